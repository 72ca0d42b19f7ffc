"""A plan: every examined file with its verdict and reason, plus what the round saw.

Plans are what `plan` prints, what dry-run reports, and what the executor carries out; their
JSON form is versioned with the reasons (``SCHEMA_VERSION``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from operator import itemgetter
from typing import NamedTuple

from retentiond.engine.decision import Decision
from retentiond.engine.identity import FileIdentity
from retentiond.kinds.rocketmq.snapshot import QueueRoot, queue_directory
from retentiond.kinds.rocketmq.triggers import Triggers
from retentiond.reasons import SCHEMA_VERSION, AnyReason, Kind, Reason, Verdict
from retentiond.text.jsonstream import Rows, encode_decision, materialize
from retentiond.text.units import iso_time


class _QueueFields(NamedTuple):
    topic: str
    queue_id: int
    # The queue directory's path, or the store's ``QueueRoot`` (the planner copies its
    # listing's): read it as ``directory``.
    location: str | QueueRoot
    names: tuple[str, ...]
    deleted: tuple[Decision, ...]
    # The first kept file when it was examined (never the newest), kept as its parts: the
    # stop is always ``names[len(deleted)]`` in this queue, so its path, start offset, kind,
    # verdict, topic and queue id follow from the queue. None: no file was kept after an
    # examination (every examined file goes, or only the newest file is left).
    stop_reason: Reason | None
    # Its identity and value packed in one bytes object (``STOP``: inode, device, size,
    # mtime_ns, value or -1) instead of a FileIdentity and four integers; None when it could
    # not be stat-ed. Read through ``stop_identity``, ``stop_value``, ``stop_mtime_ms``.
    stop_packed: bytes | None
    # Why it could not be read (a str), or a whole stop Decision that does not have the
    # usual shape (tests and holds build such), kept as given.
    stop_extra: str | Decision | None
    # The key of the directory listing the decision was made on (``QueueListing.key``, the
    # very object): the planner trusts the values it read only while the lister hands back
    # that listing. None for a decision not made by the planner.
    dir_key: bytes | None = None


STOP = struct.Struct("=QQqqq")  # inode, device, size, mtime_ns, value (-1: none)
_MTIME = struct.Struct("=q")
_MTIME_AT = 24
VALUE_AT = 32


def pack_stop(ident: FileIdentity, value: int | None) -> bytes:
    return STOP.pack(
        ident.ino, ident.dev, ident.size, ident.mtime_ns, -1 if value is None else value
    )


class QueueDecision(_QueueFields):
    """One ConsumeQueue, compactly: the first ``delete_count`` files go, the rest stay.

    With 100k+ queues a Decision object per kept file would dominate a round's cost, and a
    daemon keeps every queue's decision between rounds (the memo of ``plan_queues``): so
    even the stop is kept as its parts (reason, packed identity and value) and made into a
    ``Decision`` only when someone asks (``stop``, ``decisions()``). That is a tuple and a
    bytes object per queue instead of a tuple, a Decision, a path string, two offsets, a
    FileIdentity and its integers.

    ``QueueDecision(topic, queue_id, directory, names, deleted, stop)`` takes the stop as a
    ``Decision``; ``plan_queue`` builds the compact form directly.
    """

    __slots__ = ()

    def __new__(
        cls,
        topic: str,
        queue_id: int,
        directory: str | QueueRoot,
        names: tuple[str, ...],
        deleted: tuple[Decision, ...],
        stop: Decision | None = None,
    ) -> QueueDecision:
        if stop is None:
            parts: tuple[AnyReason | None, bytes | None, str | Decision | None] = (
                None, None, None
            )  # fmt: skip
        else:
            at = len(deleted)
            ident = stop.identity
            usual = (
                at < len(names)
                and stop.kind is Kind.CONSUMEQUEUE
                and stop.verdict is Verdict.KEEP
                and stop.path == f"{queue_directory(directory, topic, queue_id)}/{names[at]}"
                and type(stop.start_offset) is int
                and stop.start_offset == int(names[at])
                and stop.topic == topic
                and stop.queue_id == queue_id
                and (stop.end_offset is None or type(stop.end_offset) is int)
                and (stop.end_offset or 0) >= 0
            )
            if usual and ident is not None:
                packed = pack_stop(ident, stop.end_offset)
                parts = (stop.reason, packed, stop.detail)
            else:
                parts = (stop.reason, None, stop)
        return tuple.__new__(cls, (topic, queue_id, directory, names, deleted, *parts, None))

    def with_stop(self, deleted: tuple[Decision, ...], stop: Decision | None) -> QueueDecision:
        """The same queue with other deletions and stop (holds shorten a run)."""
        return QueueDecision(self.topic, self.queue_id, self[2], self.names, deleted, stop)

    @property
    def directory(self) -> str:
        return queue_directory(self[2], self[0], self[1])

    @property
    def stop_full(self) -> Decision | None:
        extra = self.stop_extra
        return extra if type(extra) is Decision else None

    @property
    def stop_detail(self) -> str | None:
        extra = self.stop_extra
        return extra.detail if isinstance(extra, Decision) else extra

    @property
    def stop_identity(self) -> FileIdentity | None:
        packed = self.stop_packed
        if packed is not None:
            return FileIdentity(*STOP.unpack(packed)[:4])
        extra = self.stop_extra
        return extra.identity if type(extra) is Decision else None

    @property
    def stop_value(self) -> int | None:
        """The CommitLog offset in the stop's last unit, if it was read."""
        packed = self.stop_packed
        if packed is not None:
            value = _MTIME.unpack_from(packed, VALUE_AT)[0]
            return None if value < 0 else value
        extra = self.stop_extra
        return extra.end_offset if type(extra) is Decision else None

    @property
    def stop_mtime_ms(self) -> int | None:
        """``stop_identity.mtime_ms`` without making the identity (figures, every round)."""
        packed = self.stop_packed
        if packed is not None:
            return _MTIME.unpack_from(packed, _MTIME_AT)[0] // 1_000_000
        ident = self.stop_identity
        return None if ident is None else ident.mtime_ms

    @property
    def stop(self) -> Decision | None:
        """The first kept file when it was examined (not for the newest), as a Decision."""
        reason = self.stop_reason
        if reason is None:
            return None
        extra = self.stop_extra
        if isinstance(extra, Decision):
            return extra
        name = self.names[len(self.deleted)]
        return Decision(
            Kind.CONSUMEQUEUE, f"{self.directory}/{name}", Verdict.KEEP, reason,
            self.stop_identity, int(name), self.stop_value, self.topic, self.queue_id, extra,
        )  # fmt: skip

    @property
    def delete_count(self) -> int:
        return len(self.deleted)

    def decisions(self) -> Iterator[Decision]:
        yield from self.deleted
        start = len(self.deleted)
        stop = self.stop
        if stop is not None:
            yield stop
            start += 1
        last = len(self.names) - 1
        directory = self.directory
        for i in range(start, len(self.names)):
            reason = Reason.NEWEST_FILE if i == last else Reason.AFTER_FIRST_KEPT
            yield Decision(
                Kind.CONSUMEQUEUE,
                f"{directory}/{self.names[i]}",
                Verdict.KEEP,
                reason,
                start_offset=int(self.names[i]),
                topic=self.topic,
                queue_id=self.queue_id,
            )


