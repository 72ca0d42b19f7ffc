"""Kafka log dirs behind the engine's interface (``engine.kind.StoreKind``). A sketch: the
wiring into ``Settings``, ``kinds.kind_for``, the CLI and the daemon is the lead's.

A round, per log dir: check it is there and a Kafka log dir (missing, unmounted or unreadable:
an error of that dir, nothing created in it, the other dirs go on), take ``.lock`` (held for
the whole round, so the broker cannot start mid-deletion; held by another process → the dir is
plan-only and its would-be deletions are ``broker_running``), scan, read per-topic configs (the
KRaft metadata log, else the overrides file), plan every partition with
``policy.plan_partition``, then for each partition: roll if everything goes, hand the ``.log``
prefix to ``Round.hold``/``Round.execute``, remove the companions of the ``.log`` files that
really went, truncate the leader-epoch cache; finally rewrite ``log-start-offset-checkpoint``
and release the locks.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from retentiond.config.settings import Settings, StoreSection
from retentiond.engine.decision import Decision
from retentiond.engine.disk import PathUsage, measure_path, usage_record
from retentiond.engine.execute import open_dir_below
from retentiond.engine.figures import DiskFigures, KindStats, StoreStats
from retentiond.engine.forked import Forked, WorkerFailed
from retentiond.engine.holds import HeldFile
from retentiond.engine.kind import BrokerMain, Cadence, RoundServices, StatusDoc
from retentiond.engine.loss import GroupRisk, Progress, risk_status
from retentiond.engine.rescue import RescueReport, RescueRequest
from retentiond.engine.runs import Run
from retentiond.journal.rollup import IdleView
from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.config import (
    DEFAULT_DISK_WARNING_RATIO,
    KafkaServer,
    broker_retention,
    kafka_of,
)
from retentiond.kinds.kafka.leftovers import is_orphan, plan_leftover, remove_partition_dir
from retentiond.kinds.kafka.metadata import METADATA_PARTITION_DIR, MetadataError, read_metadata
from retentiond.kinds.kafka.offline import (
    LogDirLock,
    OfflineResult,
    finish_partition,
    prepare_partition,
    remove_companions,
    write_log_start_checkpoint,
)
from retentiond.kinds.kafka.offsets import TOPIC as OFFSETS_TOPIC
from retentiond.kinds.kafka.offsets import (
    KafkaProgress,
    group_risks,
    keep_unconsumed,
    read_progress,
    with_loss,
)
from retentiond.kinds.kafka.parallel import ChildRescue, PlanHalf, Split, quiet, split_for, way
from retentiond.kinds.kafka.plan import KafkaPlan, LogDirPlan, known_largest
from retentiond.kinds.kafka.policy import PartitionPlan, TopicConfig, keep_all, plan_partition
from retentiond.kinds.kafka.report import PlanText, plan_text, render_plan
from retentiond.kinds.kafka.rescue import (
    Guard,
    LossOf,
    Selection,
    document,
    half_of,
    report_lines,
    segment_allocated,
    select,
)
from retentiond.kinds.kafka.scan import LogDirSnapshot, Partition, scan_log_dir
from retentiond.kinds.kafka.storecheck import log_dir_problem
from retentiond.kinds.kafka.voice import KafkaVoice
from retentiond.reasons import KAFKA_DELETE_REASONS, KAFKA_DIR_REASONS, FileKind, Kind, Reason
from retentiond.text.units import zone_name

DISK_WARNING_RATIO = DEFAULT_DISK_WARNING_RATIO  # retentiond.kafka.diskWarningRatio's default
DISK_STATES = ("ok", "warning_level")  # RocketMQ's over_max_ratio and clean_forcibly: never


def _disk_entry(usage: PathUsage) -> dict[str, object]:
    """One log dir's filesystem in ``status`` (``usage_record`` without the role)."""
    return {k: v for k, v in usage_record("log_dir", usage).items() if k != "role"}


def disk_state(ratios: Sequence[float | None], limit: float) -> str | None:
    """The log dirs' disk state: ``warning_level`` when one of them is above ``limit``
    (``retentiond.kafka.diskWarningRatio``; strictly, as RocketMQ's warning level), ``ok``
    when every one was measured and none is, None while a dir cannot be measured and none is
    above (a dir we cannot see is never called ok). The metrics (``disk_figures``) and the
    journal's folded rounds (``idle_view``) both judge with it."""
    if any(r is not None and r > limit for r in ratios):
        return "warning_level"
    if all(r is not None for r in ratios):
        return "ok"
    return None


_PROGRESS_TOPICS = frozenset({OFFSETS_TOPIC})  # every process of a plan reads them


class _Whole(Exception):
    """A rescue made of two halves that do not fit together: one process does it all."""


def _errors(snapshot: KafkaSnapshot, planned: Sequence[LogDirPlan]) -> list[str]:
    """A plan's errors: the log dirs', their partitions' and the metadata log's."""
    errors = [*snapshot.errors, *(e for p in planned for e in p.errors)]
    if snapshot.metadata_error:
        errors.append(snapshot.metadata_error)
    return errors


def _nothing(_entry: str, _name: fm.PartitionDirName) -> bool:
    return False


_NOTHING = _nothing


def _path_of(p: Partition) -> str:
    return p.path


@dataclass(frozen=True)
class _NoHolds:
    """Kafka has no forcible interval: a segment held by another process than the broker is
    simply kept (the broker's own holds are the lock)."""

    def interval(self, kind: FileKind) -> int:
        return 2**62


