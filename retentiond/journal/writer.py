"""The deletion journal: append-only, fsynced JSON lines, in numbered segments.

Every deletion is written here *before* anything else hears of it: an ``intent`` record is
fsynced before the unlink and a ``deletion`` (or ``abort``) record after it, so a crash at any
point leaves a journal from which the truth can be reconstructed. The record contract is
``docs/journal.md``.

Segments and who may write them
-------------------------------
A journal directory holds ``journal-<12 digits>.jsonl`` segments, ``journal.lock`` and
``journal.id``. Only the *highest-numbered* segment is ever written: every append takes an
exclusive ``flock`` on ``journal.lock``, moves to the highest segment if another writer (a
``retentiond once`` beside the daemon, or the shipper closing an idle segment) created a newer
one, and writes whole lines with one ``write`` and one ``fsync``. Creating a newer segment also
happens under that lock, so the moment a segment is not the highest it is *closed*: no process
will write to it again, which is what makes shipping and then deleting it safe.

Segments rotate before a write that would take them past ``max_segment_bytes`` (a record is
never split across segments) and once their first record is ``max_segment_age_ms`` old. A
crash can leave a torn last line; the next writer ends it with a newline so only that line is
lost, and readers skip and count it (``ReadStats.torn``), never fail on it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retentiond.reasons import SCHEMA_VERSION

if TYPE_CHECKING:
    pass

SEGMENT_PATTERN = re.compile(r"journal-(\d{12})\.jsonl")
DEFAULT_MAX_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_SEGMENT_AGE_MS = 3_600_000
DEFAULT_JOURNAL_DIR = Path("/var/lib/retentiond/journal")
LOCK_NAME = "journal.lock"
ID_NAME = "journal.id"
_ID_PATTERN = re.compile(r"[0-9a-f]{8,32}")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def segment_name(seq: int) -> str:
    return f"journal-{seq:012d}.jsonl"


def segment_seq(path: Path) -> int:
    m = SEGMENT_PATTERN.fullmatch(Path(path).name)
    if m is None:
        raise ValueError(f"{path} is not a journal segment")
    return int(m.group(1))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ends_with_newline(fd: int, size: int) -> bool:
    return size == 0 or os.pread(fd, 1, size - 1) == b"\n"


def first_record_ms(path: Path) -> int | None:
    """``time_ms`` of a segment's first record: the segment's age is measured from it.

    None for an empty segment or a first line that does not parse (a torn line).
    """
    try:
        with open(path, "rb") as fh:
            line = fh.readline()
    except FileNotFoundError:
        return None
    try:
        value = json.loads(line).get("time_ms")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def journal_id(directory: Path) -> str:
    """The journal's identity, created once per directory.

    Shipped file names carry it beside the segment number, so a journal directory that is
    wiped and started again from segment 1 never overwrites the copies of its predecessor.
    """
    directory = Path(directory)
    path = directory / ID_NAME
    try:
        text = path.read_text().strip()
        if _ID_PATTERN.fullmatch(text):
            return text
    except FileNotFoundError:
        pass
    new = uuid.uuid4().hex[:8]
    tmp = directory / f".{ID_NAME}.{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(new + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, path)  # never replaces an id another process wrote first
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    _fsync_dir(directory)
    return path.read_text().strip()


@contextmanager
def directory_lock(directory: Path) -> Iterator[None]:
    """The cross-process lock every writer and the shipper take to create or pick segments."""
    fd = os.open(Path(directory) / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


@dataclass(frozen=True)
class Origin:
    """Who wrote a record: stamped on every record so a fleet's journals can be merged."""

    cluster: str
    broker: str
    host: str
    store: str

    @classmethod
    def local(cls, cluster: str, broker: str, store: str) -> Origin:
        import socket  # here: a command that writes no journal does not import it (start-up)

        return cls(cluster, broker, socket.gethostname(), store)


