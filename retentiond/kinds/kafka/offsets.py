"""Kafka consumer progress: the committed offsets in the ``__consumer_offsets-N`` partitions
of the log dirs (``shared/spec/consumers.md`` §B), and what a segment deletion loses by them.

Each partition present is replayed from its first segment to its end as §B.2 says: an
``OffsetCommit`` record (key types 0 and 1) sets the group's offset for a topic partition,
the last write by record offset winning; a tombstone removes it; a transactional commit is
pending until its producer's COMMIT marker (then it wins only over an older record) and is
dropped on ABORT; every other record type is skipped. A tombstone also drops that partition
from the group's open transactions, as the 4.x coordinator does.

A broker holds only the ``__consumer_offsets`` partitions assigned to it, so the result says
which of the ``offsets.topic.num.partitions`` it read (``coverage``): a group hashed to a
partition that is elsewhere is not known here, and a plan never says "nobody lags" then.

The guard (``retentiond.guard.unconsumed: keep``, ``keep_unconsumed``) protects what it can
see: the records at or above the committed offset of an active group (not ignored, not
stale) whose offsets were read here. A group on a partition that is elsewhere or unreadable
is unknown, and keep does not protect it.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

from retentiond.engine.decision import Decision
from retentiond.engine.loss import (
    GroupLoss,
    GroupRisk,
    GroupState,
    Loss,
    Progress,
    add_risk,
    top_risks,
)
from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.policy import PartitionPlan
from retentiond.reasons import Reason, Verdict

TOPIC = "__consumer_offsets"
DEFAULT_NUM_PARTITIONS = 50  # offsets.topic.num.partitions
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_GZIP = 1

Key = tuple[str, str, int]  # (group, topic, partition)


class OffsetsError(ValueError):
    """A ``__consumer_offsets`` segment that cannot be read; the message names the file."""


def java_hash(text: str) -> int:
    """Java ``String.hashCode`` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group (``Utils.abs(hash) % n``)."""
    h = java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class _Buf:
    __slots__ = ("data", "pos", "where")

    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.pos = 0
        self.where = where

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise OffsetsError(f"{self.where}: truncated record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def varint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise OffsetsError(f"{self.where}: truncated varint")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7
            if shift > 63:
                raise OffsetsError(f"{self.where}: varint too long")


def _records(
    batch: bytes, base: int, attrs: int, count: int, where: str
) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of each record of one v2 batch (DefaultRecord framing, §B.1.2)."""
    body = batch[fm.V2_HEADER_SIZE :]
    codec = attrs & 0x07
    if codec == _GZIP:
        try:
            body = zlib.decompress(body, 47)
        except zlib.error as e:
            raise OffsetsError(f"{where}: gzip batch does not inflate ({e})") from None
    elif codec:
        raise OffsetsError(f"{where}: batch compressed with codec {codec}, which is not read")
    r = _Buf(body, where)
    for _ in range(count):
        size = r.varint()
        rec = _Buf(r.take(size), where)
        rec.take(1)  # attributes
        rec.varint()  # timestamp delta
        offset = base + rec.varint()
        klen = rec.varint()
        key = rec.take(klen) if klen >= 0 else None
        vlen = rec.varint()
        value = rec.take(vlen) if vlen >= 0 else None
        yield offset, key, value


def _string(data: bytes, pos: int, where: str) -> tuple[str, int]:
    if pos + 2 > len(data):
        raise OffsetsError(f"{where}: truncated key")
    (n,) = struct.unpack_from(">h", data, pos)
    if n < 0 or pos + 2 + n > len(data):
        raise OffsetsError(f"{where}: bad string length {n} in a key")
    return data[pos + 2 : pos + 2 + n].decode("utf-8", "replace"), pos + 2 + n


def _offset_key(key: bytes, where: str) -> Key:
    group, pos = _string(key, 2, where)
    topic, pos = _string(key, pos, where)
    if pos + 4 > len(key):
        raise OffsetsError(f"{where}: truncated offset commit key")
    return group, topic, struct.unpack_from(">i", key, pos)[0]


def _offset_value(value: bytes, where: str) -> int | None:
    """The committed offset of an ``OffsetCommitValue`` (every version starts with it after
    the int16 version); None for a version newer than 4 (skipped, as unknown)."""
    if len(value) < 10:
        raise OffsetsError(f"{where}: truncated offset commit value")
    version, offset = struct.unpack_from(">hq", value, 0)
    return offset if 0 <= version <= 4 else None


