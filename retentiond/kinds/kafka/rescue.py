"""``retentiond rescue`` on a stopped Kafka broker whose disk is full: what to free, in order.

Per filesystem holding log dirs, stopping as soon as its target is met (``--target-ratio``:
the used ratio, df's arithmetic; ``--free``: bytes available):

1. leftovers: ``-delete`` dirs past their delay, and orphan and ``-stray`` dirs where the
   configuration allows them to go (``leftovers``);
2. the configured retention: the prefix each partition's plan hands over, as a round would;
3. only with ``--beyond-retention``: the oldest segments first across the partitions of
   those log dirs (by largest timestamp), each partition only ever losing a prefix, never
   its active segment, never a segment holding an offset at or above its high watermark,
   never one whose largest timestamp is within ``retentiond.kafka.rescue.minRetentionMs``,
   never of a topic in ``retentiond.kafka.rescue.protectTopics``, and never of an internal
   (``__*``), compacted or tiered topic, nor of one whose config is unknown.

Where consumer progress is known (``LossOf``: the records of a segment some protected group
has not consumed), what loses nothing goes first, in steps 2 and 3 alike, by ``order_key``:
fully consumed segments, then those whose loss is unknown, then unconsumed ones; by largest
timestamp within each. Step 2 first takes each partition's prefix up to its first segment
not known to lose nothing (one below the log start offset loses nothing: its records are gone
for every reader already), then, only while still short of the target, the rest of those
prefixes in that order. Without progress, step 2 goes partition by partition in the plan's
order and step 3 by age alone. Each partition only ever loses a prefix: step 3 goes on where
the partition's step-2 prefix ends, and takes nothing from a partition whose retention prefix
step 2 did not take whole.

With ``retentiond.guard.unconsumed: keep`` (``Guard``) the rescue keeps what a round keeps:
a segment holding records an active group has not consumed is not taken, and its
partition's prefix stops there, in steps 2 and 3 alike, unless disk safety says so: while
the filesystem (as the rescue has freed it so far) is still above
``retentiond.kafka.diskWarningRatio``, the guard yields and such segments go in the order
above (unconsumed last), the loss recorded; once the rescue has brought it to the warning
ratio, no further unconsumed segment goes, and a target below it is reported as not reached
with the number of partitions the guard kept (each counted once).

What a step frees is counted as the space the files hold (``st_blocks``): the figure the
filesystem's used bytes move by, so that a dry run says what a real run frees.
"""

from __future__ import annotations

import heapq
import os
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from retentiond.engine.decision import Decision
from retentiond.engine.disk import PathUsage, measure_path, ratio_from_counts
from retentiond.engine.identity import FileIdentity
from retentiond.engine.rescue import RescueRequest
from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.config import KafkaServer
from retentiond.kinds.kafka.leftovers import measure_dir
from retentiond.kinds.kafka.offsets import GUARDED_REASONS
from retentiond.kinds.kafka.plan import LogDirPlan
from retentiond.kinds.kafka.policy import PartitionPlan, TopicConfig
from retentiond.kinds.kafka.scan import Partition
from retentiond.reasons import Kind, Reason, Verdict
from retentiond.text.units import human_age, human_bytes


@dataclass(frozen=True)
class Guard:
    """``retentiond.guard.unconsumed: keep`` in a rescue: ``protects(topic, partition, base,
    end)`` says a segment holds records an active group has not consumed; the guard yields
    while the filesystem is above ``warning_ratio`` (``retentiond.kafka.diskWarningRatio``)."""

    protects: Callable[[str, int, int, int], bool]
    warning_ratio: float


# (topic, partition, base offset, end offset) → the records of that segment some protected
# group has not consumed (0: fully consumed), None where progress is unknown. Consumer
# progress (``What a deletion loses``) plugs in here.
LossOf = Callable[[str, int, int, int], int | None]

STEP_LEFTOVERS = "leftovers"
STEP_RETENTION = "configured retention"
STEP_BEYOND = "beyond retention"
STEPS = (STEP_LEFTOVERS, STEP_RETENTION, STEP_BEYOND)

