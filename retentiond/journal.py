"""The deletion journal: append-only, fsynced JSON lines, in numbered segments.

Every deletion is written here *before* anything else hears of it: an ``intent`` record is
fsynced before the unlink and a ``deletion`` (or ``abort``) record after it, so a crash at any
point leaves a journal from which the truth can be reconstructed. Segments rotate by size;
a closed segment is never written again, which is what makes shipping it safe.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from retentiond.reasons import SCHEMA_VERSION

SEGMENT_PATTERN = re.compile(r"journal-(\d{12})\.jsonl")
DEFAULT_MAX_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_JOURNAL_DIR = Path("/var/lib/retentiond/journal")


def segment_name(seq: int) -> str:
    return f"journal-{seq:012d}.jsonl"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


@dataclass(frozen=True)
class Origin:
    """Who wrote a record: stamped on every record so a fleet's journals can be merged."""

    cluster: str
    broker: str
    host: str
    store: str

    @classmethod
    def local(cls, cluster: str, broker: str, store: str) -> Origin:
        return cls(cluster, broker, socket.gethostname(), store)


class Journal:
    def __init__(
        self,
        directory: Path,
        origin: Origin,
        *,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
    ) -> None:
        self.directory = Path(directory)
        self.origin = origin
        self.max_segment_bytes = max_segment_bytes
        self._lock = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        segments = list_segments(self.directory)
        self._seq = segments[-1][0] if segments else 1
        self._fd = -1
        self._size = 0
        self._open(self._seq)

    def _open(self, seq: int) -> None:
        path = self.directory / segment_name(seq)
        created = not path.exists()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        self._size = os.fstat(self._fd).st_size
        if self._size and not _ends_with_newline(path):
            # A crash tore the last line: end it, so the next record starts on its own line
            # and only the torn one is lost (readers skip and count it).
            os.write(self._fd, b"\n")
            os.fsync(self._fd)
            self._size += 1
        if created:
            _fsync_dir(self.directory)

    @property
    def active_segment(self) -> Path:
        return self.directory / segment_name(self._seq)

    def rotate(self) -> None:
        """Close the active segment (it becomes shippable) and start the next one."""
        with self._lock:
            self._rotate_locked()

    def _rotate_locked(self) -> None:
        os.fsync(self._fd)
        os.close(self._fd)
        self._seq += 1
        self._open(self._seq)

    def append(self, record: dict[str, object]) -> None:
        self.append_many([record])

    def append_many(self, records: Iterable[dict[str, object]]) -> None:
        """Write whole lines with one write and one fsync. Raises OSError if that fails."""
        stamp = {
            "schema_version": SCHEMA_VERSION,
            "cluster": self.origin.cluster,
            "broker": self.origin.broker,
            "host": self.origin.host,
            "store": self.origin.store,
        }
        data = b"".join(
            json.dumps({**stamp, **r}, separators=(",", ":"), sort_keys=True).encode() + b"\n"
            for r in records
        )
        if not data:
            return
        with self._lock:
            if self._size and self._size + len(data) > self.max_segment_bytes:
                self._rotate_locked()
            written = os.write(self._fd, data)
            while written < len(data):  # O_APPEND: a short write continues where it stopped
                written += os.write(self._fd, data[written:])
            os.fsync(self._fd)
            self._size += len(data)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for entry in os.scandir(directory):
        m = SEGMENT_PATTERN.fullmatch(entry.name)
        if m and entry.is_file(follow_symlinks=False):
            found.append((int(m.group(1)), Path(entry.path)))
    return sorted(found)


@dataclass
class ReadStats:
    records: int = 0
    torn: int = 0  # lines that did not parse (a crash mid-write leaves at most one per segment)


def read_records(directory: Path, stats: ReadStats | None = None) -> Iterator[dict[str, object]]:
    """Every record of every segment in order; a torn line is skipped and counted."""
    stats = stats if stats is not None else ReadStats()
    for _, path in list_segments(Path(directory)):
        with open(path, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    stats.torn += 1
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    stats.torn += 1
                    continue
                if isinstance(record, dict):
                    stats.records += 1
                    yield record
                else:
                    stats.torn += 1
