"""One cleaning round, wired end to end: scan → triggers → plan → execute → journal.

The Cleaner owns the state upstream keeps between ticks (the last CommitLog minimum offset the
queue cleaner acted on, the remaining manual rounds). ``plan()`` and a dry-run round call the
very same planning code as a real round and stop before the executor.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import structlog

from retentiond.execute import Executor, Outcome, RoundContext, Stopped
from retentiond.journal import Journal
from retentiond.policy.commitlog import expired_pending, plan_commitlog
from retentiond.policy.plan import CommitLogPlan, Plan, QueuesPlan
from retentiond.policy.queues import plan_queues
from retentiond.policy.triggers import evaluate, hour_of_day
from retentiond.reasons import Kind
from retentiond.settings import Settings
from retentiond.store import disk as disk_mod
from retentiond.store.reader import BinaryReader
from retentiond.store.scan import QueueLister, scan
from retentiond.store.snapshot import Snapshot

log = structlog.get_logger("retentiond.cleaner")

MAX_MANUAL_DELETE_FILE_TIMES = 20  # upstream: each manual request opens 20 rounds


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CleanerState:
    last_physical_min_offset: int = 0  # upstream CleanConsumeQueueService; 0 after a restart
    manual_rounds_remaining: int = 0


@dataclass
class RoundResult:
    plan: Plan
    outcomes: list[Outcome] = field(default_factory=list)
    stopped: bool = False
    duration_s: float = 0.0
    slept_s: float = 0.0  # time spent in the pacing sleeps between deletions

    @property
    def deleted(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.deleted]

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.deleted]

    def counts(self) -> dict[str, dict[str, int]]:
        files: Counter[str] = Counter()
        size: Counter[str] = Counter()
        for o in self.deleted:
            files[str(o.decision.kind)] += 1
            size[str(o.decision.kind)] += o.decision.identity.size if o.decision.identity else 0
        return {k.value: {"files": files[k.value], "bytes": size[k.value]} for k in Kind}


class Cleaner:
    def __init__(
        self,
        settings: Settings,
        *,
        journal: Journal | None = None,
        stop: threading.Event | None = None,
        clock_ms: Callable[[], int] = wall_ms,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.stop = stop or threading.Event()
        self.clock_ms = clock_ms
        self.on_outcome = on_outcome
        self.state = CleanerState()
        self.reader = BinaryReader(settings.mapped_file_size_consumequeue)
        self.lister = QueueLister()  # directory listings carried between rounds
        self.queue_memo: dict = {}  # earlier per-queue decisions (see plan_queues)
        self.last_result: RoundResult | None = None

    def reconfigure(self, settings: Settings) -> None:
        """Take new settings from the next round on; round state survives a reload."""
        if settings.mapped_file_size_consumequeue != self.settings.mapped_file_size_consumequeue:
            self.reader = BinaryReader(settings.mapped_file_size_consumequeue)
            self.queue_memo = {}
        self.settings = settings

    def request_manual(self) -> None:
        """upstream executeDeleteFilesManually: the next 20 rounds run a deletion pass."""
        self.state = replace(self.state, manual_rounds_remaining=MAX_MANUAL_DELETE_FILE_TIMES)

    # ---- planning (pure apart from the scan and lazy reads) -----------------------------
    def _timezone_label(self) -> str:
        return self.settings.daemon.timezone or "local"

    def _plan_commitlog(self, snap: Snapshot, now: int, manual: bool) -> CommitLogPlan:
        s = self.settings
        usage = disk_mod.measure([str(p) for p in s.store_path_commitlog], snap.consumequeue_dir)
        triggers = evaluate(s, now, usage, manual=manual)
        if snap.errors and triggers.error is None:
            triggers = replace(triggers, error="; ".join(e.message for e in snap.errors))
        return plan_commitlog(snap.commitlog, triggers, s, now)

    def _plan_queues(self, snap: Snapshot, min_offset: int, *, gate: int) -> QueuesPlan:
        return plan_queues(
            snap.list_queues(),
            snap.index,
            snap.index_dir,
            min_offset=min_offset,
            last_min_offset=gate,
            reader=self.reader,
            memo=self.queue_memo,
        )

    def _make_plan(
        self,
        snap: Snapshot,
        now: int,
        cl: CommitLogPlan,
        qp: QueuesPlan,
        manual: bool,
        dry_run: bool,
    ) -> Plan:
        foreign = [*snap.foreign, *snap.queue_foreign]
        return Plan(
            now_ms=now,
            timezone=self._timezone_label(),
            config_hash=self.settings.config_hash,
            store_root=snap.root,
            commitlog=cl,
            queues=qp,
            foreign=tuple((f.path, str(f.why)) for f in foreign),
            errors=tuple(f"{e.path}: {e.message}" for e in snap.errors),
            manual=manual,
            dry_run=dry_run,
        )

    def _manual_now(self, manual: bool) -> bool:
        return manual or self.state.manual_rounds_remaining > 0

    def plan(self, *, manual: bool = False) -> Plan:
        """What a round would do now. Changes nothing, not even the round state."""
        now = self.clock_ms()
        snap = scan(self.settings, now_ms=now, lister=self.lister)
        cl = self._plan_commitlog(snap, now, self._manual_now(manual))
        qp = self._plan_queues(snap, cl.min_offset_after, gate=self.state.last_physical_min_offset)
        return self._make_plan(snap, now, cl, qp, self._manual_now(manual), True)

    # ---- a round ------------------------------------------------------------------------
    def run_round(self, *, manual: bool = False, dry_run: bool = False) -> RoundResult:
        started = time.monotonic()
        now = self.clock_ms()
        is_manual = self._manual_now(manual)
        snap = scan(self.settings, now_ms=now, lister=self.lister)
        cl = self._plan_commitlog(snap, now, is_manual)
        if cl.triggers.fired and self.state.manual_rounds_remaining > 0:
            self.state = replace(
                self.state, manual_rounds_remaining=self.state.manual_rounds_remaining - 1
            )
        ctx = RoundContext(
            config_hash=self.settings.config_hash,
            dry_run=dry_run,
            disk_ratio_before=cl.triggers.physic_ratio,
            now_ms=self.clock_ms,
        )
        executor = None
        if not dry_run:
            if self.journal is None:
                raise RuntimeError("a real round needs a journal")
            executor = Executor(
                self.settings, self.journal, stop=self.stop, on_outcome=self.on_outcome
            )
        outcomes: list[Outcome] = []
        stopped = False
        qp = QueuesPlan(cl.min_offset_after, self.state.last_physical_min_offset, examined=False)
        try:
            if executor is not None:
                executor.run_commitlog(cl, ctx, outcomes)
                min_offset = self._actual_min_offset(cl, outcomes)
            else:
                min_offset = cl.min_offset_after
            if snap.errors:
                min_offset = -1  # never act on the queues of a store we could not fully read
            qp = self._plan_queues(snap, min_offset, gate=self.state.last_physical_min_offset)
            if executor is not None:
                if qp.examined:
                    self.state = replace(self.state, last_physical_min_offset=min_offset)
                executor.run_queues(qp, ctx, outcomes)
        except Stopped:
            stopped = True
        plan = self._make_plan(snap, now, cl, qp, is_manual, dry_run)
        slept = executor.slept_s if executor is not None else 0.0
        result = RoundResult(plan, outcomes, stopped, time.monotonic() - started, slept)
        self.last_result = result
        if not dry_run and self.journal is not None:
            self._journal_round(result)
        return result

    @staticmethod
    def _actual_min_offset(cl: CommitLogPlan, outcomes: list[Outcome]) -> int:
        """The CommitLog minimum after what really happened, not after what was planned."""
        gone = {o.decision.path for o in outcomes if o.deleted}
        for d in cl.decisions:
            if d.path not in gone:
                return d.start_offset if d.start_offset is not None else -1
        return -1

    def _journal_round(self, result: RoundResult) -> None:
        plan = result.plan
        t = plan.commitlog.triggers
        gone = frozenset(o.decision.path for o in result.deleted)
        pending = expired_pending(plan.commitlog, self.settings, plan.now_ms, gone)
        record = {
            "type": "round",
            "time_ms": plan.now_ms,
            "manual": plan.manual,
            "triggers": t.as_dict(),
            "hour": hour_of_day(plan.now_ms, self.settings.daemon.timezone),
            "min_offset_before": plan.commitlog.min_offset_before,
            "min_offset_after": plan.queues.min_offset,
            "queues_examined": plan.queues.examined,
            "deleted": result.counts(),
            "failures": len(result.failed),
            "expired_pending": pending,
            "errors": list(plan.errors),
            "stopped": result.stopped,
            "duration_ms": round(result.duration_s * 1000, 3),
            "config_hash": plan.config_hash,
        }
        try:
            self.journal.append(record)  # type: ignore[union-attr]
        except OSError as exc:
            log.error("journal write failed for round record", error=str(exc))
