"""Whether the log dirs a Kafka configuration names are there and look like a broker's.

Each log dir must exist and look like one a Kafka broker has run on, and no two may be one
directory: a wrong ``log.dirs`` is the mistake that turns retention into an accident.
Read-only: this only stats and lists.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from retentiond.config.problems import ConfigProblem
from retentiond.config.settings import Settings
from retentiond.kinds.kafka.config import KafkaServer

__all__ = ["check_store"]

KAFKA_MARKER_FILES = (
    "meta.properties",
    ".lock",
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
)


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


def check_store(settings: Settings[KafkaServer]) -> list[ConfigProblem]:
    """Every problem with the log dirs, each naming the file, the key as written and the dir."""
    file = str(settings.source) if settings.source is not None else "<settings>"
    server = settings.store
    key = server.log_dirs_key
    problems: list[ConfigProblem] = []
    seen: dict[tuple[int, int], str] = {}
    for d in server.log_dirs:
        path = Path(d)
        try:
            if os.path.realpath(path) == "/":
                problems.append(ConfigProblem(file, key, d, "is the filesystem root"))
                continue
            kind = _stat_kind(path)
            if kind is None:
                problems.append(ConfigProblem(file, key, d, "log dir does not exist"))
                continue
            if kind != "dir":
                problems.append(ConfigProblem(file, key, d, "log dir is not a directory"))
                continue
            os.listdir(path)
            if not any(_stat_kind(path / m) == "file" for m in KAFKA_MARKER_FILES):
                markers = ", ".join(KAFKA_MARKER_FILES)
                problems.append(
                    ConfigProblem(file, key, d, f"not a Kafka log dir (none of {markers} found)")
                )
                continue
            st = os.stat(path)
            if (st.st_dev, st.st_ino) in seen:
                other = seen[(st.st_dev, st.st_ino)]
                problems.append(ConfigProblem(file, key, d, f"is the same directory as {other!r}"))
            seen[(st.st_dev, st.st_ino)] = d
        except OSError as exc:
            problems.append(ConfigProblem(file, key, d, f"cannot be examined: {exc.strerror}"))
    return problems
