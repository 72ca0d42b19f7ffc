"""Whether the store a RocketMQ configuration names is there and looks like a store.

A wrong ``storePathRootDir`` is the one mistake that turns a retention daemon into a deletion
accident, so before anything else we insist on seeing the broker's own marker files, and on
every CommitLog directory existing. A store that is missing, empty (a disk not mounted) or
unreadable is a store error (exit 4: the daemon starts and every round checks the root again
with ``store_root_problem`` before it reads anything); the filesystem root or a CommitLog
directory listed twice is a configuration wrong in itself (exit 3). Read-only: this only
stats and lists.
"""

from __future__ import annotations

import os
from pathlib import Path

from retentiond.config.problems import ConfigProblem
from retentiond.config.settings import Settings
from retentiond.engine.disk import path_type
from retentiond.kinds.rocketmq.config import RocketMQStore

__all__ = ["check_store", "store_root_problem"]

STORE_MARKER_FILES = ("checkpoint", "lock", "abort")
STORE_MARKER_DIRS = ("consumequeue", "index", "config")
_MARKERS_TEXT = ", ".join([*STORE_MARKER_FILES, *(f"{d}/" for d in STORE_MARKER_DIRS)])


def store_root_problem(root: Path) -> str | None:
    """Why the store root cannot be cleaned now (None: it can): missing, not a directory,
    empty (a disk not mounted), unreadable, or none of the broker's marker files in it."""
    try:
        kind = path_type(root)
        if kind is None:
            return "does not exist"
        if kind != "dir":
            return "is not a directory"
        with os.scandir(root) as entries:  # fails early and clearly if we may not look inside
            if next(entries, None) is None:
                return "is empty (a disk not mounted?)"
        files = [m for m in STORE_MARKER_FILES if path_type(root / m) == "file"]
        dirs = [m for m in STORE_MARKER_DIRS if path_type(root / m) == "dir"]
        if not files and not dirs:
            return f"not a RocketMQ store (none of {_MARKERS_TEXT} found)"
    except OSError as exc:
        return f"cannot be examined: {exc.strerror or exc}"
    return None


def check_store(settings: Settings[RocketMQStore]) -> list[ConfigProblem]:
    """Every problem with the store root and the CommitLog directories, each naming the
    configuration file, the key and the path. The filesystem root and a CommitLog directory
    listed twice are refusals (the configuration is wrong in itself); a path that is missing,
    empty, unreadable or without the broker's marker files is a store error, which the rounds
    report and retry."""
    file = str(settings.source) if settings.source is not None else "<settings>"
    root, commitlog = settings.store.store_path_root_dir, settings.store.store_path_commitlog
    problems: list[ConfigProblem] = []

    def refuse(key: str, value: object, message: str, *, store_error: bool = True) -> None:
        problems.append(ConfigProblem(file, key, str(value), message, store_error=store_error))

    root_key = "storePathRootDir"
    if os.path.realpath(root) == "/":
        message = "is the filesystem root; point it at the broker's store"
        refuse(root_key, root, message, store_error=False)
    else:
        why = store_root_problem(root)
        if why is not None:
            refuse(root_key, root, why)

    seen: dict[tuple[int, int], Path] = {}
    for path in commitlog:
        try:
            kind = path_type(path)
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
                        store_error=False,
                    )
                seen[identity] = path
        except OSError as exc:
            refuse("storePathCommitLog", path, f"cannot be examined: {exc.strerror or exc}")
    return problems
