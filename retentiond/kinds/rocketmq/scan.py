"""Turn a store directory into a Snapshot. Read-only; never follows a symlink inside the store.

The top-level directories (the root, each CommitLog path, ``consumequeue/``, ``index/``,
``timerlog/``) are taken as configured, symlinked or not, because operators do put them on
other disks; nothing found *inside* them is followed.
"""

from __future__ import annotations

import errno
import os
import struct
import time
from array import array
from collections.abc import ItemsView, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from stat import S_ISREG
from sys import intern
from typing import Any

from retentiond.config.settings import Settings
from retentiond.engine import forked
from retentiond.engine.identity import identity_of
from retentiond.kinds.rocketmq.config import RocketMQStore
from retentiond.kinds.rocketmq.formats import CQ_UNIT_SIZE, is_never_written
from retentiond.kinds.rocketmq.halfwalk import HalfWalk, Work
from retentiond.kinds.rocketmq.names import is_index_name, parse_offset_name, parse_queue_id
from retentiond.kinds.rocketmq.reader import read_prefix
from retentiond.kinds.rocketmq.snapshot import (
    CommitLogFile,
    ForeignEntry,
    ForeignWhy,
    IndexFile,
    QueueListing,
    QueueRoot,
    Snapshot,
    StoreError,
    TimerLogFile,
)
from retentiond.kinds.rocketmq.storecheck import store_root_problem


def _classify(entry: os.DirEntry[str]) -> ForeignWhy | None:
    """None for a regular file; otherwise why it is not one (uses d_type, no syscall)."""
    if entry.is_symlink():
        return ForeignWhy.SYMLINK
    if entry.is_dir(follow_symlinks=False):
        return ForeignWhy.DIRECTORY
    if not entry.is_file(follow_symlinks=False):
        return ForeignWhy.NOT_REGULAR
    return None


def _scan_commitlog(
    settings: Settings[RocketMQStore], foreign: list[ForeignEntry], errors: list[StoreError]
) -> tuple[CommitLogFile, ...]:
    by_offset: dict[int, CommitLogFile] = {}
    for path in settings.store.store_path_commitlog:
        directory = str(path)
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            errors.append(StoreError(directory, "CommitLog path does not exist"))
            continue
        except NotADirectoryError:
            errors.append(StoreError(directory, "CommitLog path is not a directory"))
            continue
        except OSError as exc:
            errors.append(StoreError(directory, f"cannot list CommitLog path: {exc.strerror}"))
            continue
        for entry in entries:
            why = _classify(entry)
            offset = parse_offset_name(entry.name)
            if why is None and offset is None:
                why = ForeignWhy.NAME
            if why is not None:
                foreign.append(ForeignEntry(entry.path, why))
                continue
            assert offset is not None
            try:
                ident = identity_of(entry.stat(follow_symlinks=False))
            except OSError:
                continue  # vanished between listing and stat: not ours to decide on
            clf = CommitLogFile(directory, entry.name, offset, ident, None)
            if offset in by_offset:
                other = by_offset[offset]
                foreign.append(ForeignEntry(clf.path, ForeignWhy.DUPLICATE))
                errors.append(
                    StoreError(
                        clf.path,
                        f"offset {entry.name} exists in two CommitLog paths "
                        f"({other.directory} and {directory}); refusing to choose",
                    )
                )
                continue
            by_offset[offset] = clf
    files = [by_offset[o] for o in sorted(by_offset)]
    # Read the head of files from the newest backwards until one holds data: everything from
    # there on is the broker's active or pre-allocated file and is kept.
    for i in range(len(files) - 1, -1, -1):
        prefix = read_prefix(files[i].path)
        empty = prefix is not None and is_never_written(prefix)
        files[i] = CommitLogFile(
            files[i].directory, files[i].name, files[i].start_offset, files[i].identity, empty
        )
        if not empty:
            break
    return tuple(files)


def _scan_index(
    index_dir: str, foreign: list[ForeignEntry], errors: list[StoreError] | None = None
) -> tuple[IndexFile, ...]:
    try:
        entries = list(os.scandir(index_dir))
    except (FileNotFoundError, NotADirectoryError):
        return ()  # a store without index files
    except OSError as exc:
        if errors is not None:
            errors.append(StoreError(index_dir, f"cannot list the index directory: {exc.strerror}"))
        return ()
    files = []
    for entry in entries:
        why = _classify(entry)
        if why is None and not is_index_name(entry.name):
            why = ForeignWhy.NAME
        if why is not None:
            foreign.append(ForeignEntry(entry.path, why))
            continue
        try:
            files.append(IndexFile(entry.name, identity_of(entry.stat(follow_symlinks=False))))
        except OSError:
            continue
    files.sort(key=lambda f: f.name)  # IndexService.load: lexicographic
    return tuple(files)


