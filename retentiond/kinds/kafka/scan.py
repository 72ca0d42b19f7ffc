"""A Kafka log dir, read once into an immutable snapshot (spec §3, §9 "inputs").

The scan never follows a symlink inside a log dir and never opens a file for writing. It lists
each partition dir once (``scandir`` through a descriptor: the entry types come with the
listing; the ``.log`` names picked out in bulk) and reads only the root checkpoints. A
partition is its base offsets and its listing; a ``Segment`` object is made only for a
segment the plan looks at. Everything else is read when a policy first asks for it, because
Kafka's passes stop at the first segment that does not qualify and a plan over 10,000
partitions must not cost much more than listing them:

- only regular files are segments: a symlink or a directory under a segment's name is
  foreign. What changes after the listing is caught where it matters: a segment is read
  with ``O_NOFOLLOW`` and must ``fstat`` as a regular file, one that is deleted is
  ``lstat``-ed as one first (and the executor checks again before the unlink);
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

import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from itertools import repeat
from operator import add, attrgetter
from typing import Final

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


class _Unread(Enum):
    """Not read yet (a read that failed is remembered as its exception)."""

    NOT_READ = 0


_NOT_READ: Final = _Unread.NOT_READ


class Segment:
    """One segment: its ``.log`` and the companions present beside it. What the disk says
    about it (its stat, batches, time index) is read once, on first use, and kept; a read
    that fails is remembered too and raises again, so one segment has one story per plan."""

    __slots__ = (
        "_identity",
        "_largest",
        "_owner",
        "_stat",
        "_summary",
        "_time_index",
        "base_offset",
        "log_path",
    )

    def __init__(
        self,
        base_offset: int,
        log_path: str,
        owner: Partition | None = None,  # its partition (for the listing)
        identity: FileIdentity | None = None,
    ) -> None:
        self.base_offset = base_offset
        self.log_path = log_path
        self._owner = owner
        self._identity: FileIdentity | None = identity
        self._stat: os.stat_result | None = None  # the first stat taken, if any
        self._summary: fm.LogSummary | Exception | _Unread = _NOT_READ
        self._time_index: tuple[int, bool] | Exception | _Unread = _NOT_READ
        self._largest: tuple[int, bool] | None = None

    @property
    def companions(self) -> frozenset[str]:
        """The suffixes present beside the ``.log`` when the partition dir was listed."""
        if self._owner is None:
            return frozenset()
        listing = self._owner.listing
        prefix = fm.offset_prefix(self.base_offset)
        return frozenset(s for s in _COMPANIONS if prefix + s in listing)

    def __repr__(self) -> str:
        return f"Segment({self.base_offset}, {self.log_path!r})"

    def _lstat(self) -> os.stat_result:
        st = os.lstat(self.log_path)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{self.log_path}: no longer a regular file")
        self._stat = st
        return st

    @property
    def identity(self) -> FileIdentity:
        """The ``.log`` as first seen: from the read's ``fstat`` if it was read, else an
        ``lstat`` now (OSError if it has gone)."""
        ident = self._identity
        if ident is None:
            st = self._stat
            ident = self._identity = identity_of(st if st is not None else self._lstat())
        return ident

    @property
    def known_identity(self) -> FileIdentity | None:
        """The identity if something has already stat'ed the ``.log``; never any I/O."""
        if self._identity is None and self._stat is not None:
            self._identity = identity_of(self._stat)
        return self._identity

    @property
    def known_allocated(self) -> int | None:
        """The space the ``.log`` holds (``st_blocks``) if something has already stat'ed it
        (the read's ``fstat``, the size pass's ``lstat``); never any I/O."""
        st = self._stat
        return None if st is None else st.st_blocks * 512

    @property
    def size(self) -> int:
        """FileRecords.sizeInBytes of a loaded segment: the ``.log`` length."""
        if self._identity is not None:
            return self._identity.size
        st = self._stat
        return (st if st is not None else self._lstat()).st_size

    @property
    def summary(self) -> fm.LogSummary:
        """The batch headers (§4.4), read on first use: one ``pread`` for a small ``.log``, a
        window at a time for a large one (``summarize_log_fd``: never a map). OSError or
        FormatError if unreadable."""
        got = self._summary
        if got is _NOT_READ:
            try:
                got = self._read_summary()
            except (OSError, fm.FormatError) as e:
                got = e
            self._summary = got
        if isinstance(got, Exception):
            raise got
        return got

    def _read_summary(self) -> fm.LogSummary:
        fd = os.open(self.log_path, _OPEN_FLAGS)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{self.log_path}: not a regular file")
            if self._stat is None and self._identity is None:
                self._stat = st
            size = st.st_size
            if size > _READ_WHOLE_MAX:
                return fm.summarize_log_fd(fd, size, self.log_path)
            data = os.pread(fd, size, 0) if size else b""
        finally:
            os.close(fd)
        return fm.summarize_log(data, self.log_path)

    def _mtime_ms(self) -> int:
        ident = self._identity
        if ident is not None:
            return ident.mtime_ms
        st = self._stat
        return (st if st is not None else self._lstat()).st_mtime_ns // 1_000_000

    @property
    def largest_timestamp(self) -> tuple[int, bool]:
        """(LogSegment.largestTimestamp, whether the mtime fallback was used)."""
        got = self._largest
        if got is None:
            summary = self._summary
            if summary is _NOT_READ or isinstance(summary, Exception):
                summary = self.summary  # reads it, or raises what the read raised
            if summary.max_timestamp >= 0:
                got = (summary.max_timestamp, False)
            else:
                got = fm.largest_timestamp(summary, self._mtime_ms())
            self._largest = got
        return got

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
        return got

    def _read_time_index(self) -> tuple[int, bool]:
        try:
            entries = fm.decode_time_index(read_nofollow(self.path(fm.TIME_INDEX_SUFFIX)))
        except FileNotFoundError:
            entries = []
        if entries and entries[-1][0] >= 0:
            return entries[-1][0], False
        return self._mtime_ms(), True

    def known_largest(self, time_index: bool) -> tuple[int, bool] | None:
        """The largest timestamp if it is known without any I/O (the batches or time index
        were already read for another reason, e.g. the active segment for the log end
        offset); None otherwise, and for a read that failed."""
        if time_index:
            got = self._time_index
            return None if got is _NOT_READ or isinstance(got, Exception) else got
        if self._largest is not None:
            return self._largest
        summary = self._summary
        if summary is _NOT_READ or isinstance(summary, Exception):
            return None
        if self._identity is None and self._stat is None:
            return None
        return self.largest_timestamp

    def path(self, suffix: str) -> str:
        return self.log_path[: -len(fm.LOG_SUFFIX)] + suffix


