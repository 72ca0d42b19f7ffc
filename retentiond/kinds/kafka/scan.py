"""A Kafka log dir, read once into an immutable snapshot (spec §3, §9 "inputs").

The scan never follows a symlink inside a log dir and never opens a file for writing: it
lists partition dirs and their segments, stats each ``.log`` once (its ``FileIdentity`` is
what the unlink is later checked against), reads the root checkpoints, and leaves the
batch scan of a segment (its largest timestamp, §4.3) until a policy asks for it, since
size- and offset-based decisions never need it.
"""

from __future__ import annotations

import mmap
import os
import stat
from dataclasses import dataclass, field
from functools import cached_property

from retentiond.engine.identity import FileIdentity, identity_of
from retentiond.kinds.kafka import formats as fm


def _read_nofollow(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Segment:
    """One segment: its ``.log`` and the companions present beside it."""

    base_offset: int
    log_path: str
    identity: FileIdentity
    companions: frozenset[str]  # suffixes present besides .log (.index, .timeindex, ...)

    @property
    def size(self) -> int:
        """FileRecords.sizeInBytes of a loaded segment: the ``.log`` length."""
        return self.identity.size

    @cached_property
    def summary(self) -> fm.LogSummary:
        """The batch headers, read on first use (§4.4) through a read-only map, so that only
        the header pages of a 1 GiB segment are touched."""
        fd = os.open(self.log_path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            if os.fstat(fd).st_size == 0:
                return fm.summarize_log(b"", self.log_path)
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as m:
                return fm.summarize_log(m, self.log_path)
        finally:
            os.close(fd)

    @cached_property
    def largest_timestamp(self) -> tuple[int, bool]:
        """(LogSegment.largestTimestamp, whether the mtime fallback was used)."""
        return fm.largest_timestamp(self.summary, self.identity.mtime_ms)

    @cached_property
    def time_index_largest(self) -> tuple[int, bool]:
        """Kafka's own value for a segment loaded without recovery (§4.3): the last entry of
        its ``.timeindex``, else the ``.log``'s mtime (a missing or empty time index, as
        after ``testRebuildTimeIndexForOldMessages``)."""
        try:
            entries = fm.decode_time_index(_read_nofollow(self.path(fm.TIME_INDEX_SUFFIX)))
        except FileNotFoundError:
            entries = []
        if entries and entries[-1][0] >= 0:
            return entries[-1][0], False
        return self.identity.mtime_ms, True

    def path(self, suffix: str) -> str:
        return self.log_path[: -len(fm.LOG_SUFFIX)] + suffix


@dataclass(frozen=True)
class Partition:
    """A partition dir; ``segments`` in base-offset order (the last is the active one)."""

    path: str
    name: fm.PartitionDirName
    segments: tuple[Segment, ...]
    snapshots: tuple[int, ...]  # producer snapshot offsets present
    leader_epochs: tuple[tuple[int, int], ...] | None  # None: no leader-epoch-checkpoint
    errors: tuple[str, ...] = ()
    leftovers: tuple[str, ...] = ()  # *.deleted files the broker purges at its next load

    @property
    def topic(self) -> str:
        return self.name.topic

    @property
    def partition(self) -> int:
        return self.name.partition

    @cached_property
    def log_end_offset(self) -> int:
        """The next offset of the last segment's last batch, or its base offset when empty
        (§4.4); a partition without segments has none (Kafka would create one at the LSO)."""
        if not self.segments:
            return 0
        last = self.segments[-1]
        nxt = last.summary.next_offset
        return last.base_offset if nxt is None else max(nxt, last.base_offset)


@dataclass(frozen=True)
class LogDirSnapshot:
    """One log dir as the scan found it. A checkpoint that is missing is None; one that
    cannot be parsed is None with an error, so its consequences stay on the safe side."""

    path: str
    partitions: tuple[Partition, ...]
    high_watermarks: dict[tuple[str, int], int] | None
    log_start_offsets: dict[tuple[str, int], int] | None
    recovery_points: dict[tuple[str, int], int] | None
    foreign: tuple[tuple[str, str], ...] = ()
    errors: tuple[str, ...] = field(default=())


def _checkpoint(path: str, errors: list[str]) -> dict[tuple[str, int], int] | None:
    try:
        return fm.parse_offset_checkpoint(_read_nofollow(path).decode("utf-8"), path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, fm.FormatError) as e:
        errors.append(f"{path}: {e}")
        return None


_ROOT_FILES = {
    fm.REPLICATION_CHECKPOINT,
    fm.LOG_START_CHECKPOINT,
    fm.RECOVERY_CHECKPOINT,
    fm.CLEANER_CHECKPOINT,
    fm.LOCK_FILE,
    "meta.properties",
    ".kafka_cleanshutdown",
}
_PARTITION_FILES = {fm.LEADER_EPOCH_CHECKPOINT, "partition.metadata", "quorum-state"}
# the cleaner's and the KRaft metadata log's own files: Kafka's business, never ours
_TRANSIENT_SUFFIXES = (".cleaned", ".swap", ".checkpoint", ".checkpoint.part", ".tmp")


def scan_partition(path: str, name: fm.PartitionDirName) -> tuple[Partition, list[tuple[str, str]]]:
    """One partition dir: its segments by base offset, snapshots, leader epochs."""
    foreign: list[tuple[str, str]] = []
    errors: list[str] = []
    logs: dict[int, tuple[str, FileIdentity]] = {}
    companions: dict[int, set[str]] = {}
    snapshots: list[int] = []
    epochs: tuple[tuple[int, int], ...] | None = None
    leftovers: list[str] = []
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        full = os.path.join(path, e.name)
        if e.is_symlink():
            foreign.append((full, "symlink (never followed)"))
            continue
        parsed = fm.parse_segment_file_name(e.name)
        if parsed is not None and e.is_file(follow_symlinks=False):
            base, suffix = parsed
            if suffix == fm.LOG_SUFFIX:
                logs[base] = (full, identity_of(e.stat(follow_symlinks=False)))
            elif suffix == fm.SNAPSHOT_SUFFIX:
                snapshots.append(base)
            else:
                companions.setdefault(base, set()).add(suffix)
        elif e.name == fm.LEADER_EPOCH_CHECKPOINT:
            try:
                text = _read_nofollow(full).decode("utf-8")
                epochs = tuple(fm.parse_leader_epoch_checkpoint(text, full))
            except (OSError, UnicodeDecodeError, fm.FormatError) as err:
                errors.append(f"{full}: {err}")
        elif e.name.endswith(fm.DELETED_SUFFIX) and e.is_file(follow_symlinks=False):
            if not e.name.endswith(".checkpoint" + fm.DELETED_SUFFIX):
                leftovers.append(full)
        elif e.name in _PARTITION_FILES or e.name.endswith(_TRANSIENT_SUFFIXES):
            continue
        else:
            foreign.append((full, "not a Kafka segment file"))
    segments = tuple(
        Segment(base, p, ident, frozenset(companions.get(base, ())))
        for base, (p, ident) in sorted(logs.items())
    )
    for base in companions:
        if base not in logs:
            foreign.append((os.path.join(path, fm.offset_prefix(base)), "index without .log"))
    return (
        Partition(
            path,
            name,
            segments,
            tuple(sorted(snapshots)),
            epochs,
            tuple(errors),
            tuple(leftovers),
        ),
        foreign,
    )


def scan_log_dir(path: str) -> LogDirSnapshot:
    """A log dir → snapshot. Partition dirs (including ``-delete``/``-future``/``-stray`` and
    ``__cluster_metadata-0``, which the policy leaves alone with a reason) are listed; anything
    else is foreign. Symlinks are reported, never followed."""
    errors: list[str] = []
    foreign: list[tuple[str, str]] = []
    partitions: list[Partition] = []
    st = os.stat(path)  # the configured dir may itself be a symlink; nothing below it may
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{path}: not a directory")
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        full = os.path.join(path, e.name)
        if e.is_symlink():
            foreign.append((full, "symlink (never followed)"))
            continue
        if e.is_dir(follow_symlinks=False):
            name = fm.parse_partition_dir_name(e.name)
            if name is None:
                foreign.append((full, "directory not named <topic>-<partition>"))
                continue
            try:
                part, more = scan_partition(full, name)
            except OSError as err:
                errors.append(f"{full}: {err}")
                continue
            partitions.append(part)
            foreign.extend(more)
        elif e.name in _ROOT_FILES or e.name.endswith((".tmp", ".checkpoint")):
            continue
        else:
            foreign.append((full, "not a Kafka log dir file"))
    return LogDirSnapshot(
        path=path,
        partitions=tuple(partitions),
        high_watermarks=_checkpoint(os.path.join(path, fm.REPLICATION_CHECKPOINT), errors),
        log_start_offsets=_checkpoint(os.path.join(path, fm.LOG_START_CHECKPOINT), errors),
        recovery_points=_checkpoint(os.path.join(path, fm.RECOVERY_CHECKPOINT), errors),
        foreign=tuple(foreign),
        errors=tuple(errors),
    )