def _scan_timerlog(
    timerlog_dir: str, foreign: list[ForeignEntry], errors: list[StoreError]
) -> tuple[TimerLogFile, ...] | None:
    """The timer log's files by offset name; None when the store has no ``timerlog/``."""
    try:
        entries = list(os.scandir(timerlog_dir))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        errors.append(
            StoreError(timerlog_dir, f"cannot list the timerlog directory: {exc.strerror}")
        )
        return None
    files = []
    for entry in entries:
        why = _classify(entry)
        if why is None and parse_offset_name(entry.name) is None:
            why = ForeignWhy.NAME
        if why is not None:
            foreign.append(ForeignEntry(entry.path, why))
            continue
        try:
            files.append(TimerLogFile(entry.name, identity_of(entry.stat(follow_symlinks=False))))
        except OSError:
            continue  # vanished between listing and stat
    files.sort(key=lambda f: f.name)  # fixed-width decimal: name order is offset order
    return tuple(files)


# A queue directory's identity: mtime_ns, ctime_ns, inode, device (native byte order: the
# scan cache file stores these bytes as they are, see scancache).
DIR_KEY = struct.Struct("=qqQQ")
# A topic directory opened only to stat its queue directories relative to it: never through a
# symlink, never inherited by a child process.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", 0)
_GONE_OR_NOT_A_DIR = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP}
# A topic or queue directory that vanished (or was replaced by a file) since its parent was
# listed is simply not there this round; any other failure to stat or list it is a store error.
_GONE = {errno.ENOENT, errno.ENOTDIR}
_MAX_OFFSET_NAME = "09223372036854775807"  # Long.MAX_VALUE, 20 digits
_RACY_NS = 1_000_000_000  # a directory changed this close to its listing is listed again


def _is_offset_name(name: str) -> bool:
    """Fast path of names.parse_offset_name for the hot loop (fixed width: compare strings)."""
    return len(name) == 20 and name.isascii() and name.isdigit() and name <= _MAX_OFFSET_NAME


def _list_dir(path: str, foreign: list[ForeignEntry]) -> tuple[list[str], list[ForeignEntry]]:
    """Regular files with offset names in a queue directory, and everything else as foreign."""
    names: list[str] = []
    strangers: list[ForeignEntry] = []
    append = names.append
    with os.scandir(path) as entries:
        for entry in entries:
            name = entry.name
            # _is_offset_name, inline: this runs for every file of a store's first walk.
            if (
                len(name) == 20
                and name.isdigit()
                and name.isascii()
                and name <= _MAX_OFFSET_NAME
                and entry.is_file(follow_symlinks=False)
            ):
                append(intern(name))  # offsets repeat across queues: one string each
            else:
                strangers.append(ForeignEntry(entry.path, _classify(entry) or ForeignWhy.NAME))
    names.sort()  # fixed-width decimal: lexicographic order is offset order
    if strangers:
        foreign.extend(strangers)
    return names, strangers


# What the lister remembers of a parent directory (``consumequeue/`` or a topic directory):
# its identity when listed (``PARENT_KEY``: mtime_ns, ctime_ns, inode, packed), its children
# (``consumequeue/``: topic names; a topic: (name, queue id or None) pairs) and the foreign
# entries found in it. Equal children tuples are shared: most topics hold the same queue ids.
PARENT_KEY = struct.Struct("=qqQ")
Children = tuple[tuple[str, int | None], ...]
ParentListing = tuple[bytes, tuple[object, ...], tuple[ForeignEntry, ...]]


