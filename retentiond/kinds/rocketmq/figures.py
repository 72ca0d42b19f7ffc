"""A RocketMQ store's figures for the metrics and `status`: files per kind, disk, expiry.

A scrape must stay cheap on a store with 100,000 consume queues, and must never wait for a
round. So nothing here runs at scrape time: ``store_stats`` is computed in the round thread,
right after a round (or the daemon's startup scan), from what that round already looked at,
and the result — an immutable ``StoreStats`` — replaces the previous one with a single
reference assignment. A scrape reads whichever snapshot is current, without a lock.

Where each number comes from, and how fresh it is:

* **commitlog** — the plan lists every CommitLog file with the size and mtime the scan saw;
  the files this round deleted are subtracted. Fresh after every round.
* **index**, **timerlog** — each directory holds a few dozen files at most; it is listed (and
  each file stat-ed) after every round. Fresh after every round. A store without
  ``timerlog/`` has no timerlog figures.
* **consumequeue** — listing every queue directory is exactly the cost to avoid, so the counts
  come from the rounds that walked the queues anyway: those in which the CommitLog minimum
  moved (``QueuesPlan.examined``) and the startup scan. Other rounds keep the previous
  figures; their time is exported (``retentiond_store_scan_timestamp_seconds``) so the age of
  the cache is visible. Bytes are ``files × mappedFileSizeConsumeQueue``: the broker creates
  every ConsumeQueue file at its full size. The oldest file is the oldest *first remaining
  file* among queues with more than one file (those are the files the planner already stat-ed;
  a queue's single file is the one being written, and is never stat-ed).

Ages are not stored: the oldest mtime is, and the collector subtracts it from the clock at
scrape time, so an age keeps growing between rounds as it does on disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from retentiond.config.settings import Settings
from retentiond.engine.decision import Decision
from retentiond.engine.disk import measure_path
from retentiond.engine.figures import DiskFigures, KindStats, StoreStats
from retentiond.kinds.rocketmq.commitlog import expired_pending
from retentiond.kinds.rocketmq.config import RocketMQStore
from retentiond.kinds.rocketmq.disk import DiskUsage
from retentiond.kinds.rocketmq.plan import Plan
from retentiond.kinds.rocketmq.triggers import DISK_STATE_ORDER, DiskState, evaluate
from retentiond.reasons import FileKind, Kind


def _commitlog(plan: Plan, gone: frozenset[str]) -> tuple[KindStats, int | None]:
    left = [d for d in plan.commitlog.decisions if d.path not in gone and d.identity is not None]
    stats = KindStats(
        files=len(left),
        bytes=sum(d.identity.size for d in left if d.identity is not None),
        oldest_mtime_ms=min((d.identity.mtime_ms for d in left if d.identity), default=None),
        scanned_ms=plan.now_ms,
    )
    return stats, (left[0].start_offset if left else None)


def list_index(index_dir: str, now_ms: int) -> KindStats:
    """One listing of a small directory (``index/``, ``timerlog/``): regular files only,
    symlinks not followed."""
    files = size = 0
    oldest: int | None = None
    try:
        with os.scandir(index_dir) as entries:
            for entry in entries:
                if not entry.is_file(follow_symlinks=False):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                files += 1
                size += st.st_size
                mtime = st.st_mtime_ns // 1_000_000
                oldest = mtime if oldest is None else min(oldest, mtime)
    except OSError:
        pass  # no index directory yet: zero files
    return KindStats(files, size, oldest, now_ms)


def _consumequeue(
    plan: Plan, gone: frozenset[str], settings: Settings[RocketMQStore]
) -> KindStats | None:
    """None when this plan did not walk the queues (keep the previous figures)."""
    queues = plan.queues
    if not queues.examined:
        return None
    deleted = sum(1 for q in queues.queues for d in q.deleted if d.path in gone)
    files = queues.file_count - deleted
    oldest: int | None = None
    for q in queues.queues:
        mtime = _first_left(q.deleted, gone)
        if mtime is _STOP:
            mtime = q.stop_mtime_ms
        if mtime is not None:
            oldest = mtime if oldest is None else min(oldest, mtime)
    return KindStats(
        files, files * settings.store.mapped_file_size_consumequeue, oldest, plan.now_ms
    )


_STOP: Any = object()  # no planned file left: the stop is the oldest file


def _first_left(deleted: Iterable[Decision], gone: frozenset[str]) -> int | None:
    """The mtime of the oldest file of a queue still on disk after the round, if the planner
    stat-ed it, among those planned to go (a failure or a dry run); ``_STOP`` when none of
    them is left (then it is the stop's: ``stop_mtime_ms``, without making a Decision)."""
    for d in deleted:
        if d.path not in gone:
            return d.identity.mtime_ms if d.identity is not None else None
    return _STOP


def store_stats(
    plan: Plan,
    settings: Settings[RocketMQStore],
    gone: frozenset[str],
    previous: StoreStats | None,
) -> StoreStats:
    """The figures after a round that deleted ``gone`` (empty for a scan or a dry run)."""
    commitlog, min_offset = _commitlog(plan, gone)
    kinds: dict[FileKind, KindStats] = {
        Kind.COMMITLOG: commitlog,
        Kind.INDEX: list_index(str(settings.store.index_dir), plan.now_ms),
    }
    cq = _consumequeue(plan, gone, settings)
    if cq is None and previous is not None:
        cq = previous.kinds.get(Kind.CONSUMEQUEUE)
    if cq is not None:
        kinds[Kind.CONSUMEQUEUE] = cq
    if plan.timerlog is not None:  # (a store without ``timerlog/`` shows no such figures)
        kinds[Kind.TIMERLOG] = list_index(str(settings.store.timerlog_dir), plan.now_ms)
    return StoreStats(kinds, min_offset)


DISK_STATES = (*DISK_STATE_ORDER, DiskState.UNKNOWN)


def disk_figures(settings: Settings[RocketMQStore], now_ms: int) -> DiskFigures:
    """Measured at scrape time: each CommitLog path and the consumequeue path, and the disk
    state the triggers would see (``unknown`` when a path cannot be measured)."""
    commitlog = tuple(measure_path(str(p)) for p in settings.store.store_path_commitlog)
    consumequeue = measure_path(str(settings.store.consumequeue_dir))
    paths = (*(("commitlog", u) for u in commitlog), ("consumequeue", consumequeue))
    state = evaluate(settings, now_ms, DiskUsage(commitlog, consumequeue), manual=False).disk_state
    return DiskFigures(
        paths=paths,
        state=state.value,
        states=tuple(s.value for s in DISK_STATES),
        thresholds=(
            (DiskState.OVER_MAX_RATIO.value, settings.store.disk_max_used_ratio_fraction),
            (DiskState.CLEAN_FORCIBLY.value, settings.store.disk_space_clean_forcibly_ratio),
            (DiskState.WARNING_LEVEL.value, settings.store.disk_space_warning_level_ratio),
        ),
    )


def status_fields(
    plan: Plan, settings: Settings[RocketMQStore], deleted: frozenset[str]
) -> dict[str, object]:
    """What `status` shows of a scan: the triggers and the expired files still on disk."""
    return {
        "triggers": plan.commitlog.triggers.as_dict(),
        "pending_expired": expired_pending(plan.commitlog, settings, plan.now_ms, deleted),
    }