@dataclass
class Replay:
    """The replay state of one ``__consumer_offsets`` partition (§B.2)."""

    committed: dict[Key, tuple[int, int]] = field(default_factory=dict)  # -> (offset, record)
    pending: dict[int, dict[Key, tuple[int, int]]] = field(default_factory=dict)  # by producer

    def feed(self, data: bytes, path: str, log_start: int = 0) -> None:
        for b in fm.iter_batches(data, path):
            if b.magic != 2 or b.records_count <= 0:
                continue  # legacy formats carry no coordinator records; empty batches
            where = f"{path}: position {b.position}"
            batch = data[b.position : b.position + b.size]
            (crc,) = struct.unpack_from(">I", batch, 17)
            if fm.crc32c(batch[21:]) != crc:
                raise OffsetsError(f"{where}: batch CRC mismatch")
            (pid,) = struct.unpack_from(">q", batch, 43)
            txn = bool(b.attributes & fm.TRANSACTIONAL_FLAG)
            if b.is_control:
                for _off, key, _v in _records(batch, b.base_offset, b.attributes, 1, where):
                    if key is None or len(key) < 4:
                        raise OffsetsError(f"{where}: control record without a type")
                    (ctype,) = struct.unpack_from(">h", key, 2)
                    done = self.pending.pop(pid, {})
                    if ctype == 1:  # COMMIT: a pending entry wins over an older record only
                        for key_, entry in done.items():
                            old = self.committed.get(key_)
                            if old is None or entry[1] > old[1]:
                                self.committed[key_] = entry
                continue
            records = _records(batch, b.base_offset, b.attributes, b.records_count, where)
            for off, key, value in records:
                if off < log_start or key is None or len(key) < 2:
                    continue
                (typ,) = struct.unpack_from(">h", key, 0)
                if typ not in (0, 1):
                    continue  # group metadata and every other (or future) type
                k = _offset_key(key, where)
                v = None if value is None else _offset_value(value, where)
                if value is not None and v is None:
                    continue  # a value version we cannot read: skipped as unknown
                if txn:
                    if v is None:
                        self.pending.get(pid, {}).pop(k, None)
                    else:
                        self.pending.setdefault(pid, {})[k] = (v, off)
                elif v is None:
                    self.committed.pop(k, None)
                    for open_txn in self.pending.values():
                        open_txn.pop(k, None)
                else:
                    self.committed[k] = (v, off)


def _read(path: str) -> bytes:
    fd = os.open(path, _OPEN)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def replay_partition(log_paths: Sequence[str], log_start: int = 0) -> Replay:
    """Every ``.log`` of one partition, in base-offset order."""
    state = Replay()
    for path in log_paths:
        try:
            data = _read(path)
        except OSError as e:
            raise OffsetsError(f"{path}: unreadable ({e.strerror})") from None
        try:
            state.feed(data, path, log_start)
        except fm.FormatError as e:
            raise OffsetsError(str(e)) from None
    return state


