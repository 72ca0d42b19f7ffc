"""RocketMQ's forcible intervals, and holds applied to its CommitLog and queue plans.

The intervals are upstream's: ``destroyMapedFileIntervalForcibly`` for CommitLog files (the
only one upstream makes configurable), a fixed 60 s for ConsumeQueue files
and timerlog files (``deleteExpiredFileByOffset`` and its timer-log variant call
``destroy(1000 * 60)``) and 3 s for index files
(``IndexService.deleteExpiredFile`` calls ``destroy(3000)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from retentiond.config.settings import Settings
from retentiond.engine.decision import Decision
from retentiond.kinds.rocketmq.commitlog import first_kept_offset
from retentiond.kinds.rocketmq.config import RocketMQStore
from retentiond.kinds.rocketmq.plan import CommitLogPlan, QueueDecision, QueuesPlan, TimerLogPlan
from retentiond.reasons import FileKind, Kind

CONSUMEQUEUE_FORCIBLY_MS = 60_000  # MappedFileQueue.deleteExpiredFileByOffset: destroy(1000*60)
INDEX_FORCIBLY_MS = 3_000  # IndexService.deleteExpiredFile: destroy(3000)

# An ordered run with its held files deferred (engine.round.Round.hold).
HoldRun = Callable[[tuple[Decision, ...]], tuple[Decision, ...]]


@dataclass(frozen=True)
class HoldRules:
    """Forcible interval per kind, in ms. CommitLog follows the configuration."""

    commitlog_ms: int
    consumequeue_ms: int = CONSUMEQUEUE_FORCIBLY_MS  # and timerlog files
    index_ms: int = INDEX_FORCIBLY_MS

    @classmethod
    def from_settings(cls, settings: Settings[RocketMQStore]) -> HoldRules:
        return cls(settings.store.destroy_mapped_file_interval_forcibly_ms)

    def interval(self, kind: FileKind) -> int:
        if kind is Kind.COMMITLOG:
            return self.commitlog_ms
        if kind is Kind.CONSUMEQUEUE or kind is Kind.TIMERLOG:
            return self.consumequeue_ms
        return self.index_ms


def hold_commitlog(plan: CommitLogPlan, hold: HoldRun) -> CommitLogPlan:
    """The CommitLog plan with held files deferred (or forced): ``hold`` is the round's
    (``engine.round.Round.hold``), which stops the run at the first file that must wait."""
    if not plan.deletions():
        return plan
    decisions = hold(plan.decisions)
    return replace(plan, decisions=decisions, min_offset_after=first_kept_offset(decisions))


def hold_queues(plan: QueuesPlan, hold: HoldRun) -> QueuesPlan:
    """Each queue stops at its first held file; the index list likewise."""
    if not plan.examined:
        return plan
    queues: list[QueueDecision] = []
    changed = False
    for q in plan.queues:
        if not q.deleted:
            queues.append(q)
            continue
        walked = hold(q.deleted)
        if walked is q.deleted:  # nothing held (the hold hands back the very tuple)
            queues.append(q)
            continue
        go = tuple(d for d in walked if d.delete)
        if len(go) == len(q.deleted):
            queues.append(q._replace(deleted=walked))
        else:
            queues.append(q.with_stop(go, walked[len(go)]))
        changed = True
    index = plan.index
    if any(d.delete for d in index):
        index = hold(index)
        changed = True
    if not changed:
        return plan
    return replace(plan, queues=tuple(queues), index=index)


def hold_timerlog(plan: TimerLogPlan, hold: HoldRun) -> TimerLogPlan:
    """The timer log's prefix stops at its first held file."""
    if not plan.deletions():
        return plan
    return replace(plan, decisions=hold(plan.decisions))
