"""One cleaning round, wired end to end: scan → triggers → plan → holds → execute → journal.

The Cleaner owns the state upstream keeps between ticks (the last CommitLog minimum offset the
queue cleaner acted on, the remaining manual rounds, the first attempts on files another
process held). ``plan()`` and a dry-run round call the very same planning code as a real round
and stop before the executor.

Safety around the plan (``guard.py``): files held by other processes are deferred and then
forced (upstream's destroy/reDeleteHangedFile); bytes unlinked but still held by the broker are
subtracted from disk usage before the pressure triggers are evaluated; before the first real
round the journal is reconciled (``reconcile.py``); a journal on a full disk holds records in
memory (``spool.py``); bad files and store errors are reported once and counted (``faults.py``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import structlog

from retentiond.execute import Executor, JournalFailed, Outcome, RoundContext, Stopped
from retentiond.faults import FaultCounters, OnceReporter, StoreErrorWatch
from retentiond.guard import Guard
from retentiond.journal import Journal, round_fields
from retentiond.journal_place import shares_store_filesystem
from retentiond.policy.commitlog import expired_pending, newest_kept_index, plan_commitlog
from retentiond.policy.holds import HeldFile, HoldRules, resolve
from retentiond.policy.plan import CommitLogPlan, Decision, Plan, QueuesPlan
from retentiond.policy.queues import plan_queues
from retentiond.policy.triggers import evaluate, hour_of_day
from retentiond.reasons import Kind, Verdict
from retentiond.reconcile import ReconcileResult, reconcile
from retentiond.settings import Settings
from retentiond.spool import SpoolingJournal
from retentiond.store import disk as disk_mod
from retentiond.store.holders import PROC
from retentiond.store.inuse import PendingTotals
from retentiond.store.reader import BinaryReader
from retentiond.store.scan import QueueLister, scan
from retentiond.store.snapshot import Snapshot

log = structlog.get_logger("retentiond.cleaner")

MAX_MANUAL_DELETE_FILE_TIMES = 20  # upstream: each manual request opens 20 rounds
_LOG_HELD = 10  # newly held files logged one by one per round; the rest are summed up


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CleanerState:
    last_physical_min_offset: int = 0  # upstream CleanConsumeQueueService; 0 after a restart
    manual_rounds_remaining: int = 0
    # Files whose deletion was deferred because another process held them, by path: upstream's
    # firstShutdownTimestamp. Replaced (never mutated) by the round thread.
    held: Mapping[str, HeldFile] = field(default_factory=dict)


@dataclass
class RoundResult:
    plan: Plan
    outcomes: list[Outcome] = field(default_factory=list)
    stopped: bool = False
    duration_s: float = 0.0
    slept_s: float = 0.0  # time spent in the pacing sleeps between deletions
    journal_error: str | None = None  # the journal refused a record: the round ended there

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
        journal: Journal | SpoolingJournal | None = None,
        stop: threading.Event | None = None,
        clock_ms: Callable[[], int] = wall_ms,
        on_outcome: Callable[[Outcome], None] | None = None,
        proc_root: str = PROC,
        hold_rules: HoldRules | None = None,
    ) -> None:
        self.settings = settings
        if journal is not None and not isinstance(journal, SpoolingJournal):
            journal = SpoolingJournal(journal)
        self.journal = journal
        self.stop = stop or threading.Event()
        self.clock_ms = clock_ms
        self.on_outcome = on_outcome  # chained by the daemon's state and the metrics
        self.state = CleanerState()
        self.reader = BinaryReader(settings.mapped_file_size_consumequeue)
        self.lister = QueueLister()  # directory listings carried between rounds
        self.queue_memo: dict = {}  # earlier per-queue decisions (see plan_queues)
        self.last_result: RoundResult | None = None
        self.last_usage: disk_mod.DiskUsage | None = None
        self.guard = Guard(proc_root, hold_rules)
        self.faults = FaultCounters()
        self._bad_files = OnceReporter(self.faults)
        self._store_errors = StoreErrorWatch(self.faults)
        self.last_reconcile: ReconcileResult | None = None
        self._reconciled = False
        if journal is not None and shares_store_filesystem(journal.directory, settings):
            log.warning(
                "the journal is on the store's filesystem: on a full disk its records are held "
                "in memory until space is freed; set retentiond.journal.dir to another one",
                journal=str(journal.directory),
            )

    def reconfigure(self, settings: Settings) -> None:
        """Take new settings from the next round on; round state survives a reload."""
        if settings.mapped_file_size_consumequeue != self.settings.mapped_file_size_consumequeue:
            self.reader = BinaryReader(settings.mapped_file_size_consumequeue)
            self.queue_memo = {}
        self.settings = settings

    def request_manual(self) -> None:
        """upstream executeDeleteFilesManually: the next 20 rounds run a deletion pass."""
        self.state = replace(self.state, manual_rounds_remaining=MAX_MANUAL_DELETE_FILE_TIMES)

    # ---- planning (pure apart from the scan, lazy reads and /proc) ----------------------
    def _timezone_label(self) -> str:
        return self.settings.daemon.timezone or "local"

    def _plan_commitlog(self, snap: Snapshot, now: int, manual: bool) -> CommitLogPlan:
        """The CommitLog plan, judged on the disk as it will be once pending bytes are freed.

        Pending files are re-checked first (only if there are any). When the plan has
        deletions, the round's holder map is built; if it turns up more pending bytes (say,
        after a restart) the plan is made again with them.
        """
        s = self.settings
        usage = disk_mod.measure([str(p) for p in s.store_path_commitlog], snap.consumequeue_dir)
        self.last_usage = usage  # per-path ratios for the round record
        self.guard.refresh_pending(s, now)
        cl = self._commitlog_for(snap, usage, now, manual)
        if cl.deletions() and not self.guard.inuse.has_map:
            before = self.guard.inuse.totals()
            self.guard.holder_map(s, now)
            if self.guard.inuse.totals() != before:
                cl = self._commitlog_for(snap, usage, now, manual)
        return cl

    def _commitlog_for(
        self, snap: Snapshot, usage: disk_mod.DiskUsage, now: int, manual: bool
    ) -> CommitLogPlan:
        s = self.settings
        triggers = evaluate(s, now, self.guard.adjusted(usage), manual=manual)
        pending = self.guard.inuse.totals().bytes
        if pending and not usage.errors:
            raw = min(u.ratio for u in usage.commitlog if u.ratio is not None)
            triggers = replace(triggers, unadjusted_physic_ratio=raw, pending_release_bytes=pending)
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

    def _hold_commitlog(self, cl: CommitLogPlan, now: int, record: bool) -> CommitLogPlan:
        cl, seen = self.guard.hold_commitlog(cl, self.state.held, self.settings, now)
        if record:
            self._remember_held(seen)
        return cl

    def _hold_queues(self, qp: QueuesPlan, now: int, record: bool) -> QueuesPlan:
        qp, seen = self.guard.hold_queues(qp, self.state.held, self.settings, now)
        if record:
            self._remember_held(seen)
        return qp

    def _remember_held(self, seen: dict[str, HeldFile]) -> None:
        """Keep first attempts (upstream firstShutdownTimestamp); log each new one once."""
        if not seen:
            return
        held = dict(self.state.held)
        rules = self.guard.rules(self.settings)
        new = 0
        for path, h in seen.items():
            if held.get(path) is h:
                continue
            held[path] = h
            new += 1
            if new <= _LOG_HELD:
                log.warning(
                    "deletion deferred: another process holds the file",
                    file=path,
                    holders=list(h.holders) or "cannot be seen",
                    forced_in_ms=rules.interval(h.kind),
                )
        if new > _LOG_HELD:
            log.warning("deletion deferred for more held files", more=new - _LOG_HELD)
        self.state = replace(self.state, held=held)

    def _prune_held(self) -> None:
        """Forget first attempts on files that are gone by now."""
        held = self.state.held
        gone = [p for p in held if not os.path.lexists(p)]
        if gone:
            self.state = replace(self.state, held={p: h for p, h in held.items() if p not in gone})

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
        self.guard.begin_round(self.settings)
        cl = self._plan_commitlog(snap, now, self._manual_now(manual))
        cl = self._hold_commitlog(cl, now, record=False)
        qp = self._plan_queues(snap, cl.min_offset_after, gate=self.state.last_physical_min_offset)
        qp = self._hold_queues(qp, now, record=False)
        return self._make_plan(snap, now, cl, qp, self._manual_now(manual), True)

    # ---- a round ------------------------------------------------------------------------
    def reconcile(self) -> ReconcileResult | None:
        """Give orphaned intents their outcome: once per process, before the first real
        round (``once`` and the daemon both run rounds, so both reconcile)."""
        if self._reconciled or self.journal is None:
            return self.last_reconcile
        try:
            result = reconcile(self.journal.directory, self.journal.append, now_ms=self.clock_ms())
        except OSError as exc:
            log.error("journal reconciliation failed; retried next round", error=str(exc))
            return None
        self._reconciled = True
        self.last_reconcile = result
        self.faults.reconciled += result.deleted + result.aborted
        self.faults.torn_journal_lines += result.torn
        return result

    def _executor(self) -> Executor:
        if self.journal is None:
            raise RuntimeError("a real round needs a journal")
        return Executor(self.settings, self.journal, stop=self.stop, on_outcome=self._outcome)

    def _outcome(self, outcome: Outcome) -> None:
        """Every file outcome: pending-release and held bookkeeping, counters, then the
        daemon's and the metrics' hook (read at call time: they chain onto it)."""
        d = outcome.decision
        if outcome.deleted:
            if d.path in self.state.held:
                held = {p: h for p, h in self.state.held.items() if p != d.path}
                self.state = replace(self.state, held=held)
            self.guard.note_outcome(outcome, self.clock_ms())
        elif outcome.cause == "unlink_failed":
            self.faults.unlink_failed += 1
        hook = self.on_outcome
        if hook is not None:
            hook(outcome)

    def run_round(self, *, manual: bool = False, dry_run: bool = False) -> RoundResult:
        started = time.monotonic()
        if not dry_run:
            self.reconcile()
            self._prune_held()
        now = self.clock_ms()
        is_manual = self._manual_now(manual)
        snap = scan(self.settings, now_ms=now, lister=self.lister)
        self.guard.begin_round(self.settings)
        cl = self._plan_commitlog(snap, now, is_manual)
        cl = self._hold_commitlog(cl, now, record=not dry_run)
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
        executor = None if dry_run else self._executor()
        outcomes: list[Outcome] = []
        stopped = False
        journal_error = None
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
            qp = self._hold_queues(qp, now, record=not dry_run)
            if executor is not None:
                if qp.examined:
                    self.state = replace(self.state, last_physical_min_offset=min_offset)
                executor.run_queues(qp, ctx, outcomes)
        except Stopped:
            stopped = True
        except JournalFailed as exc:
            journal_error = str(exc)
            self.faults.journal_failures += 1
            log.error("the journal refused a record: no more deletions this round", error=str(exc))
        plan = self._make_plan(snap, now, cl, qp, is_manual, dry_run)
        slept = executor.slept_s if executor is not None else 0.0
        result = RoundResult(
            plan, outcomes, stopped, time.monotonic() - started, slept, journal_error
        )
        self.last_result = result
        self._bad_files.observe(plan)
        self._store_errors.observe(plan)
        if not dry_run and self.journal is not None:
            self._journal_round(result)
        return result

    def redelete_hanged(self) -> Outcome | None:
        """upstream reDeleteHangedFile (spec §4.7), run every ``redeleteHangedFileInterval``:
        if the first CommitLog file is one a round had to leave because another process held
        it, delete it now if it was released (with its original reason) or once the forcible
        interval has passed (``forced_after_hold``). The caller keeps the cadence."""
        if self.journal is None or self.settings.daemon.dry_run:
            return None
        if not any(h.kind is Kind.COMMITLOG for h in self.state.held.values()):
            return None
        self.reconcile()
        now = self.clock_ms()
        snap = scan(self.settings, now_ms=now, lister=self.lister)
        if snap.errors or newest_kept_index(snap.commitlog) == 0:
            return None
        first = snap.commitlog[0]
        record = self.state.held.get(first.path)
        if record is None or record.identity != first.identity:
            return None
        self.guard.begin_round(self.settings)
        planned = Decision(
            Kind.COMMITLOG, first.path, Verdict.DELETE, record.reason, identity=first.identity,
            start_offset=first.start_offset, end_offset=first.start_offset + first.identity.size,
        )  # fmt: skip
        holders = self.guard.holders_of(self.settings, now)(planned)
        interval = self.guard.rules(self.settings).commitlog_ms
        decision, _ = resolve(planned, holders, record, now, interval)
        if not decision.delete:
            return None
        log.info("retrying the first CommitLog file (reDeleteHangedFile)", file=first.path)
        ctx = RoundContext(self.settings.config_hash, False, None, self.clock_ms)
        try:
            return self._executor().delete_one(decision, ctx)
        except JournalFailed as exc:
            self.faults.journal_failures += 1
            return exc.outcome

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
        release = self.guard.inuse.totals()
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
            "pending_release": {"files": release.files, "bytes": release.bytes},
            "owner_running": self.guard.owner.running,
            "held_files": len(self.state.held),
            "journal_error": result.journal_error,
            **round_fields(self.settings, self.last_usage),
        }
        try:
            self.journal.append(record)  # type: ignore[union-attr]
        except OSError as exc:
            log.error("journal write failed for round record", error=str(exc))
        if self.journal is not None and self.journal.held:
            log.error("journal records are held in memory (disk full?)", held=self.journal.held)

    # ---- for status and metrics (any thread) ------------------------------------------
    def pending_release(self) -> PendingTotals:
        """(files, bytes) unlinked but still open or mapped somewhere: not yet free."""
        return self.guard.inuse.totals()

    def owner_running(self) -> bool | None:
        """Whether a broker holds the store's lock; None if that could not be read."""
        return self.guard.owner.running

    def proc_view_complete(self) -> bool | None:
        """Whether the last holder map saw every process (False: doubt, files held count as
        held by others); None before the first map."""
        return self.guard.inuse.view_complete

    def held_count(self) -> int:
        """Files whose deletion waits because another process holds them."""
        return len(self.state.held)

    def store_errors(self) -> int:
        """Rounds so far in which a store path could not be read or measured."""
        return self.faults.store_error_rounds

    def fault_counts(self) -> dict[str, int]:
        """Every fault counter (cumulative), plus the journal's records held in memory now."""
        counts = self.faults.as_dict()
        j = self.journal
        counts["journal_held"] = j.held if j is not None else 0
        counts["journal_space_errors"] = j.space_errors if j is not None else 0
        counts["journal_dropped"] = j.dropped if j is not None else 0
        return counts

    def safety_status(self) -> dict[str, object]:
        """The `status` document's ``safety`` section."""
        doc = self.guard.status(self.state.held)
        doc["faults"] = self.fault_counts()
        doc["journal_last_error"] = self.journal.last_error if self.journal is not None else None
        doc["reconcile"] = self.last_reconcile.as_dict() if self.last_reconcile else None
        return doc

    def flush_journal(self) -> bool:
        """Write records held in memory, if any (at shutdown); True if none are left."""
        return self.journal.flush() if self.journal is not None else True
