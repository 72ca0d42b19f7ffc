"""The daemon's shipping job: ``journal.ship`` every ``retentiond.ship.interval`` in its own
scheduler job, its counters exported on the daemon's Prometheus registry."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from pathlib import Path

import structlog
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger
from prometheus_client.registry import CollectorRegistry

from retentiond.config.settings import Settings, StoreSection
from retentiond.journal.ship import ShipCounters, ship_with_settings
from retentiond.journal.writer import Journal
from retentiond.observe.ship_metrics import ShipCollector

log = structlog.get_logger(__name__)

SHIP_JOB = "ship"


def schedule(
    scheduler: BaseScheduler,
    settings: Callable[[], Settings[StoreSection]],
    journal: Journal | None,
    registry: CollectorRegistry | None = None,
    held: Callable[[str], bool] | None = None,
) -> ShipCounters:
    """Add the shipping job to the daemon's scheduler; its counters, for the daemon's life.

    The job reads the settings the rounds use at each run, so a reload that sets, changes or
    removes the target takes effect on the next run, and a new interval reschedules it. With
    a Prometheus ``registry``, the shipping counters are exported on it.
    """
    counters = ShipCounters()

    def trigger(ms: int) -> IntervalTrigger:
        return IntervalTrigger(seconds=ms / 1000, timezone=UTC)

    current = {"interval": settings().daemon.ship_interval_ms}

    def job() -> None:
        s = settings()
        if s.daemon.ship_interval_ms != current["interval"]:
            current["interval"] = s.daemon.ship_interval_ms
            scheduler.reschedule_job(SHIP_JOB, trigger=trigger(current["interval"]))
        if journal is None:
            return
        journal.set_limits(s.daemon.journal_max_segment_bytes, s.daemon.journal_max_segment_age_ms)
        if s.daemon.ship_target is None:
            return
        try:
            result = ship_with_settings(
                s, Path(journal.directory), journal, held=held, counters=counters
            )
        except Exception:  # the job must survive anything; the next run retries
            log.exception("shipping job failed")
            return
        if result.shipped_segments or result.error or result.dropped_segments:
            log.info(
                "journal shipped",
                segments=result.shipped_segments,
                records=result.shipped_records,
                files=result.files_written,
                backlog_segments=result.backlog_segments,
                reconciled=result.reconciled,
                waiting_segments=result.waiting_segments,
                error=result.error,
            )

    scheduler.add_job(job, trigger(current["interval"]), id=SHIP_JOB, name="journal shipping")
    if registry is not None:

        def labels() -> tuple[str, str]:
            s = settings()
            return s.broker_cluster_name, s.broker_name

        registry.register(ShipCollector(counters, labels))
    return counters