class Partition:
    """A partition dir, compactly: its listing and the base offsets of its ``.log`` files in
    order (the last is the active segment). ``Segment`` objects, which carry what was read of
    a segment, are made on first use (``segment(i)``): a plan touches a few per partition.
    Everything else the listing says (companions, snapshots, leftovers, foreign names, the
    leader-epoch file) is worked out when asked for, which only a deletion or a report does.
    """

    def __init__(
        self,
        path: str,
        name: fm.PartitionDirName,
        bases: Sequence[int],
        names: Sequence[str] = (),
        prefixes: Sequence[str] | None = None,
        odd: Sequence[tuple[str, bool]] = (),
        strays: bool = False,  # ``stray_logs`` is not empty
        joined: str | None = None,  # ``names`` joined with NUL, in their place
    ) -> None:
        self.path = path
        self.name = name
        self.bases = bases  # base offsets, ascending
        # the regular files' names, as listed; kept as one string when the scan gives it
        # (10,000 partitions of 80 files: a string per name is most of the scan's memory),
        # split when first asked for (a deletion, a report of foreign files)
        self._names: Sequence[str] | None = None if joined is not None else names
        self._joined = joined
        self.odd = odd  # (name, is a symlink) of every entry that is no regular file
        self._strays = strays
        # the 20-digit file-name prefixes in the order of ``bases`` (built when not given)
        self._prefixes = prefixes
        self.made: list[Segment | None] = [None] * len(bases)  # by ``segment(i)``

    def __repr__(self) -> str:
        return f"Partition({self.path!r}, {len(self.bases)} segments)"

    @property
    def names(self) -> Sequence[str]:
        """The regular files' names, as listed."""
        names = self._names
        if names is None:
            joined = self._joined
            names = self._names = joined.split("\0") if joined else []
        return names

    @property
    def topic(self) -> str:
        return self.name.topic

    @property
    def partition(self) -> int:
        return self.name.partition

    def __len__(self) -> int:
        return len(self.bases)

    def segment(self, i: int) -> Segment:
        """The ``i``-th segment (negative from the end), made once and kept, so what is read
        of it is read once per plan."""
        seg = self.made[i]
        if seg is None:
            pre = self._prefixes
            prefix = pre[i] if pre is not None else fm.offset_prefix(self.bases[i])
            seg = Segment(self.bases[i], f"{self.path}/{prefix}{fm.LOG_SUFFIX}", self)
            self.made[i] = seg
        return seg

    @property
    def segments(self) -> tuple[Segment, ...]:
        """Every segment, in base-offset order."""
        return tuple(self.segment(i) for i in range(len(self.bases)))

    @property
    def stray_logs(self) -> tuple[str, ...]:
        """The names the broker's loader would take as segments and the scan does not: it
        lists with ``File::isFile`` (a symlink is followed) and takes every name ending in
        ``.log``, its base offset ``Long.parseLong`` of what precedes the first dot (a sign,
        other scripts' digits, any width). A symlink or a regular file under such a name
        makes the broker's segment list differ from ours; a directory does not."""
        if not self._strays:
            return ()
        ours = {p + fm.LOG_SUFFIX for p in self._prefix_list()}
        regular = [n for n in self.names if n.endswith(fm.LOG_SUFFIX) and n not in ours]
        links = [n for n, is_symlink in self.odd if is_symlink and n.endswith(fm.LOG_SUFFIX)]
        return tuple(sorted([*regular, *links]))

    def _prefix_list(self) -> Sequence[str]:
        pre = self._prefixes
        return pre if pre is not None else [fm.offset_prefix(b) for b in self.bases]

    @cached_property
    def listing(self) -> frozenset[str]:
        """The names in the dir, as listed."""
        return frozenset(self.names)

    @cached_property
    def _classified(self) -> tuple[str | None, tuple[str, ...], tuple[tuple[str, str], ...]]:
        """(leader-epoch file, ``.deleted`` leftovers, foreign entries) from the names that
        no segment accounts for, and the entries that are no regular file."""
        path = self.path
        pre = self._prefix_list()
        # every name a segment accounts for set aside in bulk (a daemon round asks for
        # this of every partition), each suffix's names made in one C loop; only what is
        # left is looked at one by one. The listing's set, when something made it already
        # (a rescue measuring its deletions), is copied: its names' hashes are known
        listed = self.__dict__.get("listing")
        rest = set(self.names if listed is None else listed)
        for sfx in _SEGMENT_FILE_SUFFIXES:
            rest.difference_update(map(add, pre, repeat(sfx)))
        prefixes = frozenset(pre) if rest else frozenset()
        epochs: str | None = None
        leftovers: list[str] = []
        foreign: list[tuple[str, str]] = []
        orphans: set[str] = set()
        for n in rest:
            parsed = fm.parse_segment_file_name(n)
            if parsed is not None:
                if parsed[1] != fm.SNAPSHOT_SUFFIX and n[:_DIGITS] not in prefixes:
                    orphans.add(n[:_DIGITS])  # an index whose .log is not there
            elif n == fm.LEADER_EPOCH_CHECKPOINT:
                epochs = f"{path}/{n}"
            elif n in _PARTITION_FILES:
                continue
            elif n.endswith(fm.DELETED_SUFFIX):
                # only what the broker itself renames: a segment's files, its snapshot
                if fm.parse_segment_file_name(n[: -len(fm.DELETED_SUFFIX)]) is not None:
                    leftovers.append(f"{path}/{n}")
                elif not n.endswith(".checkpoint" + fm.DELETED_SUFFIX):
                    foreign.append((f"{path}/{n}", "not a Kafka segment file"))
            elif not n.endswith(_TRANSIENT_SUFFIXES):
                foreign.append((f"{path}/{n}", "not a Kafka segment file"))
        for n, is_symlink in self.odd:
            full = f"{path}/{n}"
            if is_symlink:
                foreign.append((full, "symlink (never followed)"))
            elif n == fm.LEADER_EPOCH_CHECKPOINT:
                epochs = full  # not a regular file: reading it says so
            elif n not in _PARTITION_FILES and not n.endswith(_TRANSIENT_SUFFIXES):
                foreign.append((full, "not a Kafka segment file"))
        foreign.extend((f"{path}/{p}", "index without .log") for p in orphans)
        foreign.sort()
        leftovers.sort()
        return epochs, tuple(leftovers), tuple(foreign)

    @property
    def leader_epoch_file(self) -> str | None:
        """The ``leader-epoch-checkpoint`` path, None when the dir has none."""
        return self._classified[0]

    @property
    def leftovers(self) -> tuple[str, ...]:
        """``<base><suffix>.deleted`` files (a segment's, its snapshot's) the broker purges at
        its next load; any other name ending in ``.deleted`` is foreign."""
        return self._classified[1]

    @property
    def foreign(self) -> tuple[tuple[str, str], ...]:
        """Names in the dir that are no Kafka file: reported, never touched."""
        return self._classified[2]

    @cached_property
    def snapshots(self) -> tuple[int, ...]:
        """The producer snapshot offsets present, in order."""
        parsed = (fm.parse_segment_file_name(n) for n in self.names)
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
        if not self.bases:
            return 0
        last = self.segment(-1)
        nxt = last.summary.next_offset
        return last.base_offset if nxt is None else max(nxt, last.base_offset)


