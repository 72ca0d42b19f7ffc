"""A plan: every examined file with its verdict and reason, plus what the round saw.

Plans are what `plan` prints, what dry-run reports, and what the executor carries out; their
JSON form is versioned with the reasons (``SCHEMA_VERSION``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import NamedTuple

from retentiond.engine.decision import Decision
from retentiond.engine.jsonstream import Rows, encode_decision, materialize
from retentiond.kinds.rocketmq.triggers import Triggers
from retentiond.reasons import SCHEMA_VERSION, Kind, Reason, Verdict


class QueueDecision(NamedTuple):
    """One ConsumeQueue, compactly: the first ``delete_count`` files go, the rest stay.

    With 100k+ queues a Decision object per kept file would dominate a round's cost, so kept
    files are expanded only when someone asks (``decisions()``).
    """

    topic: str
    queue_id: int
    directory: str
    names: tuple[str, ...]
    deleted: tuple[Decision, ...]
    stop: Decision | None  # the first kept file when it was examined (not for the newest)

    @property
    def delete_count(self) -> int:
        return len(self.deleted)

    def decisions(self) -> Iterator[Decision]:
        yield from self.deleted
        start = len(self.deleted)
        if self.stop is not None:
            yield self.stop
            start += 1
        last = len(self.names) - 1
        for i in range(start, len(self.names)):
            reason = Reason.NEWEST_FILE if i == last else Reason.AFTER_FIRST_KEPT
            yield Decision(
                Kind.CONSUMEQUEUE,
                f"{self.directory}/{self.names[i]}",
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
class CommitLogPlan:
    triggers: Triggers
    decisions: tuple[Decision, ...]
    min_offset_before: int
    min_offset_after: int  # projected: first file not planned for deletion

    def deletions(self) -> list[Decision]:
        return [d for d in self.decisions if d.delete]


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

    # ---- engine.kind.RoundPlan ----------------------------------------------------------
    def decisions(self) -> Iterator[Decision]:
        yield from self.commitlog.decisions
        for q in self.queues.queues:
            yield from q.decisions()
        yield from self.queues.index

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
            if q.stop is not None and q.stop.reason is Reason.UNREADABLE:
                found.append((q.stop.path, q.stop.detail or "unreadable"))
        for d in self.queues.index:
            if d.reason is Reason.UNREADABLE:
                found.append((d.path, d.detail or "unreadable"))
        for path, why in self.foreign:
            found.append((path, f"not a store file ({why}); never touched"))
        return found

    def ran_deletion_pass(self) -> bool:
        return self.commitlog.triggers.fired

    def as_dict(self, *, all_queue_files: bool = True) -> dict[str, object]:
        doc = materialize(self.as_document(all_queue_files=all_queue_files))
        assert isinstance(doc, dict)
        return doc

    def as_document(self, *, all_queue_files: bool = True) -> dict[str, object]:
        """``as_dict`` with the queue files as ``Rows``, made while ``jsonstream.dump``
        writes them (a 100k-queue plan lists 300k+ files)."""
        now = self.now_ms
        queues = self.queues.queues

        def queue_rows() -> Iterator[dict[str, object]]:
            for q in queues:
                rows = q.decisions() if all_queue_files else iter(q.deleted)
                for d in rows:
                    yield d.as_dict(now)

        def queue_text(pad: str) -> Iterator[str]:
            return encode_queue_files(queues, now, pad, all_queue_files=all_queue_files)

        return {
            "schema_version": SCHEMA_VERSION,
            "type": "plan",
            "now_ms": now,
            "timezone": self.timezone,
            "config_hash": self.config_hash,
            "store_root": self.store_root,
            "manual": self.manual,
            "dry_run": self.dry_run,
            "errors": list(self.errors),
            "commitlog": {
                "triggers": self.commitlog.triggers.as_dict(),
                "min_offset_before": self.commitlog.min_offset_before,
                "min_offset_after": self.commitlog.min_offset_after,
                "files": [d.as_dict(now) for d in self.commitlog.decisions],
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
            "foreign": [{"path": p, "why": w} for p, w in self.foreign],
        }


_BATCH = 2048  # queues encoded per piece handed to the writer


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
    parts: list[str] = []
    append = parts.append
    for n, q in enumerate(queues, 1):
        if n % _BATCH == 0:
            yield "".join(parts)
            parts = []
            append = parts.append
        deleted, stop = q.deleted, q.stop
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
        if stop is not None:
            ident = stop.identity
            if (
                ident is not None
                and stop.detail is None
                and type(stop.start_offset) is int
                and type(stop.end_offset) is int
                and stop.topic == q.topic
                and stop.queue_id == q.queue_id
            ):  # the usual stop: a file holding a live offset
                mtime = ident.mtime_ms
                row = (
                    f'{head}{encode_basestring_ascii(stop.path)}{k}verdict": "{stop.verdict}"'
                    f'{k}reason": "{stop.reason}"{k}bytes": {ident.size}{k}mtime_ms": {mtime}'
                    f'{k}age_ms": {now_ms - mtime}{k}start_offset": {stop.start_offset}'
                    f'{k}end_offset": {stop.end_offset}{tail}'
                )
            else:
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
