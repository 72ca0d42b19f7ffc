"""One cleaning round, wired end to end: scan → plan → holds → execute → journal, for any kind.

The Cleaner runs a store kind (``engine.kind.StoreKind``) and owns the state the engine keeps
between rounds: the remaining manual rounds and the first attempts on files another process
held (the kind keeps its own, such as the CommitLog minimum its queue pass acted on).
``plan()`` and a dry-run round call the very same planning code as a real round and stop
before the executor.

Safety around the plan (``guard.py``): files held by other processes are deferred and then
forced (upstream's destroy/reDeleteHangedFile); bytes unlinked but still held by the broker are
subtracted from disk usage before the pressure triggers are evaluated (``round.Round``); before
the first real round the journal is reconciled (``journal.reconcile``); a journal on a full disk
holds records in memory (``journal.spool``); bad files and store errors are reported once and
counted (``faults.py``).
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

import structlog

from retentiond.config.settings import Settings, StoreSection
from retentiond.engine.execute import Executor, JournalFailed, Outcome, RoundContext
from retentiond.engine.faults import FaultCounters, OnceReporter, StoreErrorWatch
from retentiond.engine.guard import STATUS_HELD, Guard
from retentiond.engine.holds import HeldFile, HoldIntervals, resolve
from retentiond.engine.kind import AnyKind, RoundPlan
from retentiond.engine.proc.files import PROC
from retentiond.engine.proc.inuse import PendingTotals
from retentiond.engine.proc.owner import OwnerReport
from retentiond.engine.refused import RefusedFile, record_refusal, waiting
from retentiond.engine.round import Mode, Round
from retentiond.journal.place import shares_store_filesystem
from retentiond.journal.reconcile import ReconcileResult, reconcile
from retentiond.journal.rollup import RoundFolder
from retentiond.journal.spool import SpoolingJournal
from retentiond.journal.writer import Journal
from retentiond.reasons import Cause, FileKind, Kind

log = structlog.get_logger(__name__)


class RoundListener(Protocol):
    """An observer of the Cleaner's rounds (the daemon's state, the metrics), registered with
    ``Cleaner.add_listener``. Called in the round's thread, in the order of registration; a
    listener that raises is logged and the round goes on. Subclass it to inherit no-op hooks.
    """

    def round_started(self) -> None:
        """A round (real or dry) begins, before reconciliation and the scan."""
        return None

    def phase_started(self, phase: str) -> None:
        """The kind starts planning one of its phases (``StoreKind.phases``); not in ``plan``."""
        return None

    def file_done(self, outcome: Outcome) -> None:
        """One file's outcome, after the journal has its record (safety rule 4)."""
        return None

    def round_ended(self) -> None:
        """The round is over: returned, stopped or raised."""
        return None


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Scan and plan without the cyclic collector. A round makes hundreds of thousands of
    small objects (one per file) that all live until it ends, and the collector, triggered by
    the allocation count, would walk them again and again for nothing: on a 10,000-partition
    Kafka log dir that was most of the planning time. Reference counting still frees
    everything; the collector runs again once the round is planned. Nests (inner pauses
    restore what they found)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


MAX_MANUAL_DELETE_FILE_TIMES = 20  # upstream: each manual request opens 20 rounds
_LOG_HELD = 10  # newly held files logged one by one per round; the rest are summed up


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CleanerState:
    manual_rounds_remaining: int = 0
    # Files whose deletion was deferred because another process held them, by path: upstream's
    # firstShutdownTimestamp. Replaced (never mutated) by the round thread.
    held: Mapping[str, HeldFile] = field(default_factory=dict)
    # Files whose last unlink failed (EPERM, EROFS, EACCES...), by path: kept until their
    # backoff has passed (``engine.refused``). Replaced (never mutated) by the round thread.
    refused: Mapping[str, RefusedFile] = field(default_factory=dict)


@dataclass
class RoundResult:
    plan: RoundPlan
    outcomes: list[Outcome] = field(default_factory=list)
    stopped: bool = False
    duration_s: float = 0.0
    slept_s: float = 0.0  # time spent in the pacing sleeps between deletions
    journal_error: str | None = None  # the journal refused a record: the round ended there
    file_kinds: tuple[FileKind, ...] = tuple(Kind)  # the store kind's, for the per-kind counts

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
        return {k.value: {"files": files[k.value], "bytes": size[k.value]} for k in self.file_kinds}


