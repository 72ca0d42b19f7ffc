"""One Kafka round's plan as the engine, the journal and the reports read it
(``engine.kind.RoundPlan``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from retentiond.engine.decision import Decision
from retentiond.kinds.kafka.offsets import KafkaProgress
from retentiond.kinds.kafka.policy import PartitionPlan
from retentiond.kinds.kafka.scan import LogDirSnapshot
from retentiond.reasons import SCHEMA_VERSION
from retentiond.text.jsonstream import Rows, encode_decision
from retentiond.text.units import iso_time


def known_largest(p: PartitionPlan, i: int, time_index_compat: bool) -> int | None:
    """Segment ``i`` of ``p``'s largest timestamp as the plan judged it (``Segment.
    known_largest``: the time index's with ``time_index_compat``, but never for the active
    segment), if it is known without any I/O: every segment the time pass examined, the first
    one kept, the active one. The age of a segment's data (``age_ms``) counts from it."""
    s = p.partition.made[i]
    if s is None:
        return None
    active = i == len(p.partition.bases) - 1
    known = s.known_largest(time_index_compat and not active)
    return None if known is None else known[0]


class LogDirPlan:
    """One log dir's partitions planned. ``foreign`` (what the dir holds that is no Kafka
    file) is taken from the snapshot when first asked for: the daemon reports it, a plan
    does not need it.

    A plan made in two processes (``parallel``) holds this process's partitions (``own``,
    ``own_leftovers``) and ``complete``, which plans the other process's here: the first
    use of ``partitions``, ``leftovers`` or ``foreign`` calls it, so that whatever reads
    them sees the whole log dir, in the scan's order."""

    def __init__(
        self,
        path: str,
        locked: bool,  # False: another process holds .lock, the dir is plan-only
        partitions: tuple[PartitionPlan, ...],
        foreign: tuple[tuple[str, str], ...] | LogDirSnapshot = (),
        errors: tuple[str, ...] = (),
        leftovers: tuple[Decision, ...] = (),  # whole partition dirs (``leftovers``)
        guarded: bool = False,  # retentiond.guard.unconsumed=keep held here (disk not above)
    ) -> None:
        self.path = path
        self.locked = locked
        self.own = partitions
        self._partitions = partitions
        self._foreign = foreign
        self.errors = errors
        self.own_leftovers = leftovers
        self._leftovers = leftovers
        self.guarded = guarded
        # the other process's partitions and leftover dirs, planned here on first use
        self.complete: Callable[[], tuple[tuple[PartitionPlan, ...], tuple[Decision, ...]]] | None
        self.complete = None
        self._all_foreign: tuple[tuple[str, str], ...] | None = None

    def _whole(self) -> None:
        complete, self.complete = self.complete, None
        if complete is None:
            return
        parts, leftovers = complete()
        self._partitions = tuple(sorted((*self.own, *parts), key=_path_of))
        self._leftovers = tuple(sorted((*self.own_leftovers, *leftovers), key=_path_of))
        if self._all_foreign is None:
            more = [f for p in parts for f in p.partition.foreign]
            self._all_foreign = tuple(sorted([*self._own_foreign, *more]))

    @property
    def partitions(self) -> tuple[PartitionPlan, ...]:
        self._whole()
        return self._partitions

    @property
    def leftovers(self) -> tuple[Decision, ...]:
        self._whole()
        return self._leftovers

    @property
    def _own_foreign(self) -> tuple[tuple[str, str], ...]:
        got = self._foreign
        return got.foreign if isinstance(got, LogDirSnapshot) else got

    @property
    def foreign(self) -> tuple[tuple[str, str], ...]:
        if self._all_foreign is None:
            self._whole()
        if self._all_foreign is not None:
            return self._all_foreign
        return self._own_foreign

    def add_foreign(self, more: Iterable[tuple[str, str]]) -> None:
        """What the dir's partitions another process planned hold that is no Kafka file."""
        self._all_foreign = tuple(sorted([*self._own_foreign, *more]))


