"""Disk usage of one path, with RocketMQ's arithmetic (UtilAll.getDiskPartitionSpaceUsedPercent),
which df's Use% shares; every store kind judges pressure with it.

ratio = ceil(100 * used / (used + avail)) / 100, where used = total - free and avail excludes
root-reserved blocks: exactly df's Use%. Upstream returns -1 for a path it cannot measure and
then treats -1 as "space to delete"; we return None and the policy refuses to delete instead.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PathUsage:
    path: str
    ratio: float | None  # None: the path could not be measured
    total_bytes: int = 0
    used_bytes: int = 0
    avail_bytes: int = 0
    error: str | None = None


def usage_record(role: str, usage: PathUsage) -> dict[str, object]:
    """One entry of a ``round`` record's ``disk`` list (docs/journal.md): the same fields for
    every kind, so the fleet job reads a RocketMQ path and a Kafka log dir alike."""
    return {
        "role": role,
        "path": usage.path,
        "ratio": usage.ratio,
        "total_bytes": usage.total_bytes,
        "used_bytes": usage.used_bytes,
        "avail_bytes": usage.avail_bytes,
        "error": usage.error,
    }


def ratio_from_counts(used: int, avail: int) -> float | None:
    entire = used + avail
    if entire <= 0:
        return None
    percent = used * 100 // entire + (1 if used * 100 % entire else 0)
    return percent / 100.0


def measure_path(path: str) -> PathUsage:
    if not path:
        return PathUsage(path, None, error="empty path")
    if not os.path.exists(path):
        return PathUsage(path, None, error="path does not exist")
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return PathUsage(path, None, error=f"statvfs failed: {exc.strerror}")
    total = st.f_blocks * st.f_frsize
    free = st.f_bfree * st.f_frsize
    avail = st.f_bavail * st.f_frsize
    if total <= 0:
        return PathUsage(path, None, error="filesystem reports no size")
    used = total - free
    return PathUsage(path, ratio_from_counts(used, avail), total, used, avail)


def adjusted(usage: PathUsage, pending_release_bytes: int) -> PathUsage:
    """The usage as it will be once unlinked-but-still-held files are released.

    Pressure decisions use this so that bytes the cleaner already freed (but a process still
    maps) do not make it delete again.
    """
    if usage.ratio is None or pending_release_bytes <= 0:
        return usage
    used = max(0, usage.used_bytes - pending_release_bytes)
    avail = usage.avail_bytes + (usage.used_bytes - used)
    return PathUsage(usage.path, ratio_from_counts(used, avail), usage.total_bytes, used, avail)


def path_type(path: str | os.PathLike[str]) -> str | None:
    """What is at ``path``, following links as the broker does: ``dir``, ``file``, ``other``,
    or None when nothing is (other OSErrors are raised): the store checks of every kind."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "other"
