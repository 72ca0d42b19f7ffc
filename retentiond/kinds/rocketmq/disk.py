"""A RocketMQ store's disk: the CommitLog paths and the consumequeue path, measured together.

The pressure triggers take the minimum ratio over the CommitLog paths, then the consumequeue
path's (spec §4.2); the round record carries each path's figures for the fleet analysis.
"""

from __future__ import annotations

from dataclasses import dataclass

from retentiond.config.settings import Settings
from retentiond.engine.disk import PathUsage, measure_path, usage_record
from retentiond.kinds.rocketmq.config import RocketMQStore


@dataclass(frozen=True)
class DiskUsage:
    commitlog: tuple[PathUsage, ...]  # in configured order
    consumequeue: PathUsage

    @property
    def errors(self) -> list[str]:
        return [f"{u.path}: {u.error}" for u in self.commitlog if u.ratio is None]


def measure(commitlog_paths: list[str], consumequeue_path: str) -> DiskUsage:
    return DiskUsage(
        tuple(measure_path(p) for p in commitlog_paths), measure_path(consumequeue_path)
    )


def round_fields(settings: Settings[RocketMQStore], usage: DiskUsage | None) -> dict[str, object]:
    """Fields of the ``round`` record that come from the settings and the disk measurement:
    per-path disk ratios, the thresholds and retention in force, the round interval. The
    fleet analysis needs them to judge each round against the configuration of its time."""
    fields: dict[str, object] = {
        "file_reserved_time_hours": settings.store.file_reserved_time_hours,
        "interval_ms": settings.store.clean_resource_interval_ms,
        "thresholds": {
            "disk_max_used_ratio": settings.store.disk_max_used_ratio_fraction,
            "clean_forcibly_ratio": settings.store.disk_space_clean_forcibly_ratio,
            "warning_level_ratio": settings.store.disk_space_warning_level_ratio,
        },
    }
    if usage is not None:
        paths = [("commitlog", u) for u in usage.commitlog]
        paths.append(("consumequeue", usage.consumequeue))
        fields["disk"] = [usage_record(role, u) for role, u in paths]
    return fields