class Parents:
    """The parent listings the lister remembers (and the scan cache file carries): the one of
    ``consumequeue/`` (``root``, at ``root_path``) and those of its topic directories, keyed
    by topic name (a store has as many topics as queues at worst: no path string each).

    A topic directory that holds the queue directories most topics hold (``usual``) and
    nothing else is remembered by its key alone (``put``): no tuple per topic."""

    __slots__ = ("root", "root_path", "topics", "usual")

    def __init__(self, root_path: str = "", root: ParentListing | None = None,
                 topics: dict[str, bytes | ParentListing] | None = None) -> None:  # fmt: skip
        self.root_path = root_path
        self.root = root
        self.topics: dict[str, bytes | ParentListing] = topics if topics is not None else {}
        self.usual: tuple[object, ...] = ()  # (set by the first plain topic ``put``)

    def put(self, topic: str, key: bytes, children: tuple[object, ...],
            strangers: tuple[ForeignEntry, ...]) -> None:  # fmt: skip
        """Remember a topic directory's listing."""
        if not strangers:
            if not self.usual:
                self.usual = children
            if children is self.usual or children == self.usual:
                self.topics[topic] = key
                return
        self.topics[topic] = (key, children, strangers)

    def listing(self, topic: str) -> ParentListing | None:
        """A topic directory's remembered listing: (key, children, foreign entries)."""
        got = self.topics.get(topic)
        if type(got) is bytes:
            return (got, self.usual, ())
        return got  # type: ignore[return-value]

    def plain(self) -> Iterator[tuple[str, bytes, tuple[object, ...]]]:
        """(topic, key, children) of the topic directories remembered with nothing foreign
        in them, in the order they were remembered."""
        usual = self.usual
        for topic, got in self.topics.items():
            if type(got) is bytes:
                yield topic, got, usual
            elif not got[2]:
                yield topic, got[0], got[1]  # type: ignore[misc]

    def __contains__(self, path: object) -> bool:
        """Whether the listing of the directory at ``path`` is remembered."""
        if path == self.root_path:
            return self.root is not None
        head, _, name = str(path).rpartition("/")
        return head == self.root_path and name in self.topics

    def __len__(self) -> int:
        return (self.root is not None) + len(self.topics)


@dataclass
class Prefetch:
    """A walk that lists every queue directory and reads the oldest files of every queue
    (``retentiond plan`` without a scan cache file), shared with a forked child where
    ``engine.forked`` allows it (within ``plan``, two cores, at least ``min_topics`` topic
    directories): see ``halfwalk``. Both processes walk their topics with the same code
    (``_chunk_walk``): it lists a topic's queue directories and reads their files as
    ``queues.plan_queue`` would (oldest first, up to the first file that holds an offset at or
    above ``min_offset``); the walk hands out the listings it would have made, in its order,
    and the values read go to the planner through ``values`` (``queues.plan_queues``'
    ``prefetched``), which makes the decisions ``plan_queue`` would.

    A topic with anything unusual in it (a foreign entry, a directory that cannot be opened,
    a file that cannot be read or whose last unit says nothing) is walked as always, with
    its foreign entries, errors and problems; so is every topic of a child that failed."""

    min_offset: int
    cq_file_size: int
    min_topics: int = 128
    # directory key of a queue listed by ``_chunk_walk`` -> its files' values as read (``STOP``
    # records: inode, device, size, mtime_ns, value), oldest first; the planner takes them
    values: dict[bytes, bytes] = field(default_factory=dict)
    shared: bool = False  # a child was started
    reads: int = 0  # files read for ``values`` (added to the reader's count)
    topics: int = 0  # topic directories the child did


new_tuple = tuple.__new__
_CHUNKS = 512  # the topics are claimed in about this many chunks (see halfwalk)
_CHUNK_HEAD = struct.Struct("=qqq")  # int64s, bytes of keys and values, names tuples
_VALUE = struct.Struct("=QQqqq")  # (plan.STOP) inode, device, size, mtime_ns, value
_VALUE_AT = 32
_CQ_OFFSET = struct.Struct(">q")  # a ConsumeQueue unit's CommitLog offset (formats.CQ_UNIT)
_FILE_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # (reader.read_at)


def _chunk_walk(cq_dir: str, topics: tuple[str, ...], min_offset: int, cq_file_size: int,
                lo: int, hi: int) -> bytes:  # fmt: skip
    """Topics ``lo..hi-1`` (in either process), each listed and its queues' files read,
    packed for ``_chunk_listings``: per topic 1 and its number of queue directories, then per
    queue directory its id, its names tuple's number in this chunk and how many files were
    read (int64s); the keys and values (bytes); the names tuples (their lengths, then the
    names written out). A topic with anything unusual in it is a 0 (the walk does it)."""
    ints = array("q")
    blob = bytearray()
    tuples: dict[tuple[str, ...], int] = {}
    for t in range(lo, hi):
        mark, blob_mark = len(ints), len(blob)
        try:
            done = _chunk_topic(f"{cq_dir}/{topics[t]}", min_offset, cq_file_size, ints,
                                blob, tuples)  # fmt: skip
        except (OSError, ValueError):
            done = False
        if not done:
            del ints[mark:]
            del blob[blob_mark:]
            ints.append(0)
    lengths = array("q", map(len, tuples))
    text = "".join(name for names in tuples for name in names).encode("ascii")
    return b"".join((_CHUNK_HEAD.pack(len(ints), len(blob), len(lengths)), ints.tobytes(),
                     blob, lengths.tobytes(), text))  # fmt: skip