@dataclass(frozen=True)
class LogDirSnapshot:
    """One log dir as the scan found it. A checkpoint that is missing is None; one that
    cannot be parsed is None with an error, so its consequences stay on the safe side.
    ``root_foreign`` is what the log dir's own listing holds that is no partition dir;
    ``foreign`` adds what the partition dirs hold, worked out when first asked for."""

    path: str
    partitions: tuple[Partition, ...]
    high_watermarks: dict[tuple[str, int], int] | None
    log_start_offsets: dict[tuple[str, int], int] | None
    recovery_points: dict[tuple[str, int], int] | None
    root_foreign: tuple[tuple[str, str], ...] = ()
    errors: tuple[str, ...] = field(default=())
    # scanned only to be read (the consumer offsets), not planned here: a scan of part of
    # the partitions (``scan_log_dir``'s ``owned``) leaves the others to another process
    extra: tuple[Partition, ...] = ()
    # the root's listing and checkpoints as this scan read them: a scan of another part of
    # the partitions (``scan_log_dir``'s ``like``) takes them from here
    root: RootListing | None = field(default=None, compare=False, repr=False)
    checkpoint_errors: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @cached_property
    def foreign(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted([*self.root_foreign, *(f for p in self.partitions for f in p.foreign)]))


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
_HEAD = _DIGITS + 1  # a NUL, then a name's offset prefix
_LOG_END = fm.LOG_SUFFIX + "\0"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _log_prefixes(names: list[str]) -> list[str]:
    """The 20-digit prefixes of the ``.log`` names that follow the naming scheme, in offset
    order."""
    return _pick_logs(names)[0]


