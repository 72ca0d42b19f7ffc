"""``UnifiedLog.deleteOldSegments`` as a pure function of a scanned partition (spec §2, the
reference algorithm of §2.7).

Three passes in Kafka's fixed order, each on what the previous one left: log-start-offset
breach, then size, then time. Each deletes a *prefix* of the segments, bounded by the high
watermark; the trailing empty segment never goes, and deleting every segment first "rolls" an
empty one at the log end offset. Nothing here touches the disk (the largest timestamps are read
lazily by the scan); ``offline`` carries a plan out.

Every segment gets a verdict and a reason; a kept segment's reason says what stopped the
prefix, and a segment kept only because an earlier one is kept names that one, so a future
timestamp pinning a partition is visible in the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from retentiond.engine.decision import Decision
from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.scan import Partition, Segment
from retentiond.reasons import KAFKA_DELETE_REASONS, Kind, Reason, Verdict

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """The effective retention config of one topic (topic keys, §5.1)."""

    cleanup_policy: frozenset[str] = frozenset({"delete"})
    retention_ms: int = DEFAULT_RETENTION_MS
    retention_bytes: int = -1
    remote_storage_enable: bool = False
    file_delete_delay_ms: int = 60_000

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy


class _Seg:
    """A segment in the evolving list; ``seg`` is None for the empty segment a roll adds.
    The size is asked of the segment only by the passes that need it (a stat otherwise)."""

    __slots__ = ("base_offset", "seg")

    def __init__(self, base_offset: int, seg: Segment | None) -> None:
        self.base_offset = base_offset
        self.seg = seg

    @property
    def size(self) -> int:
        return 0 if self.seg is None else self.seg.size


@dataclass(frozen=True)
class PartitionPlan:
    """One partition's verdicts, and what carrying them out changes."""

    partition: Partition
    decisions: tuple[Decision, ...]  # one per segment, in base-offset order
    log_start_offset: int  # before
    high_watermark: int
    log_end_offset: int
    new_log_start_offset: int  # after the planned deletions
    roll_offset: int | None  # an empty segment to create first (every segment goes)

    @property
    def deletions(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.delete)


def _keep_all(
    part: Partition, reason: Reason, detail: str, lso: int = 0, hw: int = 0, leo: int = 0
) -> PartitionPlan:
    decisions = tuple(_decision(part, s, Verdict.KEEP, reason, detail) for s in part.segments)
    return PartitionPlan(part, decisions, lso, hw, leo, lso, None)


def _decision(
    part: Partition,
    s: Segment,
    verdict: Verdict,
    reason: Reason,
    detail: str | None,
    end_offset: int | None = None,
) -> Decision:
    """A deletion carries the identity the executor re-checks (a stat now if no read took
    one); a kept segment carries it only if it is already known, as RocketMQ's files behind a
    queue's first kept one carry none."""
    identity = s.identity if verdict is Verdict.DELETE else s.known_identity
    # the next segment's base offset, or the log end offset, as end_offset
    return Decision(
        Kind.KAFKA_SEGMENT,
        s.log_path,
        verdict,
        reason,
        identity,
        s.base_offset,
        end_offset,
        part.topic,
        part.partition,
        detail,
    )


