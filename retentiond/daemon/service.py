"""The long-running daemon: scheduled rounds, signals, reloads, control socket, sd_notify.

Threads and who owns what:

* the **main thread** owns signals, reloads and shutdown. Signal handlers only post a word to
  an inbox; the main loop does the work, so no lock is ever taken inside a handler;
* the **scheduler** (APScheduler 3, BackgroundScheduler) runs the cleaning round as an interval
  job with ``max_instances=1`` and ``coalesce=True`` (never two rounds at once, late runs
  folded into one and counted), the watchdog pings (so they stop if the scheduler dies) and the
  config-file poll;
* the **control thread** answers `status` and `trigger-delete`.

Settings and manual requests reach the Cleaner only at the start of a round (``_take_pending``):
a reload or a trigger arriving mid-round never changes a round in flight, and the Cleaner's own
state (last CommitLog minimum, manual rounds left) is only ever written by the round thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import signal
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType

import structlog
from apscheduler.events import (
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    EVENT_JOB_SUBMITTED,
    JobEvent,
)
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from retentiond.config.settings import Settings, StoreSection
from retentiond.daemon import control, reload, shipping
from retentiond.daemon.notify import Notifier, watchdog_interval_s
from retentiond.daemon.state import DaemonState, scan_ok, wall_ms
from retentiond.daemon.statustext import deleted_text, summary_line
from retentiond.engine.cleaner import MAX_MANUAL_DELETE_FILE_TIMES, Cleaner, RoundResult
from retentiond.journal.writer import Journal
from retentiond.kinds import StoreUnusable, kind_for, load_settings
from retentiond.observe.daemon_metrics import DaemonMetrics

log = structlog.get_logger(__name__)

ROUND_JOB = "round"
STOP_DEADLINE_S = 1.5  # the service must be gone within 2 s of SIGTERM
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _interval_trigger(interval_ms: int, first_in_ms: int) -> IntervalTrigger:
    start = datetime.now(UTC) + timedelta(milliseconds=first_in_ms)
    return IntervalTrigger(seconds=interval_ms / 1000, start_date=start, timezone=UTC)


class Daemon:
    def __init__(
        self,
        config_path: Path,
        settings: Settings[StoreSection],
        *,
        journal: Journal | None,
        notifier: Notifier | None = None,
        watcher: reload.ConfigWatcher | None = None,
        dry_run: bool = False,
    ) -> None:
        """``watcher`` should be created before ``settings`` were loaded, so that an edit
        landing in between is still seen as a change. ``dry_run`` (`run --dry-run`) holds
        ``retentiond.dryRun`` true for the whole run, reloads included."""
        self.force_dry_run = dry_run
        # The hash of what the file says, by the hash of what this run uses (they differ under
        # --dry-run): a client compares the file it reads with the former.
        self._file_hash_of: dict[str, str] = {}
        settings = self._forced(settings)
        self.config_path = config_path
        self.journal = journal
        self.notifier = notifier or Notifier()
        self.stop_event = threading.Event()  # interrupts the executor's pacing sleeps
        kind = kind_for(settings)
        self.state = DaemonState(config_path, settings, kind)
        self.cleaner = Cleaner(kind, journal=journal, stop=self.stop_event)
        self.cleaner.add_listener(self.state)  # files that would not go
        self.watcher = watcher or reload.ConfigWatcher(config_path)
        self.config_real = control.real_config_path(config_path)
        self.control = control.ControlServer(
            control.socket_path(settings, config_path),
            {"status": self._cmd_status, "trigger-delete": self._cmd_trigger},
            identity=self._identity,
        )
        self.metrics = DaemonMetrics(self, self.cleaner)  # /metrics; listens to the cleaner
        self.scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=4)},
            job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": None},
            timezone=UTC,
        )
        self._inbox: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._pending_lock = threading.Lock()
        self._pending_settings: Settings[StoreSection] | None = None
        self._pending_manual = False

    # ---- lifecycle (main thread) --------------------------------------------------------
    def run(self) -> int:
        """Serve until SIGTERM/SIGINT; returns the process exit code."""
        # APScheduler's own INFO/WARNING lines duplicate what we log (and count) ourselves.
        logging.getLogger("apscheduler").setLevel(logging.ERROR)
        for sig in (*_STOP_SIGNALS, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        try:
            self.control.start()
        except control.ControlError as exc:
            log.error("cannot start", error=str(exc))
            return 1
        self.metrics.start()
        s = self.state.settings
        kind = self.cleaner.kind
        log.info(
            "daemon starting",
            config=str(self.config_path),
            config_hash=s.config_hash,
            store=s.store_label,
            store_kind=kind.name,
            control_socket=str(self.control.path),
            first_round_in_ms=s.daemon.initial_delay_ms,
            interval_ms=kind.cadence(s).round_interval_ms,
            delete_when=kind.status_settings(s, None)["delete_when"],
            dry_run=s.daemon.dry_run,
        )
        self._startup_scan()
        self._start_scheduler()
        try:
            self._main_loop()
        finally:
            clean = self._shutdown()
        if not clean:
            # A round is still inside a (non-interruptible) scan; nothing is being deleted,
            # so leaving now is safe and keeps the 2 s promise. Skip the interpreter's joins.
            sys.stderr.flush()
            os._exit(0)
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._inbox.put(signal.Signals(signum).name)  # SimpleQueue.put is reentrant

    def _main_loop(self) -> None:
        while True:
            try:
                word = self._inbox.get(timeout=1.0)
            except queue.Empty:
                continue
            if word in ("SIGTERM", "SIGINT"):
                log.info("stopping", signal=word)
                return
            if word == "SIGHUP":
                self._reload("SIGHUP")
            elif word == "file changed":
                self._reload("file changed")

    def _startup_scan(self) -> None:
        """One read-only scan before the first round, so READY and `status` mean something
        from the start instead of after ``initialDelay``."""
        try:
            plan = self.cleaner.plan()
        except Exception as exc:
            log.exception("startup scan failed; READY waits for a round that can read the store")
            self.state.note_error(f"startup scan: {exc}")
            return
        self.state.observe_plan(plan, self.cleaner.kind, frozenset())
        self.cleaner.describe_owner()  # the broker's figures from the start, then every round
        self.metrics.observe_plan(plan)
        if scan_ok(plan):
            self._became_ready()
        else:
            log.error("startup scan could not read the store", errors=plan.store_errors())

    def _start_scheduler(self) -> None:
        s = self.cleaner.settings
        self.scheduler.add_listener(
            self._on_scheduler_event,
            EVENT_JOB_SUBMITTED | EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED,
        )
        interval_ms = self.cleaner.kind.cadence(s).round_interval_ms
        first = datetime.now(UTC) + timedelta(milliseconds=s.daemon.initial_delay_ms)
        self.scheduler.add_job(
            self._round_job,
            _interval_trigger(interval_ms, s.daemon.initial_delay_ms),
            # Explicit: a trigger whose start is already past when the scheduler starts (an
            # initialDelay of 0) would otherwise first fire a whole interval later.
            next_run_time=first,
            id=ROUND_JOB,
            name="cleaning round",
        )
        self.scheduler.add_job(
            self._poll_config,
            IntervalTrigger(seconds=reload.POLL_INTERVAL_S, timezone=UTC),
            id="config-poll",
        )
        shipping.schedule(  # closed journal segments to retentiond.ship.target
            self.scheduler,
            lambda: self.cleaner.settings,
            self.journal,
            registry=self.metrics.metrics.registry,  # retentiond_ship_* on /metrics
            held=self._outcome_held,  # outcomes the rounds' journal holds in memory
        )
        watchdog = watchdog_interval_s()
        if watchdog is not None:
            self.scheduler.add_job(
                self.notifier.watchdog,
                IntervalTrigger(seconds=watchdog, timezone=UTC),
                id="watchdog",
            )
        self.scheduler.start()

    def _shutdown(self) -> bool:
        """Stop everything; True if every round finished (False: gave up at the deadline)."""
        self.notifier.stopping()
        self.stop_event.set()
        done = threading.Thread(target=self.scheduler.shutdown, kwargs={"wait": True})
        done.start()
        done.join(STOP_DEADLINE_S)
        self.control.stop()
        self.metrics.stop()
        if done.is_alive():
            log.warning("exiting while a round is still scanning the store (nothing is deleted)")
            return False
        if self.journal is not None:
            self.cleaner.flush_journal()  # records held in memory by a full disk, if any
            self.journal.close()
        self.notifier.close()
        log.info("stopped")
        return True

    def _became_ready(self) -> None:
        if self.state.mark_ready():
            self.notifier.ready(summary_line(self.status(), self.cleaner.kind))
            log.info("ready")

    # ---- scheduler jobs (worker threads) ------------------------------------------------
    def _outcome_held(self, op_id: str) -> bool:
        """An outcome of ``op_id`` waits in the rounds' journal for disk space. The shipper
        writes through its own handle, so it asks here before reconciling that intent."""
        journal = self.cleaner.journal
        return journal is not None and journal.holds_outcome(op_id)

    def _round_job(self) -> None:
        if self.stop_event.is_set():
            return
        self.state.round_started()
        try:
            settings = self._take_pending()
            result = self.cleaner.run_round(dry_run=settings.daemon.dry_run)
        except Exception as exc:  # the job must survive anything; the next round retries
            log.exception("round failed")
            self.state.round_failed(f"{type(exc).__name__}: {exc}")
            self.notifier.status(f"last round failed: {exc}")
            return
        self.state.round_done(result, self.cleaner.kind)
        self.metrics.round_done(result)
        self._log_round(result)
        self._redelete_hanged(settings)
        # READY after the first round even when the store could not be read (a disk not
        # mounted yet): the service is up, STATUS= names the store error, and every round
        # tries the store again. Waiting would leave systemd to kill the unit at its start
        # timeout, and a restart policy to give up before the mount appears.
        self._became_ready()
        self.notifier.status(summary_line(self.status(), self.cleaner.kind))

    def _take_pending(self) -> Settings[StoreSection]:
        with self._pending_lock:
            new, self._pending_settings = self._pending_settings, None
            manual, self._pending_manual = self._pending_manual, False
        if new is not None:
            self.cleaner.reconfigure(new)
        if manual:
            self.cleaner.request_manual()
        return self.cleaner.settings

    def _log_round(self, result: RoundResult) -> None:
        # What the store kind reported of the round's scan for `status` (round_done kept it).
        fields = self.cleaner.kind.log_fields(
            self.state.last_fields or {}, self.cleaner.state.manual_rounds_remaining
        )
        log.info(
            "round interrupted by stop" if result.stopped else "round done",
            duration_s=round(result.duration_s, 3),
            deleted=deleted_text(result.counts()),
            failures=len(result.failed),
            **fields,
        )

    def _redelete_hanged(self, settings: Settings[StoreSection]) -> None:
        """upstream reDeleteHangedFile's cadence: at most every ``redeleteHangedFileInterval``,
        look again at files that failed to go. A first CommitLog file left because another
        process held it is retried by the Cleaner (released: deleted; held past the forcible
        interval: forced); other failures are retried by the next round's plan (the file is
        still the oldest); here we forget files that went away and say which remain."""
        retry_ms = self.cleaner.kind.cadence(settings).retry_interval_ms
        if not self.state.redelete_due(wall_ms(), retry_ms):
            return
        try:
            self.cleaner.redelete_hanged()
        except Exception:  # the round job must survive anything
            log.exception("retrying the first CommitLog file failed")
        refused = self.cleaner.state.refused  # said at each attempt (Cleaner._note_refusal)
        for path, hung in self.state.prune_hung().items():
            if path in refused:
                continue
            log.warning(
                "file still not deleted",
                file=path,
                since_ms=wall_ms() - hung.first_attempt_ms,
                error=hung.last_error,
            )

    def _poll_config(self) -> None:
        if self.watcher.changed():
            self._inbox.put("file changed")

    def _on_scheduler_event(self, event: JobEvent) -> None:
        if event.job_id != ROUND_JOB:
            return
        if event.code == EVENT_JOB_MISSED:
            self.state.run_skipped(event.scheduled_run_time.timestamp(), overlap=False)
            return
        times = getattr(event, "scheduled_run_times", None) or []
        if not times:
            return
        if event.code == EVENT_JOB_MAX_INSTANCES:
            self.state.run_skipped(times[-1].timestamp(), overlap=True)
            log.warning("round skipped: the previous round is still running")
        else:
            self.state.run_scheduled(times[-1].timestamp())

    # ---- reloads (main thread) ----------------------------------------------------------
    def _reload(self, trigger: str) -> None:
        ready = self.state.ready
        if ready:
            self.notifier.reloading()
        current = self.state.settings
        result = reload.check_reload(self.config_path, current, trigger, load=self._load)
        if result.refused:
            self.state.reload_refused(trigger, result.problems)
            log.error(
                "configuration refused; keeping the running settings",
                trigger=trigger,
                config_hash=current.config_hash,
                problems=result.problems,
            )
        elif not result.changes:
            self.state.reload_unchanged(trigger)
            log.info("configuration reloaded: nothing changed", trigger=trigger)
        else:
            assert result.settings is not None
            self._apply(result.settings, current)
            self.state.reload_applied(result.settings, trigger, result.change_lines())
            log.info(
                "configuration reloaded; takes effect from the next round",
                trigger=trigger,
                config_hash=result.settings.config_hash,
                changes=result.change_lines(),
            )
        if ready:
            self.notifier.ready(summary_line(self.status(), self.cleaner.kind))

    def _load(self, path: Path) -> Settings[StoreSection]:
        """The file's settings as this run uses them (``_forced``), a store error included."""
        try:
            return self._forced(load_settings(path))
        except StoreUnusable as exc:
            raise StoreUnusable(exc.problems, self._forced(exc.settings)) from None

    def _forced(self, settings: Settings[StoreSection]) -> Settings[StoreSection]:
        """``settings`` as this run uses them: with ``--dry-run``, ``dryRun`` is true."""
        if not self.force_dry_run or settings.daemon.dry_run:
            return settings
        forced = dataclasses.replace(
            settings, daemon=dataclasses.replace(settings.daemon, dry_run=True)
        )
        self._file_hash_of[forced.config_hash] = settings.config_hash
        return forced

    def _apply(self, new: Settings[StoreSection], old: Settings[StoreSection]) -> None:
        with self._pending_lock:
            self._pending_settings = new
        cadence = self.cleaner.kind.cadence
        interval = cadence(new).round_interval_ms
        if interval != cadence(old).round_interval_ms:
            self.scheduler.reschedule_job(ROUND_JOB, trigger=_interval_trigger(interval, interval))
            self.state.rescheduled(interval)

    # ---- for the metrics (observe.daemon_metrics.DaemonView) ----------------------------
    def settings_in_force(self) -> Settings[StoreSection]:
        return self.state.settings

    def control_state(self) -> dict[str, object] | None:
        return self.control.state

    # ---- control commands (control thread) ----------------------------------------------
    def status(self) -> dict[str, object]:
        doc = self.state.snapshot()
        job = self.scheduler.get_job(ROUND_JOB) if self.scheduler.running else None
        next_run = job.next_run_time if job is not None else None
        rounds = doc["rounds"]
        assert isinstance(rounds, dict)
        rounds["next_ms"] = int(next_run.timestamp() * 1000) if next_run else None
        with self._pending_lock:
            manual_pending = self._pending_manual
            settings_pending = self._pending_settings is not None
        remaining = self.cleaner.state.manual_rounds_remaining
        doc["manual_rounds_left"] = MAX_MANUAL_DELETE_FILE_TIMES if manual_pending else remaining
        doc["manual_requested"] = manual_pending
        doc["settings_pending"] = settings_pending
        doc.update(self.cleaner.kind.status())
        doc["scheduler_running"] = self.scheduler.running
        doc["safety"] = self.cleaner.safety_status()  # owner, pending release, held, faults
        server = self.metrics.server
        doc["endpoints"] = {
            "control": self.control.state,
            "metrics": server.state if server is not None else None,
        }
        return doc

    def _identity(self) -> dict[str, object]:
        """Carried by every control reply: which file this daemon serves, the hash of the
        settings it runs as the file states them (a refused reload leaves the older one;
        ``run --dry-run`` is not the file's) and its pid."""
        running = self.state.settings.config_hash
        return {
            "config": self.config_real,
            "config_hash": self._file_hash_of.get(running, running),
            "pid": os.getpid(),
        }

    def _cmd_status(self, request: dict[str, object]) -> dict[str, object]:
        return self.status()

    def _cmd_trigger(self, request: dict[str, object]) -> dict[str, object]:
        with self._pending_lock:
            self._pending_manual = True
        log.info("manual deletion requested over the control socket")
        job = self.scheduler.get_job(ROUND_JOB)
        next_run = job.next_run_time if job is not None else None
        return {
            "manual_rounds": MAX_MANUAL_DELETE_FILE_TIMES,
            "store_kind": self.cleaner.kind.name,
            "next_round_ms": int(next_run.timestamp() * 1000) if next_run else None,
        }
