"""Whether the log dirs a Kafka configuration names are there and look like a broker's.

Each log dir must exist and look like one a Kafka broker has run on, and no two may be one
directory: a wrong ``log.dirs`` is the mistake that turns retention into an accident.

Two kinds of problem: a log dir that is the filesystem root or the same directory as another
is a configuration wrong in itself (refused, exit 3); a log dir that is missing, empty (an
unmounted disk), not a directory, unreadable or without any of Kafka's marker files is a store
error of that dir (exit 4): the daemon starts, each round reports it and cleans the other dirs
(``log_dir_problem`` is asked again every round, before anything there is touched).
Read-only: this only stats and lists, and never creates a missing dir nor anything in one.
"""

from __future__ import annotations

import os
from pathlib import Path

from retentiond.config.problems import ConfigProblem
from retentiond.config.settings import Settings
from retentiond.engine.disk import path_type
from retentiond.kinds.kafka.config import KafkaServer

__all__ = ["check_store", "log_dir_problem"]

KAFKA_MARKER_FILES = (
    "meta.properties",
    ".lock",
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
)


def log_dir_problem(log_dir: str) -> str | None:
    """Why ``log_dir`` cannot be cleaned now (None: it can): missing, not a directory, empty
    (a disk not mounted), unreadable, or none of Kafka's marker files in it."""
    path = Path(log_dir)
    try:
        kind = path_type(path)
        if kind is None:
            return "log dir does not exist (a disk not mounted?)"
        if kind != "dir":
            return "log dir is not a directory"
        with os.scandir(path) as entries:
            if next(entries, None) is None:
                return "log dir is empty (a disk not mounted?)"
        if not any(path_type(path / m) == "file" for m in KAFKA_MARKER_FILES):
            markers = ", ".join(KAFKA_MARKER_FILES)
            return f"not a Kafka log dir (none of {markers} found)"
    except OSError as exc:
        return f"cannot be examined: {exc.strerror or exc}"
    return None


def check_store(settings: Settings[KafkaServer]) -> list[ConfigProblem]:
    """Every problem with the log dirs, each naming the file, the key as written and the dir."""
    file = str(settings.source) if settings.source is not None else "<settings>"
    server = settings.store
    key = server.log_dirs_key
    problems: list[ConfigProblem] = []
    seen: dict[tuple[int, int], str] = {}
    for d in server.log_dirs:
        try:
            if os.path.realpath(d) == "/":
                problems.append(ConfigProblem(file, key, d, "is the filesystem root"))
                continue
        except OSError as exc:  # (a NUL is refused before this; a loop of symlinks is not)
            problems.append(ConfigProblem(file, key, d, f"cannot be examined: {exc.strerror}"))
            continue
        why = log_dir_problem(d)
        if why is not None:
            problems.append(ConfigProblem(file, key, d, why, store_error=True))
            continue
        try:
            st = os.stat(d)
        except OSError as exc:  # gone since the line above
            message = f"cannot be examined: {exc.strerror}"
            problems.append(ConfigProblem(file, key, d, message, store_error=True))
            continue
        if (st.st_dev, st.st_ino) in seen:
            other = seen[(st.st_dev, st.st_ino)]
            problems.append(ConfigProblem(file, key, d, f"is the same directory as {other!r}"))
        seen[(st.st_dev, st.st_ino)] = d
    return problems