@dataclass(frozen=True)
class KafkaProgress:
    """The committed offsets read this round and how much of ``__consumer_offsets`` that is."""

    progress: Progress
    # (topic, partition) -> group -> committed offset (the next record the group reads)
    committed: Mapping[tuple[str, int], Mapping[str, int]]
    present: tuple[int, ...]  # the __consumer_offsets partitions read
    num_partitions: int
    problems: tuple[tuple[str, str], ...] = ()
    ignore: tuple[str, ...] = ()  # retentiond.guard.ignoreGroups
    stale: frozenset[str] = frozenset()  # offsets unmoved for retentiond.guard.staleAfter

    def coverage(self) -> dict[str, object]:
        return {
            "progress": str(self.progress),
            "partitions": list(self.present),
            "of": self.num_partitions,
        }

    def coverage_line(self) -> str:
        n, of = len(self.present), self.num_partitions
        if self.progress is Progress.UNKNOWN and not self.problems:
            return f"consumer progress unknown: no {TOPIC} partition in these log dirs"
        text = f"consumer progress {self.progress}: {n} of {of} {TOPIC} partitions here"
        if self.progress is Progress.PARTIAL:
            text += " (groups whose offsets are elsewhere are not known)"
        return text

    def state(self, group: str) -> GroupState:
        if any(fnmatchcase(group, p) for p in self.ignore):
            return GroupState.IGNORED
        if group in self.stale:
            return GroupState.STALE
        return GroupState.ACTIVE

    @property
    def readable(self) -> bool:
        """Some committed offsets were read (the progress is known or partial)."""
        return self.progress in (Progress.KNOWN, Progress.PARTIAL)

    def signatures(self) -> dict[str, int]:
        """Per group, a digest of every committed offset of it read here: the group's offsets
        moved when its digest changed."""
        by_group: dict[str, list[tuple[str, int, int]]] = {}
        for (topic, part), groups in self.committed.items():
            for group, offset in groups.items():
                by_group.setdefault(group, []).append((topic, part, offset))
        return {g: hash(tuple(sorted(sig))) for g, sig in by_group.items()}

    def with_stale(self, stale: frozenset[str]) -> KafkaProgress:
        return replace(self, stale=stale)

    def protects(self, topic: str, partition: int, start: int, end: int) -> bool:
        """Whether the guard set to keep protects the records ``[start, end)``: an active
        group has not consumed some of them."""
        loss = self.loss(topic, partition, start, end)
        return loss.protects(unconsumed=True, timers=False) is not None

    def uniform_loss(self) -> Loss | None:
        """The loss of every segment where it does not depend on the segment (progress
        unknown or corrupt: nothing is known of any group), else None."""
        if self.progress in (Progress.UNKNOWN, Progress.CORRUPT):
            return Loss(self.progress)
        return None

    def loss(self, topic: str, partition: int, start: int, end: int) -> Loss:
        """What deleting the records ``[start, end)`` of a partition loses: per group, the
        records at or above its committed offset."""
        same = self.uniform_loss()
        if same is not None:
            return same
        groups = []
        for group, committed in sorted(self.committed.get((topic, partition), {}).items()):
            n = end - max(start, committed)
            if n > 0:
                groups.append(GroupLoss(group, topic, n, self.state(group)))
        return Loss(self.progress, tuple(groups))


def read_progress(
    partitions: Iterable[tuple[int, Sequence[str], int]],
    num_partitions: int = DEFAULT_NUM_PARTITIONS,
    ignore: Sequence[str] = (),
) -> KafkaProgress:
    """``partitions``: (partition number, its ``.log`` paths in order, its log start offset)
    of each ``__consumer_offsets`` partition in the log dirs."""
    committed: dict[tuple[str, int], dict[str, int]] = {}
    present: list[int] = []
    problems: list[tuple[str, str]] = []
    seen = 0
    for number, logs, log_start in partitions:
        seen += 1
        try:
            state = replay_partition(logs, log_start)
        except OffsetsError as e:
            where = os.path.dirname(logs[0]) if logs else TOPIC
            problems.append((where, f"consumer offsets unreadable: {e}"))
            continue
        present.append(number)
        for (group, topic, part), (offset, _ro) in state.committed.items():
            committed.setdefault((topic, part), {})[group] = offset
    total = max([num_partitions, *(p + 1 for p in present)])
    if not seen:
        progress = Progress.UNKNOWN
    elif not present:
        progress = Progress.CORRUPT
    elif len(set(present)) < total:
        progress = Progress.PARTIAL
    else:
        progress = Progress.KNOWN
    return KafkaProgress(
        progress, committed, tuple(sorted(set(present))), total, tuple(problems), tuple(ignore)
    )


_LOSS = len(Decision._fields) - 1
assert Decision._fields[_LOSS] == "loss"  # the last field: the others are copied before it
_new_tuple = tuple.__new__


def with_loss(plan: PartitionPlan, progress: KafkaProgress) -> PartitionPlan:
    """The partition's plan with the ``loss`` of each segment the passes handed over (a
    deletion, or in a plan-only dir one that would go), set before anything is carried out,
    so the journal's deletion record holds it."""
    if not plan.prefix:
        return plan
    head = list(plan.head)
    topic, part = plan.partition.topic, plan.partition.partition
    same = progress.uniform_loss()  # one immutable value for every segment, or None
    for i in range(plan.prefix):
        d = head[i]
        if d.start_offset is None or d.end_offset is None:
            continue
        loss = (
            same if same is not None else progress.loss(topic, part, d.start_offset, d.end_offset)
        )
        head[i] = _new_tuple(Decision, (*d[:_LOSS], loss))  # d._replace(loss=loss)
    plan.head = tuple(head)
    plan.__dict__.pop("deletions", None)
    plan.__dict__.pop("decisions", None)
    return plan


