"""RocketMQ behind the engine's interface (``engine.kind.StoreKind``).

A RocketMQ round has two stages, as in the broker: ``CleanCommitLogService`` first, then
``CleanConsumeQueueService``, which judges the queues and the index files by the CommitLog
minimum offset *after* the first stage's deletions. So the queue stage is planned only once
the CommitLog run has been carried out (or, in a dry run, as if it had been).

Between rounds this object remembers what upstream keeps between ticks: the CommitLog minimum
the queue stage last acted on (0 after a restart), the directory listings and the values read
from full queue files (both validated before reuse), and the last disk measurement.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from retentiond.config.settings import Settings, StoreSection
from retentiond.engine import forked
from retentiond.engine.decision import Decision
from retentiond.engine.execute import open_dir_below
from retentiond.engine.figures import DiskFigures, StoreStats
from retentiond.engine.holds import HeldFile
from retentiond.engine.kind import BrokerMain, Cadence, RoundServices, StatusDoc
from retentiond.engine.loss import (
    GroupRisk,
    Loss,
    Progress,
    add_risk,
    risk_status,
    top_risks,
)
from retentiond.engine.runs import Outcome, Run
from retentiond.journal.place import default_journal_dir
from retentiond.journal.rollup import IdleView
from retentiond.kinds.rocketmq import frontiers, scancache
from retentiond.kinds.rocketmq.commitlog import (
    expired_pending,
    first_kept_offset,
    newest_kept_index,
    plan_commitlog,
)
from retentiond.kinds.rocketmq.config import RocketMQStore, rocketmq_of
from retentiond.kinds.rocketmq.disk import DiskUsage, measure, round_fields
from retentiond.kinds.rocketmq.figures import disk_figures, status_fields, store_stats
from retentiond.kinds.rocketmq.frontiers import Frontiers
from retentiond.kinds.rocketmq.holds import HoldRules, hold_commitlog, hold_queues, hold_timerlog
from retentiond.kinds.rocketmq.loss import GroupPolicy, commitlog_losses
from retentiond.kinds.rocketmq.plan import (
    CommitLogPlan,
    Plan,
    QueueDecision,
    QueuesPlan,
    TimerLogPlan,
)
from retentiond.kinds.rocketmq.progress import CONSUMER_OFFSET, ConsumerProgress, read_progress
from retentiond.kinds.rocketmq.queues import plan_queues
from retentiond.kinds.rocketmq.reader import (
    BinaryReader,
    read_index_header,
    read_timerlog_last_offset,
)
from retentiond.kinds.rocketmq.report import render_plan
from retentiond.kinds.rocketmq.risk import add_group_risks, going
from retentiond.kinds.rocketmq.scan import Prefetch, QueueLister, scan
from retentiond.kinds.rocketmq.scancache import LoadedValues
from retentiond.kinds.rocketmq.snapshot import Snapshot
from retentiond.kinds.rocketmq.timerlog import plan_timerlog
from retentiond.kinds.rocketmq.triggers import evaluate, hour_of_day
from retentiond.kinds.rocketmq.voice import RocketMQVoice
from retentiond.reasons import DELETE_REASONS, FORCED_REASONS, Kind, Reason, Verdict
from retentiond.text.units import zone_name

log = structlog.get_logger(__name__)

BELOW = Reason.BELOW_COMMITLOG_MIN_OFFSET

_HOUR_MS = 3_600_000
# A forked child's count (kind._start_loss_worker): each CommitLog decision's loss, the
# progress problems, and the round memory the count leaves (progress, losses, risk, moves).
_LossResult = tuple[
    tuple[Loss | None, ...],
    tuple[tuple[str, str], ...],
    Progress,
    tuple[Loss, ...],
    dict[str, list[int | None]],
    dict[str, tuple[int, int]],
]
# A consumerOffset.json from this size on (about 10,000 queue offsets) is read and its losses
# counted in a forked child while a plan walks the queues (``_start_loss_worker``).
FORK_PROGRESS_BYTES = 100_000
RECOUNT_AHEAD_MS = 60_000  # the groups at risk in files that go later: recounted at most this often


def _indicator_problem(settings: Settings[RocketMQStore], exc: Exception) -> tuple[str, str]:
    """The problem line for an error met while counting the groups at risk."""
    path = str(settings.store.store_path_commitlog[0])
    return path, f"groups at risk not counted for the files that go later ({exc!r})"


# The trigger fields that make a round's "state": idle rounds fold only while all agree.
_IDLE_FLAGS = (
    "time_up",
    "usage_exceeds",
    "manual",
    "clean_immediately",
    "clean_at_once",
    "fired",
    "disk_state",
)


class RocketMQ(RocketMQVoice):
    file_kinds: tuple[Kind, ...] = (Kind.COMMITLOG, Kind.CONSUMEQUEUE, Kind.INDEX, Kind.TIMERLOG)
    phases: tuple[str, ...] = (Kind.COMMITLOG.value, Kind.CONSUMEQUEUE.value)  # its services
    deletion_series: tuple[tuple[Kind, Reason], ...] = tuple(
        sorted(
            [(Kind.COMMITLOG, r) for r in DELETE_REASONS if r is not BELOW]
            + [(k, BELOW) for k in (Kind.CONSUMEQUEUE, Kind.INDEX, Kind.TIMERLOG)]
        )
    )

    # The broker's main class by its last dotted part: 5.x also ships a container that runs
    # brokers in one JVM.
    brokers: tuple[BrokerMain, ...] = (
        BrokerMain(
            "rocketmq",
            "a RocketMQ broker (BrokerStartup)",
            simple_names=frozenset({"BrokerStartup", "BrokerContainerStartup"}),
        ),
    )

    def __init__(self, settings: Settings[RocketMQStore]) -> None:
        self.settings = settings
        self.reader = BinaryReader(settings.store.mapped_file_size_consumequeue)
        self.lister = QueueLister()  # directory listings carried between rounds
        self.queue_memo: dict[bytes | str, QueueDecision] = {}  # earlier decisions (plan_queues)
        self.last_physical_min_offset = 0  # upstream CleanConsumeQueueService; 0 after a restart
        self.dry_run_min_offset = 0  # the same gate for dry-run rounds (never for real ones)
        self.last_dir_errors: dict[str, str] = {}  # the root, if the last scan could not use it
        self.last_usage: DiskUsage | None = None  # per-path ratios for the round record
        self.last_progress = Progress.UNKNOWN  # the consumer progress the last round read
        self.last_loss: tuple[Loss, ...] = ()  # what the last round's deletions lose
        self.last_risk: tuple[GroupRisk, ...] | None = None  # store_stats' group_risk
        self.risk_acc: dict[str, list[int | None]] = {}  # the last round's, by group
        # The later files' part of it: (what it was counted for, when, by group)
        self._ahead: tuple[tuple[object, ...], int, dict[str, list[int | None]]] | None = None
        self.group_moves: dict[str, tuple[int, int]] = {}  # group -> (offsets digest, since ms)
        # The scan cache file (see scancache): loaded before the first scan, written after a
        # remembering round that had to list or read anything. None: not yet looked up.
        self._cache_path: Path | None = None
        self._cache_loaded = False
        self._saved_reads = 0
        self.cache_loaded_queues = 0  # for tests, benchmarks and the start-up log
        # Values from the cache file by queue directory, until a remembering round has
        # planned every queue (then the memo holds what was verified).
        self.loaded_values: LoadedValues | None = None
        self.last_prefetch: Prefetch | None = None  # the last walk's, when it had one

    def _prefetch(self, min_offset: int, gate: int) -> Prefetch | None:
        """A walk that may be shared with a forked child (when ``engine.forked`` allows it:
        within ``retentiond plan``): one that will examine every queue with nothing of the
        store remembered (every directory listed, every examined file read), and that
        leaves nothing behind (a plan's)."""
        if min_offset < 0 or min_offset <= gate:
            return None
        if self.loaded_values is not None or self.queue_memo or self.lister.queue_entries():
            return None
        return Prefetch(min_offset, self.reader.cq_file_size)

    def _scan_cache_path(self) -> Path | None:
        """Beside the journal: the configured journal directory, else the journal's default
        one when it exists (never created here)."""
        if self._cache_path is None:
            s = self.settings
            if s.daemon.journal_dir is not None:
                directory = Path(s.daemon.journal_dir)
            else:
                directory = default_journal_dir(self.directories())
            self._cache_path = scancache.cache_file(directory, str(s.store.consumequeue_dir))
        return self._cache_path if self._cache_path.parent.is_dir() else None

    def _load_scan_cache(self) -> None:
        if self._cache_loaded:
            return
        self._cache_loaded = True
        path = self._scan_cache_path()
        if path is not None:
            with gc_paused():
                got = scancache.load(
                    path, str(self.settings.store.consumequeue_dir), self.reader.cq_file_size
                )
            if got is not None and not self.queue_memo:  # (a fresh kind: always empty)
                queues, self.loaded_values, parents = got
                self.lister.preload_parents(parents)
                self.lister.preload(queues)
                self.cache_loaded_queues = len(queues)
        self._saved_reads = self.reader.reads

    def _save_scan_cache(self) -> None:
        """After a round that listed a directory or opened a file: write the cache again."""
        if self.lister.queues_listed == 0 and self.reader.reads == self._saved_reads:
            return
        path = self._scan_cache_path()
        if path is not None and scancache.save(
            path,
            str(self.settings.store.consumequeue_dir),
            self.lister,
            self.queue_memo,
            self.loaded_values,
            self.reader.cq_file_size,
        ):
            self._saved_reads = self.reader.reads

    def reconfigure(self, new: Settings[StoreSection]) -> None:
        settings = rocketmq_of(new)
        if (
            settings.store.mapped_file_size_consumequeue
            != self.settings.store.mapped_file_size_consumequeue
        ):
            self.reader = BinaryReader(settings.store.mapped_file_size_consumequeue)
            self.queue_memo = {}
            self.loaded_values = None
            self._saved_reads = 0
        self.settings = settings

    # ---- where its files are ------------------------------------------------------------
    def directories(self) -> tuple[str, ...]:
        s = self.settings
        dirs = [
            *map(str, s.store.store_path_commitlog),
            str(s.store.consumequeue_dir),
            str(s.store.index_dir),
            str(s.store.timerlog_dir),
        ]
        return tuple(sorted({*dirs, *(os.path.realpath(d) for d in dirs)}))

    def owner_lock(self) -> str:
        return str(self.settings.store.store_path_root_dir / "lock")

    def hold_intervals(self) -> HoldRules:
        return HoldRules.from_settings(self.settings)

    # ---- a round ------------------------------------------------------------------------
    def scan(self, now_ms: int, *, executes: bool = True) -> Snapshot:
        self._load_scan_cache()
        snapshot = scan(self.settings, now_ms=now_ms, lister=self.lister)
        # the store root when this scan could not use it (missing, unmounted, unreadable)
        root = snapshot.root
        self.last_dir_errors = {e.path: e.message for e in snapshot.errors if e.path == root}
        return snapshot

    def plan_round(self, snapshot: Snapshot, rnd: RoundServices) -> Plan:
        s = self.settings
        rnd.phase(Kind.COMMITLOG.value)
        cl = hold_commitlog(self._plan_commitlog(snapshot, rnd), rnd.hold)
        worker = self._start_loss_worker(cl, rnd)
        progress_problems: tuple[tuple[str, str], ...] = ()
        if worker is None:
            cl, progress_problems = self._with_loss(cl, rnd.now_ms, ahead=rnd.remembers)
        try:
            qp, tl, queue_errors = self._plan_queue_stage(snapshot, rnd, cl)
        except BaseException:
            if worker is not None:
                worker.cancel()
            raise
        if worker is not None:
            cl, progress_problems = self._loss_from_worker(worker, cl, rnd.now_ms)
        return Plan(
            now_ms=rnd.now_ms,
            timezone=zone_name(s.daemon.timezone),
            config_hash=s.config_hash,
            store_root=snapshot.root,
            commitlog=cl,
            queues=qp,
            foreign=tuple(
                (f.path, str(f.why)) for f in [*snapshot.foreign, *snapshot.queue_foreign]
            ),
            errors=(*(f"{e.path}: {e.message}" for e in snapshot.errors), *queue_errors),
            queue_errors=queue_errors,
            progress_problems=progress_problems,
            timerlog=tl,
            manual=rnd.manual,
            dry_run=not rnd.executes,
        )

    def _plan_queue_stage(
        self, snapshot: Snapshot, rnd: RoundServices, cl: CommitLogPlan
    ) -> tuple[QueuesPlan, TimerLogPlan | None, tuple[str, ...]]:
        """The CommitLog run carried out, then the queue, index and timer log stage judged
        by the CommitLog minimum it left (and carried out)."""
        s = self.settings
        rnd.note_disk_ratio(cl.triggers.physic_ratio)
        gate = self.last_physical_min_offset
        if not rnd.executes and rnd.remembers:
            gate = max(gate, self.dry_run_min_offset)
        qp = QueuesPlan(cl.min_offset_after, gate, examined=False)
        queue_errors: tuple[str, ...] = ()
        tl = None if snapshot.timerlog is None else TimerLogPlan(snapshot.timerlog_dir, -1)
        done = rnd.execute(commitlog_run(cl, s))
        if not rnd.halted:
            min_offset = actual_min_offset(cl, done) if rnd.executes else cl.min_offset_after
            if snapshot.errors:
                min_offset = -1  # never act on the queues of a store we could not fully read
            rnd.phase(Kind.CONSUMEQUEUE.value)
            prefetch = None if rnd.remembers else self._prefetch(min_offset, gate)
            with gc_paused():
                qp = plan_queues(
                    snapshot.list_queues() if prefetch is None else snapshot.list_queues(prefetch),
                    snapshot.index,
                    snapshot.index_dir,
                    min_offset=min_offset,
                    last_min_offset=gate,
                    reader=self.reader,
                    memo=self.queue_memo,
                    loaded=self.loaded_values,
                    prefetched=None if prefetch is None else prefetch.values,
                )
            if prefetch is not None and prefetch.shared:
                self.reader.reads += prefetch.reads
                self.last_prefetch = prefetch
                log.debug("queue walk shared with a forked child", child_topics=prefetch.topics,
                          reads=prefetch.reads)  # fmt: skip
            if qp.examined:
                # The memo now holds every queue's verified values (a plan's walk fills it
                # too): the file's arrays are not needed after a daemon's start-up scan.
                self.loaded_values = None
            # Topic or queue directories the walk could not read: nothing under them was
            # judged. The gate stays where it was, so the next round walks the queues again
            # (and says so again) instead of skipping them until the minimum next moves.
            queue_errors = tuple(f"{e.path}: {e.message}" for e in snapshot.queue_errors)
            qp = hold_queues(qp, rnd.hold)
            judged = qp.examined and not queue_errors
            if judged and rnd.executes:
                self.last_physical_min_offset = min_offset
            elif judged and rnd.remembers:
                # A dry run remembers the minimum the real round would have acted on (the
                # CommitLog as if its run had gone), so its next rounds skip the queues as a
                # real daemon's would instead of re-reading every queue every round. It is
                # kept apart from the real gate: a real round after dry ones (dryRun turned
                # off by a reload) still examines the queues once. ``plan`` changes nothing.
                self.dry_run_min_offset = min_offset
            for run in queue_runs(qp, s):
                rnd.execute(run)
            if snapshot.timerlog is not None and not rnd.halted:
                # TimerMessageStore's own cleaner: every round (upstream: every 30 s), by the
                # same CommitLog minimum, not gated on its having moved (one read a file).
                tl = hold_timerlog(
                    plan_timerlog(snapshot.timerlog, snapshot.timerlog_dir, min_offset),
                    rnd.hold,
                )
                tl_run = timerlog_run(tl, s)
                if tl_run is not None:
                    rnd.execute(tl_run)
            if qp.examined and rnd.remembers:
                self._save_scan_cache()  # after the unlinks: the listings it saves are current
            if qp.examined:
                # The walk freed as much as it keeps (the cache file's arrays, the values it
                # held, what the round built): hand the free heap back to the system, or a
                # daemon's resident size carries it for good (its start-up scan is a plan).
                scancache.trim_heap()
        return qp, tl, queue_errors

    def _start_loss_worker(
        self, cl: CommitLogPlan, rnd: RoundServices
    ) -> forked.Forked[_LossResult] | None:
        """The child that reads the consumer progress and counts the deletions' losses while
        the queues are planned, when nothing of the rest of the round depends on them: in a
        one-off command (``forked.allowed``: ``plan``) that remembers nothing, with neither
        guard keeping files (the losses then change no verdict), with deletions to count and
        a progress file worth it. None: counted here."""
        s = self.settings
        if (
            rnd.remembers
            or s.daemon.guard_unconsumed == "keep"
            or s.daemon.guard_timers == "keep"
            or not cl.deletions()
        ):
            return None
        try:
            size = os.stat(s.store.store_path_root_dir / "config" / CONSUMER_OFFSET).st_size
        except OSError:
            return None
        if not forked.allowed(size, FORK_PROGRESS_BYTES):
            return None
        now_ms = rnd.now_ms

        def count() -> _LossResult:
            got, problems = self._with_loss(cl, now_ms)
            return (
                tuple(d.loss for d in got.decisions),
                problems,
                self.last_progress,
                self.last_loss,
                self.risk_acc,
                self.group_moves,
            )

        try:
            return forked.Forked(count)
        except forked.WorkerFailed:
            return None

    def _loss_from_worker(
        self, worker: forked.Forked[_LossResult], cl: CommitLogPlan, now_ms: int
    ) -> tuple[CommitLogPlan, tuple[tuple[str, str], ...]]:
        """The child's count put on the plan; counted here when the child has none."""
        try:
            losses, problems, progress, last_loss, risk, moves = worker.result()
        except forked.WorkerFailed:
            return self._with_loss(cl, now_ms)
        if len(losses) != len(cl.decisions):
            return self._with_loss(cl, now_ms)
        self.last_progress, self.last_loss = progress, last_loss
        self.risk_acc, self.group_moves, self._ahead = risk, moves, None
        decisions = tuple(
            d if loss is None else d._replace(loss=loss)
            for d, loss in zip(cl.decisions, losses, strict=True)
        )
        return replace(cl, decisions=decisions), problems

    def _with_loss(
        self, cl: CommitLogPlan, now_ms: int, *, ahead: bool = False
    ) -> tuple[CommitLogPlan, tuple[tuple[str, str], ...]]:
        """The plan with what each CommitLog deletion loses (``engine.loss``), read from the
        consumer progress on disk this round, and the progress files' problems.

        With ``ahead`` (a daemon's round) the files that go later are counted too, for the
        leading indicator (``_group_risk``), apart from the deletions: what they read (or
        fail to read) never changes a verdict nor a deletion's loss, which are ``plan``'s;
        an error there is a problem line and leaves the indicator without the later files."""
        s = self.settings
        try:
            progress = read_progress(s.store.store_path_root_dir)
        except (OSError, ValueError) as exc:  # never a crash, never more deletion
            path = str(s.store.store_path_root_dir / "config")
            progress = ConsumerProgress(
                Progress.UNKNOWN, problems=((path, f"consumer progress unreadable ({exc})"),)
            )
        problems = list(progress.problems)
        self.last_progress = progress.progress
        self.risk_acc = {}
        deletions = [
            (i, d) for i, d in enumerate(cl.decisions) if d.delete and d.start_offset is not None
        ]
        later: list[tuple[int, Decision, int]] = []
        ahead_key: tuple[object, ...] = ()
        if ahead and progress.progress not in (Progress.UNKNOWN, Progress.CORRUPT):
            try:
                later, ahead_key = self._later_files(cl, progress, now_ms, deletions)
            except Exception as exc:  # the indicator only reports: never a failed round
                problems.append(_indicator_problem(s, exc))
                self._ahead = None
        else:
            self._ahead = None
        if not deletions and not later:
            self.last_loss = ()
            self._add_ahead()
            return cl, tuple(problems)
        policy = GroupPolicy(
            dict(progress.enabled) if progress.enabled is not None else None,
            s.daemon.guard_ignore_groups,
            self._stale_groups(progress, now_ms, watching=ahead),
        )
        memory = self._frontier_memory(recording=ahead)
        losses = commitlog_losses(
            progress,
            s.store.consumequeue_dir,
            s.store.mapped_file_size_consumequeue,
            [(d.start_offset or 0, d.end_offset or 0) for _, d in deletions],
            policy=policy,
            problem=lambda path, text: problems.append((path, text)),
            memory=memory,
        )
        decisions = list(cl.decisions)
        keep_unconsumed = s.daemon.guard_unconsumed == "keep"
        keep_timers = s.daemon.guard_timers == "keep"
        # Disk safety wins: above diskSpaceCleanForciblyRatio the files go, loss recorded.
        guarding = (keep_unconsumed or keep_timers) and not cl.triggers.clean_immediately
        kept = False
        for (i, d), loss in zip(deletions, losses, strict=True):
            if kept:
                decisions[i] = d._replace(
                    verdict=Verdict.KEEP, reason=Reason.AFTER_FIRST_KEPT, loss=loss
                )
                continue
            why = loss.protects(unconsumed=keep_unconsumed, timers=keep_timers)
            if guarding and why is not None:
                reason = Reason.UNCONSUMED if why == "unconsumed" else Reason.PENDING_TIMER
                decisions[i] = d._replace(
                    verdict=Verdict.KEEP, reason=reason, detail=loss.summary(), loss=loss
                )
                kept = True
            else:
                decisions[i] = d._replace(loss=loss)
        self.last_loss = tuple(
            loss for (i, _), loss in zip(deletions, losses, strict=True) if decisions[i].delete
        )
        # The indicator: what goes now, then the later files unless the guard stopped the
        # pass this round (it would keep stopping there until the disk forces it).
        going_now = [(decisions[i], now_ms) for i, _ in deletions if decisions[i].delete]
        add_group_risks(self.risk_acc, going_now, self.last_loss, guard=None)
        if later:
            try:
                ahead_acc = self._count_later(
                    progress, later, policy, problems, kept=kept, guard=guarding, memory=memory
                )
            except Exception as exc:  # the indicator only reports: never a failed round
                problems.append(_indicator_problem(s, exc))
                self._ahead = None
            else:
                self._ahead = (ahead_key, now_ms, ahead_acc)
        self._add_ahead()
        if memory is not None and memory.changed:
            self._save_frontiers(memory)
        return (
            replace(cl, decisions=tuple(decisions), min_offset_after=first_kept_offset(decisions)),
            tuple(problems),
        )

    def _frontiers_path(self) -> Path | None:
        cache = self._scan_cache_path()
        if cache is None:
            return None
        return frontiers.memory_file(cache.parent, str(self.settings.store.consumequeue_dir))

    def _frontier_memory(self, *, recording: bool) -> Frontiers | None:
        """What earlier counts found of the queues (``frontiers``), from the file beside the
        scan cache: never when a guard keeps files (the losses then decide verdicts: they
        are read from the queues themselves). A daemon's rounds record theirs into it."""
        s = self.settings
        if s.daemon.guard_unconsumed == "keep" or s.daemon.guard_timers == "keep":
            return None
        path = self._frontiers_path()
        if path is None:
            return None
        return Frontiers.load(
            path,
            str(s.store.consumequeue_dir),
            s.store.mapped_file_size_consumequeue,
            recording=recording,
        )

    def _save_frontiers(self, memory: Frontiers) -> None:
        path = self._frontiers_path()
        if path is not None and memory.recording:
            memory.save(
                path,
                str(self.settings.store.consumequeue_dir),
                self.settings.store.mapped_file_size_consumequeue,
            )

    def _later_files(
        self,
        cl: CommitLogPlan,
        progress: ConsumerProgress,
        now_ms: int,
        deletions: list[tuple[int, Decision]],
    ) -> tuple[list[tuple[int, Decision, int]], tuple[object, ...]]:
        """The files that go later (``risk.going``) when they are to be counted this round,
        and the key under which their count is kept; none while the last count still holds."""
        s = self.settings
        later = [(i, d, w) for i, d, w in going(cl, s, now_ms) if not d.delete]
        # The later files are recounted at most once a minute while the same files would go
        # now and later under the same triggers: a count reads a unit of every queue the
        # groups read, too much for every round of a daemon on 10^5 queues.
        t = cl.triggers
        ahead_key = (
            s.config_hash,
            progress.progress,
            t.fired,
            t.usage_exceeds,
            t.clean_at_once,
            tuple(d.path for _, d in deletions),
            tuple(d.path for _, d, _ in later),
        )
        if not later:
            self._ahead = None
        elif (
            self._ahead is not None
            and self._ahead[0] == ahead_key
            and now_ms - self._ahead[1] < RECOUNT_AHEAD_MS
        ):
            later = []  # the count kept holds
        return later, ahead_key

    def _count_later(
        self,
        progress: ConsumerProgress,
        later: list[tuple[int, Decision, int]],
        policy: GroupPolicy,
        problems: list[tuple[str, str]],
        *,
        kept: bool,
        guard: bool,
        memory: Frontiers | None = None,
    ) -> dict[str, list[int | None]]:
        """The groups at risk in the files that go later, counted on their own: a queue
        unreadable only there makes their losses uncounted (the walk stops at the first,
        as the guard would), never this round's deletions'. Problems already said this
        round are not said twice."""
        s = self.settings
        acc: dict[str, list[int | None]] = {}
        if kept:
            return acc  # the guard stopped the pass this round: nothing goes after it
        said = set(problems)

        def problem(path: str, text: str) -> None:
            if (path, text) not in said:
                said.add((path, text))
                problems.append((path, text))

        losses = commitlog_losses(
            progress,
            s.store.consumequeue_dir,
            s.store.mapped_file_size_consumequeue,
            [(d.start_offset or 0, d.end_offset or 0) for _, d, _ in later],
            policy=policy,
            problem=problem,
            memory=memory,
        )
        keep = (s.daemon.guard_unconsumed == "keep", s.daemon.guard_timers == "keep")
        add_group_risks(acc, [(d, w) for _, d, w in later], losses, guard=keep if guard else None)
        return acc

    def _add_ahead(self) -> None:
        """The later files' part of the indicator (counted this round or within the last
        minute for the same files) added to this round's."""
        if self._ahead is not None:
            for group, (messages, when) in self._ahead[2].items():
                add_risk(self.risk_acc, group, messages or 0, when)

    def _stale_groups(
        self, progress: ConsumerProgress, now: int, *, watching: bool = True
    ) -> frozenset[str]:
        """Groups whose offsets have not moved for ``guard.staleAfter`` as this object has
        watched them (a fresh kind, as ``plan``'s, has seen no group go stale). Without
        ``watching`` (a round that remembers nothing) and nothing watched yet, no digest is
        taken: every group is as fresh as it can be."""
        after = self.settings.daemon.guard_stale_after_ms
        if not watching and not self.group_moves:
            if after > 0:
                return frozenset()
            return frozenset(g for by_group in progress.offsets.values() for g in by_group)
        # A group's offsets as one digest, whatever order the file lists them in: a set of
        # (topic, digest of its queue -> offset pairs) per group (no tuple per offset sorted).
        signatures: dict[str, list[tuple[str, int]]] = {}
        for topic, by_group in progress.offsets.items():
            for group, queues in by_group.items():
                signatures.setdefault(group, []).append((topic, hash(frozenset(queues.items()))))
        seen: dict[str, tuple[int, int]] = {}
        for group, sig in signatures.items():
            digest = hash(frozenset(sig))
            old = self.group_moves.get(group)
            seen[group] = old if old is not None and old[0] == digest else (digest, now)
        self.group_moves = seen
        return frozenset(g for g, (_, since) in seen.items() if now - since >= after)

    def _plan_commitlog(self, snap: Snapshot, rnd: RoundServices) -> CommitLogPlan:
        """The CommitLog plan, judged on the disk as it will be once pending bytes are freed.

        Pending files are re-checked first (only if there are any). When the plan has
        deletions, the round's holder map is built; if it turns up more pending bytes (say,
        after a restart) the plan is made again with them.
        """
        s = self.settings
        usage = measure([str(p) for p in s.store.store_path_commitlog], snap.consumequeue_dir)
        self.last_usage = usage
        rnd.refresh_pending()
        cl = self._commitlog_for(snap, usage, rnd)
        if cl.deletions() and rnd.look_for_pending():
            cl = self._commitlog_for(snap, usage, rnd)
        return cl

    def _commitlog_for(self, snap: Snapshot, usage: DiskUsage, rnd: RoundServices) -> CommitLogPlan:
        s = self.settings
        adjusted = DiskUsage(
            tuple(rnd.adjusted(u) for u in usage.commitlog), rnd.adjusted(usage.consumequeue)
        )
        triggers = evaluate(s, rnd.now_ms, adjusted, manual=rnd.manual)
        pending = rnd.pending_bytes()
        if pending and not usage.errors:
            raw = min(u.ratio for u in usage.commitlog if u.ratio is not None)
            triggers = replace(triggers, unadjusted_physic_ratio=raw, pending_release_bytes=pending)
        if snap.errors and triggers.error is None:
            triggers = replace(triggers, error="; ".join(e.message for e in snap.errors))
        return plan_commitlog(snap.commitlog, triggers, s, rnd.now_ms)

    def redelete_candidate(self, now_ms: int, held: Mapping[str, HeldFile]) -> Decision | None:
        """The first CommitLog file, if a round left it because another process held it."""
        if not any(h.kind is Kind.COMMITLOG for h in held.values()):
            return None
        snap = self.scan(now_ms)
        if snap.errors or newest_kept_index(snap.commitlog) == 0:
            return None
        first = snap.commitlog[0]
        record = held.get(first.path)
        if record is None or record.identity != first.identity:
            return None
        return Decision(
            Kind.COMMITLOG, first.path, Verdict.DELETE, record.reason, identity=first.identity,
            start_offset=first.start_offset, end_offset=first.start_offset + first.identity.size,
        )  # fmt: skip

    def status(self) -> dict[str, object]:
        return {
            "last_commitlog_min_offset": self.last_physical_min_offset,
            "store_dir_errors": dict(self.last_dir_errors),
            "loss": loss_status(self.last_progress, self.last_loss),
            "groups_at_risk": risk_status(self.last_risk),
        }

    def round_fields(self, plan: Plan, deleted: frozenset[str]) -> dict[str, object]:
        s = self.settings
        return {
            "triggers": plan.commitlog.triggers.as_dict(),
            "hour": hour_of_day(plan.now_ms, s.daemon.timezone),
            "min_offset_before": plan.commitlog.min_offset_before,
            "min_offset_after": plan.queues.min_offset,
            "queues_examined": plan.queues.examined,
            "expired_pending": expired_pending(plan.commitlog, s, plan.now_ms, deleted),
            **round_fields(s, self.last_usage),
        }

    def idle_view(self, record: Mapping[str, Any]) -> IdleView | None:
        """Two RocketMQ rounds are alike when every trigger flag and the disk state agree;
        the ratio is the worse of the CommitLog and ConsumeQueue ratios and a round is stuck
        when the disk is over ``diskMaxUsedSpaceRatio`` (an idle round deletes nothing) --
        exactly as ``analytics/tables.py`` reads a ``round`` record."""
        t = record.get("triggers") or {}
        if t.get("error") is not None:
            return None
        ratios = [r for r in (t.get("physic_ratio"), t.get("logics_ratio")) if r is not None]
        state = tuple(t.get(k) for k in _IDLE_FLAGS)
        return IdleView(
            state=state,
            disk_state=str(t.get("disk_state")),
            ratio=max(ratios) if ratios else None,
            stuck=bool(t.get("usage_exceeds")),
            interval_ms=record.get("interval_ms"),
            carried={
                "triggers": t,
                "file_reserved_time_hours": record.get("file_reserved_time_hours"),
                "interval_ms": record.get("interval_ms"),
                "thresholds": record.get("thresholds"),
            },
            maxima={"expired_pending": record.get("expired_pending")},
        )

    # ---- for people and dashboards ------------------------------------------------------
    def render_plan(self, plan: Plan, *, all_queue_files: bool = False) -> str:
        return render_plan(plan, all_queue_files=all_queue_files)

    def status_fields(self, plan: Plan, deleted: frozenset[str]) -> dict[str, object]:
        return status_fields(plan, self.settings, deleted)

    def store_stats(
        self, plan: Plan, deleted: frozenset[str], previous: StoreStats | None
    ) -> StoreStats:
        stats = store_stats(plan, self.settings, deleted, previous)
        self.last_risk = self._group_risk()
        return replace(stats, group_risk=self.last_risk)

    def _group_risk(self) -> tuple[GroupRisk, ...] | None:
        """The leading indicator: each active group's unread messages in the CommitLog files
        the current configuration will delete, and when the first of them goes
        (``kinds.rocketmq.risk``), as the last round counted them."""
        if self.last_progress in (Progress.UNKNOWN, Progress.CORRUPT):
            return None
        return top_risks(self.risk_acc, self.settings.daemon.guard_top_groups)

    def disk_figures(self, settings: Settings[StoreSection], now_ms: int) -> DiskFigures:
        return disk_figures(rocketmq_of(settings), now_ms)

    def phases_succeeded(self, plan: Plan) -> tuple[str, ...]:
        """The queue service always completes; the CommitLog one not when the disk could not
        be measured."""
        if plan.commitlog.triggers.error is None:
            return self.phases
        return (Kind.CONSUMEQUEUE.value,)

    def cadence(self, settings: Settings[StoreSection]) -> Cadence:
        """cleanResourceInterval; redeleteHangedFileInterval."""
        return Cadence(settings.round_interval_ms, settings.retry_interval_ms)

    def status_settings(
        self, settings: Settings[StoreSection], scan: StatusDoc | None
    ) -> dict[str, object]:
        """deleteWhen, and the disk: the last scan's ratios against the thresholds in force."""
        store = rocketmq_of(settings).store
        triggers = (scan or {}).get("triggers")
        t = triggers if isinstance(triggers, Mapping) else {}
        return {
            "delete_when": store.delete_when,
            "disk": {
                "commitlog_ratio": t.get("physic_ratio"),
                "consumequeue_ratio": t.get("logics_ratio"),
                "state": t.get("disk_state"),
                "max_used_ratio": store.disk_max_used_ratio_fraction,
                "clean_forcibly_ratio": store.disk_space_clean_forcibly_ratio,
                "warning_level_ratio": store.disk_space_warning_level_ratio,
            },
        }

    def log_fields(self, scan: StatusDoc, manual_rounds_left: int) -> dict[str, object]:
        """The triggers as evaluated, the CommitLog ratio, expired files left, manual rounds."""
        triggers = scan.get("triggers")
        t = triggers if isinstance(triggers, Mapping) else {}
        return {
            "fired": t.get("fired"),
            "time_up": t.get("time_up"),
            "usage_exceeds": t.get("usage_exceeds"),
            "manual": t.get("manual"),
            "disk_ratio": t.get("physic_ratio"),
            "pending_expired": scan.get("pending_expired"),
            "manual_rounds_left": manual_rounds_left,
        }

    def info_labels(self, settings: Settings[StoreSection]) -> dict[str, str]:
        s = rocketmq_of(settings)
        return {
            "file_reserved_time_hours": str(s.store.file_reserved_time_hours),
            "delete_when": s.store.delete_when,
            "disk_max_used_space_ratio": f"{s.store.disk_max_used_ratio_fraction:g}",
            "disk_space_clean_forcibly_ratio": f"{s.store.disk_space_clean_forcibly_ratio:g}",
            "disk_space_warning_level_ratio": f"{s.store.disk_space_warning_level_ratio:g}",
            "clean_file_forcibly_enable": str(s.store.clean_file_forcibly_enable).lower(),
            "delete_file_batch_max": str(s.store.delete_file_batch_max),
        }

    def reserved_time_s(self, settings: Settings[StoreSection]) -> float | None:
        """fileReservedTime."""
        return rocketmq_of(settings).store.file_reserved_time_hours * 3600.0

    def plan_only_notes(self, plan: Plan) -> list[str]:
        return []  # a RocketMQ round deletes beside a running broker, as the broker would

    # ---- just before an unlink ----------------------------------------------------------
    def open_parent(self, decision: Decision) -> int:
        """CommitLog and index files sit directly in a configured directory; a queue file
        two levels below ``consumequeue/`` (topic, then queue id), each opened O_NOFOLLOW."""
        s = self.settings
        parent = os.path.dirname(decision.path)
        if decision.kind is Kind.COMMITLOG:
            if parent not in {str(p) for p in s.store.store_path_commitlog}:
                raise PermissionError(f"{parent} is not a configured CommitLog path")
            return open_dir_below(parent)
        if decision.kind is Kind.INDEX:
            if parent != str(s.store.index_dir):
                raise PermissionError(f"{parent} is not the index directory")
            return open_dir_below(parent)
        if decision.kind is Kind.TIMERLOG:
            if parent != str(s.store.timerlog_dir):
                raise PermissionError(f"{parent} is not the timerlog directory")
            return open_dir_below(parent)
        topic_dir = os.path.dirname(parent)
        if decision.kind is not Kind.CONSUMEQUEUE or os.path.dirname(topic_dir) != str(
            s.store.consumequeue_dir
        ):
            raise PermissionError(f"{parent} is not a queue directory of this store")
        return open_dir_below(
            str(s.store.consumequeue_dir), os.path.basename(topic_dir), os.path.basename(parent)
        )

    def _expired(self, d: Decision, now_ms: int) -> bool:
        reserved = self.settings.store.file_reserved_time_hours * _HOUR_MS
        return d.identity is not None and now_ms >= d.identity.mtime_ms + reserved

    def recheck(
        self, decision: Decision, st: os.stat_result, now_ms: int, floor: int | None
    ) -> str | None:
        d = decision
        if d.kind is Kind.COMMITLOG:
            exempt = d.reason in FORCED_REASONS or d.reason is Reason.FORCED_AFTER_HOLD
            if not exempt and not self._expired(d, now_ms):
                return "no longer expired"
            return None
        if floor is None:
            return "no minimum offset to re-check against"
        if d.kind is Kind.CONSUMEQUEUE:
            fresh = BinaryReader(self.settings.store.mapped_file_size_consumequeue).cq_last_offset(
                d.path
            )
            if fresh.value is None or fresh.value >= floor:
                return f"last unit re-read as {fresh.value} ({fresh.problem or 'not below'})"
            return None
        if d.kind is Kind.TIMERLOG:
            size = d.identity.size if d.identity is not None else st.st_size
            fresh = read_timerlog_last_offset(d.path, size)
            if fresh.value is None or fresh.value >= floor:
                return f"last unit re-read as {fresh.value} ({fresh.problem or 'not below'})"
            return None
        header, _, problem = read_index_header(d.path)
        if header is None or header.end_phy_offset >= floor:
            return f"header re-read: {problem or 'endPhyOffset not below the minimum'}"
        return None

    def journal_fields(self, decision: Decision, now_ms: int) -> dict[str, object]:
        d = decision
        loss = {} if d.loss is None else {"loss": d.loss.as_dict()}
        return {
            **loss,
            # Data removed before fileReservedTime: a forced deletion, or a held file forced
            # out that was not expired either.
            "forced": d.reason in FORCED_REASONS
            or (
                d.kind is Kind.COMMITLOG
                and d.reason is Reason.FORCED_AFTER_HOLD
                and not self._expired(d, now_ms)
            ),
            "file_reserved_time_hours": self.settings.store.file_reserved_time_hours,
        }


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a walk over every queue builds 100k+ objects.

    The collector would otherwise run full collections over the ever larger heap (a third of
    a cold round's time on 100,000 queues). The round's objects are freed by reference
    counting; what survives it (the memo, the listings) is moved to the permanent generation
    (``gc.freeze``) so the first collection after the round does not walk it either. The
    objects frozen by the previous round are handed back to the collector first, so cyclic
    garbage among them is still found, one round late.
    """
    was = gc.isenabled()
    gc.disable()
    gc.unfreeze()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()


def commitlog_run(cl: CommitLogPlan, settings: Settings[RocketMQStore]) -> Run:
    """deleteExpiredFileByTime's pacing (spec §4.5): sleep after a deletion unless the batch
    is full or no candidate followed it; at most ``deleteFileBatchMax`` files."""
    candidates = [d for d in cl.decisions if d.reason is not Reason.NEWEST_FILE]
    deletions: list[Decision] = []
    for d in candidates:
        if not d.delete:
            break
        deletions.append(d)
    return Run(
        tuple(deletions),
        pause_between_ms=settings.store.delete_commitlog_files_interval_ms,
        pause_after_last=len(deletions) < len(candidates),
        batch_max=settings.store.delete_file_batch_max,
    )


def queue_runs(qp: QueuesPlan, settings: Settings[RocketMQStore]) -> list[Run]:
    """Each queue oldest-first with a sleep after each queue that lost a file (upstream's
    deleteConsumeQueueFilesInterval); then the index list, unpaced."""
    runs = [
        Run(q.deleted, pause_after_ms=settings.store.delete_consumequeue_files_interval_ms,
            floor=qp.min_offset)
        for q in qp.queues
        if q.deleted
    ]  # fmt: skip
    index: list[Decision] = []
    for d in qp.index:
        if not d.delete:
            break
        index.append(d)
    if index:
        runs.append(Run(tuple(index), floor=qp.min_offset))
    return runs


def timerlog_run(tl: TimerLogPlan, settings: Settings[RocketMQStore]) -> Run | None:
    """The timer log's prefix, oldest first, as one more queue of the ConsumeQueue pass: a
    pause of ``deleteConsumeQueueFilesInterval`` after it when it deleted anything."""
    prefix: list[Decision] = []
    for d in tl.decisions:
        if not d.delete:
            break
        prefix.append(d)
    if not prefix:
        return None
    return Run(
        tuple(prefix),
        pause_after_ms=settings.store.delete_consumequeue_files_interval_ms,
        floor=tl.min_offset,
    )


def actual_min_offset(cl: CommitLogPlan, outcomes: list[Outcome]) -> int:
    """The CommitLog minimum after what really happened, not after what was planned."""
    gone = {o.decision.path for o in outcomes if o.deleted}
    for d in cl.decisions:
        if d.path not in gone:
            return d.start_offset if d.start_offset is not None else -1
    return -1


def loss_status(progress: Progress, losses: tuple[Loss, ...]) -> dict[str, object]:
    """The last round's deletions' loss, summed per group, for ``status``."""
    per_group: dict[tuple[str, str, str], int] = {}
    for loss in losses:
        for g in loss.groups:
            key = (g.group, g.topic, str(g.state))
            per_group[key] = per_group.get(key, 0) + g.messages
    return {
        "progress": str(progress),
        "messages": sum(loss.messages for loss in losses),
        "groups": [
            {"group": g, "topic": t, "messages": n, "state": st}
            for (g, t, st), n in sorted(per_group.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "timers": sum(loss.timers for loss in losses),
        "half_messages": sum(loss.half_messages for loss in losses),
        "delay_messages": sum(n for loss in losses for _, n in loss.delay_levels),
    }