def _chunk_topic(path: str, min_offset: int, cq_file_size: int, ints: array[int],
                 blob: bytearray, tuples: dict[tuple[str, ...], int]) -> bool:  # fmt: skip
    """One topic directory for ``_chunk_walk``: False when it holds anything but queue
    directories of queue files, or anything fails. As the walk: the topic directory opened
    without following a symlink, each queue directory stat-ed relative to it, each file
    opened relative to it without following a symlink."""
    queue_dirs: list[tuple[str, int]] = []
    with os.scandir(path) as entries:
        for entry in entries:
            name = entry.name
            queue_id = parse_queue_id(name)
            if queue_id is None or not entry.is_dir(follow_symlinks=False):
                return False
            queue_dirs.append((intern(name), queue_id))
    ints.append(1)
    ints.append(len(queue_dirs))
    at = cq_file_size - CQ_UNIT_SIZE
    fd = os.open(path, _DIR_FLAGS)
    try:
        for name, queue_id in queue_dirs:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            key = DIR_KEY.pack(st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
            files: list[str] = []
            with os.scandir(f"{path}/{name}") as entries:
                for entry in entries:
                    file = entry.name
                    if not (
                        len(file) == 20
                        and file.isdigit()
                        and file.isascii()
                        and file <= _MAX_OFFSET_NAME
                        and entry.is_file(follow_symlinks=False)
                    ):
                        return False
                    files.append(file)
            files.sort()
            names = (*files,)
            number = tuples.setdefault(names, len(tuples))
            blob += key
            reads = 0
            for file in files[:-1]:  # as plan_queue: oldest first, up to the first kept
                reads += 1
                ffd = os.open(f"{name}/{file}", _FILE_OPEN, dir_fd=fd)
                try:
                    fst = os.fstat(ffd)
                    if not S_ISREG(fst.st_mode) or fst.st_size != cq_file_size:
                        return False
                    unit = os.pread(ffd, CQ_UNIT_SIZE, at)
                finally:
                    os.close(ffd)
                if len(unit) != CQ_UNIT_SIZE or not any(unit):
                    return False
                value = _CQ_OFFSET.unpack_from(unit)[0]
                if value < 0:
                    return False
                blob += _VALUE.pack(fst.st_ino, fst.st_dev, fst.st_size, fst.st_mtime_ns, value)
                if value >= min_offset:
                    break
            ints.append(queue_id)
            ints.append(number)
            ints.append(reads)
    finally:
        os.close(fd)
    return True


def _chunk_listings(
    data: memoryview, topics: tuple[str, ...], lo: int, hi: int, root: QueueRoot,
    prefetch: Prefetch, child: bool,
) -> Iterator[str | list[QueueListing]]:  # fmt: skip
    """What ``_chunk_walk`` packed: per topic, its queue listings as the walk makes them (the
    values read go to ``prefetch.values``), or its name when the walk is to do it."""
    n_ints, n_blob, n_tuples = _CHUNK_HEAD.unpack_from(data)
    at = _CHUNK_HEAD.size
    ints = array("q")
    ints.frombytes(data[at : at + 8 * n_ints])
    at += 8 * n_ints
    blob = data[at : at + n_blob]
    at += n_blob
    lengths = array("q")
    lengths.frombytes(data[at : at + 8 * n_tuples])
    text = str(data[at + 8 * n_tuples :], "ascii")
    tuples: list[tuple[str, ...]] = []
    pos = 0
    for n in lengths:
        tuples.append(tuple(intern(text[p : p + 20]) for p in range(pos, pos + 20 * n, 20)))
        pos += 20 * n
    values = prefetch.values
    size = _VALUE.size
    i = b = 0
    for t in range(lo, hi):
        if not ints[i]:
            i += 1
            yield topics[t]
            continue
        topic = topics[t]
        n_queues = ints[i + 1]
        i += 2
        if child:
            prefetch.topics += 1
        listings: list[QueueListing] = []
        for _ in range(n_queues):
            queue_id, number, reads = ints[i], ints[i + 1], ints[i + 2]
            i += 3
            key = bytes(blob[b : b + 32])
            b += 32
            if reads:
                values[key] = bytes(blob[b : b + size * reads])
                b += size * reads
                prefetch.reads += reads
            names = tuples[number]
            if names:  # (a QueueListing, made as its __new__ would, with its defaults)
                listings.append(
                    new_tuple(QueueListing, (topic, queue_id, root, names, False, key, ()))
                )
        yield listings


class QueueLister:
    """Lists ``consumequeue/<topic>/<queueId>/`` and remembers directory listings.

    A directory whose mtime and inode are unchanged since a listing taken more than a second
    after its last change still holds the same names (creating, removing or renaming an entry
    updates the directory's mtime), so a later round costs one stat per directory instead of
    a full listing, and hands back the very same QueueListing object (``unchanged=True``),
    which lets the planner reuse its earlier decision. Any doubt (a racy timestamp, an error)
    means listing again. Stale names can only ever make a round keep more: every deletion is
    re-checked on the file itself.
    """

    def __init__(self) -> None:
        # consumequeue/ and its topic directories (see Parents).
        self._parents = Parents()
        # The directory key a listing was taken under -> the listing, with the foreign entries
        # found (``names`` empty: a directory without queue files). The key packs the mtime,
        # the change time (utime() can set an mtime back, never a ctime), the inode and the
        # device into one bytes object (``DIR_KEY``): compact for 100k+ queues, and compared
        # exactly. Keyed by it rather than by path, a daemon keeps no path string per queue
        # directory (the listings hold the store's ``QueueRoot``); a directory that changed
        # is found under its new key, and what no walk visits any more is dropped at the end
        # of the walk. One object per queue directory: a daemon keeps them all.
        self._queues: dict[bytes, QueueListing] = {}
        self._root: QueueRoot | None = None
        # Names tuples (and topic children tuples) of the listings taken in this walk, to share
        # equal ones (emptied before and after each walk, so that it never holds names no
        # queue has any more).
        self._names: dict[Any, Any] = {}
        self.listed = 0  # directories actually read in the last walk (benchmarks, tests)
        # Queue directories listed since the scan cache file last took the listings (``saved``):
        # counted across walks, so that listings a ``plan`` took (it writes no cache) are
        # written by the next round that does, even when that round lists nothing itself.
        self.queues_listed = 0

    def _root_children(
        self, path: str, foreign: list[ForeignEntry], errors: list[StoreError] | None
    ) -> tuple[str, ...]:
        """The topic directories of ``consumequeue/`` (followed if a symlink, as configured:
        the listing is remembered under its target's identity, which a new entry changes);
        the rest is foreign. One that cannot be stat-ed or listed is a store error."""
        parents = self._parents
        if parents.root_path != path:  # another store's (never, but then nothing is shared)
            self._parents = parents = Parents(path)
        what = "consumequeue directory"
        try:
            st = os.stat(path)
        except OSError as exc:
            parents.root = None
            if exc.errno not in _GONE and errors is not None:
                errors.append(StoreError(path, f"cannot stat the {what}: {exc.strerror}"))
            return ()
        key = PARENT_KEY.pack(st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        cached = parents.root
        if cached is not None and cached[0] == key:
            foreign.extend(cached[2])
            return cached[1]  # type: ignore[return-value]
        listed = self._list_parent(path, what, False, errors)
        if listed is None:
            parents.root = None
            return ()
        names, strangers, listed_at = listed
        foreign.extend(strangers)
        parents.root = (key, names, strangers) if st.st_mtime_ns < listed_at - _RACY_NS else None
        return names  # type: ignore[return-value]

    def _list_parent(
        self, path: str, what: str, pairs: bool, errors: list[StoreError] | None
    ) -> tuple[tuple[object, ...], tuple[ForeignEntry, ...], int] | None:
        """Subdirectories (names, or (name, queue id or None) pairs), foreign entries and when
        it was listed; None when it cannot be listed (a store error unless it is gone)."""
        listed_at = time.time_ns()
        self.listed += 1
        children: list[object] = []
        strangers: list[ForeignEntry] = []
        share = self._names.setdefault
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        name = intern(entry.name)  # "0".."N" once, not once per topic
                        if pairs:
                            pair = (name, parse_queue_id(name))
                            children.append(share(pair, pair))
                        else:
                            children.append(name)
                    else:
                        why = _classify(entry) or ForeignWhy.NAME
                        strangers.append(ForeignEntry(entry.path, why))
        except OSError as exc:
            if exc.errno not in _GONE and errors is not None:
                errors.append(StoreError(path, f"cannot list the {what}: {exc.strerror}"))
            return None
        result = (*children,)
        return share(result, result), (*strangers,), listed_at

    def _topic_children(
        self, topic: str, path: str, st: os.stat_result, foreign: list[ForeignEntry],
        errors: list[StoreError] | None,
    ) -> Children:  # fmt: skip
        """A topic directory's queue directories, remembered while its identity holds."""
        parents = self._parents
        topics = parents.topics
        key = PARENT_KEY.pack(st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        cached = topics.get(topic)
        if cached is not None:
            if type(cached) is bytes:
                if cached == key:
                    return parents.usual  # type: ignore[return-value]
            elif cached[0] == key:
                if cached[2]:
                    foreign.extend(cached[2])  # type: ignore[arg-type]
                return cached[1]  # type: ignore[return-value]
        listed = self._list_parent(path, "topic directory", True, errors)
        if listed is None:
            topics.pop(topic, None)
            return ()
        children, strangers, listed_at = listed
        foreign.extend(strangers)
        if st.st_mtime_ns < listed_at - _RACY_NS:
            parents.put(topic, key, children, strangers)
        else:
            topics.pop(topic, None)
        return children  # type: ignore[return-value]

    def _list_queue(
        self, path: str, st: os.stat_result, key: bytes, topic: str, queue_id: int,
        root: QueueRoot, foreign: list[ForeignEntry], errors: list[StoreError] | None,
    ) -> tuple[QueueListing | None, bool]:  # fmt: skip
        """The listing to hand out (None: no queue files, or not listable) and whether it
        was remembered (under ``key``)."""
        listed_at = time.time_ns()
        self.listed += 1
        self.queues_listed += 1
        try:
            names, strangers = _list_dir(path, foreign)
        except OSError as exc:
            if exc.errno not in _GONE and errors is not None:
                msg = f"cannot list the queue directory: {exc.strerror}"
                errors.append(StoreError(path, msg))
            return None, False
        t = (*names,)
        t = self._names.setdefault(t, t)  # queues with the same file names share one tuple
        listing = QueueListing(topic, queue_id, root, t, False, key) if names else None
        if st.st_mtime_ns < listed_at - _RACY_NS:
            self._queues[key] = QueueListing(topic, queue_id, root, t, True, key, (*strangers,))
            return listing, True
        return listing, False

    def saved(self) -> None:
        """The scan cache file now holds every listing remembered."""
        self.queues_listed = 0

    def queue_entries(self) -> ItemsView[bytes, QueueListing]:
        """The remembered queue listings as (directory key, listing), for the scan cache
        file (a listing with no names: a directory without queue files)."""
        return self._queues.items()

    def parent_entries(self) -> Parents:
        """The remembered listings of ``consumequeue/`` and its topic directories."""
        return self._parents

    def preload_parents(self, entries: Parents) -> None:
        """Parent listings from the cache file, used only while each directory keeps its
        mtime, ctime and inode (a stale one could only leave a queue out: keep more)."""
        self._parents = entries

    def preload(self, entries: Mapping[bytes, QueueListing]) -> None:
        """Listings from the cache file (``scancache``), used only while each directory keeps
        its identity. They are handed out as they are (``unchanged``): the first round after a
        start has no earlier decision for them, so ``plan_queues`` checks every file's
        identity before it uses a value from the file, and from the next round on the
        listing is the one those checks were made under. A lister that remembers nothing
        yet (a start) takes the dictionary itself rather than a copy of 100k+ entries."""
        if not self._queues and isinstance(entries, dict):
            self._queues = entries
        else:
            self._queues.update(entries)

    def iter_queues(
        self,
        consumequeue_dir: str,
        foreign: list[ForeignEntry],
        errors: list[StoreError] | None = None,
        prefetch: Prefetch | None = None,
    ) -> Iterator[QueueListing]:
        """Every ``topic/queueId`` directory with its file names; files are not stat-ed.

        A directory only the broker reads is a queue: one whose name is the decimal form of
        its id (``parse_queue_id``); any other is foreign. A directory that cannot be stat-ed
        or listed is added to ``errors`` (``StoreError``) and nothing under it is yielded.

        The loop is written out (one stat and one dict lookup per queue directory on the
        common path) because it runs over every queue of the store.

        ``prefetch``: a walk that may be shared with a forked child (see ``Prefetch``);
        the topics walked that way are handed out as the walk would have made them, and
        not remembered (only a walk that leaves nothing behind asks for one).
        """
        self.listed = 0
        self._names = {}
        root = self._root
        if root is None or root.path != consumequeue_dir:
            if root is not None:
                self._queues = {}  # another store's (never, but then nothing is shared)
            self._root = root = QueueRoot(consumequeue_dir)
        queues = self._queues
        get = queues.get
        pack = DIR_KEY.pack
        stat = os.stat
        visited: list[bytes] = []  # the keys of the listings remembered after this walk
        remember = visited.append
        topics = self._root_children(consumequeue_dir, foreign, errors)
        forget = self._parents.topics.pop
        shared = None
        source: Iterator[str | list[QueueListing]] | tuple[str, ...] = topics
        if prefetch is not None and forked.allowed(len(topics), prefetch.min_topics):
            work = partial(_chunk_walk, consumequeue_dir, topics, prefetch.min_offset,
                           prefetch.cq_file_size)  # fmt: skip
            shared = HalfWalk.start(len(topics), max(1, len(topics) // _CHUNKS), work)
            if shared is not None:
                prefetch.shared = True
                source = self._shared_topics(shared, work, topics, root, prefetch)
        try:
            for topic in source:
                if not isinstance(topic, str):  # walked by _chunk_walk (see _shared_topics)
                    yield from topic
                    continue
                topic_path = f"{consumequeue_dir}/{topic}"
                # The topic directory is opened once (never through a symlink) and stat-ed by its
                # descriptor, and each queue directory is stat-ed relative to it: the kernel walks
                # one path component per stat instead of the whole absolute path (a sixth of the
                # stat's cost on a 100k-queue store).
                topic_fd: int | None
                try:
                    topic_fd = os.open(topic_path, _DIR_FLAGS)
                except OSError as exc:
                    if exc.errno in _GONE_OR_NOT_A_DIR:
                        # Listed as a directory a moment ago, now gone or replaced (by a symlink,
                        # say): nothing of it this round; the next one lists consumequeue/ again.
                        forget(topic, None)
                        continue
                    topic_fd = None  # (out of descriptors, say) by absolute path, as before
                try:
                    try:
                        if topic_fd is not None:
                            tst = os.fstat(topic_fd)
                        else:
                            tst = stat(topic_path, follow_symlinks=False)
                    except OSError as exc:
                        forget(topic, None)
                        if exc.errno not in _GONE and errors is not None:
                            msg = f"cannot stat the topic directory: {exc.strerror}"
                            errors.append(StoreError(topic_path, msg))
                        continue
                    children = self._topic_children(topic, topic_path, tst, foreign, errors)
                    for name, queue_id in children:
                        if queue_id is None:
                            foreign.append(ForeignEntry(f"{topic_path}/{name}", ForeignWhy.NAME))
                            continue
                        try:
                            if topic_fd is not None:
                                st = stat(name, dir_fd=topic_fd, follow_symlinks=False)
                            else:
                                st = stat(f"{topic_path}/{name}", follow_symlinks=False)
                        except OSError as exc:
                            if exc.errno not in _GONE and errors is not None:
                                msg = f"cannot stat the queue directory: {exc.strerror}"
                                errors.append(StoreError(f"{topic_path}/{name}", msg))
                            continue
                        key = pack(st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
                        listing = get(key)
                        # (The key holds the inode and device: no other directory has it. The
                        # names are checked anyway, as cheaply: the topic strings are shared.)
                        if listing is not None and listing[1] == queue_id and listing[0] == topic:
                            remember(listing.key)  # (not ``key``: an equal object, made just now)
                            if listing.strangers:
                                foreign.extend(listing.strangers)
                            if listing.names:
                                yield listing
                            continue
                        listing, kept = self._list_queue(
                            f"{topic_path}/{name}", st, key, topic, queue_id, root, foreign, errors
                        )
                        if kept:
                            remember(key)
                        if listing is not None:
                            yield listing
                finally:
                    if topic_fd is not None:
                        os.close(topic_fd)
        finally:
            if shared is not None:
                shared.close()
        self._names = {}  # the listings share their tuples now: nothing more to keep
        if len(queues) != len(visited):
            # Directories gone, changed (remembered under their new key), unreadable or
            # racy this walk: only what this walk saw is remembered.
            self._queues = {key: queues[key] for key in visited}

    def _shared_topics(
        self, shared: HalfWalk, work: Work, topics: tuple[str, ...], root: QueueRoot,
        prefetch: Prefetch,
    ) -> Iterator[str | list[QueueListing]]:  # fmt: skip
        """The topics of a walk shared with a child, in order: for each topic walked by
        ``work`` (the chunks this process claims, then the child's), its listings; the name
        of each other one (unusual, or the child failed), for the walk to do as always."""
        while (claimed := shared.claim()) is not None:
            lo, hi = claimed
            yield from self._counted(_chunk_listings(memoryview(work(lo, hi)), topics, lo, hi,
                                                     root, prefetch, False))  # fmt: skip
        results = shared.results()
        if results is None:  # the child failed: the rest is done here
            yield from topics[shared.first_of_child * shared.chunk :]
            return
        for lo, hi, data in results:
            yield from self._counted(
                _chunk_listings(memoryview(data), topics, lo, hi, root, prefetch, True)
            )

    def _counted(
        self, got: Iterator[str | list[QueueListing]]
    ) -> Iterator[str | list[QueueListing]]:
        """``got``, with the directories listed in it counted as the walk counts its own."""
        for topic in got:
            if type(topic) is list:
                self.listed += 1 + len(topic)
                self.queues_listed += len(topic)
            yield topic


def iter_queues(
    consumequeue_dir: str,
    foreign: list[ForeignEntry],
    errors: list[StoreError] | None = None,
) -> Iterator[QueueListing]:
    """A one-off listing (no cache carried between calls)."""
    return QueueLister().iter_queues(consumequeue_dir, foreign, errors)


def _has_entries(path: str, errors: list[StoreError]) -> bool:
    """Whether ``consumequeue/`` has any entry (reads one; cheap even with 100k topics). One
    that exists but cannot be listed, or searched (its first entry stat-ed), is a store error,
    as an unreadable ``index/`` is."""
    try:
        with os.scandir(path) as entries:
            first = next(entries, None)
    except (FileNotFoundError, NotADirectoryError):
        return False  # a store without ConsumeQueue files
    except OSError as exc:
        errors.append(StoreError(path, f"cannot list the consumequeue directory: {exc.strerror}"))
        return False
    if first is None:
        return False
    try:
        first.stat(follow_symlinks=False)
    except FileNotFoundError:
        pass  # gone since it was listed
    except OSError as exc:
        errors.append(StoreError(path, f"cannot search the consumequeue directory: {exc.strerror}"))
    return True


def scan(
    settings: Settings[RocketMQStore],
    *,
    now_ms: int | None = None,
    lister: QueueLister | None = None,
) -> Snapshot:
    foreign: list[ForeignEntry] = []
    errors: list[StoreError] = []
    root = str(settings.store.store_path_root_dir)
    why = store_root_problem(settings.store.store_path_root_dir)
    if why is not None:
        # Missing, unmounted, unreadable or not a store (checked every round, as at start-up):
        # nothing under it is read, so nothing is planned, deleted or created.
        errors.append(StoreError(root, f"store root {why}"))
        return Snapshot(
            root=root,
            commitlog=(),
            index=(),
            index_dir=str(settings.store.index_dir),
            consumequeue_dir=str(settings.store.consumequeue_dir),
            foreign=(),
            errors=tuple(errors),
            taken_at_ms=now_ms if now_ms is not None else time.time_ns() // 1_000_000,
            list_queues=lambda: iter(()),
            timerlog_dir=str(settings.store.timerlog_dir),
        )
    commitlog = _scan_commitlog(settings, foreign, errors)
    index_dir = str(settings.store.index_dir)
    index = _scan_index(index_dir, foreign, errors)
    timerlog_dir = str(settings.store.timerlog_dir)
    timerlog = _scan_timerlog(timerlog_dir, foreign, errors)
    cq_dir = str(settings.store.consumequeue_dir)
    has_queues = _has_entries(cq_dir, errors)
    if not commitlog and not errors and (index or has_queues):
        # The broker never deletes its last CommitLog file, so an empty CommitLog beside
        # ConsumeQueue or index files is a disk that is not mounted (an empty mount point).
        errors.append(
            StoreError(
                ",".join(map(str, settings.store.store_path_commitlog)),
                "no CommitLog files although the store has ConsumeQueue or index files "
                "(a CommitLog disk not mounted?)",
            )
        )
    queue_foreign: list[ForeignEntry] = []
    queue_errors: list[StoreError] = []
    return Snapshot(
        root=root,
        commitlog=commitlog,
        index=index,
        index_dir=index_dir,
        consumequeue_dir=cq_dir,
        foreign=tuple(foreign),
        errors=tuple(errors),
        taken_at_ms=now_ms if now_ms is not None else time.time_ns() // 1_000_000,
        list_queues=lambda prefetch=None: (lister or QueueLister()).iter_queues(
            cq_dir, queue_foreign, queue_errors, prefetch
        ),
        queue_foreign=queue_foreign,
        queue_errors=queue_errors,
        timerlog=timerlog,
        timerlog_dir=timerlog_dir,
    )