@dataclass(frozen=True)
class KafkaSnapshot:
    now_ms: int
    log_dirs: tuple[tuple[LogDirSnapshot, bool], ...]  # (snapshot, we hold its lock)
    overrides: Mapping[str, Mapping[str, str]] | None
    broker_layers: tuple[Mapping[str, str], ...]
    metadata_source: str | None
    metadata_error: str | None
    errors: tuple[str, ...]
    # the topics the metadata log knows, by name and by id (None: no readable metadata log,
    # so no partition can be told an orphan)
    topic_names: frozenset[str] | None = None
    topic_ids: frozenset[bytes] | None = None


class Kafka(KafkaVoice):
    file_kinds: tuple[Kind, ...] = (Kind.KAFKA_SEGMENT, Kind.PARTITION_DIR)
    phases: tuple[str, ...] = (Kind.KAFKA_SEGMENT.value,)
    deletion_series: tuple[tuple[Kind, Reason], ...] = (
        *((Kind.KAFKA_SEGMENT, r) for r in sorted(KAFKA_DELETE_REASONS)),
        *((Kind.PARTITION_DIR, r) for r in sorted(KAFKA_DIR_REASONS)),
    )
    # Kafka's main class in ZooKeeper and KRaft mode alike.
    brokers: tuple[BrokerMain, ...] = (
        BrokerMain("kafka", "a Kafka broker (kafka.Kafka)", classes=frozenset({"kafka.Kafka"})),
    )

    def __init__(self, settings: Settings[KafkaServer], server: KafkaServer | None = None) -> None:
        self.settings = settings
        self.server = server if server is not None else settings.store
        self.locks = {d: LogDirLock(d) for d in self.server.log_dirs}
        self.last_plan_only: list[str] = []
        self.rescue_request: RescueRequest | None = None  # set for `retentiond rescue`
        # consumer progress for rescue's order (None: unknown, by age alone): ``rescue.LossOf``
        self.rescue_loss: LossOf | None = None
        self._rescue_state: tuple[Selection | None, RescueRequest, bool, list[str]] | None = None
        self.last_progress: KafkaProgress | None = None  # the consumer progress last read
        self.last_risk: tuple[GroupRisk, ...] | None = None  # store_stats' group_risk
        # group -> (digest of its committed offsets, when this object first saw them so):
        # retentiond.guard.staleAfter as the daemon observes it (a fresh object, as plan's,
        # has seen no group go stale)
        self.group_moves: dict[str, tuple[int, int]] = {}
        # the log dirs the last scan could not use (missing, unmounted, unreadable), and why
        self.last_dir_errors: dict[str, str] = {}
        # each log dir's filesystem as the last scan found it, before any deletion (as
        # RocketMQ's round judges its disk): the round record's ``disk``
        self.last_disk: tuple[PathUsage, ...] = ()
        # the largest timestamp of each segment being deleted, where the plan knows it: the
        # journal's age_ms counts from it, as the plan's does (``journal_fields``)
        self._largest: dict[str, int] = {}
        # a plan or dry-run rescue made in two processes (``parallel``): decided by the scan
        self._split: Split | None = None

    def reconfigure(self, settings: Settings[StoreSection]) -> None:
        """A reload: new retention values from the next round on. The log dirs cannot
        change while running (``log.dirs`` is a restart key), so the locks stay."""
        self.settings = kafka_of(settings)
        self.server = self.settings.store

    @property
    def disk_warning_ratio(self) -> float:
        """The used ratio of a log dir's filesystem above which its disk is at the warning
        level (``retentiond_disk_state{state="warning_level"}``):
        ``retentiond.kafka.diskWarningRatio``."""
        return self.server.disk_warning_ratio

    # ---- where its files are ------------------------------------------------------------
    def directories(self) -> tuple[str, ...]:
        dirs = self.server.log_dirs
        return tuple(sorted({*dirs, *(os.path.realpath(d) for d in dirs)}))

    def owner_lock(self) -> str:
        """The ``.lock`` of the first log dir whose lock is not ours this round: a running
        broker locks every one of its dirs, so that one names it. When the round holds them
        all, the first dir's (the engine does not count our own hold as a broker)."""
        for d in self.server.log_dirs:
            if not self.locks[d].held:
                return os.path.join(d, fm.LOCK_FILE)
        return os.path.join(self.server.log_dirs[0], fm.LOCK_FILE)

    def hold_intervals(self) -> _NoHolds:
        return _NoHolds()

    # ---- a round ------------------------------------------------------------------------
    def scan(self, now_ms: int, *, executes: bool = True) -> KafkaSnapshot:
        """A real round takes each free log dir's ``.lock`` here and keeps it to the end of
        the round: the broker cannot start mid-deletion, and the checkpoints read now are the
        ones rewritten. A plan or a dry run only probes it (taken and let go at once): holding
        it for a long scan would make a broker starting meanwhile fail on the lock."""
        errors: list[str] = []
        dirs = []
        self.last_dir_errors = {}
        split = self._split = self._split_for(executes)
        self.last_disk = tuple(measure_path(d) for d in self.server.log_dirs)
        for d in self.server.log_dirs:
            # A dir missing, unmounted or unreadable is that dir's error, asked before its
            # .lock is taken (which would create the file): nothing is created in it, and the
            # other dirs are cleaned.
            why = log_dir_problem(d)
            if why is not None:
                self.last_dir_errors[d] = why
                errors.append(f"{d}: {why}")
                continue
            try:
                locked = self.locks[d].acquire()
                if locked and not executes:
                    self.locks[d].release()
                # split: the root and the consumer offsets only; plan_round does the rest
                owned, root = (None, None) if split is None else (_NOTHING, split.roots.get(d))
                dirs.append((scan_log_dir(d, owned, _PROGRESS_TOPICS, root=root), locked))
            except OSError as e:
                self.last_dir_errors[d] = str(e)
                errors.append(f"{d}: {e}")
        overrides: Mapping[str, Mapping[str, str]] | None = None
        layers: tuple[Mapping[str, str], ...] = ()
        source = error = None
        names: frozenset[str] | None = None
        ids: frozenset[bytes] | None = None
        meta_dir = os.path.join(self.server.metadata_dir, METADATA_PARTITION_DIR)
        if self.server.metadata_dir in self.last_dir_errors:
            # The metadata log's dir cannot be read: the topic configs are unknown, as for an
            # unreadable metadata log (never "no KRaft metadata here").
            error = f"{meta_dir}: the metadata log's log dir cannot be read"
            overrides = {}
        elif os.path.isdir(meta_dir):
            try:
                state = read_metadata(meta_dir)
                overrides = state.topic_overrides()
                layers = tuple(state.broker_layers(self.server.node_id))
                source = ", ".join(state.sources)
                names, ids = frozenset(state.topics.values()), frozenset(state.topics)
            except MetadataError as e:
                error = str(e)  # every topic unknown (unless the overrides file names it)
                overrides = {}
        elif self.server.topic_overrides:
            source = self.server.retentiond.get("kafka.topicOverrides")
        return KafkaSnapshot(
            now_ms, tuple(dirs), overrides, layers, source, error, tuple(errors), names, ids
        )

    def _config_for(self, snap: KafkaSnapshot, topic: str) -> TopicConfig | None:
        return self.server.config_for(topic, snap.overrides, snap.broker_layers)

    def _split_for(self, executes: bool) -> Split | None:
        """Whether this plan or dry-run rescue is made in two processes (``parallel``): never
        for a real round, nor for a rescue that consumer progress or the guard orders or
        that goes beyond the retention."""
        if executes:
            return None
        request = self.rescue_request
        if request is not None and (
            request.beyond_retention
            or self.rescue_loss is not None
            or self.settings.daemon.guard_unconsumed == "keep"
        ):
            return None
        return split_for(self.server.log_dirs, rescue=request is not None)

    def plan_round(self, snapshot: KafkaSnapshot, rnd: RoundServices) -> KafkaPlan:
        rnd.phase(Kind.KAFKA_SEGMENT.value)
        split, self._split = self._split, None
        configs: dict[str, TopicConfig | None] = {}  # a topic's config, worked out once a round

        def config_for(topic: str) -> TopicConfig | None:
            if topic not in configs:
                configs[topic] = self._config_for(snapshot, topic)
            return configs[topic]

        progress = self.consumer_progress(snapshot, rnd.now_ms, remember=rnd.remembers)
        keep = self.settings.daemon.guard_unconsumed == "keep" and progress.readable
        other_text = None
        root = snapshot
        try:
            try:
                if split is None or rnd.executes:
                    planned = self._plan_dirs(snapshot, rnd, config_for, progress, keep)
                    theirs = None
                else:
                    for topic in sorted(split.topics):
                        config_for(topic)  # every topic's, for the plan's retention_ms
                    snapshot, planned, other_text, theirs = self._plan_split(
                        split, root, rnd, config_for, progress, keep
                    )
                if self.rescue_request is not None:
                    self._rescue(self.rescue_request, snapshot, planned, rnd, config_for, theirs)
            except _Whole:  # a rescue made of halves that do not fit: one process does it
                way("one process, after two did not fit")
                other_text = None
                snapshot = self._rescan(root, None)
                planned = self._plan_dirs(snapshot, rnd, config_for, progress, keep)
                if self.rescue_request is not None:
                    self._rescue(self.rescue_request, snapshot, planned, rnd, config_for)
        finally:
            for lock in self.locks.values():
                lock.release()
        self.last_plan_only = [p.path for p in planned if not p.locked]
        return self._kafka_plan(snapshot, planned, rnd, configs, progress, other_text)

    def _kafka_plan(
        self,
        snapshot: KafkaSnapshot,
        planned: list[LogDirPlan],
        rnd: RoundServices,
        configs: Mapping[str, TopicConfig | None],
        progress: KafkaProgress,
        other_text: tuple[PlanText | None, PlanText] | None = None,
    ) -> KafkaPlan:
        return KafkaPlan(
            now_ms=rnd.now_ms,
            config_hash=self.settings.config_hash,
            log_dirs=tuple(planned),
            metadata_source=snapshot.metadata_source,
            metadata_error=snapshot.metadata_error,
            manual=rnd.manual,
            dry_run=not rnd.executes,
            errors=tuple(_errors(snapshot, planned)),
            timezone=zone_name(self.settings.daemon.timezone),
            zone=self.settings.daemon.timezone,
            store=tuple(self.server.log_dirs),
            retention_ms={
                t: c.retention_ms
                for t, c in configs.items()
                if c is not None and c.delete and c.retention_ms >= 0
            },
            time_index_compat=self.server.time_index_compat,
            progress=progress,
            guard_unconsumed=self.settings.daemon.guard_unconsumed == "keep",
            other_text=other_text,
        )

    def _plan_dirs(
        self,
        snapshot: KafkaSnapshot,
        rnd: RoundServices,
        config_for: Callable[[str], TopicConfig | None],
        progress: KafkaProgress,
        keep: bool,
    ) -> list[LogDirPlan]:
        """Each log dir's partitions planned, and in a real round carried out."""
        planned = []
        for ld, locked in snapshot.log_dirs:
            parts, leftovers = self._plan_log_dir(snapshot, ld, locked, rnd, config_for)
            parts = tuple(with_loss(p, progress) for p in parts)
            guarded = False
            if keep:
                yielded = self.guard_yields(ld.path)
                parts = tuple(keep_unconsumed(p, yielded) for p in parts)
                # a running broker's own retention deletes whatever the lag: in a
                # plan-only dir nothing is guarded (its would-be deletions are kept as
                # broker_running, and its groups' records count as at risk)
                guarded = yielded is None and locked
            # A plan or a dry run carries nothing out: the holds it would look up change
            # nothing in what it returns (the partitions' own plans).
            failed: tuple[str, ...] = ()
            if locked and not ld.errors and rnd.executes and self.rescue_request is None:
                failed = self._carry_out(ld, parts, leftovers, rnd)
            planned.append(
                LogDirPlan(ld.path, locked, parts, ld, (*ld.errors, *failed), leftovers, guarded)
            )
        return planned

    def _rescan(
        self, snapshot: KafkaSnapshot, owned: Callable[[str, fm.PartitionDirName], bool] | None
    ) -> KafkaSnapshot:
        """``snapshot``'s log dirs scanned again, their partition dirs that ``owned`` accepts
        (None: all of them); their roots' listings and checkpoints as ``snapshot`` read
        them."""
        dirs = []
        errors = list(snapshot.errors)
        for ld, locked in snapshot.log_dirs:
            try:
                dirs.append((scan_log_dir(ld.path, owned, _PROGRESS_TOPICS, like=ld), locked))
            except OSError as e:
                self.last_dir_errors[ld.path] = str(e)
                errors.append(f"{ld.path}: {e}")
        return replace(snapshot, log_dirs=tuple(dirs), errors=tuple(errors))

    def _plan_split(
        self,
        split: Split,
        root: KafkaSnapshot,
        rnd: RoundServices,
        config_for: Callable[[str], TopicConfig | None],
        progress: KafkaProgress,
        keep: bool,
    ) -> tuple[
        KafkaSnapshot, list[LogDirPlan], tuple[PlanText | None, PlanText] | None, ChildRescue | None
    ]:
        """This process's half planned while a forked child plans the other (``parallel``):
        the snapshot and plans of this half, the child's part of the text (``plan``) or of
        the rescue; the child's half, if its text is not used or it failed, planned here
        when first needed (``LogDirPlan.complete``)."""

        def work() -> PlanHalf | ChildRescue:
            quiet()
            snap = self._rescan(root, split.child)
            planned = self._plan_dirs(snap, rnd, config_for, progress, keep)
            errors = _errors(snap, planned)
            if split.rescue:
                usable = [p for p in planned if not p.errors]
                return ChildRescue(
                    errors,
                    sum(len(p.leftovers) for p in planned),
                    {p.path: half_of(p, self.server, config_for, rnd.now_ms) for p in usable},
                    {p.path: [f for q in p.own for f in q.partition.foreign] for p in planned},
                )
            plan = self._kafka_plan(snap, planned, rnd, {}, progress)
            return PlanHalf(errors, plan_text(plan))

        try:
            child: Forked[PlanHalf | ChildRescue] | None = Forked(work)
        except WorkerFailed:
            child = None
        snapshot = self._rescan(root, split.parent)
        planned = self._plan_dirs(snapshot, rnd, config_for, progress, keep)
        own_text = None
        known: dict[str, int] = {}
        if split.rescue:
            # while the child is at work: the space each segment this half's plan hands
            # over holds (what the rescue may take of it), then its foreign files (which
            # reuse the listings the first made)
            for p in planned:
                if not p.errors:
                    for q in p.own:
                        for d in q.deletions:
                            assert d.start_offset is not None
                            known[d.path] = segment_allocated(q.partition, d.start_offset)
                _ = p.foreign
        elif child is not None and not child.ready():
            # this half's part of plan's text while the child is at work (plan --json and
            # --all do not use it: they are made from the whole)
            own_text = plan_text(self._kafka_plan(snapshot, planned, rnd, {}, progress), own=True)
        got = None
        if child is not None:
            try:
                got = child.result()
            except WorkerFailed:
                got = None
        errors = _errors(snapshot, planned)
        # the child's half, planned here when something asks for it
        theirs: dict[str, tuple[tuple[PartitionPlan, ...], tuple[Decision, ...]]] = {}
        their_errors: list[list[str]] = []

        def plan_theirs(path: str) -> tuple[tuple[PartitionPlan, ...], tuple[Decision, ...]]:
            if not their_errors:
                snap = self._rescan(root, split.child)
                done = self._plan_dirs(snap, rnd, config_for, progress, keep)
                their_errors.append(_errors(snap, done))
                theirs.update((p.path, (p.own, p.own_leftovers)) for p in done)
            return theirs.get(path, ((), ()))

        for p in planned:
            p.complete = functools.partial(plan_theirs, p.path)
        if split.rescue and isinstance(got, ChildRescue) and got.errors == errors:
            way("two processes")
            got.known = known
            return snapshot, planned, None, got
        if isinstance(got, PlanHalf) and got.errors == errors and isinstance(got.text, PlanText):
            way("two processes")
            return snapshot, planned, (own_text, got.text), None
        if split.rescue:
            raise _Whole("the child's half of the rescue did not come or does not fit")
        plan_theirs("")  # the child's half, here, now
        if their_errors[0] == errors:
            way("the child's half here")
            return snapshot, planned, None, None
        way("one process, after two did not fit")
        snapshot = self._rescan(root, None)
        return snapshot, self._plan_dirs(snapshot, rnd, config_for, progress, keep), None, None

    def guard_yields(self, log_dir: str) -> str | None:
        """Disk safety wins over ``retentiond.guard.unconsumed: keep``: when the log dir's
        filesystem is above ``retentiond.kafka.diskWarningRatio`` (strictly, as its
        ``warning_level`` disk state), what the guard would keep goes, and this says why.
        None (the guard holds) below it, and while the ratio cannot be measured."""
        ratio = measure_path(log_dir).ratio
        limit = self.disk_warning_ratio
        if ratio is None or ratio <= limit:
            return None
        return (
            f"guard yielded: log dir used ratio {ratio:g} above "
            f"retentiond.kafka.diskWarningRatio {limit:g}"
        )

    def _stale_groups(self, progress: KafkaProgress, now_ms: int, remember: bool) -> frozenset[str]:
        """Groups whose committed offsets have not moved for ``guard.staleAfter`` as this
        object has watched them, round after round. A group whose offsets were not read this
        round is forgotten (its clock starts again when it is seen). ``remember`` False (a
        plan) leaves the memory as it was."""
        seen: dict[str, tuple[int, int]] = {}
        for group, digest in progress.signatures().items():
            old = self.group_moves.get(group)
            seen[group] = old if old is not None and old[0] == digest else (digest, now_ms)
        if remember:
            self.group_moves = seen
        after = self.settings.daemon.guard_stale_after_ms
        return frozenset(g for g, (_, since) in seen.items() if now_ms - since >= after)

    def consumer_progress(
        self, snapshot: KafkaSnapshot, now_ms: int | None = None, *, remember: bool = False
    ) -> KafkaProgress:
        """The committed offsets of the ``__consumer_offsets`` partitions in the log dirs
        (``offsets``), read every round; a segment that cannot be read is a problem of the
        plan, never a reason to delete more. Groups whose offsets have not moved for
        ``retentiond.guard.staleAfter`` are ``stale`` (``_stale_groups``)."""
        found = []
        for ld, _locked in snapshot.log_dirs:
            parts = ld.partitions
            if ld.extra:  # those another process plans, read here too, in the scan's order
                parts = tuple(sorted((*parts, *ld.extra), key=_path_of))
            for p in parts:
                if p.topic != OFFSETS_TOPIC or p.name.special is not None or not len(p):
                    continue
                lso = (ld.log_start_offsets or {}).get((p.topic, p.partition), 0)
                found.append((p.partition, [s.log_path for s in p.segments], lso))
        progress = read_progress(
            found, self.server.offsets_topic_partitions, self.settings.daemon.guard_ignore_groups
        )
        if now_ms is not None and progress.readable:
            progress = progress.with_stale(self._stale_groups(progress, now_ms, remember))
        self.last_progress = progress
        return progress

    def _plan_log_dir(
        self,
        snapshot: KafkaSnapshot,
        ld: LogDirSnapshot,
        locked: bool,
        rnd: RoundServices,
        config_for: Callable[[str], TopicConfig | None],
    ) -> tuple[tuple[PartitionPlan, ...], tuple[Decision, ...]]:
        """Every partition's plan, and the verdicts on the leftover dirs as wholes."""
        server = self.server
        names, ids = snapshot.topic_names, snapshot.topic_ids
        parts: list[PartitionPlan] = []
        leftovers: list[Decision] = []
        for p in ld.partitions:
            orphan = names is not None and ids is not None and is_orphan(p, names, ids)
            if orphan:
                parts.append(
                    keep_all(
                        p,
                        Reason.ORPHAN_PARTITION,
                        "its topic id is not in the metadata log: removed as a whole or kept",
                    )
                )
            else:
                parts.append(
                    plan_partition(
                        p,
                        config_for(p.topic),
                        now_ms=rnd.now_ms,
                        high_watermarks=ld.high_watermarks,
                        log_start_offsets=ld.log_start_offsets,
                        cleaner_enabled=server.cleaner_enable,
                        broker_running=not locked,
                        time_index_compat=server.time_index_compat,
                    )
                )
            if orphan or p.name.special is not None:
                d = plan_leftover(
                    p,
                    now_ms=rnd.now_ms,
                    delete_delay_ms=server.segment_delete_delay_ms,
                    orphan=orphan,
                    remove_orphans=server.remove_orphans,
                    remove_stray=server.remove_stray,
                    broker_running=not locked,
                )
                if d is not None:
                    leftovers.append(d)
        return tuple(parts), tuple(leftovers)

    def _remove_leftovers(
        self, leftovers: tuple[Decision, ...], rnd: RoundServices, gone: set[str]
    ) -> None:
        """Each leftover dir that goes, on its own: one that cannot go keeps no other. Not
        through ``Round.hold``: a directory cannot be leased to prove nobody has it open,
        and what guards a leftover is the log dir's ``.lock``, held by this round."""
        for d in leftovers:
            if d.delete:
                gone.update(o.decision.path for o in rnd.execute(Run((d,))) if o.deleted)

    # ---- `retentiond rescue` (engine.rescue.Rescues) -------------------------------------
    def held_store_dirs(self) -> list[str]:
        """The log dirs whose ``.lock`` another process holds now (a running broker); a
        log dir that cannot be opened is the round's store error, not a holder."""
        held = []
        for d in self.server.log_dirs:
            lock = self.locks[d]
            if lock.held:
                continue
            try:
                if lock.acquire():
                    lock.release()
                else:
                    held.append(d)
            except OSError:
                continue
        return held

    def begin_rescue(self, request: RescueRequest | None) -> None:
        self.rescue_request = request
        self._rescue_state = None

    def rescue_report(self) -> RescueReport:
        state = self._rescue_state
        if state is None:
            return RescueReport(("no rescue ran",), False)
        selection, request, dry_run, held = state
        if held:
            lines = tuple(
                f"{d}: another process (the broker) holds its .lock: rescue runs only on a "
                "stopped broker; nothing was deleted"
                for d in held
            )
            return RescueReport(lines, False, tuple(held))
        assert selection is not None
        lines2, reached = report_lines(selection, request, dry_run=dry_run)
        doc = functools.partial(document, selection, request, dry_run=dry_run)
        return RescueReport(tuple(lines2), reached, (), doc)

    def _rescue(
        self,
        request: RescueRequest,
        snapshot: KafkaSnapshot,
        planned: list[LogDirPlan],
        rnd: RoundServices,
        config_for: Callable[[str], TopicConfig | None],
        theirs: ChildRescue | None = None,  # the other half of a dry run (``parallel``)
    ) -> None:
        """Select what goes (``rescue.select``) and, in a real round, carry it out: the
        leftovers, then per partition one prefix (the configured retention's and the
        rescue's together), with the checkpoints updated as a round updates them. Nothing
        at all while another process holds any of the log dirs."""
        held = [p.path for p in planned if not p.locked]
        if held:
            if theirs is not None:
                # the round still reports the whole store's foreign files: one process
                raise _Whole("a broker holds a log dir")
            self._rescue_state = (None, request, not rnd.executes, held)
            return
        usable = [p for p in planned if not p.errors]
        loss_of = self.rescue_loss
        progress = self.last_progress
        if loss_of is None and progress is not None and progress.progress is Progress.KNOWN:
            # every __consumer_offsets partition read: consumed segments can be told apart
            def loss_of(topic: str, partition: int, base: int, upper: int) -> int | None:
                assert progress is not None
                return progress.loss(topic, partition, base, upper).messages

        guard = None
        if (
            self.settings.daemon.guard_unconsumed == "keep"
            and progress is not None
            and progress.readable
        ):
            guard = Guard(progress.protects, self.disk_warning_ratio)
        if theirs is not None:
            if loss_of is not None or guard is not None or request.beyond_retention or rnd.executes:
                raise _Whole("only a dry run taking by the plan's order is made of halves")
            self._rescue_half(theirs, request, planned, usable, config_for, rnd.now_ms)
            return
        selection = select(usable, request, self.server, config_for, rnd.now_ms, loss_of, guard)
        if rnd.executes:
            snaps = {ld.path: ld for ld, _locked in snapshot.log_dirs}
            gone: set[str] = set()
            for p in usable:
                failed = self._carry_out(
                    snaps[p.path],
                    tuple(selection.partitions.get(p.path, ())),
                    tuple(selection.leftovers.get(p.path, ())),
                    rnd,
                    gone,
                )
                p.errors = (*p.errors, *failed)
            for g in selection.groups:
                for item in g.items:
                    item.gone = item.decision.path in gone
                g.after = measure_path(g.paths[0])
        self._rescue_state = (selection, request, not rnd.executes, [])

    def _rescue_half(
        self,
        theirs: ChildRescue,
        request: RescueRequest,
        planned: list[LogDirPlan],
        usable: list[LogDirPlan],
        config_for: Callable[[str], TopicConfig | None],
        now_ms: int,
    ) -> None:
        """A dry-run rescue of this half of the partitions, the child's half (``theirs``)
        taken among its own, in the scan's order (``parallel``); ``_Whole`` when they do not fit
        together."""
        if theirs.leftovers or set(theirs.halves) != {p.path for p in usable}:
            raise _Whole("the child's half does not fit")
        # this half alone (the whole, planned here, is for whoever reads the plan later)
        mine = [
            LogDirPlan(p.path, p.locked, p.own, (), p.errors, p.own_leftovers, p.guarded)
            for p in usable
        ]
        for p in planned:
            p.add_foreign(theirs.foreign.get(p.path, ()))
        selection = select(
            mine, request, self.server, config_for, now_ms, halves=theirs.halves, known=theirs.known
        )
        self._rescue_state = (selection, request, True, [])

    def _carry_out(
        self,
        ld: LogDirSnapshot,
        parts: tuple[PartitionPlan, ...],
        leftovers: tuple[Decision, ...],
        rnd: RoundServices,
        gone: set[str] | None = None,
    ) -> tuple[str, ...]:
        """Each partition's prefix through the engine (holds, journal, re-check, unlink),
        then what the engine does not know: companions, epochs, the checkpoint. Returns
        what kept a partition's prefix from being carried out (a roll that could not be
        made: nothing of that partition goes, the other partitions go on) and the
        companions or leftovers that could not be removed. Leftover partition dirs go
        first, as the broker removes them first at its start."""
        gone = set() if gone is None else gone  # the paths that really went
        self._remove_leftovers(leftovers, rnd, gone)
        result = OfflineResult(ld.path, True)
        failed: list[str] = []
        lso_entries = dict(ld.log_start_offsets or {})
        changed = False
        for plan in parts:
            prefix = rnd.hold(plan.deletions)
            run = tuple(d for d in prefix if d.delete)
            if not run:
                continue
            self._largest = self._largest_of(plan)
            if rnd.executes:
                try:
                    prepare_partition(plan, result, whole=len(run) == len(plan.deletions))
                except OSError as e:
                    failed.append(
                        f"{plan.partition.path}: nothing deleted (roll or leftovers): {e}"
                    )
                    continue
            outcomes = rnd.execute(Run(run))
            went = [b for o in outcomes if o.deleted and (b := o.decision.start_offset) is not None]
            gone.update(o.decision.path for o in outcomes if o.deleted)
            for base in went:
                remove_companions(plan, base, result)
            changed |= finish_partition(plan, went, lso_entries)
        self._largest = {}
        if changed:
            write_log_start_checkpoint(ld, lso_entries)
        return (*failed, *result.errors)  # the round's errors: logged, counted, shown

    def _largest_of(self, plan: PartitionPlan) -> dict[str, int]:
        """The largest timestamp of each segment ``plan`` deletes, where it is known without
        a read: what the time pass judged (``known_largest``, as ``plan --json`` shows it),
        the batches' largest that ``rescue`` ordered a beyond-retention deletion by."""
        out: dict[str, int] = {}
        compat = self.server.time_index_compat
        for i, d in enumerate(plan.head[: plan.prefix]):
            if not d.delete:
                continue
            if d.reason is Reason.RESCUE_BEYOND_RETENTION:
                s = plan.partition.made[i]
                known = None if s is None else s.known_largest(False)
                ts = None if known is None else known[0]
            else:
                ts = known_largest(plan, i, compat)
            if ts is not None:
                out[d.path] = ts
        return out

    def redelete_candidate(self, now_ms: int, held: Mapping[str, HeldFile]) -> Decision | None:
        return None  # Kafka has no reDeleteHangedFile

    def status(self) -> dict[str, object]:
        return {
            "log_dirs": list(self.server.log_dirs),
            "plan_only_log_dirs": list(self.last_plan_only),
            "groups_at_risk": risk_status(self.last_risk),
            "store_dir_errors": dict(self.last_dir_errors),
        }

    def idle_view(self, record: Mapping[str, Any]) -> IdleView | None:
        """Two Kafka rounds are alike when the same log dirs are plan-only, the per-topic
        configs came from the same source without error, the same verdicts (reason names,
        not counts: a roll adds a kept segment) were given and the disk state is the same.
        The ratio is the fullest log dir's, the state ``warning_level`` or ``ok`` against
        ``thresholds.warning_level_ratio`` (``unknown`` while a dir cannot be measured and
        none is above) -- exactly as ``analytics/tables.py`` reads a Kafka ``round``
        record. A round is never "stuck" (a running broker keeps its own retention). The
        summary carries what a full round says of the kind and the largest number of
        segments a plan-only dir kept that would otherwise have gone."""
        if record.get("metadata_error") is not None:
            return None
        reasons = record.get("reasons") or {}
        plan_only = tuple(record.get("plan_only_log_dirs") or ())
        thresholds = record.get("thresholds") or {}
        limit = thresholds.get("warning_level_ratio", self.disk_warning_ratio)
        ratios = [d.get("ratio") for d in record.get("disk") or ()]
        state = disk_state(ratios, limit) or "unknown"
        measured = [r for r in ratios if r is not None]
        return IdleView(
            state=(plan_only, record.get("metadata_source"), tuple(sorted(reasons)), state),
            disk_state=state,
            ratio=max(measured) if measured else None,
            stuck=False,
            interval_ms=record.get("interval_ms"),
            carried={
                "plan_only_log_dirs": list(plan_only),
                "metadata_source": record.get("metadata_source"),
                "interval_ms": record.get("interval_ms"),
                "reasons": dict(reasons),
                "thresholds": record.get("thresholds"),
            },
            maxima={"broker_running_kept": int(reasons.get("keep:broker_running", 0))},
        )

    def round_fields(self, plan: KafkaPlan, deleted: frozenset[str]) -> dict[str, object]:
        return {
            "plan_only_log_dirs": plan.plan_only_dirs(),
            "metadata_source": plan.metadata_source,
            "metadata_error": plan.metadata_error,
            "reasons": plan.reason_counts(),
            "interval_ms": self.server.retention_check_interval_ms,
            # the same fields as RocketMQ's round, for the fleet job (docs/journal.md)
            "thresholds": {"warning_level_ratio": self.disk_warning_ratio},
            "disk": [usage_record("log_dir", u) for u in self.last_disk],
        }

    # ---- for people and dashboards ------------------------------------------------------
    def render_plan(self, plan: KafkaPlan, *, all_queue_files: bool = False) -> str:
        return render_plan(plan, all_queue_files=all_queue_files)

    def status_fields(self, plan: KafkaPlan, deleted: frozenset[str]) -> dict[str, object]:
        """The plan-only log dirs and the verdict counts; ``disk``: each log dir's filesystem
        as the round found it before deleting (``last_disk``, the round record's figures),
        which ``status_settings`` shows against the warning level."""
        return {
            "plan_only_log_dirs": plan.plan_only_dirs(),
            "reasons": plan.reason_counts(),
            "disk": [_disk_entry(u) for u in self.last_disk],
        }

    def store_stats(
        self, plan: KafkaPlan, deleted: frozenset[str], previous: StoreStats | None
    ) -> StoreStats:
        """What is left after the round. A kept segment the plan never had to examine (behind
        its partition's first kept one) carries no identity: it is stat'ed here, in the
        daemon's round, not in ``plan``."""
        count = size = 0
        oldest: int | None = None
        dirs = KindStats(0, 0, None, plan.now_ms)
        for d in plan.decisions():
            if d.path in deleted:
                continue
            if d.kind is Kind.PARTITION_DIR:
                if d.identity is not None:
                    dirs = KindStats(
                        dirs.files + 1,
                        dirs.bytes + d.identity.size,
                        d.identity.mtime_ms
                        if dirs.oldest_mtime_ms is None
                        else min(dirs.oldest_mtime_ms, d.identity.mtime_ms),
                        plan.now_ms,
                    )
                continue
            ident = d.identity
            if ident is not None:
                bytes_, mtime_ms = ident.size, ident.mtime_ms
            else:
                try:
                    st = os.lstat(d.path)
                except OSError:
                    continue  # gone since the scan: not left
                bytes_, mtime_ms = st.st_size, st.st_mtime_ns // 1_000_000
            count += 1
            size += bytes_
            oldest = mtime_ms if oldest is None else min(oldest, mtime_ms)
        risk = None
        if plan.progress is not None:
            risk = group_risks(
                ((p, ld.guarded) for ld in plan.log_dirs for p in ld.partitions),
                plan.progress,
                plan.now_ms,
                plan.retention_ms,
                plan.expires_ms,
                self.settings.daemon.guard_top_groups,
            )
        self.last_risk = risk
        return StoreStats(
            {
                Kind.KAFKA_SEGMENT: KindStats(count, size, oldest, plan.now_ms),
                Kind.PARTITION_DIR: dirs,
            },
            group_risk=risk,
        )

    def disk_figures(self, settings: Settings[StoreSection], now_ms: int) -> DiskFigures:
        """Each log dir's filesystem, and the disk state: ``warning_level`` when one of them is
        above ``disk_warning_ratio`` (as RocketMQ's warning level, strictly above), ``ok`` when
        every one was measured and none is, no state at all while a dir cannot be measured
        and none is above (a dir we cannot see is never called ok)."""
        paths = tuple(("log_dir", measure_path(d)) for d in self.server.log_dirs)
        limit = self.disk_warning_ratio
        return DiskFigures(
            paths,
            state=disk_state([u.ratio for _, u in paths], limit),
            states=DISK_STATES,
            thresholds=(("warning_level", limit),),
        )

    def phases_succeeded(self, plan: KafkaPlan) -> tuple[str, ...]:
        return () if plan.errors else self.phases

    def cadence(self, settings: Settings[StoreSection]) -> Cadence:
        """log.retention.check.interval.ms; the retry interval is the default one."""
        return Cadence(settings.round_interval_ms, settings.retry_interval_ms)

    def status_settings(
        self, settings: Settings[StoreSection], scan: StatusDoc | None
    ) -> dict[str, object]:
        """Kafka has no hour of day (``delete_when`` is null). ``disk``: each log dir's
        filesystem as the last round found it (null before the first), the disk state those
        figures give against ``retentiond.kafka.diskWarningRatio`` in force (as
        ``retentiond_disk_state``: ``warning_level`` when a dir is strictly above it, ``ok``
        when every dir was measured and none is, null otherwise) and that ratio."""
        limit = kafka_of(settings).store.disk_warning_ratio
        measured = (scan or {}).get("disk")
        dirs = measured if isinstance(measured, list) else None
        state = None
        if dirs is not None:
            ratios = [d.get("ratio") if isinstance(d, Mapping) else None for d in dirs]
            state = disk_state([r if isinstance(r, float) else None for r in ratios], limit)
        return {
            "delete_when": None,
            "disk": {"log_dirs": dirs, "state": state, "warning_level_ratio": limit},
        }

    def log_fields(self, scan: StatusDoc, manual_rounds_left: int) -> dict[str, object]:
        """What the scan reported (its plan-only log dirs), the verdict counts and the disk
        figures left out."""
        return {k: v for k, v in scan.items() if k not in ("reasons", "disk")}

    def info_labels(self, settings: Settings[StoreSection]) -> dict[str, str]:
        """The broker-wide retention (a topic's own config may differ)."""
        server = kafka_of(settings).store
        try:
            broker = broker_retention(server.broker_props, server.path)
        except ValueError:  # validated at load; a scrape never fails on it anyway
            return {}
        return {
            "log_retention_ms": str(broker.retention_ms),
            "log_retention_bytes": str(broker.retention_bytes),
            "log_cleanup_policy": ",".join(sorted(broker.cleanup_policy)),
        }

    def reserved_time_s(self, settings: Settings[StoreSection]) -> float | None:
        return None  # retention is per topic

    def plan_only_notes(self, plan: KafkaPlan) -> list[str]:
        """Nothing may go from a log dir while its broker runs: say so for each."""
        return [
            f"plan-only: {d}: another process (the broker) holds its .lock; "
            "nothing was deleted there"
            for d in plan.plan_only_dirs()
        ]

    # ---- just before an unlink ----------------------------------------------------------
    def open_parent(self, decision: Decision) -> int:
        """A segment sits in a partition dir directly under a configured log dir; a partition
        dir removed whole, directly in one."""
        if decision.kind is Kind.PARTITION_DIR:
            log_dir = os.path.dirname(decision.path)
            if log_dir not in self.server.log_dirs:
                raise PermissionError(f"{decision.path} is not in a configured log dir")
            return open_dir_below(log_dir)
        part_dir = os.path.dirname(decision.path)
        log_dir = os.path.dirname(part_dir)
        if log_dir not in self.server.log_dirs or decision.kind is not Kind.KAFKA_SEGMENT:
            raise PermissionError(f"{part_dir} is not a partition dir of a configured log dir")
        return open_dir_below(log_dir, os.path.basename(part_dir))

    def remove_directory(self, decision: Decision, parent_fd: int, name: str) -> int:
        """A leftover partition dir (journaled already): renamed to the ``-delete`` form
        unless it has it, then emptied through handles that never follow a symlink."""
        if decision.kind is not Kind.PARTITION_DIR:
            raise PermissionError(f"{decision.path}: only partition dirs are removed whole")
        return remove_partition_dir(parent_fd, name)

    def recheck(
        self, decision: Decision, st: os.stat_result, now_ms: int, floor: int | None
    ) -> str | None:
        """The identity (size, mtime, inode) is unchanged, so the batches are; time only
        moves forward. What can change is who holds the dir."""
        part_dir = decision.path if decision.kind is Kind.PARTITION_DIR else None
        log_dir = os.path.dirname(part_dir or os.path.dirname(decision.path))
        lock = self.locks.get(log_dir)
        if lock is None or not lock.acquire():
            return "the log dir's .lock is no longer ours"
        return None

    def journal_fields(self, decision: Decision, now_ms: int) -> dict[str, object]:
        fields: dict[str, object] = {
            "forced": False,
            "topic": decision.topic,
            "partition": decision.queue_id,
        }
        if decision.kind is not Kind.PARTITION_DIR:
            fields["base_offset"] = decision.start_offset
            largest = self._largest.get(decision.path)
            if largest is not None:
                # the data's age as retention.ms judges it (the engine puts it in its place)
                fields["age_ms"] = now_ms - largest
        if decision.loss is not None:
            fields["loss"] = decision.loss.as_dict()
        if self.rescue_request is not None:
            fields["rescue"] = True  # every deletion `retentiond rescue` makes
        return fields
