"""What each CommitLog deletion loses: the offset -> ConsumeQueue unit -> CommitLog file
mapping of ``shared/spec/consumers.md`` §A.3, per group, delay level, half and timer queue.

A group's unread messages in a CommitLog file ``[start, end)`` of topic ``T``, queue ``q``
are the ConsumeQueue units with index at or above its offset (clamped to the queue's minimum)
whose physical offset lies in the file. Within one queue the physical offset grows with the
index, so each file boundary is one binary search over the queue's units (a few ``pread``s),
shared by every group of that queue: the cost follows the queues the groups read and the
files the plan deletes, not the size of the queues.
"""

from __future__ import annotations

import bisect
import os
import stat
import struct
import time
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from retentiond.engine.loss import GroupLoss, GroupState, Loss, Progress
from retentiond.kinds.rocketmq.formats import CQ_UNIT, CQ_UNIT_SIZE
from retentiond.kinds.rocketmq.frontiers import Frontiers
from retentiond.kinds.rocketmq.names import parse_offset_name, parse_queue_id
from retentiond.kinds.rocketmq.progress import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_GROUP,
    ConsumerProgress,
    is_directory_name,
)
from retentiond.kinds.rocketmq.scan import DIR_KEY

_INT_MAX = (1 << 31) - 1
_PAST = -1  # a pre-blank filler unit: below every file
_END = 1 << 63  # an unwritten unit: past every file
_CHUNK = 64  # units taken by one read (1,280 bytes)
_RACY_NS = 1_000_000_000  # a directory changed this close to a count: its frontiers not kept
# Unpackers of n units' CommitLog offsets and sizes, by n (QueueUnits.chunk_keys).
_PHY_SIZE: dict[int, Callable[[bytes, int], tuple[int, ...]]] = {}