def group_risks(
    parts: Iterable[tuple[PartitionPlan, bool]],
    progress: KafkaProgress,
    now_ms: int,
    retention_ms: Mapping[str, int],
    expires: Callable[[PartitionPlan, int], int | None],
    top: int,
) -> tuple[GroupRisk, ...] | None:
    """Per group, the records at or above its committed offset in the segments the current
    configuration will delete: those handed over now (they go now), and for a topic with a
    time limit every segment, the active one included (Kafka rolls it once it expires). A
    segment goes no earlier than the ones before it (a prefix), so its time is the latest
    expiry known up to it (never later than it can go). A partition given with True is
    guarded (``retentiond.guard.unconsumed: keep`` holding in its log dir): an active group's
    unread records there go with no later segment, so only the deletions now count. None
    while the progress is unknown or unreadable."""
    acc: dict[str, list[int | None]] = {}
    if progress.progress in (Progress.UNKNOWN, Progress.CORRUPT):
        return None  # nothing can be said: not "no group at risk"
    for p, guarded_dir in parts:
        part = p.partition
        groups = progress.committed.get((part.topic, part.partition))
        if not groups:
            continue
        bases = part.bases
        timed = part.topic in retention_ms and not guarded_dir
        # with a time limit every segment goes in turn, the active one too (after a roll)
        last = len(bases) if timed else p.prefix
        when: int | None = now_ms
        for i in range(min(last, len(bases))):
            if i >= p.prefix:
                e = expires(p, i)
                if e is not None:
                    when = e if when is None or e > when else when
            start = bases[i]
            end = bases[i + 1] if i + 1 < len(bases) else p.log_end_offset
            for group, committed in groups.items():
                n = end - max(start, committed)
                if n > 0 and progress.state(group) is GroupState.ACTIVE:
                    add_risk(acc, group, n, max(when, now_ms) if when is not None else None)
    return top_risks(acc, top)


# The passes whose deletions the guard may keep: what retention (time or size) takes. Records
# below the log start offset are gone for every reader already (a fetch there is out of range).
GUARDED_REASONS = frozenset({Reason.RETENTION_MS_BREACH, Reason.RETENTION_BYTES_BREACH})


def guarded(d: Decision) -> bool:
    """A deletion the guard set to keep would keep: its ``loss`` (``with_loss``) names
    records an active group has not consumed."""
    return (
        d.delete
        and d.reason in GUARDED_REASONS
        and d.loss is not None
        and d.loss.protects(unconsumed=True, timers=False) is not None
    )


def keep_unconsumed(plan: PartitionPlan, yielded: str | None = None) -> PartitionPlan:
    """``retentiond.guard.unconsumed: keep`` on a partition whose deletions carry their loss:
    the first deletion holding records an active group has not consumed is kept (reason
    ``unconsumed``, its loss as the detail) and the prefix stops there, the deletions behind
    it kept as ``after_first_kept``. ``yielded`` (disk safety: the log dir is above
    ``retentiond.kafka.diskWarningRatio``) lets every deletion go, each guarded one saying
    why in its detail; its loss is recorded as always."""
    if not plan.prefix:
        return plan
    head = list(plan.head)
    for i in range(plan.prefix):
        d = head[i]
        if not guarded(d):
            continue
        if yielded is not None:
            head[i] = d._replace(detail=f"{d.detail}; {yielded}" if d.detail else yielded)
            continue
        return _cut(plan, head, i)
    if yielded is not None:
        plan.head = tuple(head)
        plan.__dict__.pop("deletions", None)
        plan.__dict__.pop("decisions", None)
    return plan


def _cut(plan: PartitionPlan, head: list[Decision], i: int) -> PartitionPlan:
    """The partition's plan with its prefix stopped at ``head[i]``, kept as ``unconsumed``."""
    d = head[i]
    assert d.loss is not None and d.start_offset is not None
    kept = d._replace(verdict=Verdict.KEEP, reason=Reason.UNCONSUMED, detail=d.loss.summary())
    behind = [
        b._replace(
            verdict=Verdict.KEEP,
            reason=Reason.AFTER_FIRST_KEPT,
            detail=f"behind {d.path} ({Reason.UNCONSUMED}); would go: {b.reason}",
        )
        for b in head[i + 1 : plan.prefix]
    ]
    tail = head[plan.prefix :]  # the first segment the passes kept, if any
    old = plan

    def rest() -> Iterator[Decision]:
        yield from behind
        yield from tail
        if old.behind:
            yield from old.decisions[len(old.head) :]

    return PartitionPlan(
        plan.partition,
        (*head[:i], kept),
        i,
        plan.log_start_offset,
        plan.high_watermark,
        plan.log_end_offset,
        max(plan.log_start_offset, d.start_offset),
        None,
        rest,
    )