def _pick_logs(names: list[str]) -> tuple[list[str], int]:
    """``_log_prefixes``, and how many names end in ``.log`` at all. Every name of every
    partition passes here, so the common case is a few C-level string operations per dir,
    not a Python step per name: the names joined with a double NUL (which no name holds),
    split at ``.log`` + NUL (the end of each ``.log`` name), and the 21 characters before
    each split point checked together to be a NUL and 20 ASCII digits. A dir where that
    fails is looked at name by name."""
    pieces = ("\0" + "\0\0".join(names) + "\0").split(_LOG_END)
    pieces.pop()  # what follows the last .log name
    heads = "".join([p[-_HEAD:] for p in pieces])
    k = len(pieces)
    digits = heads.replace("\0", "")
    if (
        len(heads) == _HEAD * k
        and heads[::_HEAD].count("\0") == k
        and len(digits) == _DIGITS * k
        and digits.isascii()
        and digits.isdigit()
    ):
        prefixes = heads.split("\0")
        prefixes.pop(0)  # before the first NUL: nothing
    else:
        prefixes = [
            n[:_DIGITS] for n in names if n.endswith(fm.LOG_SUFFIX) and fm.is_offset_prefix(n[:-4])
        ]
    prefixes.sort()  # equal-length digit strings: the order of their offsets
    while prefixes and prefixes[-1] > fm.MAX_OFFSET_PREFIX:
        prefixes.pop()  # past a long: not a name Kafka writes (nor one it can parse)
    return prefixes, k


