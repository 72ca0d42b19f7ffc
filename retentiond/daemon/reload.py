"""Live configuration: notice that the file changed, validate it, and say what changed.

Two doors lead here: SIGHUP (``systemctl reload``) and an edit of the file on disk, noticed
by polling. Polling rather than inotify because it also sees a Kubernetes ConfigMap swapping a
symlink, an editor replacing the file, or a file on a network mount, and because a stat every
two seconds costs nothing. This module only decides; the daemon applies the result, so that
a refused file can never leave half its values in force.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from retentiond.config.daemon import RESTART_KEYS as DAEMON_RESTART_KEYS
from retentiond.config.diff import diff_settings, restart_keys
from retentiond.config.problems import ConfigError
from retentiond.config.settings import Settings, StoreSection
from retentiond.kinds import StoreUnusable, load_settings

POLL_INTERVAL_S = 2.0

# Keys a reload may not change (a kind adds the keys that name its store, ``restart_keys``).
RESTART_KEYS = DAEMON_RESTART_KEYS


def _stat_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)  # follows symlinks on purpose: a swapped link target is a change
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class ConfigWatcher:
    """Reports a change of the file's content. Cheap when nothing happens: the file is read
    only when its stat changed, and a touch that keeps the bytes is not a change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stat = _stat_key(path)
        self._digest = _digest(path)

    def changed(self) -> bool:
        stat_key = _stat_key(self.path)
        if stat_key == self._stat:
            return False
        self._stat = stat_key
        digest = _digest(self.path)
        if digest == self._digest:
            return False
        self._digest = digest
        return True


def describe_change(key: str, old: object, new: object) -> str:
    """``fileReservedTime: 72 -> 24``: how each changed key is logged and reported."""

    def show(value: object) -> str:
        if isinstance(value, list):
            return ",".join(str(v) for v in value)
        return "(default)" if value is None else str(value)

    return f"{key}: {show(old)} -> {show(new)}"


@dataclass(frozen=True)
class ReloadResult:
    trigger: str  # "SIGHUP" or "file changed"
    settings: Settings[StoreSection] | None  # the new settings; None when refused
    changes: list[tuple[str, object, object]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        return self.settings is None

    def change_lines(self) -> list[str]:
        return [describe_change(*c) for c in self.changes]


def check_reload(
    path: Path,
    current: Settings[StoreSection],
    trigger: str,
    *,
    load: Callable[[Path], Settings[StoreSection]] = load_settings,
) -> ReloadResult:
    """Load and validate ``path`` against the running ``current`` settings. Never raises: any
    failure, even an unexpected one, is a refused reload and the old settings stay."""
    try:
        new = load(path)
    except StoreUnusable as exc:
        # Right in itself: its store errors are each round's to report and retry, as for a
        # path that vanishes while the daemon runs (the rounds check the store every time).
        new = exc.settings
    except ConfigError as exc:
        return ReloadResult(trigger, None, problems=[str(p) for p in exc.problems])
    except Exception as exc:  # a bug in the loader must not take the daemon down
        return ReloadResult(trigger, None, problems=[f"{path}: cannot load: {exc!r}"])
    changes = diff_settings(current, new)
    fixed_keys = restart_keys(current, new)
    fixed = [c for c in changes if c[0] in fixed_keys]
    if fixed:
        problems = [
            f"{path}: {describe_change(*c)}: this key cannot change while running; "
            "restart the service to apply it"
            for c in fixed
        ]
        return ReloadResult(trigger, None, changes, problems)
    return ReloadResult(trigger, new, changes)
