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

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property

from retentiond.engine.decision import Decision
from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.scan import Partition, Segment
from retentiond.reasons import Kind, Reason, Verdict

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


class PartitionPlan:
    """One partition's verdicts, and what carrying them out changes.

    Compact, as a plan over 10,000 partitions needs it: ``head`` holds a ``Decision`` for
    each segment the passes handed over (deleted, or kept as ``broker_running``) and one for
    the first segment kept, whose reason says what stopped the prefix; the ``behind``
    segments after it are only counted. ``decisions`` gives every segment's verdict, worked
    out on first use from what the passes already know (no I/O), exactly as if it had been
    built with the head: the JSON document, ``plan --all`` and the daemon's figures ask for
    it, the text plan does not.
    """

    def __init__(
        self,
        partition: Partition,
        head: tuple[Decision, ...],
        prefix: int,  # how many of ``head`` the passes handed over
        log_start_offset: int,  # before
        high_watermark: int,
        log_end_offset: int,
        new_log_start_offset: int,  # after the planned deletions
        roll_offset: int | None,  # an empty segment to create first (every segment goes)
        rest: Callable[[], Iterable[Decision]] | None = None,  # the segments behind ``head``
        behind_reason: Reason | None = None,  # the reason of every segment behind, if one
    ) -> None:
        self.partition = partition
        self.head = head
        self.prefix = prefix
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark
        self.log_end_offset = log_end_offset
        self.new_log_start_offset = new_log_start_offset
        self.roll_offset = roll_offset
        self._rest = rest
        self.behind = len(partition.bases) - len(head)
        self.behind_reason = behind_reason

    def __repr__(self) -> str:
        return f"PartitionPlan({self.partition.name.name}, {self.prefix} handed over)"

    @property
    def stop(self) -> Decision | None:
        """The first segment kept, with what stopped the prefix (None: every one goes)."""
        return self.head[self.prefix] if len(self.head) > self.prefix else None

    @cached_property
    def deletions(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.head[: self.prefix] if d.delete)

    @cached_property
    def decisions(self) -> tuple[Decision, ...]:
        """One per segment, in base-offset order."""
        if self._rest is None or not self.behind:
            return self.head
        return (*self.head, *self._rest())


def _keep_all(
    part: Partition, reason: Reason, detail: str, lso: int = 0, hw: int = 0, leo: int = 0
) -> PartitionPlan:
    """Every segment kept for the same reason: the first one built, the rest on demand."""
    n = len(part.bases)
    if not n:
        return PartitionPlan(part, (), 0, lso, hw, leo, lso, None)
    first = (_decision(part, part.segment(0), Verdict.KEEP, reason, detail),)

    def rest() -> Iterator[Decision]:
        for i in range(1, n):
            yield _decision(part, part.segment(i), Verdict.KEEP, reason, detail)

    return PartitionPlan(part, first, 0, lso, hw, leo, lso, None, rest, reason)