def scan_partition(
    path: str, name: fm.PartitionDirName, log_dir_fd: int | None = None
) -> tuple[Partition, tuple[tuple[str, str], ...]]:
    """One partition dir: its segments by base offset, and what else it holds (foreign
    entries, worked out here; ``scan_log_dir`` leaves them until asked for)."""
    part = _scan_partition(path, name, log_dir_fd)
    return part, part.foreign


def _scan_partition(path: str, name: fm.PartitionDirName, log_dir_fd: int | None) -> Partition:
    """One listing through a descriptor (``scandir(fd)``: the types come with it, no path
    is built per entry), the dir opened without following a symlink, relative to
    ``log_dir_fd`` when given. Every file of every partition passes here, so nothing is done
    per entry in Python in the common case: the names and the type checks are C loops
    (``map``), the ``.log`` names are picked out and checked in bulk, and only a dir holding
    something that is no regular file is looked at entry by entry."""
    if log_dir_fd is None:
        fd = os.open(path, _DIR_FLAGS)
    else:
        fd = os.open(os.path.basename(path), _DIR_FLAGS, dir_fd=log_dir_fd)
    try:
        with os.scandir(fd) as it:
            entries = list(it)
    finally:
        os.close(fd)
    odd: list[tuple[str, bool]] = []
    # symlinks first: is_file() follows them, a regular entry's type is its d_type
    if any(map(_IS_SYMLINK, entries)) or not all(map(_IS_FILE, entries)):
        names = []
        for e in entries:
            if e.is_file(follow_symlinks=False):
                names.append(e.name)
            else:
                odd.append((e.name, e.is_symlink()))
    else:
        names = list(map(_NAME, entries))
    prefixes, ending_in_log = _pick_logs(names)
    strays = ending_in_log != len(prefixes) or any(
        is_symlink and n.endswith(fm.LOG_SUFFIX) for n, is_symlink in odd
    )
    return Partition(
        path, name, list(map(int, prefixes)), (), prefixes, odd, strays, "\0".join(names)
    )


_NAME = attrgetter("name")
_IS_SYMLINK = os.DirEntry.is_symlink
_IS_FILE = os.DirEntry.is_file


@dataclass(frozen=True)
class RootListing:
    """A log dir's own listing: its partition dirs (entry name, parsed name) in name order,
    and what else it holds that is no Kafka file."""

    path: str
    dirs: tuple[tuple[str, fm.PartitionDirName], ...]
    foreign: tuple[tuple[str, str], ...]