@dataclass(frozen=True)
class QueuesPlan:
    """ConsumeQueue and index decisions, driven by the CommitLog minimum offset."""

    min_offset: int
    last_min_offset: int
    examined: bool  # False: the minimum did not move, nothing was looked at
    queues: tuple[QueueDecision, ...] = ()  # only queues with at least one examined file
    queue_count: int = 0
    file_count: int = 0
    index: tuple[Decision, ...] = ()
    skip_reason: Reason | None = None
    problems: tuple[str, ...] = ()

    def deletions(self) -> Iterator[Decision]:
        for q in self.queues:
            yield from q.deleted
        yield from (d for d in self.index if d.delete)


@dataclass(frozen=True)
class TimerLogPlan:
    """``timerlog/`` judged by the CommitLog minimum (TimerMessageStore's cleaner): a prefix of
    files whose last unit points below it goes, never the newest file."""

    directory: str
    min_offset: int  # the CommitLog minimum it was judged by (-1: not examined)
    decisions: tuple[Decision, ...] = ()  # oldest first, every file when examined

    @property
    def examined(self) -> bool:
        return self.min_offset >= 0

    def deletions(self) -> list[Decision]:
        return [d for d in self.decisions if d.delete]


@dataclass(frozen=True)
class CommitLogPlan:
    triggers: Triggers
    decisions: tuple[Decision, ...]
    min_offset_before: int
    min_offset_after: int  # projected: first file not planned for deletion
    reserved_ms: int | None = None  # fileReservedTime: a file expires at mtime + this
    next_window_ms: int | None = None  # outside a pass: when the next delete hour starts
    zone: str | None = None  # the configured zone (None: the machine's), for the times shown

    def deletions(self) -> list[Decision]:
        return [d for d in self.decisions if d.delete]

    def expires_ms(self, d: Decision) -> int | None:
        """When a CommitLog file is (or was) old enough to go: its mtime + fileReservedTime."""
        if d.identity is None or self.reserved_ms is None:
            return None
        return d.identity.mtime_ms + self.reserved_ms

    def row(self, d: Decision, now_ms: int) -> dict[str, object]:
        """A file's row in the plan document: ``Decision.as_dict`` and when it expires; for
        a file kept because no pass runs now, when the next delete window opens."""
        data = d.as_dict(now_ms)
        expires = self.expires_ms(d)
        if expires is not None:
            data["expires_ms"] = expires
        if d.reason is Reason.NOT_TIME_TO_DELETE and self.next_window_ms is not None:
            data["next_window_ms"] = self.next_window_ms
        return data