def keep_all(part: Partition, reason: Reason, detail: str) -> PartitionPlan:
    """Every segment of ``part`` kept for one reason, not judged (an orphan partition)."""
    return _keep_all(part, reason, detail)


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
    strays = part.stray_logs
    if strays:
        # the broker would load a segment list other than ours: a prefix of ours need not
        # be a prefix of its (rule 1), so nothing here is judged
        named = ", ".join(repr(n) for n in strays[:3]) + (", ..." if len(strays) > 3 else "")
        return _keep_all(
            part,
            Reason.UNREADABLE,
            f"{named}: a .log the broker would load as a segment (a symlink, or a name "
            "outside the 20-digit scheme): its segment list is not the one planned",
        )
    if not part.bases:
        return _keep_all(part, Reason.WITHIN_RETENTION, "no segments")

    tp = (part.topic, part.partition)
    try:
        leo = part.log_end_offset
    except (OSError, fm.FormatError) as e:
        return _keep_all(part, Reason.UNREADABLE, f"log end offset unknown: {e}")
    first_base = part.bases[0]
    lso = max((log_start_offsets or {}).get(tp, first_base), first_base)
    hw_raw = (high_watermarks or {}).get(tp, 0)
    hw = min(max(hw_raw, lso), leo)
    no_hw = high_watermarks is None or tp not in high_watermarks

    try:
        return _plan(part, config, now_ms, lso, hw, leo, no_hw, broker_running, time_index_compat)
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
    """The three passes, the first segment kept and why; the reasons of the segments behind
    it when asked for.

    Every pass deletes a prefix, so the evolving segment list of §2.7 is
    ``segments[start:]``, plus the empty segment a roll adds once ``start`` reaches the end
    (after which nothing more can go: the trailing empty segment never does). Timestamps are
    read only where Kafka's own passes look: the prefix that goes and the first segment that
    stays; sizes only by the size pass (and of the last segment, known from its read).
    """
    seg = part.segment
    made = part.made  # the Segment objects made so far (None where not): seg() without a call
    bases = part.bases
    n = len(bases)
    uppers = [*bases[1:], leo]  # each segment's next base offset, the last one's LEO
    # hw >= upper holds for a prefix of the segments (uppers only grow): its length
    hw_end = bisect_right(uppers, hw)
    active = seg(n - 1)
    retention_ms = config.retention_ms

    def largest(s: Segment) -> tuple[int, bool]:
        if time_index_compat and s is not active:
            return s.time_index_largest
        return s.largest_timestamp

    by_batches = not time_index_compat

    handed: list[tuple[Reason, str]] = []  # the reason of each segment of the prefix
    start = 0
    new_lso = lso
    roll_offset: int | None = None

    def deletable(pred: Callable[[int], bool]) -> int:
        """How many segments from ``start`` Kafka's ``deletableSegments`` hands over."""
        i = start
        while i < n and i < hw_end:
            if i == n - 1 and active.size == 0:
                break  # the trailing empty segment
            if not pred(i):
                break
            i += 1
        return i - start

    def apply(count: int, reason: Reason, detail: Callable[[int], str]) -> None:
        nonlocal start, new_lso, roll_offset
        if not count:
            return
        handed.extend((reason, detail(i)) for i in range(start, start + count))
        start += count
        if start == n:
            roll_offset = leo  # roll(): the new active segment at LEO
        new_lso = max(new_lso, bases[start] if start < n else leo)

    # 1. log start offset breach: the next segment starts at or below the LSO
    apply(
        deletable(lambda i: i + 1 < n and bases[i + 1] <= lso),
        Reason.LOG_START_OFFSET_BREACH,
        lambda i: f"next segment starts at or below log start offset {lso}",
    )
    ts_errors: dict[int, str] = {}

    def timestamp(i: int) -> int | None:
        try:
            s = made[i] or seg(i)
            return (s.largest_timestamp if by_batches else largest(s))[0]
        except (OSError, fm.FormatError) as e:
            ts_errors[i] = str(e)
            return None

    def age_detail(i: int) -> str:
        ts, from_mtime = largest(seg(i))
        src = "mtime" if from_mtime else "largest timestamp"
        return f"{src} {ts}: age {now_ms - ts} ms, retention.ms {retention_ms}"

    if config.delete and start < n:
        # 2. size: the longest prefix whose sizes fit in (size - retention.bytes)
        limit = config.retention_bytes
        if limit >= 0:
            total = sum([(made[i] or seg(i)).size for i in range(start, n)])
            if total >= limit:
                diff = total - limit

                def size_pred(i: int) -> bool:
                    nonlocal diff
                    size = (made[i] or seg(i)).size
                    if diff - size >= 0:
                        diff -= size
                        return True
                    return False

                apply(
                    deletable(size_pred),
                    Reason.RETENTION_BYTES_BREACH,
                    lambda i: f"partition {total} bytes over retention.bytes {limit}",
                )
        # 3. time: now - largestTimestamp > retention.ms, strictly; the pass stops at the
        # first segment that does not qualify, and so does the reading
        if retention_ms >= 0 and start < n:

            def time_pred(i: int) -> bool:
                ts = timestamp(i)
                return ts is not None and now_ms - ts > retention_ms

            apply(deletable(time_pred), Reason.RETENTION_MS_BREACH, age_detail)

    # Why each remaining segment stays. The first one was examined by the passes; behind it
    # only what is known without reading is told (the high watermark, the empty active
    # segment, a timestamp already read), the rest stays because the prefix ended there.
    def own_reason(i: int, read: bool) -> tuple[Reason, str] | None:
        if i == n - 1 and active.size == 0:
            return Reason.EMPTY_ACTIVE_SEGMENT, "the trailing empty segment is never deleted"
        if i >= hw_end:
            why = " (no high watermark checkpointed)" if no_hw else ""
            return Reason.ABOVE_HIGH_WATERMARK, f"high watermark {hw} < {uppers[i]}{why}"
        if not config.delete:
            return _COMPACTED
        if retention_ms < 0:
            return _UNLIMITED
        if read:
            ts = timestamp(i)
            if ts is None:
                return Reason.UNREADABLE, ts_errors.get(i, "unreadable")
        else:
            s = seg(i)
            known = s.known_largest(time_index_compat and s is not active)
            if known is None:
                return None  # never read: Kafka's pass stopped before it
            ts = known[0]
        if ts > now_ms:
            return Reason.FUTURE_TIMESTAMP, f"largest timestamp {ts} is in the future"
        if now_ms - ts > retention_ms:
            return None
        return Reason.WITHIN_RETENTION, age_detail(i)

    # The head: a Decision for every segment the passes handed over, then the first kept.
    topic, partition = part.topic, part.partition
    head: list[Decision] = []
    for i, (reason, detail) in enumerate(handed):
        s = seg(i)
        if broker_running:
            verdict, reason, detail = _KEEP, Reason.BROKER_RUNNING, f"would go: {reason}"
            identity = s.known_identity
        else:
            verdict, identity = _DELETE, s.identity  # what the executor re-checks
        head.append(
            _new_tuple(
                Decision,
                (
                    _SEGMENT,
                    s.log_path,
                    verdict,
                    reason,
                    identity,
                    bases[i],
                    uppers[i],
                    topic,
                    partition,
                    detail,
                    None,  # loss
                ),
            )
        )
    rest: Callable[[], Iterator[Decision]] | None = None
    if start < n:
        first = own_reason(start, read=True) or (Reason.WITHIN_RETENTION, "within retention")
        s = seg(start)
        head.append(
            _new_tuple(
                Decision,
                (
                    _SEGMENT,
                    s.log_path,
                    _KEEP,
                    first[0],
                    s.known_identity,
                    bases[start],
                    uppers[start],
                    topic,
                    partition,
                    first[1],
                    None,  # loss
                ),
            )
        )

        def rest() -> Iterator[Decision]:
            """The segments behind the first kept one, from what is already known."""
            first_path = seg(start).log_path
            if first[0] is Reason.FUTURE_TIMESTAMP:
                behind = (
                    Reason.FUTURE_TIMESTAMP,
                    f"behind {first_path}, whose largest timestamp is in the future",
                )
            else:
                behind = (Reason.AFTER_FIRST_KEPT, f"behind {first_path} ({first[0]})")
            last = n - 1
            if not config.delete:
                quick: tuple[Reason, str] | None = _COMPACTED
            elif retention_ms < 0:
                quick = _UNLIMITED
            else:
                quick = None  # behind, unless its timestamp happens to be known
            for i in range(start + 1, n):
                s = seg(i)
                if i == last or i >= hw_end:
                    reason, detail = own_reason(i, read=False) or behind
                elif quick is not None:
                    reason, detail = quick
                elif s.known_largest(time_index_compat and s is not active) is None:
                    reason, detail = behind
                else:
                    reason, detail = own_reason(i, read=False) or behind
                yield _new_tuple(
                    Decision,
                    (
                        _SEGMENT,
                        s.log_path,
                        _KEEP,
                        reason,
                        s.known_identity,
                        bases[i],
                        uppers[i],
                        topic,
                        partition,
                        detail,
                        None,  # loss
                    ),
                )

    if broker_running:
        new_lso, roll_offset = lso, None
    return PartitionPlan(part, tuple(head), len(handed), lso, hw, leo, new_lso, roll_offset, rest)


_SEGMENT = Kind.KAFKA_SEGMENT
# a Decision from its eleven fields without NamedTuple's Python-level __new__ (200,000 a plan)
_new_tuple = tuple.__new__
_KEEP = Verdict.KEEP
_DELETE = Verdict.DELETE
_COMPACTED = (Reason.COMPACTED, "cleanup.policy without delete: log-start-offset breaches only")
_UNLIMITED = (Reason.WITHIN_RETENTION, "retention.ms=-1 and under retention.bytes")