def plan_partition(
    part: Partition,
    config: TopicConfig | None,
    *,
    now_ms: int,
    high_watermarks: Mapping[tuple[str, int], int] | None,
    log_start_offsets: Mapping[tuple[str, int], int] | None,
    cleaner_enabled: bool = True,
    broker_running: bool = False,
    time_index_compat: bool = False,
) -> PartitionPlan:
    """The verdict on every segment of ``part`` (§2.1–§2.4, §2.7).

    ``high_watermarks`` and ``log_start_offsets`` are the log dir's checkpoints (None when the
    file is missing). With no high watermark the HW is the log start offset (Kafka clamps a
    missing entry into [LSO, LEO]), so only log-start-offset breaches can go. ``config`` None
    means the topic's effective config is unknown: every segment stays. ``broker_running``
    turns every deletion into a ``broker_running`` keep that says what would have gone.
    ``time_index_compat`` takes an inactive segment's largest timestamp from its time index
    as a broker that loaded it would (§4.3 strict mode); by default the batches decide.
    """
    name = part.name
    if name.special is not None:
        return _keep_all(part, Reason.TRANSIENT_PARTITION_DIR, f"a -{name.special} directory")
    if name.topic == fm.METADATA_TOPIC:
        return _keep_all(part, Reason.CLUSTER_METADATA, "KRaft metadata log: its own retention")
    if config is None:
        return _keep_all(part, Reason.UNKNOWN_TOPIC_CONFIG, f"no effective config for {name.topic}")
    if config.remote_storage_enable:
        return _keep_all(part, Reason.TIERED, "remote.storage.enable=true: needs remote offsets")
    if config.compact and not cleaner_enabled:
        return _keep_all(
            part, Reason.CLEANER_DISABLED, "compacted topic and log.cleaner.enable=false"
        )
    if not part.segments:
        return _keep_all(part, Reason.WITHIN_RETENTION, "no segments")

    tp = (part.topic, part.partition)
    try:
        leo = part.log_end_offset
    except (OSError, fm.FormatError) as e:
        return _keep_all(part, Reason.UNREADABLE, f"log end offset unknown: {e}")
    first_base = part.segments[0].base_offset
    lso = max((log_start_offsets or {}).get(tp, first_base), first_base)
    hw_raw = (high_watermarks or {}).get(tp, 0)
    hw = min(max(hw_raw, lso), leo)
    no_hw = high_watermarks is None or tp not in high_watermarks

    try:
        return _plan(
            part, config, now_ms, lso, hw, leo, no_hw, broker_running, time_index_compat
        )
    except OSError as e:  # a .log gone or replaced since the scan listed it: judge nothing
        return _keep_all(part, Reason.UNREADABLE, f"segment changed under the plan: {e}", lso)