def list_log_dir(path: str) -> RootListing:
    """The log dir's own entries: partition dirs (including ``-delete``/``-future``/
    ``-stray`` and ``__cluster_metadata-0``) and what is foreign (a symlink, never followed;
    a dir not named as a partition; a file that is no Kafka log dir file)."""
    foreign: list[tuple[str, str]] = []
    dirs: list[tuple[str, fm.PartitionDirName]] = []
    st = os.stat(path)  # the configured dir may itself be a symlink; nothing below it may
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{path}: not a directory")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(fd) as it:
            entries = sorted(it, key=_entry_name)
    finally:
        os.close(fd)
    stem = os.path.join(path, "")
    for e in entries:
        if e.is_symlink():
            foreign.append((stem + e.name, "symlink (never followed)"))
            continue
        if e.is_dir(follow_symlinks=False):
            name = fm.parse_partition_dir_name(e.name)
            if name is None:
                foreign.append((stem + e.name, "directory not named <topic>-<partition>"))
            else:
                dirs.append((e.name, name))
        elif not (e.name in _ROOT_FILES or e.name.endswith((".tmp", ".checkpoint"))):
            foreign.append((stem + e.name, "not a Kafka log dir file"))
    return RootListing(path, tuple(dirs), tuple(foreign))


def scan_log_dir(
    path: str,
    owned: Callable[[str, fm.PartitionDirName], bool] | None = None,
    extra_topics: frozenset[str] = frozenset(),
    *,
    root: RootListing | None = None,
    like: LogDirSnapshot | None = None,
) -> LogDirSnapshot:
    """A log dir → snapshot. Partition dirs (including ``-delete``/``-future``/``-stray`` and
    ``__cluster_metadata-0``, which the policy leaves alone with a reason) are listed; anything
    else is foreign. Symlinks are reported, never followed.

    ``owned``: only the partition dirs it accepts (by entry name and parsed name) are
    listed (another process takes the rest); those of ``extra_topics`` it does not accept
    are listed too, into ``extra``. ``root``: the log dir's own listing, already made;
    ``like``: an earlier scan of the same log dir (of other partitions), whose root listing
    and checkpoints this one takes instead of reading them again."""
    errors: list[str] = []
    partitions: list[Partition] = []
    extra: list[Partition] = []
    if like is not None and like.root is not None:
        root = like.root
    else:
        like = None
    if root is None:
        root = list_log_dir(path)
    root_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    stem = os.path.join(path, "")
    try:
        for entry, name in root.dirs:
            into = partitions
            if owned is not None and not owned(entry, name):
                if name.topic not in extra_topics:
                    continue
                into = extra
            full = stem + entry
            try:
                into.append(_scan_partition(full, name, root_fd))
            except OSError as err:
                if into is partitions:  # the process that owns it says so
                    errors.append(f"{full}: {err}")
    finally:
        os.close(root_fd)
    if like is not None:
        hw, lso, rp = like.high_watermarks, like.log_start_offsets, like.recovery_points
        read_errors = like.checkpoint_errors
    else:
        got: list[str] = []
        hw = _checkpoint(os.path.join(path, fm.REPLICATION_CHECKPOINT), got)
        lso = _checkpoint(os.path.join(path, fm.LOG_START_CHECKPOINT), got)
        rp = _checkpoint(os.path.join(path, fm.RECOVERY_CHECKPOINT), got)
        read_errors = tuple(got)
    return LogDirSnapshot(
        path=path,
        partitions=tuple(partitions),
        high_watermarks=hw,
        log_start_offsets=lso,
        recovery_points=rp,
        root_foreign=root.foreign,
        errors=(*errors, *read_errors),
        extra=tuple(extra),
        root=root,
        checkpoint_errors=read_errors,
    )


def _entry_name(e: os.DirEntry[str]) -> str:
    return e.name
