"""retentiond's Prometheus metrics: what was deleted and why, and how close the disk is to full.

One ``RetentionMetrics`` owns one ``CollectorRegistry`` it constructs itself — never the
process-global default — so every test gets a fresh registry and nothing a library registers
globally leaks into ``/metrics``.

Two kinds of numbers, updated in two different ways:

* **Events** (counters, the round histogram, last-success timestamps) are updated from the
  round thread: ``on_outcome`` for each file, which the Cleaner's listeners hear only after the
  journal has the record (safety rule 4: the journal is the truth, a metric never runs ahead
  of it), and ``round_done`` once per round.
* **State** (disk ratios, disk state, file counts and ages, pending and hung files, manual
  rounds, the configuration) is produced at scrape time by ``LiveCollector``
  (``observe/live.py``). It never waits for a round: the disk ratios are one ``statvfs`` per
  store path, everything expensive comes from the ``StoreStats`` snapshot the last round left
  behind (see ``observe/storestats.py`` for what is cached and how fresh it is).

Every series carries ``cluster`` and ``broker`` (``brokerClusterName``, ``brokerName``) so a
fleet-wide Prometheus can tell brokers apart without per-target relabelling, and the numbers
match the deletion records the shipper files under ``cluster=/broker=``. Both keys need a
restart to change, so the labels are fixed for the life of the process.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import structlog
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from retentiond.config.settings import Settings, StoreSection
from retentiond.engine.cleaner import Cleaner, RoundListener, RoundResult
from retentiond.engine.execute import Outcome
from retentiond.engine.figures import StoreStats
from retentiond.engine.kind import AnyKind, RoundPlan
from retentiond.engine.proc.owner import OwnerReport
from retentiond.kinds import kind_for
from retentiond.observe.live import LiveCollector
from retentiond.observe.owner_metrics import OwnerCollector
from retentiond.reasons import FORCED_REASONS, Cause

log = structlog.get_logger(__name__)

BASE_LABELS = ("cluster", "broker")
# From a quiet round (milliseconds) to a CommitLog pass pacing 10 deletions at the default
# 100 ms, to a cold walk of 100,000 consume queues.
ROUND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# Failure causes whose series exist from the start, at 0, so that increase() sees the first
# failure (``gone`` is not a failure). Another cause simply appears when it first happens.
KNOWN_FAILURE_CAUSES = (Cause.CHANGED, Cause.UNLINK_FAILED, Cause.CONTAINMENT, Cause.JOURNAL)

StatusFn = Callable[[], Mapping[str, object]]


def wall_s() -> float:
    return time.time()


class RetentionMetrics:
    """The metrics of one daemon (or one test): a registry and the hooks that feed it.

    ``settings`` fixes the ``cluster``/``broker`` labels; ``current_settings`` returns the
    settings in force (they change on reload; default: ``settings``); ``status`` returns the
    daemon's status document (``Daemon.status``), the source of reload counts, hung files and
    manual rounds, so ``/metrics`` and ``retentiond status`` always agree.
    """

    def __init__(
        self,
        settings: Settings[StoreSection],
        *,
        registry: CollectorRegistry | None = None,
        current_settings: Callable[[], Settings[StoreSection]] | None = None,
        status: StatusFn | None = None,
        clock_s: Callable[[], float] = wall_s,
        kind: AnyKind | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.base = (settings.broker_cluster_name, settings.broker_name)
        self.current_settings = current_settings or (lambda: settings)
        self.status = status
        self.clock_s = clock_s
        self.stats: StoreStats | None = None  # replaced whole, never mutated: scrapes read it
        # The store kind the figures come from: the watched cleaner's once watch() is called.
        self.kind: AnyKind = kind if kind is not None else kind_for(settings)
        self._phase = _PhaseClock(self.kind.phases)
        r = self.registry
        self.deleted_files = Counter(
            "retentiond_deleted_files",
            "Files deleted, by kind and reason (counted after the journal has the record).",
            [*BASE_LABELS, "kind", "reason"],
            registry=r,
        )
        self.deleted_bytes = Counter(
            "retentiond_deleted_bytes",
            "Bytes of the files deleted (their size when planned), by kind and reason.",
            [*BASE_LABELS, "kind", "reason"],
            registry=r,
        )
        self.forced_deletions = Counter(
            "retentiond_forced_deletions",
            "Files deleted before fileReservedTime because the disk was over "
            "diskSpaceCleanForciblyRatio: unexpired data removed.",
            BASE_LABELS,
            registry=r,
        )
        self.delete_failures = Counter(
            "retentiond_delete_failures",
            "Planned deletions that did not happen, by kind and cause (changed: the file "
            "changed since the plan; unlink_failed; containment: its directory moved; "
            "journal: the intent could not be journaled).",
            [*BASE_LABELS, "kind", "cause"],
            registry=r,
        )
        self.round_duration = Histogram(
            "retentiond_round_duration_seconds",
            "Duration of each cleaner's part of a round, pacing sleeps included.",
            [*BASE_LABELS, "cleaner"],
            buckets=ROUND_BUCKETS,
            registry=r,
        )
        self.last_success = Gauge(
            "retentiond_last_round_success_timestamp_seconds",
            "When a round last finished having read and measured the whole store, by cleaner "
            "(the daemon's start time until the first such round).",
            [*BASE_LABELS, "cleaner"],
            registry=r,
        )
        self._initialise_series()
        self.live = LiveCollector(self)
        # The owner broker's process: the watched cleaner's last report (read per round).
        self.owner: Callable[[], OwnerReport | None] = lambda: None
        # What the registry serves, in order (the README's metrics table lists them from here).
        self.collectors: tuple[Collector, ...] = (
            self.deleted_files,
            self.deleted_bytes,
            self.forced_deletions,
            self.delete_failures,
            self.round_duration,
            self.last_success,
            self.live,
            OwnerCollector(self.base, lambda: self.owner()),
            # process_* (memory, CPU, open fds, start time) and python_info, labelled like ours
            Labelled(ProcessCollector(registry=None), self.base),
            Labelled(PlatformCollector(registry=None), self.base),
        )
        for collector in self.collectors[6:]:
            r.register(collector)

    def _initialise_series(self) -> None:
        """Create the series we know of at 0 so rate() and increase() see their first step."""
        self.forced_deletions.labels(*self.base)
        for kind, reason in self.kind.deletion_series:
            self.deleted_files.labels(*self.base, kind.value, reason.value)
            self.deleted_bytes.labels(*self.base, kind.value, reason.value)
        for kind in self.kind.file_kinds:
            for cause in KNOWN_FAILURE_CAUSES:
                self.delete_failures.labels(*self.base, kind.value, cause.value)
        started = self.clock_s()
        for cleaner in self.kind.phases:  # RocketMQ: its two services; one round runs both
            self.round_duration.labels(*self.base, cleaner)
            self.last_success.labels(*self.base, cleaner).set(started)

    # ---- wiring -------------------------------------------------------------------------
    def watch(self, cleaner: Cleaner) -> None:
        """Feed on ``cleaner``: its file outcomes, and when each phase of its rounds starts
        (RoundResult carries only the total; the split is timed from the round's start, the
        kind's phase marks and its end). The figures follow the cleaner's kind from now on."""
        self.kind = cleaner.kind
        self.owner = cleaner.owner_report
        self._phase.follow(cleaner.kind.phases)
        cleaner.add_listener(_Listener(self))

    # ---- events (round thread) ----------------------------------------------------------
    def on_outcome(self, outcome: Outcome) -> None:
        """One file's outcome, after the executor journaled it."""
        d = outcome.decision
        kind = str(d.kind)
        if outcome.deleted:
            reason = str(d.reason)
            size = d.identity.size if d.identity is not None else 0
            self.deleted_files.labels(*self.base, kind, reason).inc()
            self.deleted_bytes.labels(*self.base, kind, reason).inc(size)
            if d.reason in FORCED_REASONS:
                self.forced_deletions.labels(*self.base).inc()
        elif outcome.cause != Cause.GONE:  # gone by itself: what was wanted
            self.delete_failures.labels(*self.base, kind, outcome.cause or "unknown").inc()

    def observe_plan(self, plan: RoundPlan) -> None:
        """A scan that deleted nothing (the daemon's startup scan): refresh the store figures."""
        self.stats = self.kind.store_stats(plan, frozenset(), self.stats)

    def round_done(self, result: RoundResult) -> None:
        """After a round (real or dry): durations, success times, the store figures."""
        plan = result.plan
        gone = frozenset(o.decision.path for o in result.deleted)
        self.stats = self.kind.store_stats(plan, gone, self.stats)
        durations = self._phase.split(result.duration_s)
        for cleaner, seconds in durations.items():
            self.round_duration.labels(*self.base, cleaner).observe(seconds)
        if result.stopped or plan.errors:
            return
        now = self.clock_s()
        for phase in self.kind.phases_succeeded(plan):
            self.last_success.labels(*self.base, phase).set(now)


class Labelled(Collector):
    """Another collector's series (prometheus_client's process and platform collectors) with
    ``cluster`` and ``broker`` added to every sample, so that they too tell brokers apart."""

    def __init__(self, inner: Collector, base: tuple[str, str]) -> None:
        self.inner = inner
        self.base = dict(zip(BASE_LABELS, base, strict=True))

    def collect(self) -> Iterator[Metric]:
        for family in self.inner.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            for s in family.samples:
                labelled.add_sample(
                    s.name, {**self.base, **s.labels}, s.value, s.timestamp, s.exemplar
                )
            yield labelled


class _Listener(RoundListener):
    """What ``RetentionMetrics`` hears of a cleaner's rounds."""

    def __init__(self, metrics: RetentionMetrics) -> None:
        self.metrics = metrics

    def round_started(self) -> None:
        self.metrics._phase.start()

    def phase_started(self, phase: str) -> None:
        self.metrics._phase.mark(phase)

    def file_done(self, outcome: Outcome) -> None:
        self.metrics.on_outcome(outcome)

    def round_ended(self) -> None:
        self.metrics._phase.end()


class _PhaseClock:
    """Monotonic marks around a round: its start, the start of each later phase, its end.

    The first phase runs from the round's start (scan included) to the second phase's mark,
    and so on; the last to the round's end. A phase the round never reached took 0 s.
    """

    def __init__(self, phases: tuple[str, ...]) -> None:
        self._lock = threading.Lock()
        self._thread: int | None = None  # the round's thread: a plan() elsewhere is no mark
        self._phases = phases  # the store kind's, in order
        self._start: float | None = None
        self._marks: list[tuple[str, float]] = []
        self._end: float | None = None

    def follow(self, phases: tuple[str, ...]) -> None:
        self._phases = phases

    def start(self) -> None:
        with self._lock:
            self._start, self._marks, self._end = time.monotonic(), [], None
            self._thread = threading.get_ident()

    def end(self) -> None:
        with self._lock:
            self._end = time.monotonic()

    def mark(self, phase: str) -> None:
        with self._lock:
            in_round = self._thread == threading.get_ident() and self._end is None
            first = phase == self._phases[0]
            seen = any(p == phase for p, _ in self._marks)
            if self._start is not None and in_round and not first and not seen:
                self._marks.append((phase, time.monotonic()))

    def split(self, total_s: float) -> dict[str, float]:
        """Seconds per phase for the round that just ended (``total_s`` if unwatched)."""
        with self._lock:
            start, marks, end = self._start, self._marks, self._end
            self._start, self._marks, self._end = None, [], None
        phases = self._phases
        durations = dict.fromkeys(phases, 0.0)
        if start is None or end is None:
            durations[phases[0]] = total_s
            return durations
        bounds = [(phases[0], start), *marks, ("", end)]
        for (phase, begin), (_, finish) in itertools.pairwise(bounds):
            durations[phase] = finish - begin
        return durations