REPLICA_NOTE = (
    "note: on a partition this broker leads, the followers will advance their log start "
    "offset to match: the loss reaches every replica"
)


def order_key(largest_timestamp: int, loss: int | None) -> tuple[int, int]:
    """Beyond-retention order: consumed (loss 0) first, then unknown, then unconsumed; the
    oldest first within each."""
    rank = 1 if loss is None else (0 if loss == 0 else 2)
    return rank, largest_timestamp


def needed_bytes(usage: PathUsage, request: RescueRequest) -> int:
    """How much to free on a filesystem for ``request``'s target (0: met already)."""
    if request.free_bytes is not None:
        return max(0, request.free_bytes - usage.avail_bytes)
    assert request.target_ratio is not None
    used, avail = usage.used_bytes, usage.avail_bytes
    entire = used + avail
    percent = int(request.target_ratio * 100 + 1e-9)
    need = max(0, used - percent * entire // 100)
    while need < used and (ratio_from_counts(used - need, avail + need) or 0) > (
        request.target_ratio + 1e-9
    ):
        need += 1
    return need


def target_met(usage: PathUsage, request: RescueRequest) -> bool:
    if request.free_bytes is not None:
        return usage.avail_bytes >= request.free_bytes
    assert request.target_ratio is not None
    return usage.ratio is not None and usage.ratio <= request.target_ratio + 1e-9


_ALLOCATED_SUFFIXES = (*fm.SEGMENT_SUFFIXES, fm.SNAPSHOT_SUFFIX)


def segment_allocated(part: Partition, base: int) -> int:
    """The space a segment's files hold: its ``.log``, indexes and producer snapshot. The
    ``.log``'s is taken from the stat the plan already has of it (the read's ``fstat``),
    the others' from an ``lstat`` each."""
    prefix = fm.offset_prefix(base)
    listing = part.listing
    path = part.path
    stem = f"{path}{prefix}" if path.endswith("/") else f"{path}/{prefix}"
    known = None
    i = bisect_left(part.bases, base)
    if i < len(part.bases) and part.bases[i] == base:
        seg = part.made[i]
        if seg is not None:
            known = seg.known_allocated
    total = 0
    for suffix in _ALLOCATED_SUFFIXES:
        if prefix + suffix in listing:
            if known is not None and suffix == fm.LOG_SUFFIX:
                total += known
                continue
            try:
                total += os.lstat(stem + suffix).st_blocks * 512
            except OSError:
                continue
    return total


@dataclass
class Item:
    """One thing a rescue deletes: a leftover dir or a segment, with the space it frees."""

    step: str
    decision: Decision
    allocated: int
    gone: bool = False  # a real run deleted it


@dataclass
class Group:
    """The log dirs on one filesystem and what the rescue takes from them."""

    paths: list[str]
    before: PathUsage
    needed: int
    items: list[Item] = field(default_factory=list)
    after: PathUsage | None = None
    # what could still go beyond the configured retention (when that step did not run)
    beyond_available: bool = False
    # partitions whose prefix the guard stopped at a segment with unconsumed records
    guard_kept: int = 0

    def freed(self, step: str | None = None, *, real: bool) -> int:
        return sum(
            i.allocated
            for i in self.items
            if (step is None or i.step == step) and (i.gone or not real)
        )


@dataclass
class Selection:
    """Per filesystem: what goes, and per log dir the partition plans and leftovers that
    carry it out (the configured prefix and the rescue's, as one prefix per partition)."""

    groups: list[Group]
    partitions: dict[str, list[PartitionPlan]]  # log dir → plans to carry out
    leftovers: dict[str, list[Decision]]  # log dir → dirs to remove


# One segment of the configured retention, compactly (``Half``): its ``.log``, reason,
# identity (ino, dev, size, mtime_ns), offsets, topic, partition, detail, and the space its
# files hold.
Compact = tuple[str, str, int, int, int, int, int, int, str, int, str | None, int]


@dataclass
class Half:
    """What a rescue needs of partitions another process planned (``parallel``), for a
    rescue that takes by the plan's order alone (no consumer progress, no guard, nothing
    beyond the retention): per partition, in the scan's order, its dir's path and the
    segments its plan hands over; and whether one of them has a segment beyond its
    retention that could go."""

    paths: list[str]
    partitions: list[list[Compact]]
    beyond: bool


def compact(p: PartitionPlan, d: Decision) -> Compact:
    """``d``, a deletion of ``p``'s plan, with the space its files hold."""
    ident = d.identity
    assert ident is not None and d.start_offset is not None and d.end_offset is not None
    assert d.topic is not None and d.queue_id is not None
    return (
        d.path,
        f"{d.reason}",
        ident.ino,
        ident.dev,
        ident.size,
        ident.mtime_ns,
        d.start_offset,
        d.end_offset,
        d.topic,
        d.queue_id,
        d.detail,
        segment_allocated(p.partition, d.start_offset),
    )


# a reason's member by its value: ``Reason(value)`` once per reason, not once per segment
_REASONS: dict[str, Reason] = {}


def _decision(c: Compact) -> Decision:
    path, reason, ino, dev, size, mtime_ns, start, end, topic, partition, detail, _ = c
    member = _REASONS.get(reason)
    if member is None:
        member = _REASONS[reason] = Reason(reason)
    return Decision(
        Kind.KAFKA_SEGMENT,
        path,
        Verdict.DELETE,
        member,
        FileIdentity(ino, dev, size, mtime_ns),
        start,
        end,
        topic,
        partition,
        detail,
    )


def half_of(
    ld: LogDirPlan,
    server: KafkaServer,
    config_for: Callable[[str], TopicConfig | None],
    now_ms: int,
) -> Half:
    """``ld``'s partitions as another process's rescue takes them (``Half``)."""
    floor = server.rescue_min_retention_ms
    beyond = False
    paths = []
    parts = []
    for p in ld.partitions:
        paths.append(p.partition.path)
        parts.append([compact(p, d) for d in p.deletions])
        if not beyond and p.roll_offset is None and _eligible_beyond(p, server, config_for):
            beyond = _beyond_candidate(p, len(p.deletions), now_ms, floor, None) is not None
    return Half(paths, parts, beyond)


def _eligible_beyond(
    p: PartitionPlan,
    server: KafkaServer,
    config_for: Callable[[str], TopicConfig | None],
) -> bool:
    """A partition rescue may take from past its retention."""
    stop = p.stop
    part = p.partition
    if stop is None or stop.reason is not Reason.WITHIN_RETENTION or part.name.special:
        return False
    if part.topic.startswith("__") or server.protected(part.topic):
        return False
    config = config_for(part.topic)
    return (
        config is not None
        and config.delete
        and not config.compact
        and not config.remote_storage_enable
    )


def _beyond_candidate(
    p: PartitionPlan, i: int, now_ms: int, floor_ms: int, loss_of: LossOf | None
) -> tuple[tuple[int, int], int, int | None] | None:
    """Segment ``i`` of ``p`` as a beyond-retention deletion: (its order key, its largest
    timestamp, its loss), or None where the partition's prefix must stop: the active
    segment, the high watermark, the floor, an unreadable or future timestamp. The
    ``Decision`` is made (``_beyond_decision``) only for a segment the rescue comes to."""
    part = p.partition
    bases = part.bases
    if i >= len(bases) - 1:
        return None  # never the active segment
    upper = bases[i + 1]
    if upper > p.high_watermark:
        return None  # it holds an offset at or above the high watermark
    seg = part.segment(i)
    try:
        ts = seg.largest_timestamp[0]
        _ = seg.identity  # a .log that cannot be stat'ed stops the prefix too
    except (OSError, fm.FormatError):
        return None
    if ts > now_ms or now_ms - ts <= floor_ms:
        return None
    loss = loss_of(part.topic, part.partition, bases[i], upper) if loss_of else None
    return order_key(ts, loss), ts, loss


def _beyond_decision(
    p: PartitionPlan, i: int, ts: int, loss: int | None, now_ms: int, floor_ms: int
) -> Decision:
    part = p.partition
    seg = part.segment(i)
    detail = (
        f"largest timestamp {ts}: age {human_age(now_ms - ts)}, beyond the configured "
        f"retention; floor {floor_ms} ms"
        + ("" if loss is None else f"; unconsumed records: {loss}")
    )
    return Decision(
        Kind.KAFKA_SEGMENT,
        seg.log_path,
        Verdict.DELETE,
        Reason.RESCUE_BEYOND_RETENTION,
        seg.identity,
        part.bases[i],
        part.bases[i + 1],
        part.topic,
        part.partition,
        detail,
    )


def _retention_loss(p: PartitionPlan, d: Decision, loss_of: LossOf) -> int | None:
    """What deleting ``d``, a segment of the configured retention, loses: nothing below the
    log start offset (its records are gone for every reader already)."""
    if d.reason not in GUARDED_REASONS:
        return 0
    assert d.start_offset is not None and d.end_offset is not None
    part = p.partition
    return loss_of(part.topic, part.partition, d.start_offset, d.end_offset)


def _retention_key(p: PartitionPlan, i: int, loss: int | None) -> tuple[int, int]:
    """``order_key`` of segment ``i`` of ``p``'s configured retention: its largest timestamp
    as the plan read it (read now if the plan did not need it); one that cannot be read goes
    last within its rank."""
    seg = p.partition.segment(i)
    got = seg.known_largest(False) or seg.known_largest(True)
    if got is None:
        try:
            got = seg.largest_timestamp
        except (OSError, fm.FormatError):
            got = (_LAST, False)
    return order_key(got[0], loss)


_LAST = (1 << 63) - 1  # past every timestamp


def _combined(p: PartitionPlan, decisions: Sequence[Decision]) -> PartitionPlan:
    """One prefix to carry out: the configured retention's and the rescue's together."""
    part = p.partition
    k = len(decisions)
    if k < len(part.bases):
        new_lso, roll = part.bases[k], None
    else:  # only the configured retention takes every segment: it rolls first
        roll = p.roll_offset
        new_lso = roll if roll is not None else p.log_end_offset
    return PartitionPlan(
        part,
        tuple(decisions),
        k,
        p.log_start_offset,
        p.high_watermark,
        p.log_end_offset,
        max(new_lso, p.log_start_offset),
        roll,
    )


@dataclass
class _Taking:
    """What a rescue takes from one filesystem's log dirs, as it goes."""

    group: Group
    guard: Guard | None
    # what must be freed before the disk is no longer above the warning ratio: the guard
    # yields until then (never while the ratio cannot be measured)
    room: int = 0
    freed: int = 0
    taken: dict[int, list[Decision]] = field(default_factory=dict)  # id(plan) → its prefix
    plans: dict[int, tuple[str, PartitionPlan]] = field(default_factory=dict)
    kept: set[int] = field(default_factory=set)  # partitions the guard stopped, once each
    # per log dir, the partitions another process planned, among this one's (``Half``)
    halves: Mapping[str, Half] = field(default_factory=dict)
    known: Mapping[str, int] = field(default_factory=dict)  # a .log's path → its space

    def enough(self) -> bool:
        return self.freed >= self.group.needed

    def kept_by_guard(self, p: PartitionPlan, d: Decision) -> bool:
        """The guard keeps segment ``d`` of ``p``, and its partition's prefix stops there."""
        assert d.start_offset is not None and d.end_offset is not None
        guard, part = self.guard, p.partition
        if (
            guard is not None
            and self.freed >= self.room
            and guard.protects(part.topic, part.partition, d.start_offset, d.end_offset)
        ):
            self.kept.add(id(p))
            return True
        return False

    def take(self, step: str, path: str, p: PartitionPlan, d: Decision) -> None:
        assert d.start_offset is not None
        alloc = self.known.get(d.path)
        if alloc is None:
            alloc = segment_allocated(p.partition, d.start_offset)
        self.group.items.append(Item(step, d, alloc))
        self.taken.setdefault(id(p), []).append(d)
        self.plans[id(p)] = (path, p)
        self.freed += alloc

    def retention(self, lds: Sequence[LogDirPlan], loss_of: LossOf | None) -> None:
        """Step 2: the prefixes the partitions' plans hand over."""
        for ld in lds:
            for p in ld.partitions:
                stop = p.stop
                if self.guard is not None and stop is not None and stop.reason is Reason.UNCONSUMED:
                    self.kept.add(id(p))  # the round's plan kept it already (keep_unconsumed)
        if loss_of is None:  # no progress: partition by partition, in the plan's order
            guarded = None if self.guard is None else self._guarded  # None: keeps nothing
            for ld in lds:
                # another process's partitions (``Half``) go where the scan lists them
                half = self.halves.get(ld.path)
                theirs = (
                    zip(half.paths, half.partitions, strict=True) if half is not None else iter(())
                )
                there = next(theirs, None)
                for p in ld.partitions:
                    here = p.partition.path
                    while there is not None and there[0] < here:
                        self._take_compact(there[1])
                        there = next(theirs, None)
                    for d in p.deletions:
                        if self.enough() or (guarded is not None and guarded(p, d)):
                            break
                        self.take(STEP_RETENTION, ld.path, p, d)
                while there is not None:
                    self._take_compact(there[1])
                    there = next(theirs, None)
            return
        assert not self.halves, "another process's partitions only in the plan's order"
        # first what loses nothing: each prefix up to its first segment holding records a
        # group has not consumed; then, only while still short, the rest in ``order_key``
        # order (unconsumed last, oldest first), each partition only ever a prefix
        # (ties go in the scan's order, never by where the plans sit in memory: a dry run
        # and the real run that follows it take the same segments)
        rest: list[tuple[tuple[int, int], int, int, Decision]] = []
        where: dict[int, tuple[str, PartitionPlan]] = {}
        for ld in lds:
            for p in ld.partitions:
                for i, d in enumerate(p.deletions):
                    if self.enough():
                        return
                    loss = _retention_loss(p, d, loss_of)
                    if loss != 0:
                        seq = len(where)
                        where[seq] = (ld.path, p)
                        heapq.heappush(rest, (_retention_key(p, i, loss), seq, i, d))
                        break
                    if self._guarded(p, d):
                        break  # what the guard reads says otherwise: it keeps it
                    self.take(STEP_RETENTION, ld.path, p, d)
        while rest and not self.enough():
            _key, seq, i, d = heapq.heappop(rest)
            path, p = where[seq]
            if self._guarded(p, d):
                continue  # this partition's prefix stops here
            self.take(STEP_RETENTION, path, p, d)
            if i + 1 < len(p.deletions):
                d = p.deletions[i + 1]
                key = _retention_key(p, i + 1, _retention_loss(p, d, loss_of))
                heapq.heappush(rest, (key, seq, i + 1, d))

    def _take_compact(self, segments: list[Compact]) -> None:
        """Step 2 of a partition another process planned (``Half``)."""
        items, needed, freed = self.group.items, self.group.needed, self.freed
        for c in segments:
            if freed >= needed:  # ``enough``
                break
            items.append(Item(STEP_RETENTION, _decision(c), c[-1]))
            freed += c[-1]
        self.freed = freed

    def _guarded(self, p: PartitionPlan, d: Decision) -> bool:
        return d.reason in GUARDED_REASONS and self.kept_by_guard(p, d)

    def beyond(
        self,
        lds: Sequence[LogDirPlan],
        request: RescueRequest,
        server: KafkaServer,
        config_for: Callable[[str], TopicConfig | None],
        now_ms: int,
        loss_of: LossOf | None,
    ) -> None:
        """Step 3: past the configured retention, in ``order_key`` order, one prefix per
        partition, each going on where its taken prefix ends; none from a partition whose
        retention prefix step 2 did not take whole."""
        floor = server.rescue_min_retention_ms
        # ties go in the scan's order (log dir, then partition name), as in step 2
        heap: list[tuple[tuple[int, int], int, int, int, int | None]] = []
        cursors: dict[int, tuple[str, PartitionPlan]] = {}
        for ld in lds:
            for p in ld.partitions:
                if p.roll_offset is not None or not _eligible_beyond(p, server, config_for):
                    continue
                i = len(self.taken.get(id(p), ()))
                if i < len(p.deletions):
                    continue  # the guard stopped its prefix within the retention
                got = _beyond_candidate(p, i, now_ms, floor, loss_of)
                if got is not None:
                    if not request.beyond_retention:
                        # the report says only that something could go: the first will do
                        self.group.beyond_available = True
                        return
                    seq = len(cursors)
                    cursors[seq] = (ld.path, p)
                    heapq.heappush(heap, (got[0], seq, i, got[1], got[2]))
        self.group.beyond_available = bool(heap) or any(
            h.beyond for ld in lds if (h := self.halves.get(ld.path)) is not None
        )
        assert not (heap and self.halves and request.beyond_retention)
        while heap and request.beyond_retention and not self.enough():
            _key, seq, i, ts, loss = heapq.heappop(heap)
            path, p = cursors[seq]
            d = _beyond_decision(p, i, ts, loss, now_ms, floor)
            if self.kept_by_guard(p, d):
                continue  # this partition's prefix stops here
            self.take(STEP_BEYOND, path, p, d)
            got = _beyond_candidate(p, i + 1, now_ms, floor, loss_of)
            if got is not None:
                heapq.heappush(heap, (got[0], seq, i + 1, got[1], got[2]))


def select(
    planned: Sequence[LogDirPlan],
    request: RescueRequest,
    server: KafkaServer,
    config_for: Callable[[str], TopicConfig | None],
    now_ms: int,
    loss_of: LossOf | None = None,
    guard: Guard | None = None,
    halves: Mapping[str, Half] | None = None,
    known: Mapping[str, int] | None = None,
) -> Selection:
    """What the rescue takes, per filesystem, in the order of the steps; ``guard``: what
    ``retentiond.guard.unconsumed: keep`` keeps, unless disk safety says so. ``halves``:
    per log dir, the partitions another process planned, taken among ``planned``'s in the
    scan's order (only without ``loss_of``, ``guard`` or ``beyond_retention``: what is
    taken from them is in the selection's items, and carried out by nobody: a dry run).
    ``known``: the space of segments' files already measured, by ``.log`` path."""
    by_dev: dict[int, list[LogDirPlan]] = {}
    for ld in planned:
        try:
            dev = os.stat(ld.path).st_dev
        except OSError:
            continue
        by_dev.setdefault(dev, []).append(ld)
    groups: list[Group] = []
    partitions: dict[str, list[PartitionPlan]] = {}
    leftovers: dict[str, list[Decision]] = {}
    for lds in by_dev.values():
        usage = measure_path(lds[0].path)
        group = Group([ld.path for ld in lds], usage, needed_bytes(usage, request))
        groups.append(group)
        t = _Taking(group, guard, halves=halves or {}, known=known or {})
        if guard is not None and usage.ratio is not None:
            t.room = needed_bytes(usage, RescueRequest(target_ratio=guard.warning_ratio))
        # 1. leftovers
        for ld in lds:
            for d in ld.leftovers:
                if t.enough():
                    break
                if not d.delete:
                    continue
                try:
                    alloc = measure_dir(d.path).allocated
                except OSError:
                    continue
                group.items.append(Item(STEP_LEFTOVERS, d, alloc))
                leftovers.setdefault(ld.path, []).append(d)
                t.freed += alloc
        # 2. the configured retention
        t.retention(lds, loss_of)
        # 3. beyond it
        if not t.enough():
            t.beyond(lds, request, server, config_for, now_ms, loss_of)
        group.guard_kept = len(t.kept)
        for pid, decisions in t.taken.items():
            path, p = t.plans[pid]
            partitions.setdefault(path, []).append(_combined(p, decisions))
    return Selection(groups, partitions, leftovers)


def _n_partitions(n: int) -> str:
    return f"{n} partition" + ("" if n == 1 else "s")


def _ratio(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f}"


def report_lines(
    selection: Selection, request: RescueRequest, *, dry_run: bool
) -> tuple[list[str], bool]:
    """What ``rescue`` prints, and whether every filesystem reached its target."""
    real = not dry_run
    verb = "deleted" if real else "would delete"
    lines: list[str] = []
    reached_all = True
    beyond_any = False
    if request.free_bytes is not None:
        target = f"{human_bytes(request.free_bytes)} available"
    else:
        target = f"used ratio {request.target_ratio:.2f}"
    for g in selection.groups:
        before = g.before
        lines.append(
            f"{', '.join(g.paths)}: used ratio {_ratio(before.ratio)} "
            f"({human_bytes(before.avail_bytes)} available); target {target}: "
            f"{human_bytes(g.needed)} ({g.needed} bytes) to free"
        )
        so_far = 0
        for step in STEPS:
            items = [i for i in g.items if i.step == step]
            if step == STEP_BEYOND and not request.beyond_retention:
                break
            if not items and so_far >= g.needed:
                break  # the target was met before this step
            done = [i for i in items if i.gone or not real]
            what = "dirs" if step == STEP_LEFTOVERS else "segments"
            freed = g.freed(step, real=real)
            so_far += freed
            lines.append(
                f"  {step}: {len(done)} {what}, {'freed' if real else 'frees'} "
                f"{human_bytes(freed)} ({freed} bytes)"
            )
            for i in items:
                d = i.decision
                state = verb if (i.gone or not real) else "NOT deleted"
                lines.append(f"    {state}: {d.path} [{d.reason}] {i.allocated} bytes")
            beyond_any |= step == STEP_BEYOND and bool(done)
        total = g.freed(real=real)
        if g.after is not None:
            after = g.after
        else:
            after = PathUsage(
                before.path,
                ratio_from_counts(before.used_bytes - total, before.avail_bytes + total),
                before.total_bytes,
                before.used_bytes - total,
                before.avail_bytes + total,
            )
        reached = target_met(after, request)
        reached_all &= reached
        state = "reached" if reached else "NOT reached"
        short = max(0, g.needed - total)
        line = (
            f"  target {state}: used ratio {_ratio(after.ratio)}, "
            f"{human_bytes(after.avail_bytes)} available; {'freed' if real else 'frees'} "
            f"{human_bytes(total)} ({total} bytes) in all"
        )
        if not reached:
            line += f"; {human_bytes(short)} ({short} bytes) short"
            if g.guard_kept:
                line += (
                    f"; retentiond.guard.unconsumed=keep kept the unconsumed records of "
                    f"{_n_partitions(g.guard_kept)} once the disk was at "
                    "retentiond.kafka.diskWarningRatio"
                )
            if not request.beyond_retention:
                line += (
                    "; stopped after the configured retention: --beyond-retention would "
                    "take the oldest segments past it"
                    if g.beyond_available
                    else "; stopped after the configured retention"
                )
        lines.append(line)
    if beyond_any:
        lines.append(REPLICA_NOTE)
    if dry_run:
        lines.append("dry run: nothing was deleted")
    return lines, reached_all


def document(selection: Selection, request: RescueRequest, *, dry_run: bool) -> dict[str, object]:
    """``rescue --json``: per filesystem, the steps and every item."""
    real = not dry_run
    return {
        "dry_run": dry_run,
        "target_ratio": request.target_ratio,
        "free_bytes": request.free_bytes,
        "beyond_retention": request.beyond_retention,
        "filesystems": [
            {
                "log_dirs": g.paths,
                "ratio_before": g.before.ratio,
                "needed_bytes": g.needed,
                "freed_bytes": g.freed(real=real),
                "ratio_after": g.after.ratio if g.after is not None else None,
                "guard_kept_partitions": g.guard_kept,
                "steps": [
                    {
                        "step": step,
                        "freed_bytes": g.freed(step, real=real),
                        "items": [
                            {
                                "path": i.decision.path,
                                "kind": str(i.decision.kind),
                                "reason": str(i.decision.reason),
                                "allocated_bytes": i.allocated,
                                "bytes": i.decision.identity.size
                                if i.decision.identity is not None
                                else None,
                                "deleted": i.gone,
                            }
                            for i in g.items
                            if i.step == step
                        ],
                    }
                    for step in STEPS
                ],
            }
            for g in selection.groups
        ],
    }