class QueueUnits:
    """One ConsumeQueue's units read by logical index, with ``pread`` on demand."""

    def __init__(self, directory: str, cq_file_size: int, *, listed: bool = True) -> None:
        self.directory = directory
        self.cq_file_size = cq_file_size
        self.per_file = cq_file_size // CQ_UNIT_SIZE
        self._fds: dict[int, int] = {}
        self._chunk: tuple[int, bytes] = (0, b"")  # the units last read, from this index
        self.reads = 0
        self.starts: list[int] = []
        self.min_index = self.limit_index = 0
        self.listed = False
        self._end_index: int | None = None
        if listed:
            self.list()

    def list(self) -> None:
        """The queue's files, from its directory: its first and last unit."""
        names = []
        for name in os.listdir(self.directory):
            start = parse_offset_name(name)
            if start is not None and start % self.cq_file_size == 0:
                names.append(start)
        names.sort()
        self.starts = names
        self.listed = True
        self.min_index = names[0] // CQ_UNIT_SIZE if names else 0
        # One past the last unit the last file can hold: every unit from the written end to
        # here reads as unwritten, so a search needs no exact end.
        self.limit_index = names[-1] // CQ_UNIT_SIZE + self.per_file if names else 0

    @property
    def end_index(self) -> int:
        """One past the last written unit (searched on first use)."""
        if self._end_index is None:
            self._end_index = self._end() if self.starts else 0
        return self._end_index

    def search(self, phy: int, lo: int) -> int:
        """The first index at or after ``lo`` whose unit is at or above ``phy``. Unlisted,
        by galloping from ``lo`` (a file past the last one raises FileNotFoundError: the
        caller lists the queue and searches again)."""
        if self.listed:
            return self.lower_bound(phy, lo, self.limit_index)
        step, hi = 1, lo
        while self.key(hi) < phy:
            lo = hi + 1
            hi += step
            step *= 2
        return self.lower_bound(phy, lo, hi)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> QueueUnits:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def key(self, index: int) -> int:
        """The unit's CommitLog offset, made monotonic: fillers low, unwritten units high.

        Each read takes up to ``_CHUNK`` units from ``index`` on (to the file's end): the
        searches go upward from the first unit read, so a short queue or a frontier near
        its end is served from that one read."""
        first, data = self._chunk
        at = (index - first) * CQ_UNIT_SIZE
        if at < 0 or at + CQ_UNIT_SIZE > len(data):
            file_start = (index // self.per_file) * self.cq_file_size
            fd = self._fds.get(file_start)
            if fd is None:
                fd = os.open(f"{self.directory}/{file_start:020d}", os.O_RDONLY | os.O_NOFOLLOW)
                self._fds[file_start] = fd
            self.reads += 1
            within = index % self.per_file
            count = min(_CHUNK, self.per_file - within)
            data = os.pread(fd, count * CQ_UNIT_SIZE, within * CQ_UNIT_SIZE)
            self._chunk = (index, data)
            at = 0
            if len(data) < CQ_UNIT_SIZE:
                return _END
        phy, size, _tags = CQ_UNIT.unpack_from(data, at)
        if size == _INT_MAX and phy == 0:
            return _PAST
        if size <= 0 or phy < 0:
            return _END
        return phy

    def chunk_keys(self, index: int) -> Sequence[int]:
        """The keys (as ``key``) of the units read last from ``index`` to the end of that
        read, when they are non-decreasing (as a queue's are); else, or when ``index`` is
        not in it, []. A bound below the last of them is found among them by ``bisect``,
        with the same answer as ``search`` gives, and no unit read again."""
        first, data = self._chunk
        at = (index - first) * CQ_UNIT_SIZE
        n = (len(data) - at) // CQ_UNIT_SIZE if at >= 0 else 0
        if n <= 0:
            return []
        unpack = _PHY_SIZE.get(n)
        if unpack is None:
            unpack = _PHY_SIZE[n] = struct.Struct(">" + "qi8x" * n).unpack_from
        both = unpack(data, at)
        keys = list(both[0::2])
        sizes = both[1::2]
        if min(sizes) <= 0 or max(sizes) == _INT_MAX or min(keys) < 0:
            keys = [
                _PAST if size == _INT_MAX and phy == 0 else _END if size <= 0 or phy < 0 else phy
                for phy, size in zip(keys, sizes, strict=True)
            ]
        if keys != sorted(keys):
            return []
        return keys

    def _end(self) -> int:
        """One past the last written unit (ConsumeQueue.recover: the first unit with
        ``size <= 0`` ends the queue), searched in the last file."""
        last = self.starts[-1] // CQ_UNIT_SIZE
        lo, hi = last, last + self.per_file
        while lo < hi:
            mid = (lo + hi) // 2
            if self.key(mid) == _END:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def lower_bound(self, phy: int, lo: int | None = None, hi: int | None = None) -> int:
        """The first index in ``[lo, hi)`` (default: the whole queue) whose unit is at or
        above CommitLog offset ``phy``; ``hi`` when none is."""
        lo = self.min_index if lo is None else lo
        hi = self.end_index if hi is None else hi
        while lo < hi:
            mid = (lo + hi) // 2
            if self.key(mid) < phy:
                lo = mid + 1
            else:
                hi = mid
        return lo


class GroupPolicy:
    """Which state a group is reported in: disabled (consumeEnable=false), ignored (a name
    pattern), stale (offsets unmoved for ``staleAfter``), else active."""

    def __init__(
        self,
        enabled: dict[str, bool] | None = None,
        ignore: Sequence[str] = (),
        stale: frozenset[str] = frozenset(),
    ) -> None:
        self.enabled = enabled
        self.ignore = tuple(ignore)
        self.stale = stale

    def state(self, group: str) -> GroupState:
        if self.enabled is not None and self.enabled.get(group) is False:
            return GroupState.DISABLED
        if any(fnmatchcase(group, p) for p in self.ignore):
            return GroupState.IGNORED
        if group in self.stale:
            return GroupState.STALE
        return GroupState.ACTIVE


def _queue_dirs(cq_root: Path, topic: str) -> dict[int, str] | None:
    """The topic's queue directories by id; {} when it has none; None when its directory is
    there but cannot be listed (its readers' loss cannot be counted). A name that cannot be
    a directory's has none: {} (``read_progress`` skips such entries and says so)."""
    if not is_directory_name(topic):
        return {}
    try:
        names = os.listdir(cq_root / topic)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except (OSError, ValueError):
        return None
    out: dict[int, str] = {}
    for name in names:
        qid = parse_queue_id(name)
        if qid is not None:
            out[qid] = f"{cq_root}/{topic}/{name}"
    return out


class _CaughtUp(Exception):
    """A queue whose readers are all caught up, with the frontiers fixed below them."""

    def __init__(self, floor: int, clamp: int, runs: list[tuple[int, int]]) -> None:
        super().__init__(floor)
        self.floor, self.clamp, self.runs = floor, clamp, runs


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_PATH", 0)


def _open_dir(path: str) -> int | None:
    """A topic directory opened to stat its queue directories relative to it (never through
    a symlink); None when it cannot be (they are then stat-ed by their whole path)."""
    try:
        return os.open(path, _DIR_FLAGS)
    except OSError:
        return None


def commitlog_losses(
    progress: ConsumerProgress,
    cq_root: Path,
    cq_file_size: int,
    files: Sequence[tuple[int, int]],
    policy: GroupPolicy | None = None,
    problem: Callable[[str, str], None] | None = None,
    memory: Frontiers | None = None,
) -> list[Loss]:
    """One ``Loss`` per CommitLog file ``[start, end)`` in ``files`` (ascending, adjacent or
    not), from the progress read this round; with ``memory``, the frontiers recorded by
    earlier counts where they hold, and this count's recorded into it (``frontiers``)."""
    policy = policy or GroupPolicy(dict(progress.enabled) if progress.enabled else None)
    n = len(files)
    if n == 0:
        return []
    bounds = tuple(sorted({b for f in files for b in f}))
    groups: list[dict[tuple[str, str], int]] = [{} for _ in range(n)]
    delay: list[dict[int, int]] = [{} for _ in range(n)]
    half = [0] * n
    timers = [0] * n
    uncounted: set[str] = set()

    def queue_dirs(topic: str) -> dict[int, str]:
        dirs = _queue_dirs(cq_root, topic)
        if dirs is None:
            uncounted.add(topic)
            if problem is not None:
                problem(f"{cq_root}/{topic}", "unreadable: its readers' loss is not counted")
            return {}
        return dirs

    starts = [f[0] for f in files]

    # The frontier memory serves reports only (a guard that keeps reads the queues).
    lookup = memory.reader(bounds) if memory is not None else None
    recording = memory is not None and memory.recording
    settled_before = time.time_ns() - _RACY_NS  # a directory changed since: not recorded

    def unit_at(q: QueueUnits, index: int) -> int:
        """``q.key(index)``; unwritten past a listed queue's last file (never opened)."""
        return _END if q.listed and index >= q.limit_index else q.key(index)

    def frontiers(
        q: QueueUnits, firsts: dict[object, int | None]
    ) -> tuple[dict[int, int], dict[object, int], int, list[tuple[int, int]]] | None:
        """Each bound's first unit at or above it, each reader's first needed index
        (clamped to the queue's first unit), that clamp (0 without a listing) and, when
        ``recording``, the runs of frontiers that are fixed (position in ``bounds``,
        frontier or -1: see ``frontiers``); None when no reader has anything left.
        Without a listing, the lowest reader's file is opened directly: it raises
        FileNotFoundError when that reader is before the first file or past the last one."""
        if not q.listed and any(f is None for f in firsts.values()):
            q.list()
        clamp = 0
        if q.listed:
            if not q.starts:
                return None
            clamp = q.min_index
            needs = {
                who: clamp if first is None else max(first, clamp) for who, first in firsts.items()
            }
            low = min(needs.values())
            if low >= q.limit_index:
                return None  # past the last file: nothing left to read
        else:
            needs = {who: first for who, first in firsts.items() if first is not None}
            low = min(needs.values())
            if low < 0:
                raise FileNotFoundError(low)
        low_phy = q.key(low)
        if low_phy == _END:
            # Every reader caught up (or past the end after a truncation): nothing to
            # count. The bounds at or below the last written unit have their frontiers
            # below every reader for good (that unit and those before it are written):
            # recorded as at most ``low``.
            if recording and low > max(clamp, q.min_index if q.listed else 0):
                last = q.key(low - 1)
                if last not in (_END, _PAST):
                    below = bisect.bisect_right(bounds, last)
                    if below:
                        known = [(0, low)] if below == len(bounds) else [(0, low), (below, -1)]
                        raise _CaughtUp(low, clamp if q.listed else -1, known)
            return None
        # At or below every reader's first unread unit: the bounds up to the unit at low.
        k = bisect.bisect_right(bounds, low_phy)
        idx = dict.fromkeys(bounds[:k], low)
        runs: list[tuple[int, int]] = [(0, low)] if k and recording else []
        last = low if k else -2
        lo = low + 1
        # The units read with the lowest reader's: most bounds fall among them.
        keys = q.chunk_keys(low)
        past = low + len(keys)
        n_bounds = len(bounds)
        while k < n_bounds:  # ascending: each search starts where the last ended
            b = bounds[k]
            at = bisect.bisect_left(keys, b)
            if at < len(keys):
                lo = low + at
                unit = keys[at]
            else:
                lo = max(lo, past)
                unit = unit_at(q, lo)
                if unit < b:  # (else the frontier is where the last one was)
                    lo = q.search(b, lo)
                    unit = unit_at(q, lo)
            # Every bound up to that unit has the same frontier (all, past the last unit).
            upto = n_bounds if unit == _END else bisect.bisect_right(bounds, unit, k)
            idx.update(dict.fromkeys(bounds[k:upto], lo))
            fixed = -1 if unit == _END else lo
            if recording and fixed != last:
                runs.append((k, fixed))
                last = fixed
            k = upto
        return idx, needs, clamp, runs

    def add_unread(
        top: int,
        ends: list[int],
        firsts: list[int],
        needs: dict[object, int],
        add: Callable[[int, object, int], None],
    ) -> None:
        """Each reader's unread units in each file, from the files' first and end indexes."""
        for who, need in needs.items():
            if need >= top:
                continue  # nothing unread below the last file's end
            for j in range(bisect.bisect_right(ends, need), n):
                first = firsts[j]
                if first >= top:
                    break
                got = ends[j] - max(first, need)
                if got > 0:
                    add(j, who, got)

    def tally(
        idx: dict[int, int], needs: dict[object, int], add: Callable[[int, object, int], None]
    ) -> None:
        ends = [idx[end] for _, end in files]
        add_unread(idx[bounds[-1]], ends, [idx[start] for start in starts], needs, add)

    start_at = [bounds.index(f[0]) for f in files]
    end_at = [bounds.index(f[1]) for f in files]
    # The files' ends and firsts as frontiers, by the frontiers' list (the memory shares one
    # list among the queues whose records are alike): (that list, its ends, its firsts).
    ends_of: dict[int, tuple[list[int], list[int], list[int]]] = {}

    def tally_values(
        values: list[int], needs: dict[object, int], add: Callable[[int, object, int], None]
    ) -> None:
        """``tally`` with the frontiers as a list in the order of ``bounds``."""
        got = ends_of.get(id(values))
        if got is None or got[0] is not values:
            got = ends_of[id(values)] = (
                values,
                [values[e] for e in end_at],
                [values[b] for b in start_at],
            )
        add_unread(values[-1], got[1], got[2], needs, add)

    def remembered(
        directory: str,
        firsts: dict[object, int | None],
        add: Callable[[int, object, int], None],
        parent_fd: int | None,
    ) -> bytes | None:
        """Count from the frontier memory when its record for the directory holds; else
        the directory's key to record the count under (None: not to be recorded). The
        directory is stat-ed relative to its topic's, when open (``parent_fd``)."""
        assert memory is not None and lookup is not None
        try:
            if parent_fd is None:
                st = os.stat(directory, follow_symlinks=False)
            else:
                name = directory.rpartition("/")[2]
                st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except OSError:
            return None  # (the count says what is wrong with it)
        key = DIR_KEY.pack(st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
        got = lookup(key)
        if got is not None:
            floor, clamp, values = got
            # Every reader at or above the floor (then above the clamp too: the needs are
            # the offsets), or clamped up to it (a clamp at the floor).
            if None not in firsts.values():
                offsets: dict[object, int] = firsts  # type: ignore[assignment]
                if min(offsets.values()) >= floor:
                    tally_values(values, offsets, add)
                    return b""
                if clamp == floor:
                    tally_values(values, {w: max(o, clamp) for w, o in offsets.items()}, add)
                    return b""
            elif clamp == floor:
                needs = {w: clamp if o is None else max(o, clamp) for w, o in firsts.items()}
                tally_values(values, needs, add)
                return b""
            memory.forget(key)
        if not stat.S_ISDIR(st.st_mode) or st.st_mtime_ns >= settled_before:
            return None
        return key

    def count(
        directory: str,
        firsts: dict[object, int | None],
        add: Callable[[int, object, int], None],
        parent_fd: int | None = None,
    ) -> None:
        """For each reader (a group, a level...) with its first needed index (None: the
        queue's minimum), add its unread units in each file.

        Only the frontiers are searched: the unit at the lowest reader's index, then each
        file boundary above it, by binary search between that index and the last file's
        end. A queue all of whose readers are caught up costs one read; one whose frontiers
        the memory holds, none."""
        key = None
        if lookup is not None:
            key = remembered(directory, firsts, add, parent_fd)
            if key == b"":
                return
        try:
            with QueueUnits(directory, cq_file_size, listed=False) as q:
                try:
                    try:
                        found = frontiers(q, firsts)
                    except FileNotFoundError:  # a reader outside the files: list them
                        q.list()
                        found = frontiers(q, firsts)
                except _CaughtUp as up:
                    if key is not None and memory is not None:
                        memory.put(key, up.floor, up.clamp, bounds, up.runs)
                    return
                if found is None:
                    return
                idx, needs, clamp, runs = found
                if key is not None and recording and memory is not None:
                    memory.put(key, min(needs.values()), clamp if q.listed else -1, bounds, runs)
                tally(idx, needs, add)
        except OSError as exc:
            uncounted.add(os.path.basename(os.path.dirname(directory)))
            if problem is not None:
                problem(directory, f"unreadable ({exc.strerror}): its readers' loss is not counted")

    for topic, by_group in progress.offsets.items():
        if topic in (HALF_TOPIC, OP_HALF_TOPIC):
            continue
        readers: dict[int, dict[object, int | None]] = {}  # queue id -> group -> offset
        for g, qs in sorted(by_group.items()):
            for qid, offset in qs.items():
                readers.setdefault(qid, {})[g] = offset
        dirs = queue_dirs(topic)

        def add_group(j: int, who: object, got: int, topic: str = topic) -> None:
            key = (str(who), topic)
            groups[j][key] = groups[j].get(key, 0) + got

        topic_fd = _open_dir(f"{cq_root}/{topic}") if lookup is not None and dirs else None
        try:
            for qid, directory in sorted(dirs.items()):
                firsts = readers.get(qid)
                if firsts:
                    count(directory, firsts, add_group, topic_fd)
        finally:
            if topic_fd is not None:
                os.close(topic_fd)

    if progress.delay is not None:
        levels = progress.delay
        for qid, directory in sorted(queue_dirs(SCHEDULE_TOPIC).items()):

            def add_level(j: int, who: object, got: int) -> None:
                assert isinstance(who, int)
                delay[j][who] = delay[j].get(who, 0) + got

            count(directory, {qid + 1: levels.get(qid + 1, 0)}, add_level)

    half_dir = queue_dirs(HALF_TOPIC).get(0)
    if half_dir is not None and progress.progress.value == "known":
        first = progress.offsets.get(HALF_TOPIC, {}).get(TRANS_GROUP, {}).get(0)

        def add_half(j: int, who: object, got: int) -> None:
            half[j] += got

        count(half_dir, {"half": first}, add_half)

    timer = progress.timer
    if timer is not None:
        timer_dir = queue_dirs(TIMER_TOPIC).get(0)
        if timer_dir is not None:

            def add_timer(j: int, who: object, got: int) -> None:
                timers[j] += got

            count(timer_dir, {"enqueue": timer.last_timer_queue_offset}, add_timer)
        pending = timer.pending_phy
        for j, (start, end) in enumerate(files):
            timers[j] += bisect.bisect_left(pending, end) - bisect.bisect_left(pending, start)

    out = []
    # A loss not counted is never reported as known: every file may hold the uncounted
    # readers' messages.
    known = progress.progress is Progress.KNOWN
    state = Progress.PARTIAL if uncounted and known else progress.progress
    for j in range(n):
        out.append(
            Loss(
                state,
                tuple(
                    GroupLoss(g, t, m, policy.state(g)) for (g, t), m in sorted(groups[j].items())
                ),
                timers=timers[j],
                delay_levels=tuple(sorted(delay[j].items())),
                half_messages=half[j],
                uncounted=tuple(sorted(uncounted)),
            )
        )
    return out