def _path_of(x: PartitionPlan | Decision) -> str:
    return x.partition.path if isinstance(x, PartitionPlan) else x.path


@dataclass(frozen=True)
class KafkaPlan:
    now_ms: int
    config_hash: str
    log_dirs: tuple[LogDirPlan, ...]
    metadata_source: str | None  # what per-topic configs came from
    metadata_error: str | None = None
    manual: bool = False
    dry_run: bool = True
    errors: tuple[str, ...] = field(default=())
    foreign: tuple[tuple[str, str], ...] = field(default=())  # besides the log dirs' own
    timezone: str = "UTC"  # the zone times are shown in, by name
    zone: str | None = None  # the configured zone (None: the machine's)
    store: tuple[str, ...] = ()  # the configured log dirs (a dir that failed has no plan)
    # retention.ms of each topic whose segments can expire by time (delete policy, >= 0)
    retention_ms: Mapping[str, int] = field(default_factory=dict)
    time_index_compat: bool = False  # largest timestamps come from the time index
    progress: KafkaProgress | None = None  # the consumer progress read (offsets)
    guard_unconsumed: bool = False  # retentiond.guard.unconsumed=keep
    # a plan made in two processes: the parts of ``plan``'s text (not --all) of this
    # process's partitions (None: not made yet) and of the other's, ``report.PlanText``s;
    # ``LogDirPlan.complete`` plans the other's partitions here if something needs them
    other_text: tuple[object | None, object] | None = None

    def largest_ms(self, p: PartitionPlan, i: int) -> int | None:
        """Segment ``i`` of ``p``'s largest timestamp as retention.ms judges it (its batches'
        largest, else its mtime; the time index's last entry with ``time_index_compat``),
        if it is known without a read: ``known_largest``."""
        return known_largest(p, i, self.time_index_compat)

    def expires_ms(self, p: PartitionPlan, i: int, largest: int | None = None) -> int | None:
        """When segment ``i`` of ``p`` is past retention.ms (Kafka: ``now - largest >
        retention.ms``, so one ms after), if its largest timestamp is known without a read
        (``largest``, when the caller has it already); None for a topic with no time
        limit."""
        retention = self.retention_ms.get(p.partition.topic)
        if retention is None:
            return None
        if largest is None:
            largest = self.largest_ms(p, i)
        return None if largest is None else largest + retention + 1

    def partitions(self, ld: LogDirPlan, *, own: bool = False) -> list[PartitionPlan]:
        """A log dir's partitions by topic, then partition number (``own``: only those this
        process planned)."""
        parts = ld.own if own else ld.partitions
        return sorted(parts, key=lambda p: (p.partition.topic, p.partition.partition))

    def totals(self) -> dict[str, int]:
        files = sum(len(p.partition.bases) for ld in self.log_dirs for p in ld.partitions)
        deletes = [d for ld in self.log_dirs for p in ld.partitions for d in p.deletions]
        return {
            "files": files,
            "delete_files": len(deletes),
            "delete_bytes": sum(d.identity.size for d in deletes if d.identity is not None),
            "keep_files": files - len(deletes),
        }

    def decisions(self) -> Iterator[Decision]:
        for ld in self.log_dirs:
            for p in ld.partitions:
                yield from p.decisions
            yield from ld.leftovers

    def store_errors(self) -> list[str]:
        return list(self.errors)

    def problems(self) -> list[tuple[str, str]]:
        return [*self.foreign, *(f for ld in self.log_dirs for f in ld.foreign)]

    def ran_deletion_pass(self) -> bool:
        return any(ld.locked for ld in self.log_dirs)

    def plan_only_dirs(self) -> list[str]:
        return [ld.path for ld in self.log_dirs if not ld.locked]

    def reason_counts(self) -> dict[str, int]:
        return dict(Counter(f"{d.verdict}:{d.reason}" for d in self.decisions()))

    def _row(self, p: PartitionPlan, i: int, d: Decision) -> dict[str, object]:
        row = {
            ("partition" if k == "queue_id" else k): v for k, v in d.as_dict(self.now_ms).items()
        }
        largest = self.largest_ms(p, i)
        if largest is not None and "age_ms" in row:
            row["age_ms"] = self.now_ms - largest  # what retention.ms judges, not the mtime
        expires = self.expires_ms(p, i, largest)
        if expires is not None:
            row["expires_ms"] = expires
        return row

    def as_dict(self, *, all_queue_files: bool = True) -> dict[str, object]:
        return self._document(
            lambda p: [self._row(p, i, d) for i, d in enumerate(p.decisions)], all_queue_files
        )

    def as_document(self, *, all_queue_files: bool = True) -> dict[str, object]:
        """``as_dict`` with each partition's segments as ``Rows``, expanded and encoded
        while ``jsonstream.dump`` writes them (200,000 segments for 10,000 partitions)."""
        now = self.now_ms

        def rows(p: PartitionPlan) -> Rows:
            def make() -> Iterator[dict[str, object]]:
                return (self._row(p, i, d) for i, d in enumerate(p.decisions))

            def encode(pad: str) -> Iterator[str]:
                # encode_decision's text with the partition under its own name (a key
                # follows a newline, which no encoded string holds) and the expiry added
                key = f'\n{pad}  "queue_id": '
                named = f'\n{pad}  "partition": '
                for i, d in enumerate(p.decisions):
                    largest = self.largest_ms(p, i)
                    age = None if largest is None else now - largest
                    text = encode_decision(d, now, pad, age).replace(key, named)
                    expires = self.expires_ms(p, i, largest)
                    if expires is not None:
                        text = f'{text[: -len(pad) - 2]},\n{pad}  "expires_ms": {expires}\n{pad}}}'
                    yield f",\n{pad}{text}"

            return Rows(make, encode=encode)

        return self._document(rows, all_queue_files)

    def _document(
        self, segments: Callable[[PartitionPlan], object], all_queue_files: bool
    ) -> dict[str, object]:
        return {
            "schema_version": SCHEMA_VERSION,
            "type": "plan",
            "kind": "kafka",
            "now_ms": self.now_ms,
            "now": iso_time(self.now_ms, self.zone),
            "timezone": self.timezone,
            "config_hash": self.config_hash,
            "store": list(self.store or (ld.path for ld in self.log_dirs)),
            "manual": self.manual,
            "dry_run": self.dry_run,
            "errors": list(self.errors),
            "problems": [{"path": p, "problem": w} for p, w in self.problems()],
            "totals": self.totals(),
            "metadata": {"source": self.metadata_source, "error": self.metadata_error},
            **(
                {}
                if self.progress is None
                else {
                    "consumer_progress": {
                        **self.progress.coverage(),
                        "problems": [{"path": p, "problem": w} for p, w in self.progress.problems],
                    }
                }
            ),
            "log_dirs": [
                {
                    "path": ld.path,
                    "plan_only": not ld.locked,
                    "plan_only_reason": None
                    if ld.locked
                    else "another process (the broker) holds .lock: nothing is deleted here "
                    "while it runs; each segment that would go is kept as broker_running",
                    "partitions": [
                        {
                            "topic": p.partition.topic,
                            "partition": p.partition.partition,
                            "log_start_offset": p.log_start_offset,
                            "high_watermark": p.high_watermark,
                            "log_end_offset": p.log_end_offset,
                            "new_log_start_offset": p.new_log_start_offset,
                            "roll_offset": p.roll_offset,
                            "segments": segments(p),
                        }
                        for p in self.partitions(ld)
                        # the prefix the passes handed over: deletions, or in a plan-only
                        # dir what would go (kept as broker_running)
                        if all_queue_files or p.prefix
                    ],
                    # -delete, -stray and orphan partition dirs, each as a whole
                    "leftover_dirs": [d.as_dict(self.now_ms) for d in ld.leftovers],
                }
                for ld in self.log_dirs
            ],
        }
