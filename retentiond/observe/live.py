"""Scrape-time metrics: computed when Prometheus asks, from cheap sources only.

``collect`` runs in the HTTP server's thread, concurrently with rounds, and must neither wait
for a round nor cost more as the store grows:

* disk ratios — one ``statvfs`` per store path (``engine.disk``), and the disk state from the
  very policy function a round uses: the store kind's ``disk_figures`` (RocketMQ's evaluates
  its triggers);
* file counts, bytes, ages, the CommitLog minimum — the ``StoreStats`` snapshot the last round
  left (the kind's ``store_stats``), read by reference, no lock, no directory walk;
* reloads, pending and hung files, manual rounds — the daemon's status document, built under
  its state lock, which rounds only ever hold for a few assignments;
* configuration — the settings in force (an immutable object).

If one source fails, its metrics are left out of this scrape and the others are still served:
a broken status call must not hide the disk ratio.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

import structlog
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from retentiond import __version__
from retentiond.config.settings import Settings, StoreSection
from retentiond.engine.figures import StoreStats
from retentiond.engine.kind import AnyKind
from retentiond.kinds import VOICES
from retentiond.observe.families import Counter, Gauge

log = structlog.get_logger(__name__)

BASE = ["cluster", "broker"]
RELOAD_RESULTS = ("applied", "unchanged", "refused")


def _g(name: str, doc: str, labels: list[str] | None = None) -> Gauge:
    return Gauge(name, doc, [*BASE, *(labels or [])])


class MetricsState(Protocol):
    """What the collector reads at scrape time (``RetentionMetrics`` provides it); a protocol
    rather than an import, so the two modules do not import each other."""

    base: tuple[str, str]
    stats: StoreStats | None
    kind: AnyKind
    status: Callable[[], Mapping[str, object]] | None
    current_settings: Callable[[], Settings[StoreSection]]
    clock_s: Callable[[], float]


class LiveCollector(Collector):
    def __init__(self, metrics: MetricsState) -> None:
        self.metrics = metrics

    def describe(self) -> Iterator[Metric]:
        """Names only, for the registry's duplicate check; never measures anything."""
        yield from self._disk_families()
        yield from self._store_families()
        yield from self._status_families()
        yield from self._config_families()

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        settings = m.current_settings()
        now_s = m.clock_s()
        for part in (self._disk, self._store, self._status, self._config):
            try:
                families = list(part(settings, now_s))
            except Exception:
                log.exception("metrics: a scrape-time source failed", source=part.__name__)
                continue
            yield from families

    # ---- disk ---------------------------------------------------------------------------
    @staticmethod
    def _disk_families() -> tuple[Gauge, Gauge, Gauge]:
        return (
            _g(
                "retentiond_disk_used_ratio",
                "Used fraction of the filesystem holding a store path, as RocketMQ computes it: "
                "ceil(100*used/(used+avail))/100, measured at scrape time.",
                ["kind", "path"],
            ),
            _g(
                "retentiond_disk_state",
                "1 for the disk state the next round would act on, 0 for the others. "
                "RocketMQ: ok, over_max_ratio, clean_forcibly, warning_level (the broker "
                "rejects writes), unknown (a path cannot be measured); Kafka: ok, "
                "warning_level (a log dir above the warning ratio).",
                ["state"],
            ),
            _g(
                "retentiond_disk_threshold_ratio",
                "The configured ratio above which each disk state begins (RocketMQ: "
                "diskMaxUsedSpaceRatio, diskSpaceCleanForciblyRatio, "
                "diskSpaceWarningLevelRatio; Kafka: the warning ratio, 0.90 by default).",
                ["state"],
            ),
        )

    def _disk(self, settings: Settings[StoreSection], now_s: float) -> Iterator[Metric]:
        ratio, state, threshold = self._disk_families()
        base = list(self.metrics.base)
        disk = self.metrics.kind.disk_figures(settings, int(now_s * 1000))
        for role, usage in disk.paths:
            if usage.ratio is not None:  # a path that cannot be measured has no ratio
                ratio.add_metric([*base, role, usage.path], usage.ratio)
        for s in disk.states:
            state.add_metric([*base, s], 1.0 if s == disk.state else 0.0)
        for s, value in disk.thresholds:
            threshold.add_metric([*base, s], value)
        yield from (ratio, state, threshold)

    # ---- store figures (cached by the last round) -----------------------------------------
    @staticmethod
    def _store_families() -> tuple[Gauge, ...]:
        return (
            _g("retentiond_files", "Files in the store, by kind (as of the last scan).", ["kind"]),
            _g(
                "retentiond_store_bytes",
                "Bytes of the store's files, by kind (as of the last scan; ConsumeQueue files "
                "counted at mappedFileSizeConsumeQueue).",
                ["kind"],
            ),
            _g(
                "retentiond_oldest_file_age_seconds",
                "Age (now minus mtime) of the oldest file, by kind.",
                ["kind"],
            ),
            _g(
                "retentiond_store_scan_timestamp_seconds",
                "When the figures of retentiond_files and retentiond_store_bytes were taken, by "
                "kind (ConsumeQueue: the last round in which the CommitLog minimum moved).",
                ["kind"],
            ),
            _g(
                "retentiond_commitlog_min_offset",
                "Start offset of the oldest CommitLog file left (CommitLog.getMinOffset).",
            ),
            _g(
                "retentiond_group_unread_at_risk_messages",
                "Unread messages (Kafka: records) of a consumer group in files the current "
                "configuration will delete, as of the last round; the top "
                "retentiond.guard.topGroups groups by risk, the rest summed as group "
                '"__other__".',
                ["group"],
            ),
            _g(
                "retentiond_group_first_loss_timestamp_seconds",
                "When the first file holding unread messages of the group goes (the round's "
                "time when one goes now); absent while it cannot be known.",
                ["group"],
            ),
        )

    def _store(self, settings: Settings[StoreSection], now_s: float) -> Iterator[Metric]:
        stats = self.metrics.stats  # one reference read: the snapshot is never mutated
        if stats is None:
            return
        files, size, age, scanned, min_offset, at_risk, first_loss = self._store_families()
        base = list(self.metrics.base)
        for kind, k in sorted(stats.kinds.items()):
            files.add_metric([*base, kind.value], k.files)
            size.add_metric([*base, kind.value], k.bytes)
            scanned.add_metric([*base, kind.value], k.scanned_ms / 1000)
            if k.oldest_mtime_ms is not None:
                age.add_metric([*base, kind.value], max(0.0, now_s - k.oldest_mtime_ms / 1000))
        if stats.commitlog_min_offset is not None:
            min_offset.add_metric(base, stats.commitlog_min_offset)
        for r in stats.group_risk or ():
            at_risk.add_metric([*base, r.group], r.messages)
            if r.first_ms is not None:
                first_loss.add_metric([*base, r.group], r.first_ms / 1000)
        yield from (files, size, age, scanned, min_offset, at_risk, first_loss)

    # ---- the daemon's status ------------------------------------------------------------
    @staticmethod
    def _status_families() -> tuple[Gauge, Gauge, Gauge, Counter, Gauge, Gauge, Gauge, Gauge]:
        return (
            _g(
                "retentiond_expired_files_pending",
                "Expired CommitLog files still on disk after the last round: waiting for a "
                "delete hour, disk pressure or a manual round (the newest file never counts).",
            ),
            _g(
                "retentiond_hung_files",
                "Files a round planned to delete that are still on disk (failed to go; retried "
                "every redeleteHangedFileInterval).",
            ),
            _g(
                "retentiond_manual_rounds_remaining",
                "Rounds left that run a deletion pass at any hour after trigger-delete (20 per "
                "request, as the broker's executeDeleteFilesManually).",
            ),
            Counter(
                "retentiond_config_reloads",
                "Configuration reloads (SIGHUP or file change), by result: applied, unchanged, "
                "refused (the running configuration was kept).",
                [*BASE, "result"],
            ),
            _g(
                "retentiond_config_last_reload_successful",
                "0 if the last reload was refused (the file on disk is not what runs), else 1.",
            ),
            _g(
                "retentiond_store_dir_plan_only",
                "1 for a store directory the last round could only plan for: a Kafka log dir "
                "whose .lock another process (the broker) holds (planned and explained, "
                "nothing deleted there); 0 for one it could delete from (RocketMQ: always 0).",
                ["dir"],
            ),
            _g(
                "retentiond_scan_files",
                "Files the last scan gave each verdict (delete, keep) and reason, the counts "
                "`retentiond status` shows (Kafka: segments; RocketMQ's expired files are "
                "retentiond_expired_files_pending).",
                ["verdict", "reason"],
            ),
            _g(
                "retentiond_store_dir_error",
                "1 for a store directory the last scan could not use (missing, empty: a disk "
                "not mounted, unreadable, without the broker's marker files; nothing is "
                "deleted or created there, the other directories are cleaned), else 0.",
                ["dir"],
            ),
        )

    def _status(self, settings: Settings[StoreSection], now_s: float) -> Iterator[Metric]:
        if self.metrics.status is None:
            return
        doc = self.metrics.status()
        pending, hung, manual, reloads, last_ok, plan_only, verdicts, dir_error = (
            self._status_families()
        )
        base = list(self.metrics.base)
        # Kafka: a log dir whose .lock another process (the broker) holds is plan-only;
        # RocketMQ's store is never (it deletes beside a running broker, as the broker would)
        held = doc.get("plan_only_log_dirs")
        held_dirs = set(held) if isinstance(held, list) else set()
        for d in settings.store_dirs:
            plan_only.add_metric([*base, d], 1.0 if d in held_dirs else 0.0)
        erred = doc.get("store_dir_errors")
        erred_dirs = set(erred) if isinstance(erred, Mapping) else set()
        for d in settings.store_dirs:
            dir_error.add_metric([*base, d], 1.0 if d in erred_dirs else 0.0)
        if isinstance(expired := doc.get("pending_expired"), int):
            pending.add_metric(base, expired)
        hung_files = doc.get("hung_files")
        hung.add_metric(base, len(hung_files) if isinstance(hung_files, list) else 0)
        if isinstance(left := doc.get("manual_rounds_left"), int):
            manual.add_metric(base, left)
        config = doc.get("config")
        config = config if isinstance(config, Mapping) else {}
        counts = config.get("reloads")
        counts = counts if isinstance(counts, Mapping) else {}
        for result in RELOAD_RESULTS:
            reloads.add_metric([*base, result], float(counts.get(result, 0)))
        last = config.get("last_reload")
        refused = isinstance(last, Mapping) and last.get("outcome") == "refused"
        last_ok.add_metric(base, 0.0 if refused else 1.0)
        scan = doc.get("scan")
        counts_by_verdict = scan.get("reasons") if isinstance(scan, Mapping) else None
        if isinstance(counts_by_verdict, Mapping):  # "delete:retention_ms_breach": 12, ...
            for key, n in sorted(counts_by_verdict.items()):
                verdict, _, reason = str(key).partition(":")
                if isinstance(n, int):
                    verdicts.add_metric([*base, verdict, reason], float(n))
        yield from (pending, hung, manual, reloads, last_ok, plan_only, verdicts, dir_error)

    # ---- configuration and build --------------------------------------------------------
    def _info_columns(self) -> tuple[str, ...]:
        """``retentiond_config_info``'s labels after the hash: every kind's, in the order the
        kinds list them, so the columns are the same whichever kind a daemon cleans."""
        names: dict[str, None] = {}
        for voice in (*VOICES, self.metrics.kind):
            names.update(dict.fromkeys(voice.info_label_names))
        return tuple(names)

    def _config_families(self) -> tuple[Gauge, ...]:
        return (
            _g(
                "retentiond_config_info",
                "Always 1; the labels are the hash and the key settings in force.",
                ["config_hash", *self._info_columns()],
            ),
            _g(
                "retentiond_store_info",
                "Always 1; the label says which store kind this daemon cleans (rocketmq, kafka).",
                ["store_kind"],
            ),
            _g(
                "retentiond_build_info",
                "Always 1; the labels say which retentiond and which Python run.",
                ["version", "python_version"],
            ),
            _g(
                "retentiond_file_reserved_time_seconds",
                "fileReservedTime: the age at which a CommitLog file is expired.",
            ),
            _g(
                "retentiond_round_interval_seconds",
                "cleanResourceInterval: the period of the cleaning rounds.",
            ),
        )

    def _config(self, settings: Settings[StoreSection], now_s: float) -> Iterator[Metric]:
        info, store, build, reserved, interval = self._config_families()
        base = list(self.metrics.base)
        kind = self.metrics.kind
        labels = self._info_labels(settings)
        info.add_metric([*base, settings.config_hash, *labels], 1.0)
        store.add_metric([*base, kind.name], 1.0)
        build.add_metric([*base, __version__, platform.python_version()], 1.0)
        reserved_s = kind.reserved_time_s(settings)
        if reserved_s is not None:  # RocketMQ's fileReservedTime; Kafka's is per topic
            reserved.add_metric(base, reserved_s)
        interval.add_metric(base, kind.cadence(settings).round_interval_ms / 1000)
        yield from (info, store, build, reserved, interval)

    def _info_labels(self, settings: Settings[StoreSection]) -> list[str]:
        """``retentiond_config_info``'s values after the hash. The kind fills the labels of
        its own keys and leaves the other kinds' empty (an empty label is an absent one to
        Prometheus), so a Kafka daemon does not show RocketMQ defaults it never applies."""
        kind = self.metrics.kind
        own = set(kind.info_label_names)
        values = {
            "timezone": settings.daemon.timezone or "local",
            "clean_resource_interval_ms": str(kind.cadence(settings).round_interval_ms),
            "dry_run": str(settings.daemon.dry_run).lower(),
        }
        values = {k: v for k, v in values.items() if k in own}
        values.update(kind.info_labels(settings))
        return [values.get(name, "") for name in self._info_columns()]