class Cleaner:
    def __init__(
        self,
        kind: AnyKind,
        *,
        journal: Journal | SpoolingJournal | None = None,
        stop: threading.Event | None = None,
        clock_ms: Callable[[], int] = wall_ms,
        proc_root: str = PROC,
        hold_rules: HoldIntervals | None = None,
        announce_proc_view: bool = True,
    ) -> None:
        """``announce_proc_view``: log once that /proc cannot show every process (rounds);
        False for a read-only ``plan``, which asks ``proc_view_doubt`` instead."""
        self.kind = kind
        if journal is not None and not isinstance(journal, SpoolingJournal):
            journal = SpoolingJournal(journal)
        self.journal = journal
        self.stop = stop or threading.Event()
        self.clock_ms = clock_ms
        self.listeners: tuple[RoundListener, ...] = ()  # see add_listener
        self.state = CleanerState()
        self.last_result: RoundResult | None = None
        self.guard = Guard(proc_root, hold_rules, brokers=kind.brokers, announce=announce_proc_view)
        self.faults = FaultCounters()
        self._bad_files = OnceReporter(self.faults)
        self._store_errors = StoreErrorWatch(self.faults)
        self.last_reconcile: ReconcileResult | None = None
        self._reconciled = False
        self.folder = RoundFolder()  # idle rounds become round_summary records
        if journal is not None and shares_store_filesystem(journal.directory, kind.directories()):
            log.warning(
                "the journal is on the store's filesystem: on a full disk its records are held "
                "in memory until space is freed; set retentiond.journal.dir to another one",
                journal=str(journal.directory),
            )

    @property
    def settings(self) -> Settings[StoreSection]:
        return self.kind.settings

    def add_listener(self, listener: RoundListener) -> None:
        """Tell ``listener`` about every round from now on (see ``RoundListener``)."""
        self.listeners = (*self.listeners, listener)

    def _notify(self, hook: Callable[[RoundListener], None]) -> None:
        for listener in self.listeners:
            try:
                hook(listener)
            except Exception:  # an observer must never break a round mid-way
                log.exception("a round listener failed", listener=type(listener).__name__)

    def _phase(self, phase: str) -> None:
        self._notify(lambda listener: listener.phase_started(phase))

    def reconfigure(self, settings: Settings[StoreSection]) -> None:
        """Take new settings from the next round on; round state survives a reload."""
        self.kind.reconfigure(settings)

    def request_manual(self) -> None:
        """upstream executeDeleteFilesManually: the next 20 rounds run a deletion pass."""
        self.state = replace(self.state, manual_rounds_remaining=MAX_MANUAL_DELETE_FILE_TIMES)

    # ---- held files ---------------------------------------------------------------------
    def _held(self) -> Mapping[str, HeldFile]:
        return self.state.held

    def _remember_held(self, seen: dict[str, HeldFile]) -> None:
        """Keep first attempts (upstream firstShutdownTimestamp); log each new one once."""
        if not seen:
            return
        held = dict(self.state.held)
        rules = self.guard.rules(self.kind)
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
        """Forget first attempts and refusals on files that are gone by now."""
        held = self.state.held
        gone = [p for p in held if not os.path.lexists(p)]
        if gone:
            self.state = replace(self.state, held={p: h for p, h in held.items() if p not in gone})
        refused = self.state.refused
        gone = [p for p in refused if not os.path.lexists(p)]
        if gone:
            kept = {p: r for p, r in refused.items() if p not in gone}
            self.state = replace(self.state, refused=kept)

    # ---- refused unlinks ----------------------------------------------------------------
    def _refused(self) -> Mapping[str, RefusedFile]:
        return self.state.refused

    def _note_refusal(self, outcome: Outcome) -> None:
        """Remember a failed unlink and when to try again; said once per attempt, that is
        once per backoff step (the rounds in between keep the file without a word)."""
        d = outcome.decision
        now = self.clock_ms()
        cap = self.kind.cadence(self.settings).retry_interval_ms
        record = record_refusal(
            self.state.refused.get(d.path), d, outcome.error or "", outcome.errno, now, cap
        )
        self.state = replace(self.state, refused={**self.state.refused, d.path: record})
        log.warning(
            "unlink refused: the file is kept and retried with backoff",
            file=d.path,
            error=outcome.error,
            errno=record.errno_name(),
            attempts=record.attempts,
            retry_in_ms=record.next_attempt_ms - now,
        )

    def refused_files(self, limit: int | None = None) -> list[dict[str, object]]:
        """Files whose unlink was refused, with the error and the next attempt (status);
        the first ``limit`` by path (a read-only filesystem refuses every queue's head)."""
        items = sorted(self.state.refused.items())[:limit]
        return [r.as_dict(p) for p, r in items]

    # ---- rounds -------------------------------------------------------------------------
    def _manual_now(self, manual: bool) -> bool:
        return manual or self.state.manual_rounds_remaining > 0

    def _round(self, mode: Mode, manual: bool, now: int) -> Round:
        executor = None
        if mode is Mode.REAL:
            if self.journal is None:
                raise RuntimeError("a real round needs a journal")
            executor = Executor(self.kind, self.journal, stop=self.stop, on_outcome=self._outcome)
        context = RoundContext(
            config_hash=self.settings.config_hash,
            dry_run=mode is not Mode.REAL,
            disk_ratio_before=None,
            now_ms=self.clock_ms,
        )
        self.guard.begin_round(self.kind)
        return Round(
            self.kind,
            self.guard,
            now_ms=now,
            manual=self._manual_now(manual),
            mode=mode,
            held=self._held,
            remember_held=self._remember_held,
            on_phase=self._phase if mode is not Mode.PLAN else None,
            executor=executor,
            context=context,
            refused=self._refused,
        )

    def plan(self, *, manual: bool = False) -> RoundPlan:
        """What a round would do now. Changes nothing, not even the round state."""
        now = self.clock_ms()
        with no_cyclic_gc():
            snap = self.kind.scan(now, executes=False)
            return self.kind.plan_round(snap, self._round(Mode.PLAN, manual, now))

    def reconcile(self) -> ReconcileResult | None:
        """Give orphaned intents their outcome: once per process, before the first real
        round (``once`` and the daemon both run rounds, so both reconcile)."""
        if self._reconciled or self.journal is None:
            return self.last_reconcile
        try:
            result = reconcile(
                self.journal.directory, self.journal.append, now_ms=self.clock_ms(),
                held=self.journal.holds_outcome,
            )  # fmt: skip
        except OSError as exc:
            log.error("journal reconciliation failed; retried next round", error=str(exc))
            return None
        self._reconciled = True
        self.last_reconcile = result
        self.faults.reconciled += result.deleted + result.aborted
        self.faults.torn_journal_lines += result.torn
        return result

    def _outcome(self, outcome: Outcome) -> None:
        """Every file outcome: pending-release and held bookkeeping, counters, then the
        listeners."""
        d = outcome.decision
        if outcome.deleted:
            if d.path in self.state.held:
                held = {p: h for p, h in self.state.held.items() if p != d.path}
                self.state = replace(self.state, held=held)
            if d.path in self.state.refused:
                refused = {p: r for p, r in self.state.refused.items() if p != d.path}
                self.state = replace(self.state, refused=refused)
            self.guard.note_outcome(outcome, self.clock_ms())
        elif outcome.cause == Cause.UNLINK_FAILED:
            self.faults.unlink_failed += 1
            self._note_refusal(outcome)
        self._notify(lambda listener: listener.file_done(outcome))

    def run_round(self, *, manual: bool = False, dry_run: bool = False) -> RoundResult:
        self._notify(lambda listener: listener.round_started())
        try:
            return self._run_round(manual, dry_run)
        finally:
            self._notify(lambda listener: listener.round_ended())

    def _run_round(self, manual: bool, dry_run: bool) -> RoundResult:
        started = time.monotonic()
        if not dry_run:
            self.reconcile()
            self._prune_held()
        now = self.clock_ms()
        with no_cyclic_gc():
            snap = self.kind.scan(now, executes=not dry_run)
            rnd = self._round(Mode.DRY_RUN if dry_run else Mode.REAL, manual, now)
            self.describe_owner()
            plan = self.kind.plan_round(snap, rnd)
        if plan.ran_deletion_pass() and self.state.manual_rounds_remaining > 0:
            self.state = replace(
                self.state, manual_rounds_remaining=self.state.manual_rounds_remaining - 1
            )
        if rnd.journal_error is not None:
            self.faults.journal_failures += 1
            log.error(
                "the journal refused a record: no more deletions this round",
                error=rnd.journal_error,
            )
        result = RoundResult(
            plan,
            rnd.outcomes,
            rnd.stopped,
            time.monotonic() - started,
            rnd.slept_s,
            rnd.journal_error,
            self.kind.file_kinds,
        )
        self.last_result = result
        self._bad_files.observe(plan)
        self._store_errors.observe(plan)
        if not dry_run and self.journal is not None:
            self._journal_round(result)
            if result.deleted:
                self._settle_journal()
        return result

    def _settle_journal(self) -> None:
        """After a round that deleted files, a reconciliation pass over what it wrote: the
        pass moves ``reconcile.mark`` past the round's records, so a restart reads only what
        came after the last such round, however long the daemon ran without shipping (a
        shipping daemon moves it before every pass anyway). Skipped while records wait in
        memory for disk space: the pass could not write its mark then; and when another
        pass (a ``once`` starting, the shipper) holds the lock: the next round moves it."""
        if self.journal is None or not self._reconciled or self.journal.held:
            return
        try:
            result = reconcile(
                self.journal.directory, self.journal.append, now_ms=self.clock_ms(),
                when="round end", held=self.journal.holds_outcome, blocking=False,
            )  # fmt: skip
        except Exception:  # only an optimisation: never fail the round that deleted files
            log.exception("journal reconciliation after the round failed")
            return
        self.faults.reconciled += result.deleted + result.aborted
        self.faults.torn_journal_lines += result.torn

    def redelete_hanged(self) -> Outcome | None:
        """upstream reDeleteHangedFile (spec §4.7), run every ``redeleteHangedFileInterval``:
        if the kind's head file is one a round had to leave because another process held it,
        delete it now if it was released (with its original reason) or once the forcible
        interval has passed (``forced_after_hold``). The caller keeps the cadence."""
        if self.journal is None or self.settings.daemon.dry_run or not self.state.held:
            return None
        self.reconcile()
        now = self.clock_ms()
        planned = self.kind.redelete_candidate(now, self.state.held)
        if planned is None:
            return None
        if waiting(planned, self.state.refused.get(planned.path), now):
            return None  # its unlink was refused: retried when its backoff has passed
        record = self.state.held[planned.path]
        self.guard.begin_round(self.kind)
        holders = self.guard.holders_of(self.kind, now)(planned)
        interval = self.guard.rules(self.kind).interval(planned.kind)
        decision, _ = resolve(planned, holders, record, now, interval)
        if not decision.delete:
            return None
        log.info("retrying a held head file (reDeleteHangedFile)", file=planned.path)
        executor = Executor(self.kind, self.journal, stop=self.stop, on_outcome=self._outcome)
        ctx = RoundContext(self.settings.config_hash, False, None, self.clock_ms)
        try:
            return executor.delete_one(decision, ctx)
        except JournalFailed as exc:
            self.faults.journal_failures += 1
            return exc.outcome

    def _journal_round(self, result: RoundResult) -> None:
        plan = result.plan
        gone = frozenset(o.decision.path for o in result.deleted)
        release = self.guard.inuse.totals()
        record = {
            "type": "round",
            "time_ms": plan.now_ms,
            "manual": plan.manual,
            **self.kind.round_fields(plan, gone),
            "deleted": result.counts(),
            "failures": len(result.failed),
            "errors": list(plan.errors),
            "stopped": result.stopped,
            "duration_ms": round(result.duration_s * 1000, 3),
            "config_hash": plan.config_hash,
            "pending_release": {"files": release.files, "bytes": release.bytes},
            "owner_running": self.guard.owner.running,
            "held_files": len(self.state.held),
            "journal_error": result.journal_error,
        }
        interval = self.settings.daemon.journal_round_summary_interval_ms
        self._append_rounds(self.folder.offer(record, self.kind.idle_view(record), interval))
        if self.journal is not None and self.journal.held:
            log.error("journal records are held in memory (disk full?)", held=self.journal.held)

    def _append_rounds(self, records: list[dict[str, object]]) -> None:
        journal = self.journal
        if journal is None:  # (a round is journaled only with a journal)
            return
        for rec in records:
            try:
                journal.append(rec)
            except OSError as exc:
                log.error("journal write failed for round record", error=str(exc), type=rec["type"])

    # ---- for status and metrics (any thread) ------------------------------------------
    def pending_release(self) -> PendingTotals:
        """(files, bytes) unlinked but still open or mapped somewhere: not yet free."""
        return self.guard.inuse.totals()

    def owner_running(self) -> bool | None:
        """Whether a broker holds the store's lock; None if that could not be read."""
        return self.guard.owner.running

    def describe_owner(self) -> OwnerReport:
        """Read the owner broker's figures: every round does, once, after the owner lookup;
        the daemon's startup scan too. Scrapes and `status` only read the last report."""
        return self.guard.describe_owner()

    def owner_report(self) -> OwnerReport | None:
        """The owner broker as the last round saw it (None before the first)."""
        return self.guard.owner_watch.report

    def proc_view_complete(self) -> bool | None:
        """Whether the last holder map saw every process (False: doubt, files held count as
        held by others); None before the first map."""
        return self.guard.inuse.view_complete

    def proc_view_doubt(self) -> str | None:
        """After a plan or round: why some files count as held although no holder was seen
        (/proc could not show every process, and no lease proved nobody had them), in
        words; None when the view did not change the answer."""
        if not self.guard.unseen_holds:
            return None
        text = self.guard.inuse.incomplete_text()
        if text is None:
            return None
        n = self.guard.unseen_holds
        files = f"{n} file{'s are' if n != 1 else ' is'}"
        return f"{files} kept as held by another process because retentiond {text}"

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
        doc["unlink_refused"] = self.refused_files(STATUS_HELD)
        doc["unlink_refused_count"] = len(self.state.refused)
        return doc

    def flush_journal(self) -> bool:
        """Write records held in memory, if any (at shutdown): the open round summary, then
        what a full disk held back; True if none are left."""
        if self.journal is None:
            return True
        self._append_rounds(self.folder.flush())
        return self.journal.flush()