class Journal:
    """One writer's handle on a journal directory (several may share one directory)."""

    def __init__(
        self,
        directory: Path,
        origin: Origin,
        *,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
        max_segment_age_ms: int = DEFAULT_MAX_SEGMENT_AGE_MS,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self.directory = Path(directory)
        self.origin = origin
        self.max_segment_bytes = max_segment_bytes
        self.max_segment_age_ms = max_segment_age_ms
        self.clock_ms = clock_ms
        self._lock = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.journal_id = journal_id(self.directory)
        self._lock_fd = os.open(
            self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640
        )
        self._fd = -1
        self._seq = 0
        self._size = 0
        self._first_ms: int | None = None
        with self._locked():
            self._follow()

    # ---- locking and segment selection --------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            if self._lock_fd < 0:
                raise OSError("journal is closed")
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _follow(self) -> None:
        """Make the open segment the highest one (creating segment 1 in an empty directory).

        Called under the lock before every write: another process may have rotated, and the
        shipper may have removed a segment we still had open.
        """
        if self._fd >= 0:
            newer = (self.directory / segment_name(self._seq + 1)).exists()
            if not newer and os.fstat(self._fd).st_nlink > 0:
                return
        segments = list_segments(self.directory)
        seq = segments[-1][0] if segments else 1
        if seq < self._seq:  # our segment was shipped away and nothing newer exists
            seq = self._seq + 1
        self._open(seq)

    def _open(self, seq: int) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        path = self.directory / segment_name(seq)
        created = not path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        self._seq = seq
        self._size = os.fstat(self._fd).st_size
        if not _ends_with_newline(self._fd, self._size):
            # A crash tore the last line: end it, so the next record starts on its own line
            # and only the torn one is lost (readers skip and count it).
            os.write(self._fd, b"\n")
            os.fsync(self._fd)
            self._size += 1
        self._first_ms = first_record_ms(path) if self._size else None
        if created:
            _fsync_dir(self.directory)

    def _rotate_locked(self) -> None:
        os.fsync(self._fd)
        self._open(self._seq + 1)

    def _due(self, incoming: int, now_ms: int) -> bool:
        if self._size == 0:
            return False
        if self._size + incoming > self.max_segment_bytes:
            return True
        first = self._first_ms
        return first is not None and now_ms - first >= self.max_segment_age_ms

    # ---- public -------------------------------------------------------------------------
    @property
    def active_seq(self) -> int:
        return self._seq

    @property
    def active_segment(self) -> Path:
        return self.directory / segment_name(self._seq)

    def set_limits(self, max_segment_bytes: int, max_segment_age_ms: int) -> None:
        """Take new rotation limits (a reload); they apply from the next write on."""
        self.max_segment_bytes = max_segment_bytes
        self.max_segment_age_ms = max_segment_age_ms

    def rotate(self) -> bool:
        """Close the active segment (it becomes shippable) if it holds anything."""
        with self._locked():
            self._follow()
            if self._size == 0:
                return False
            self._rotate_locked()
            return True

    def rotate_if_due(self) -> bool:
        """Close the active segment if it is old enough, even when nothing new arrives."""
        with self._locked():
            self._follow()
            if not self._due(0, self.clock_ms()):
                return False
            self._rotate_locked()
            return True

    def append(self, record: dict[str, object]) -> None:
        self.append_many([record])

    def encode(self, records: Iterable[dict[str, object]]) -> bytes:
        """The bytes ``append_many`` writes: one JSON object per line, origin stamped."""
        stamp = {
            "schema_version": SCHEMA_VERSION,
            "cluster": self.origin.cluster,
            "broker": self.origin.broker,
            "host": self.origin.host,
            "store": self.origin.store,
        }
        lines = []
        for r in records:
            full = {**stamp, **r}
            if "time_ms" not in full:  # every record has a time: shipping files it by day
                full["time_ms"] = self.clock_ms()
            lines.append(json.dumps(full, separators=(",", ":"), sort_keys=True).encode())
        return b"".join(line + b"\n" for line in lines)

    def append_many(self, records: Iterable[dict[str, object]]) -> None:
        """Write whole lines with one write and one fsync. Raises OSError if that fails."""
        data = self.encode(records)
        if not data:
            return
        with self._locked():
            self._follow()
            if self._due(len(data), self.clock_ms()):
                self._rotate_locked()
            before = os.fstat(self._fd).st_size
            try:
                written = os.write(self._fd, data)
                while written < len(data):  # O_APPEND: a short write continues where it stopped
                    written += os.write(self._fd, data[written:])
                os.fsync(self._fd)
            except OSError:
                # A batch cut short (ENOSPC part-way) must not stay: the next record would
                # continue its line and both would be unreadable. Back to the last whole line.
                with suppress(OSError):
                    os.ftruncate(self._fd, before)
                raise
            if self._size == 0:
                self._first_ms = json.loads(data.split(b"\n", 1)[0])["time_ms"]
            self._size += len(data)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for entry in os.scandir(directory):
        m = SEGMENT_PATTERN.fullmatch(entry.name)
        if m and entry.is_file(follow_symlinks=False):
            found.append((int(m.group(1)), Path(entry.path)))
    return sorted(found)


def closed_segments(directory: Path) -> list[tuple[int, Path]]:
    """Every segment but the highest, oldest first: none of them will be written again."""
    with directory_lock(directory):
        return list_segments(directory)[:-1]


def close_idle_segment(directory: Path, max_age_ms: int, now_ms: int) -> bool:
    """Close the highest segment if its first record is ``max_age_ms`` old (``0``: whatever its
    age), for a process that is not the writer (``retentiond ship`` beside a stopped or quiet
    daemon). Writers move to the new segment on their next append."""
    directory = Path(directory)
    with directory_lock(directory):
        segments = list_segments(directory)
        if not segments:
            return False
        seq, path = segments[-1]
        if path.stat().st_size == 0:
            return False
        first = first_record_ms(path)
        if max_age_ms > 0 and first is not None and now_ms - first < max_age_ms:
            return False
        fd = os.open(directory / segment_name(seq + 1), os.O_WRONLY | os.O_CREAT, 0o640)
        os.close(fd)
        _fsync_dir(directory)
        return True


@dataclass
class ReadStats:
    records: int = 0
    torn: int = 0  # lines that did not parse (a crash mid-write leaves at most one per crash)


def parse_line(line: bytes) -> dict[str, object] | None:
    """A record, or None for a torn or otherwise unreadable line."""
    if not line.endswith(b"\n"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def read_segment(path: Path, stats: ReadStats | None = None) -> Iterator[dict[str, object]]:
    """Every record of one segment in order; a torn line is skipped and counted."""
    stats = stats if stats is not None else ReadStats()
    with open(path, "rb") as fh:
        for line in fh:
            if line == b"\n":
                continue
            record = parse_line(line)
            if record is None:
                stats.torn += 1
                continue
            stats.records += 1
            yield record


def read_records(directory: Path, stats: ReadStats | None = None) -> Iterator[dict[str, object]]:
    """Every record of every segment in order; a torn line is skipped and counted."""
    stats = stats if stats is not None else ReadStats()
    for _, path in list_segments(Path(directory)):
        yield from read_segment(path, stats)
