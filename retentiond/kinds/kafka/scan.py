"""A Kafka log dir, read once into an immutable snapshot (spec §3, §9 "inputs").

The scan never follows a symlink inside a log dir and never opens a file for writing. It lists
each partition dir once (``scandir``: the entry types come with the listing) and reads only
the root checkpoints. Everything else is read when a policy first asks for it, because
Kafka's passes stop at the first segment that does not qualify and a plan over 10,000
partitions must not cost much more than listing them:

- a segment's ``FileIdentity`` (its ``.log``'s stat: the size for the size pass, the mtime
  for the timestamp fallback, and what an unlink is later checked against) is taken from the
  ``fstat`` of the read that needs it, else from one ``lstat`` on first use;
- its batch headers (the largest timestamp, §4.3, and the log end offset, §4.4) are read on
  first use, as is the time index in the strict mode;
- a partition's ``leader-epoch-checkpoint`` is read when a deletion has to truncate it.

``Segment.known_identity`` and ``Segment.known_largest`` say what is already known without
any I/O, so a plan can describe the segments it never had to read.
"""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import cached_property

from retentiond.engine.identity import FileIdentity, identity_of
from retentiond.kinds.kafka import formats as fm

# a .log up to this size is read with one pread; a larger one is mapped, so that only the
# pages holding batch headers of a 1 GiB segment are touched
_READ_WHOLE_MAX = 1 << 20
_COMPANIONS = (fm.INDEX_SUFFIX, fm.TIME_INDEX_SUFFIX, fm.TXN_INDEX_SUFFIX)
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_nofollow(path: str) -> bytes:
    """A whole small file (checkpoint, time index, metadata segment), never through a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


_NOT_READ = object()


class Segment:
    """One segment: its ``.log`` and the companions present beside it. What the disk says
    about it (identity, batches, time index) is read once, on first use, and kept; a read that
    fails is remembered too and raises again, so one segment has one story per plan."""

    __slots__ = ("_identity", "_listing", "_summary", "_time_index", "base_offset", "log_path")

    def __init__(
        self,
        base_offset: int,
        log_path: str,
        listing: AbstractSet[str] = frozenset(),  # the names in its partition dir
        identity: FileIdentity | None = None,
    ) -> None:
        self.base_offset = base_offset
        self.log_path = log_path
        self._listing = listing
        self._identity: FileIdentity | None = identity
        self._summary: object = _NOT_READ
        self._time_index: object = _NOT_READ

    @property
    def companions(self) -> frozenset[str]:
        """The suffixes present beside the ``.log`` when the partition dir was listed."""
        prefix = fm.offset_prefix(self.base_offset)
        return frozenset(s for s in _COMPANIONS if prefix + s in self._listing)

    def __repr__(self) -> str:
        return f"Segment({self.base_offset}, {self.log_path!r})"

    @property
    def identity(self) -> FileIdentity:
        """The ``.log`` as first seen: from the read's ``fstat`` if it was read, else an
        ``lstat`` now (OSError if it has gone)."""
        if self._identity is None:
            st = os.lstat(self.log_path)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{self.log_path}: no longer a regular file")
            self._identity = identity_of(st)
        return self._identity

    @property
    def known_identity(self) -> FileIdentity | None:
        """The identity if something has already stat'ed the ``.log``; never any I/O."""
        return self._identity

    @property
    def size(self) -> int:
        """FileRecords.sizeInBytes of a loaded segment: the ``.log`` length."""
        return self.identity.size

    @property
    def summary(self) -> fm.LogSummary:
        """The batch headers (§4.4), read on first use: one ``pread`` for a small ``.log``, a
        read-only map for a large one. OSError or FormatError if unreadable."""
        got = self._summary
        if got is _NOT_READ:
            try:
                got = self._read_summary()
            except (OSError, fm.FormatError) as e:
                got = e
            self._summary = got
        if isinstance(got, Exception):
            raise got
        return got  # type: ignore[return-value]

    def _read_summary(self) -> fm.LogSummary:
        fd = os.open(self.log_path, _OPEN_FLAGS)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{self.log_path}: not a regular file")
            if self._identity is None:
                self._identity = identity_of(st)
            size = st.st_size
            if size == 0:
                return fm.summarize_log(b"", self.log_path)
            if size <= _READ_WHOLE_MAX:
                return fm.summarize_log(os.pread(fd, size, 0), self.log_path)
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as m:
                return fm.summarize_log(m, self.log_path)
        finally:
            os.close(fd)

    @property
    def largest_timestamp(self) -> tuple[int, bool]:
        """(LogSegment.largestTimestamp, whether the mtime fallback was used)."""
        return fm.largest_timestamp(self.summary, self.identity.mtime_ms)

    @property
    def time_index_largest(self) -> tuple[int, bool]:
        """Kafka's own value for a segment loaded without recovery (§4.3): the last entry of
        its ``.timeindex``, else the ``.log``'s mtime (a missing or empty time index, as
        after ``testRebuildTimeIndexForOldMessages``)."""
        got = self._time_index
        if got is _NOT_READ:
            try:
                got = self._read_time_index()
            except OSError as e:
                got = e
            self._time_index = got
        if isinstance(got, Exception):
            raise got
        return got  # type: ignore[return-value]

    def _read_time_index(self) -> tuple[int, bool]:
        try:
            entries = fm.decode_time_index(read_nofollow(self.path(fm.TIME_INDEX_SUFFIX)))
        except FileNotFoundError:
            entries = []
        if entries and entries[-1][0] >= 0:
            return entries[-1][0], False
        return self.identity.mtime_ms, True

    def known_largest(self, time_index: bool) -> tuple[int, bool] | None:
        """The largest timestamp if it is known without any I/O (the batches or time index
        were already read for another reason, e.g. the active segment for the log end
        offset); None otherwise, and for a read that failed."""
        if time_index:
            got = self._time_index
            return None if got is _NOT_READ or isinstance(got, Exception) else got  # type: ignore[return-value]
        summary = self._summary
        if summary is _NOT_READ or isinstance(summary, Exception) or self._identity is None:
            return None
        return fm.largest_timestamp(summary, self._identity.mtime_ms)  # type: ignore[arg-type]

    def path(self, suffix: str) -> str:
        return self.log_path[: -len(fm.LOG_SUFFIX)] + suffix


