"""Which CommitLog files a round deletes (upstream deleteExpiredFileByTime, spec §4.5).

Walks the files oldest first and stops at the first one that does not qualify, so nothing is
ever deleted "in the middle"; never touches the newest file that holds data nor the
pre-allocated file(s) after it; deletes at most ``deleteFileBatchMax`` per round.
"""

from __future__ import annotations

from collections.abc import Iterable

from retentiond.config.settings import Settings
from retentiond.engine.decision import Decision
from retentiond.kinds.rocketmq.config import RocketMQStore
from retentiond.kinds.rocketmq.plan import CommitLogPlan
from retentiond.kinds.rocketmq.snapshot import CommitLogFile
from retentiond.kinds.rocketmq.triggers import Triggers, next_delete_window
from retentiond.reasons import Kind, Reason, Verdict

_HOUR_MS = 3_600_000


def newest_kept_index(files: tuple[CommitLogFile, ...]) -> int:
    """Index of the newest file that holds data; it and everything after it are kept.

    Files whose head was not read (``never_written is None``) count as holding data; with no
    data at all the first file is the newest and everything is kept.
    """
    for i in range(len(files) - 1, -1, -1):
        if files[i].never_written is not True:
            return i
    return 0


def _pass_reason(triggers: Triggers) -> Reason:
    """The reason an expired file goes: the trigger that opened the pass, time first."""
    if triggers.time_up:
        return Reason.EXPIRED
    if triggers.manual:
        return Reason.MANUAL
    return Reason.DISK_OVER_MAX_RATIO


def first_kept_offset(decisions: Iterable[Decision]) -> int:
    """The start offset of the first file that stays (the CommitLog minimum once the others
    went); -1 when none does."""
    for d in decisions:
        if not d.delete:
            return d.start_offset if d.start_offset is not None else -1
    return -1


def _decision(
    f: CommitLogFile, verdict: Verdict, reason: Reason, detail: str | None = None
) -> Decision:
    return Decision(
        Kind.COMMITLOG,
        f.path,
        verdict,
        reason,
        identity=f.identity,
        start_offset=f.start_offset,
        end_offset=f.start_offset + f.identity.size,
        detail=detail,
    )


def plan_commitlog(
    files: tuple[CommitLogFile, ...],
    triggers: Triggers,
    settings: Settings[RocketMQStore],
    now_ms: int,
) -> CommitLogPlan:
    newest = newest_kept_index(files)
    candidates, protected = files[:newest], files[newest:]
    reserved_ms = settings.store.file_reserved_time_hours * _HOUR_MS
    decisions: list[Decision] = []
    stop_reason: Reason | None = None
    if triggers.error is not None:
        stop_reason = Reason.STORE_ERROR
    elif not triggers.fired:
        stop_reason = Reason.NOT_TIME_TO_DELETE

    deleted = 0
    pass_reason = _pass_reason(triggers)
    forced = triggers.fired and triggers.clean_at_once  # age does not matter in this pass
    for f in candidates:
        expired = now_ms >= f.identity.mtime_ms + reserved_ms  # upstream: ">=" inclusive
        if stop_reason is not None:
            # Kept without a look at its size: say why it would not go on its own first
            # (too young), and what stopped the pass only for a file that would have gone.
            reason = stop_reason
            if stop_reason is not Reason.STORE_ERROR and not expired and not forced:
                reason = Reason.NOT_EXPIRED
            decisions.append(_decision(f, Verdict.KEEP, reason))
            continue
        if f.identity.size != settings.store.mapped_file_size_commitlog:
            detail = f"size {f.identity.size} != mappedFileSizeCommitLog"
            decisions.append(_decision(f, Verdict.KEEP, Reason.BAD_SIZE, detail))
            stop_reason = Reason.AFTER_FIRST_KEPT
            continue
        if expired or triggers.clean_at_once:
            reason = pass_reason if expired else Reason.FORCED_OVER_CLEAN_FORCIBLY_RATIO
            decisions.append(_decision(f, Verdict.DELETE, reason))
            deleted += 1
            if deleted >= settings.store.delete_file_batch_max:
                stop_reason = Reason.BATCH_LIMIT
        else:
            decisions.append(_decision(f, Verdict.KEEP, Reason.NOT_EXPIRED))
            stop_reason = Reason.AFTER_FIRST_KEPT
    decisions.extend(_decision(f, Verdict.KEEP, Reason.NEWEST_FILE) for f in protected)

    return CommitLogPlan(
        triggers=triggers,
        decisions=tuple(decisions),
        min_offset_before=files[0].start_offset if files else -1,
        min_offset_after=first_kept_offset(decisions),
        reserved_ms=reserved_ms,
        next_window_ms=(
            None if triggers.fired or triggers.error else next_delete_window(settings, now_ms)
        ),
        zone=settings.daemon.timezone,
    )


def expired_pending(
    plan: CommitLogPlan,
    settings: Settings[RocketMQStore],
    now_ms: int,
    deleted: frozenset[str] = frozenset(),
) -> int:
    """Expired CommitLog files still on disk after a round: what a later pass may take.

    The newest file never counts (it is never deleted, however old). Used by the round record,
    `status` and the metrics, so all of them report the same number for the same store.
    """
    reserved = settings.store.file_reserved_time_hours * _HOUR_MS
    return sum(
        1
        for d in plan.decisions
        if d.identity is not None
        and d.path not in deleted
        and d.reason is not Reason.NEWEST_FILE
        and now_ms >= d.identity.mtime_ms + reserved
    )