def _plan(
    part: Partition,
    config: TopicConfig,
    now_ms: int,
    lso: int,
    hw: int,
    leo: int,
    no_hw: bool,
    broker_running: bool,
    time_index_compat: bool,
) -> PartitionPlan:
    """The three passes, then a reason for every segment. Timestamps are read only where
    Kafka's own passes look: the prefix that goes and the first segment that stays."""
    segs = [_Seg(s.base_offset, s) for s in part.segments]
    active = part.segments[-1]

    def largest(s: Segment) -> tuple[int, bool]:
        if time_index_compat and s is not active:
            return s.time_index_largest
        return s.largest_timestamp

    def known_largest(s: Segment) -> tuple[int, bool] | None:
        return s.known_largest(time_index_compat and s is not active)

    reasons: dict[int, tuple[Reason, str]] = {}
    new_lso = lso
    roll_offset: int | None = None

    def deletable(pred: Callable[[_Seg, _Seg | None], bool]) -> list[_Seg]:
        out: list[_Seg] = []
        for i, s in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else leo
            last_and_empty = nxt is None and s.size == 0
            if hw >= upper and not last_and_empty and pred(s, nxt):
                out.append(s)
            else:
                break
        return out

    def apply(doomed: list[_Seg], reason: Reason, detail: Callable[[_Seg], str]) -> None:
        nonlocal segs, new_lso, roll_offset
        if not doomed:
            return
        if len(doomed) == len(segs):
            segs = [*segs, _Seg(leo, None)]  # roll(): the new active segment at LEO
            roll_offset = leo
        for s in doomed:
            assert s.seg is not None
            reasons[s.base_offset] = (reason, detail(s))
        segs = segs[len(doomed) :]
        new_lso = max(new_lso, segs[0].base_offset)

    # 1. log start offset breach: the next segment starts at or below the LSO
    cur_lso = lso
    apply(
        deletable(lambda s, n: n is not None and n.base_offset <= cur_lso),
        Reason.LOG_START_OFFSET_BREACH,
        lambda s: f"next segment starts at or below log start offset {cur_lso}",
    )
    ts_errors: dict[int, str] = {}
    if config.delete:
        # 2. size: the longest prefix whose sizes fit in (size - retention.bytes)
        limit = config.retention_bytes
        total = sum(s.size for s in segs) if limit >= 0 else 0
        if limit >= 0 and total >= limit:
            diff = total - limit

            def size_pred(s: _Seg, n: _Seg | None) -> bool:
                nonlocal diff
                if diff - s.size >= 0:
                    diff -= s.size
                    return True
                return False

            apply(
                deletable(size_pred),
                Reason.RETENTION_BYTES_BREACH,
                lambda s: f"partition {total} bytes over retention.bytes {limit}",
            )
        # 3. time: now - largestTimestamp > retention.ms, strictly; the pass stops at the
        # first segment that does not qualify, and so does the reading
        if config.retention_ms >= 0:

            def time_pred(s: _Seg, n: _Seg | None) -> bool:
                ts = _timestamp(s, ts_errors, largest)
                return ts is not None and now_ms - ts > config.retention_ms

            apply(
                deletable(time_pred),
                Reason.RETENTION_MS_BREACH,
                lambda s: _age_detail(s, now_ms, config.retention_ms, largest),
            )

    # Why each remaining segment stays. The first one was examined by the passes; behind it
    # only what is known without reading is told (the high watermark, the empty active
    # segment, a timestamp already read), the rest stays because the prefix ended there.
    def own_reason(i: int, s: _Seg, read: bool) -> tuple[Reason, str] | None:
        nxt = segs[i + 1] if i + 1 < len(segs) else None
        upper = nxt.base_offset if nxt is not None else leo
        if nxt is None and s.size == 0:
            return Reason.EMPTY_ACTIVE_SEGMENT, "the trailing empty segment is never deleted"
        if hw < upper:
            why = " (no high watermark checkpointed)" if no_hw else ""
            return Reason.ABOVE_HIGH_WATERMARK, f"high watermark {hw} < {upper}{why}"
        if not config.delete:
            return Reason.COMPACTED, "cleanup.policy without delete: log-start-offset breaches only"
        if config.retention_ms >= 0:
            assert s.seg is not None
            if read:
                ts = _timestamp(s, ts_errors, largest)
                if ts is None:
                    return Reason.UNREADABLE, ts_errors.get(s.base_offset, "unreadable")
            else:
                known = known_largest(s.seg)
                if known is None:
                    return None  # never read: Kafka's pass stopped before it
                ts = known[0]
            if ts > now_ms:
                return Reason.FUTURE_TIMESTAMP, f"largest timestamp {ts} is in the future"
            if now_ms - ts > config.retention_ms:
                return None
            return Reason.WITHIN_RETENTION, _age_detail(s, now_ms, config.retention_ms, largest)
        return Reason.WITHIN_RETENTION, "retention.ms=-1 and under retention.bytes"

    behind: tuple[Reason, str] | None = None
    for i, s in enumerate(segs):
        if s.seg is None:
            continue
        if behind is None:
            first = own_reason(i, s, read=True) or (Reason.WITHIN_RETENTION, "within retention")
            reasons[s.base_offset] = first
            first_path = s.seg.log_path
            if first[0] is Reason.FUTURE_TIMESTAMP:
                behind = (
                    Reason.FUTURE_TIMESTAMP,
                    f"behind {first_path}, whose largest timestamp is in the future",
                )
            else:
                behind = (Reason.AFTER_FIRST_KEPT, f"behind {first_path} ({first[0]})")
        else:
            reasons[s.base_offset] = own_reason(i, s, read=False) or behind

    decisions = []
    uppers = [*(x.base_offset for x in part.segments[1:]), leo]
    for s, upper in zip(part.segments, uppers, strict=True):
        reason, detail = reasons[s.base_offset]
        if reason in KAFKA_DELETE_REASONS and broker_running:
            verdict, reason, detail = Verdict.KEEP, Reason.BROKER_RUNNING, f"would go: {reason}"
        else:
            verdict = Verdict.DELETE if reason in KAFKA_DELETE_REASONS else Verdict.KEEP
        decisions.append(_decision(part, s, verdict, reason, detail, upper))
    if broker_running:
        new_lso, roll_offset = lso, None
    return PartitionPlan(part, tuple(decisions), lso, hw, leo, new_lso, roll_offset)


def _timestamp(
    s: _Seg, errors: dict[int, str], largest: Callable[[Segment], tuple[int, bool]]
) -> int | None:
    """The segment's largest timestamp (§4.3), None if it cannot be read."""
    if s.seg is None:
        return None
    try:
        return largest(s.seg)[0]
    except (OSError, fm.FormatError) as e:
        errors[s.base_offset] = str(e)
        return None


def _age_detail(
    s: _Seg, now_ms: int, retention_ms: int, largest: Callable[[Segment], tuple[int, bool]]
) -> str:
    assert s.seg is not None
    ts, from_mtime = largest(s.seg)
    src = "mtime" if from_mtime else "largest timestamp"
    return f"{src} {ts}: age {now_ms - ts} ms, retention.ms {retention_ms}"
