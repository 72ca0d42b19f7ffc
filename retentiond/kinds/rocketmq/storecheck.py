"""Whether the store a RocketMQ configuration names is there and looks like a store.

A wrong ``storePathRootDir`` is the one mistake that turns a retention daemon into a deletion
accident, so before anything else we insist on seeing the broker's own marker files, and on
every CommitLog directory existing. Read-only: this only stats and lists.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from retentiond.config.problems import ConfigProblem
from retentiond.config.settings import Settings
from retentiond.kinds.rocketmq.config import RocketMQStore

__all__ = ["check_store"]

STORE_MARKER_FILES = ("checkpoint", "lock", "abort")
STORE_MARKER_DIRS = ("consumequeue", "index", "config")
_MARKERS_TEXT = ", ".join([*STORE_MARKER_FILES, *(f"{d}/" for d in STORE_MARKER_DIRS)])


def _stat_kind(path: Path) -> str | None:
    """'dir', 'file', 'other', or None if missing; other OSErrors are raised."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "other"


def check_store(settings: Settings[RocketMQStore]) -> list[ConfigProblem]:
    """Every problem with the store root and the CommitLog directories, each naming the
    configuration file, the key and the path."""
    file = str(settings.source) if settings.source is not None else "<settings>"
    root, commitlog = settings.store.store_path_root_dir, settings.store.store_path_commitlog
    problems: list[ConfigProblem] = []

    def refuse(key: str, value: object, message: str) -> None:
        problems.append(ConfigProblem(file, key, str(value), message))

    root_key = "storePathRootDir"
    try:
        if os.path.realpath(root) == "/":
            refuse(root_key, root, "is the filesystem root; point it at the broker's store")
        else:
            kind = _stat_kind(root)
            if kind is None:
                refuse(root_key, root, "does not exist")
            elif kind != "dir":
                refuse(root_key, root, "is not a directory")
            else:
                os.listdir(root)  # fails early and clearly if we may not look inside
                files = [m for m in STORE_MARKER_FILES if _stat_kind(root / m) == "file"]
                dirs = [m for m in STORE_MARKER_DIRS if _stat_kind(root / m) == "dir"]
                if not files and not dirs:
                    refuse(root_key, root, f"not a RocketMQ store (none of {_MARKERS_TEXT} found)")
    except OSError as exc:
        refuse(root_key, root, f"cannot be examined: {exc.strerror or exc}")

    seen: dict[tuple[int, int], Path] = {}
    for path in commitlog:
        try:
            kind = _stat_kind(path)
            if kind is None:
                refuse("storePathCommitLog", path, "CommitLog directory does not exist")
            elif kind != "dir":
                refuse("storePathCommitLog", path, "CommitLog path is not a directory")
            else:
                st = os.stat(path)
                identity = (st.st_dev, st.st_ino)
                if identity in seen:
                    refuse(
                        "storePathCommitLog",
                        path,
                        f"is the same directory as {str(seen[identity])!r}; the broker would "
                        "load every file twice",
                    )
                seen[identity] = path
        except OSError as exc:
            refuse("storePathCommitLog", path, f"cannot be examined: {exc.strerror or exc}")
    return problems