@dataclass(frozen=True)
class Plan:
    now_ms: int
    timezone: str
    config_hash: str
    store_root: str
    commitlog: CommitLogPlan
    queues: QueuesPlan
    foreign: tuple[tuple[str, str], ...] = ()
    errors: tuple[str, ...] = ()
    manual: bool = False
    dry_run: bool = True
    extra: dict[str, object] = field(default_factory=dict)
    # Those of ``errors`` found walking ``consumequeue/``: each names a topic or queue
    # directory that could not be read, and covers only it (the rest of the round went on).
    queue_errors: tuple[str, ...] = ()
    # (path, text) of the consumer progress files that were not simply read (kinds.rocketmq
    # .progress): a torn consumerOffset.json read from its .bak, a corrupt or missing one.
    progress_problems: tuple[tuple[str, str], ...] = ()
    # The timer log's pass; None when the store has no ``timerlog/`` (nothing is shown then).
    timerlog: TimerLogPlan | None = None

    def timerlog_decisions(self) -> tuple[Decision, ...]:
        return () if self.timerlog is None else self.timerlog.decisions

    # ---- engine.kind.RoundPlan ----------------------------------------------------------
    def decisions(self) -> Iterator[Decision]:
        yield from self.commitlog.decisions
        for q in self.queues.queues:
            yield from q.decisions()
        yield from self.queues.index
        yield from self.timerlog_decisions()

    def store_errors(self) -> list[str]:
        errors = [*self.errors]
        t = self.commitlog.triggers.error
        if t and t not in errors:
            errors.append(t)
        return errors

    def problems(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for d in self.commitlog.decisions:
            if d.reason is Reason.BAD_SIZE:
                found.append((d.path, d.detail or "bad size"))
        for q in self.queues.queues:
            if q.stop_reason is Reason.UNREADABLE and (stop := q.stop) is not None:
                found.append((stop.path, stop.detail or "unreadable"))
        for d in self.queues.index:
            if d.reason is Reason.UNREADABLE:
                found.append((d.path, d.detail or "unreadable"))
        for d in self.timerlog_decisions():
            if d.reason in (Reason.UNREADABLE, Reason.BAD_SIZE):
                found.append((d.path, d.detail or str(d.reason)))
        for path, why in self.foreign:
            found.append((path, f"not a store file ({why}); never touched"))
        found.extend(self.progress_problems)
        return found

    def ran_deletion_pass(self) -> bool:
        return self.commitlog.triggers.fired

    def totals(self) -> dict[str, int]:
        """Every file this plan gives a verdict, and those that go (what ``plan`` sums up)."""
        timerlog = self.timerlog_decisions()
        files = len(self.commitlog.decisions) + len(self.queues.index) + len(timerlog)
        files += sum(len(q.names) for q in self.queues.queues)
        deletes = [
            *self.queues.deletions(),
            *self.commitlog.deletions(),
            *(d for d in timerlog if d.delete),
        ]
        return {
            "files": files,
            "delete_files": len(deletes),
            "delete_bytes": sum(d.identity.size for d in deletes if d.identity is not None),
            "keep_files": files - len(deletes),
        }

    def _envelope(self) -> dict[str, object]:
        """What every kind's plan document starts with (``docs/plan.md``)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "type": "plan",
            "kind": "rocketmq",
            "now_ms": self.now_ms,
            "now": iso_time(self.now_ms, self.commitlog.zone),
            "timezone": self.timezone,
            "config_hash": self.config_hash,
            "store": [self.store_root],
            "manual": self.manual,
            "dry_run": self.dry_run,
            # what the scan found; the trigger's own error (the disk could not be measured)
            # only when the scan found none, as it restates one of theirs otherwise
            "errors": list(self.errors) or self.store_errors(),
            "problems": [{"path": p, "problem": w} for p, w in self.problems()],
            "totals": self.totals(),
        }

    def as_dict(self, *, all_queue_files: bool = True) -> dict[str, object]:
        doc = materialize(self.as_document(all_queue_files=all_queue_files))
        assert isinstance(doc, dict)
        return doc

    def as_document(self, *, all_queue_files: bool = True) -> dict[str, object]:
        """``as_dict`` with the queue files as ``Rows``, made while ``jsonstream.dump``
        writes them (a 100k-queue plan lists 300k+ files)."""
        now = self.now_ms
        cl = self.commitlog
        queues = sorted_queues(self.queues.queues)

        def queue_rows() -> Iterator[dict[str, object]]:
            for q in queues:
                rows = q.decisions() if all_queue_files else iter(q.deleted)
                for d in rows:
                    yield d.as_dict(now)

        def queue_text(pad: str) -> Iterator[str]:
            return encode_queue_files(queues, now, pad, all_queue_files=all_queue_files)

        zone = cl.zone
        window = cl.next_window_ms
        tl = self.timerlog
        timerlog = (
            {}
            if tl is None
            else {
                "timerlog": {
                    "examined": tl.examined,
                    "min_offset": tl.min_offset,
                    "files": [d.as_dict(now) for d in tl.decisions],
                }
            }
        )
        return {
            **self._envelope(),
            "commitlog": {
                "triggers": cl.triggers.as_dict(),
                "file_reserved_time_ms": cl.reserved_ms,
                "next_delete_window_ms": window,
                "next_delete_window": None if window is None else iso_time(window, zone),
                "min_offset_before": cl.min_offset_before,
                "min_offset_after": cl.min_offset_after,
                "files": [cl.row(d, now) for d in cl.decisions],
            },
            "consumequeue": {
                "examined": self.queues.examined,
                "skip_reason": str(self.queues.skip_reason) if self.queues.skip_reason else None,
                "min_offset": self.queues.min_offset,
                "last_min_offset": self.queues.last_min_offset,
                "queue_count": self.queues.queue_count,
                "file_count": self.queues.file_count,
                "problems": list(self.queues.problems),
                "files": Rows(queue_rows, encode=queue_text),
            },
            "index": {"files": [d.as_dict(now) for d in self.queues.index]},
            **timerlog,
            "foreign": [{"path": p, "why": w} for p, w in self.foreign],
            "consumer_progress": {
                "problems": [{"path": p, "problem": w} for p, w in self.progress_problems]
            },
        }


_BATCH = 2048  # queues encoded per piece handed to the writer


def sorted_queues(queues: Sequence[QueueDecision]) -> list[QueueDecision]:
    """Queues by topic, then queue id, as plans list them (the scan's order is the
    directories' order on disk)."""
    return sorted(queues, key=_TOPIC_QUEUE)


_TOPIC_QUEUE = itemgetter(0, 1)  # QueueDecision: (topic, queue_id, ...)


def encode_queue_files(
    queues: Sequence[QueueDecision], now_ms: int, pad: str, *, all_queue_files: bool
) -> Iterator[str]:
    """The consume-queue rows of ``Plan.as_document`` as ``jsonstream.Rows`` encodes them.

    Every file of a 100k-queue store is a row, so the files behind a queue's stop, whose rows
    differ only in name, offset and reason, are written from a per-queue prefix and tail
    without a ``Decision`` or a dict each; the usual stop (a file holding a live offset)
    shares them, and any other examined file goes through ``encode_decision``. Queue-file
    names are 20 ASCII digits (the scan lists nothing else), so they need no escaping.
    """
    sep = ",\n" + pad
    k = ",\n" + pad + '  "'
    head = f'{sep}{{\n{pad}  "kind": "{Kind.CONSUMEQUEUE}"{k}path": '
    kept = f'"{k}verdict": "{Verdict.KEEP}"{k}reason": '
    after = f'{kept}"{Reason.AFTER_FIRST_KEPT}"{k}start_offset": '
    newest = f'{kept}"{Reason.NEWEST_FILE}"{k}start_offset": '
    close = "\n" + pad + "}"
    unpack_size_mtime = struct.Struct("=qq").unpack_from  # from a packed stop (``STOP``)
    parts: list[str] = []
    append = parts.append
    for n, q in enumerate(queues, 1):
        if n % _BATCH == 0:
            yield "".join(parts)
            parts = []
            append = parts.append
        deleted = q.deleted
        for d in deleted:
            append(sep + encode_decision(d, now_ms, pad))
        if not all_queue_files:
            continue
        names = q.names
        last = len(names) - 1
        start = len(deleted)
        prefix = head + encode_basestring_ascii(q.directory + "/")[:-1]
        tail = f'{k}topic": {encode_basestring_ascii(q.topic)}{k}queue_id": {q.queue_id}{close}'
        row = ""  # the stop's row, when it shares the queue's tail
        reason = q.stop_reason
        if reason is not None:
            packed = q.stop_packed
            if packed is not None and q.stop_extra is None and (value := q.stop_value) is not None:
                # the usual stop: a file holding a live offset (path and offset: its name)
                size, mtime = unpack_size_mtime(packed, 16)
                mtime //= 1_000_000  # as FileIdentity.mtime_ms
                name = names[start]
                row = (
                    f'{prefix}{name}{kept}"{reason}"{k}bytes": {size}{k}mtime_ms": {mtime}'
                    f'{k}age_ms": {now_ms - mtime}{k}start_offset": {int(name)}'
                    f'{k}end_offset": {value}{tail}'
                )
            else:
                stop = q.stop
                assert stop is not None
                append(sep + encode_decision(stop, now_ms, pad))
            start += 1
        if start <= last:
            for i in range(start, last):
                name = names[i]
                row += f"{prefix}{name}{after}{int(name)}{tail}"
            name = names[last]
            append(f"{row}{prefix}{name}{newest}{int(name)}{tail}")
        elif row:
            append(row)
    yield "".join(parts)
