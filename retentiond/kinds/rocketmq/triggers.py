"""When a CommitLog deletion pass runs: delete hour, disk pressure, manual rounds.

Pure functions of (settings, clock, disk usage). The arithmetic follows upstream's
``isTimeToDelete`` and ``isSpaceToDelete`` (spec §4.3, §4.4) with one deliberate difference:
a path that cannot be measured is an error for the store, never a reason to delete.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

from retentiond.config.settings import Settings
from retentiond.kinds.rocketmq.config import RocketMQStore
from retentiond.kinds.rocketmq.disk import DiskUsage


class DiskState(StrEnum):
    OK = "ok"
    OVER_MAX_RATIO = "over_max_ratio"  # expired files deleted outside the delete hour
    CLEAN_FORCIBLY = "clean_forcibly"  # unexpired files deleted too
    WARNING_LEVEL = "warning_level"  # the broker rejects writes (DISK_FULL)
    UNKNOWN = "unknown"  # a path could not be measured


DISK_STATE_ORDER = (
    DiskState.OK,
    DiskState.OVER_MAX_RATIO,
    DiskState.CLEAN_FORCIBLY,
    DiskState.WARNING_LEVEL,
)


def hour_of_day(now_ms: int, timezone: str | None) -> int:
    """Hour in the configured zone; None means the machine's zone, DST included."""
    if timezone is None:
        return time.localtime(now_ms / 1000).tm_hour
    return datetime.fromtimestamp(now_ms / 1000, ZoneInfo(timezone)).hour


def next_delete_window(settings: Settings[RocketMQStore], now_ms: int) -> int | None:
    """When the next delete hour starts (epoch ms): the start of the first hour of
    ``deleteWhen``, in the configured zone, at or after the hour holding ``now_ms`` (inside a
    delete hour, that hour's start). None when no hour is configured."""
    hours = set(settings.store.delete_hours)
    if not hours:
        return None
    tz = settings.daemon.timezone
    zone = ZoneInfo(tz) if tz else None
    now = (
        datetime.fromtimestamp(now_ms / 1000, zone)
        if zone
        else datetime.fromtimestamp(now_ms / 1000).astimezone()
    )
    start = now.replace(minute=0, second=0, microsecond=0).astimezone(UTC)
    for _ in range(50):  # a day, and a DST change
        local = start.astimezone(zone) if zone else start.astimezone()
        if local.hour in hours:
            return int(start.timestamp() * 1000)
        start += timedelta(hours=1)  # absolute time: a DST change moves the local hour
    return None


def is_time_to_delete(settings: Settings[RocketMQStore], now_ms: int) -> bool:
    return hour_of_day(now_ms, settings.daemon.timezone) in settings.store.delete_hours


@dataclass(frozen=True)
class Triggers:
    time_up: bool
    usage_exceeds: bool  # upstream isSpaceToDelete()
    manual: bool
    clean_immediately: bool  # disk above the clean-forcibly or warning level
    clean_at_once: bool  # clean_immediately and cleanFileForciblyEnable: age is ignored
    physic_ratio: float | None  # minimum over CommitLog paths (upstream's P)
    logics_ratio: float | None  # the consumequeue path (upstream's L)
    disk_state: DiskState
    hour: int
    error: str | None = None  # set when the store cannot be measured: nothing is deleted
    # With bytes unlinked but still held (guard.py) the ratios above are those the disk will
    # have once they are released; these say what statvfs shows now and how much is pending.
    unadjusted_physic_ratio: float | None = None
    pending_release_bytes: int = 0

    @property
    def fired(self) -> bool:
        return self.error is None and (self.time_up or self.usage_exceeds or self.manual)

    def as_dict(self) -> dict[str, object]:
        return {
            "time_up": self.time_up,
            "usage_exceeds": self.usage_exceeds,
            "manual": self.manual,
            "clean_immediately": self.clean_immediately,
            "clean_at_once": self.clean_at_once,
            "physic_ratio": self.physic_ratio,
            "logics_ratio": self.logics_ratio,
            "disk_state": str(self.disk_state),
            "hour": self.hour,
            "fired": self.fired,
            "error": self.error,
            "unadjusted_physic_ratio": self.unadjusted_physic_ratio,
            "pending_release_bytes": self.pending_release_bytes,
        }


def disk_state(settings: Settings[RocketMQStore], ratios: list[float]) -> DiskState:
    worst = max(ratios, default=0.0)
    if worst > settings.store.disk_space_warning_level_ratio:
        return DiskState.WARNING_LEVEL
    if worst > settings.store.disk_space_clean_forcibly_ratio:
        return DiskState.CLEAN_FORCIBLY
    if worst > settings.store.disk_max_used_ratio_fraction:
        return DiskState.OVER_MAX_RATIO
    return DiskState.OK


def evaluate(
    settings: Settings[RocketMQStore], now_ms: int, disk: DiskUsage, *, manual: bool
) -> Triggers:
    hour = hour_of_day(now_ms, settings.daemon.timezone)
    time_up = hour in settings.store.delete_hours
    warning = settings.store.disk_space_warning_level_ratio
    forcibly = settings.store.disk_space_clean_forcibly_ratio
    max_ratio = settings.store.disk_max_used_ratio_fraction

    if disk.errors:
        return Triggers(
            time_up,
            False,
            manual,
            False,
            False,
            None,
            None,
            DiskState.UNKNOWN,
            hour,
            error="; ".join(disk.errors),
        )

    # P: the first minimum over the CommitLog paths, as upstream's strict ">" loop picks it.
    physic = min(u.ratio for u in disk.commitlog if u.ratio is not None)
    logics = disk.consumequeue.ratio  # None: consumequeue/ missing; it then triggers nothing

    clean_immediately = False
    usage_exceeds = False
    if (
        physic > warning
        or physic > forcibly
        or (logics is not None and (logics > warning or logics > forcibly))
    ):
        clean_immediately = usage_exceeds = True
    elif physic > max_ratio or (logics is not None and logics > max_ratio):
        usage_exceeds = True

    state = disk_state(settings, [physic] + ([logics] if logics is not None else []))
    return Triggers(
        time_up=time_up,
        usage_exceeds=usage_exceeds,
        manual=manual,
        clean_immediately=clean_immediately,
        clean_at_once=clean_immediately and settings.store.clean_file_forcibly_enable,
        physic_ratio=physic,
        logics_ratio=logics,
        disk_state=state,
        hour=hour,
    )
