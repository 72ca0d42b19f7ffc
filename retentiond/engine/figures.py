"""What a store kind reports for people and dashboards: store figures and disk figures.

The kinds compute these (``RoundPlan.store_stats``, ``StoreKind.disk_figures``); ``observe``
exports them without knowing any kind. ``StoreStats`` is computed in the round thread and
replaced whole, so a scrape reads it without a lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from retentiond.engine.disk import PathUsage
from retentiond.engine.loss import GroupRisk
from retentiond.reasons import FileKind


@dataclass(frozen=True)
class KindStats:
    files: int
    bytes: int
    oldest_mtime_ms: int | None  # None: no file (or none whose age is known)
    scanned_ms: int  # when these figures were taken


@dataclass(frozen=True)
class StoreStats:
    kinds: dict[FileKind, KindStats] = field(default_factory=dict)
    # The store's minimum offset where the kind has one (RocketMQ: CommitLog.getMinOffset).
    commitlog_min_offset: int | None = None
    # Per consumer group, the unread messages in files the configuration will delete and when
    # the first goes (``engine.loss.top_risks``); None: the kind read no consumer progress.
    group_risk: tuple[GroupRisk, ...] | None = None


@dataclass(frozen=True)
class DiskFigures:
    """The disk as a scrape sees it now: each measured path with its role, and the disk state
    the next round would act on, among the kind's states, with their thresholds."""

    paths: tuple[tuple[str, PathUsage], ...]  # (role, usage), e.g. ("commitlog", ...)
    state: str | None = None  # None: the kind has no disk states
    states: tuple[str, ...] = ()
    thresholds: tuple[tuple[str, float], ...] = ()  # (state, ratio at which it begins)