@dataclass(frozen=True)
class Partition:
    """A partition dir; ``segments`` in base-offset order (the last is the active one)."""

    path: str
    name: fm.PartitionDirName
    segments: tuple[Segment, ...]
    listing: AbstractSet[str] = frozenset()  # the regular files' names, as listed
    leader_epoch_file: str | None = None  # None: no leader-epoch-checkpoint
    leftovers: tuple[str, ...] = ()  # *.deleted files the broker purges at its next load

    @property
    def topic(self) -> str:
        return self.name.topic

    @property
    def partition(self) -> int:
        return self.name.partition

    @cached_property
    def snapshots(self) -> tuple[int, ...]:
        """The producer snapshot offsets present, in order."""
        parsed = (fm.parse_segment_file_name(n) for n in self.listing)
        return tuple(sorted(p[0] for p in parsed if p and p[1] == fm.SNAPSHOT_SUFFIX))

    @cached_property
    def _epochs(self) -> tuple[tuple[tuple[int, int], ...] | None, tuple[str, ...]]:
        path = self.leader_epoch_file
        if path is None:
            return None, ()
        try:
            text = read_nofollow(path).decode("utf-8")
            return tuple(fm.parse_leader_epoch_checkpoint(text, path)), ()
        except FileNotFoundError:
            return None, ()
        except (OSError, UnicodeDecodeError, fm.FormatError) as err:
            return None, (f"{path}: {err}",)

    @property
    def leader_epochs(self) -> tuple[tuple[int, int], ...] | None:
        """The leader-epoch cache, read on first use (only a deletion truncates it); None when
        the file is missing or cannot be parsed (``errors`` says which)."""
        return self._epochs[0]

    @property
    def errors(self) -> tuple[str, ...]:
        return self._epochs[1]

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
        return fm.parse_offset_checkpoint(read_nofollow(path).decode("utf-8"), path)
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
_SEGMENT_FILE_SUFFIXES = (fm.LOG_SUFFIX, *_COMPANIONS, fm.SNAPSHOT_SUFFIX)
_DIGITS = 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def scan_partition(
    path: str, name: fm.PartitionDirName, log_dir_fd: int | None = None
) -> tuple[Partition, list[tuple[str, str]]]:
    """One partition dir: its segments by base offset, the leader-epoch file, leftovers.

    One listing, no ``stat``: an entry's type comes with it (``d_type``). The dir is opened
    without following a symlink, relative to ``log_dir_fd`` when given, and listed through
    that descriptor (no path is built per entry). This runs for every file of every
    partition, so the names are classified in bulk: the ``.log`` prefixes, then every name a
    segment accounts for is set aside with set operations, and only what is left (the
    snapshot at the log end, leftovers, anything foreign) is looked at one by one.
    """
    foreign: list[tuple[str, str]] = []
    if log_dir_fd is None:
        fd = os.open(path, _DIR_FLAGS)
    else:
        fd = os.open(os.path.basename(path), _DIR_FLAGS, dir_fd=log_dir_fd)
    try:
        with os.scandir(fd) as it:
            entries = list(it)
        regular = [e.name for e in entries if e.is_file(follow_symlinks=False)]
        if len(regular) != len(entries):
            names = set(regular)
            odd = [(e.name, e.is_symlink()) for e in entries if e.name not in names]
        else:
            odd = []
    finally:
        os.close(fd)
    logs = [
        p
        for n in regular
        if n[_DIGITS:] == fm.LOG_SUFFIX and (p := n[:_DIGITS]).isascii() and p.isdigit()
    ]
    logs.sort()  # equal-length digit strings: the order of their offsets
    listing = set(regular)
    rest = listing.difference([p + s for p in logs for s in _SEGMENT_FILE_SUFFIXES])
    rest.difference_update(_PARTITION_FILES)
    epochs = os.path.join(path, fm.LEADER_EPOCH_CHECKPOINT)
    if fm.LEADER_EPOCH_CHECKPOINT not in listing:
        epochs = None  # type: ignore[assignment]
    leftovers: list[str] = []
    orphans: set[str] = set()
    for n in rest:
        parsed = fm.parse_segment_file_name(n)
        if parsed is not None:
            if parsed[1] != fm.SNAPSHOT_SUFFIX:
                orphans.add(n[:_DIGITS])  # an index whose .log is not there
        elif n.endswith(fm.DELETED_SUFFIX):
            if not n.endswith(".checkpoint" + fm.DELETED_SUFFIX):
                leftovers.append(os.path.join(path, n))
        elif not n.endswith(_TRANSIENT_SUFFIXES):
            foreign.append((os.path.join(path, n), "not a Kafka segment file"))
    for n, is_symlink in odd:
        full = os.path.join(path, n)
        if is_symlink:
            foreign.append((full, "symlink (never followed)"))
        elif n == fm.LEADER_EPOCH_CHECKPOINT:
            epochs = full  # not a regular file: reading it says so
        elif n in _PARTITION_FILES or n.endswith(_TRANSIENT_SUFFIXES):
            continue
        else:
            foreign.append((full, "not a Kafka segment file"))
    stem = os.path.join(path, "")
    segments = tuple(Segment(int(p), f"{stem}{p}{fm.LOG_SUFFIX}", listing) for p in logs)
    for p in sorted(orphans):
        foreign.append((stem + p, "index without .log"))
    foreign.sort()
    leftovers.sort()
    return Partition(path, name, segments, listing, epochs, tuple(leftovers)), foreign


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
    root_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(root_fd) as it:
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
                    part, more = scan_partition(full, name, root_fd)
                except OSError as err:
                    errors.append(f"{full}: {err}")
                    continue
                partitions.append(part)
                foreign.extend(more)
            elif e.name in _ROOT_FILES or e.name.endswith((".tmp", ".checkpoint")):
                continue
            else:
                foreign.append((full, "not a Kafka log dir file"))
    finally:
        os.close(root_fd)
    return LogDirSnapshot(
        path=path,
        partitions=tuple(partitions),
        high_watermarks=_checkpoint(os.path.join(path, fm.REPLICATION_CHECKPOINT), errors),
        log_start_offsets=_checkpoint(os.path.join(path, fm.LOG_START_CHECKPOINT), errors),
        recovery_points=_checkpoint(os.path.join(path, fm.RECOVERY_CHECKPOINT), errors),
        foreign=tuple(foreign),
        errors=tuple(errors),
    )
