"""Carrying a plan out on a log dir whose broker is stopped (spec §9).

Kafka takes a whole log dir offline when a segment file vanishes under it (§2.5), so nothing
is deleted unless retentiond holds ``<logdir>/.lock`` itself: the same POSIX record lock that
Java's ``FileChannel.tryLock`` takes, held for the whole round so the broker cannot start
mid-deletion. When another process holds it the dir is plan-only and every would-be deletion
is reported as ``broker_running``.

The result is what the broker would have left: segments deleted oldest first (a crash leaves a
contiguous suffix), each with its indexes and its producer snapshot; an empty segment at the log
end offset created *before* the last segment goes; ``log-start-offset-checkpoint`` and
``leader-epoch-checkpoint`` rewritten as Kafka would at its next checkpoint.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.policy import PartitionPlan, TopicConfig, plan_partition
from retentiond.kinds.kafka.scan import LogDirSnapshot, scan_log_dir


class LogDirLock:
    """``<logdir>/.lock`` held with ``lockf(LOCK_EX | LOCK_NB)``. POSIX record locks belong to
    the process and fall with the first close of any descriptor on the file, so this object is
    the only place the daemon opens it."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, fm.LOCK_FILE)
        self._fd: int | None = None

    def acquire(self) -> bool:
        """True if we hold it now; False if another process does (the broker is running).

        Kafka's lock is the POSIX one; a BSD ``flock`` on the file (``flock(1)`` in an
        operator's script, another tool) is taken too, so that either kind of holder keeps
        the dir plan-only. On Linux the two are independent: holding both is no conflict."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)  # drops the POSIX lock if it was taken
            if e.errno in (errno.EACCES, errno.EAGAIN, errno.EWOULDBLOCK):
                return False
            raise
        self._fd = fd
        return True

    @property
    def held(self) -> bool:
        """We hold it now (from ``acquire`` to ``release``)."""
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)  # and the flock with the last descriptor
                self._fd = None

    def __enter__(self) -> LogDirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass
class OfflineResult:
    """What one offline round did to one log dir."""

    log_dir: str
    locked: bool
    plans: list[PartitionPlan] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # every path unlinked
    created: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _partition_dir_fd(part_dir: str) -> int:
    """The partition dir, opened from its log dir without following a symlink: a dir
    swapped for a link after the scan fails here instead of leading out of the store."""
    parent = os.open(os.path.dirname(part_dir), os.O_RDONLY | os.O_DIRECTORY)
    try:
        return os.open(
            os.path.basename(part_dir), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent
        )
    finally:
        os.close(parent)


def _unlink(path: str, result: OfflineResult) -> None:
    """Unlink a companion, a snapshot or a leftover: only a regular file (an ``lstat``
    through the partition dir first). A symlink or anything else under such a name is
    left alone and said so; the scan reports it as foreign. A file that cannot be removed
    (permissions, an immutable attribute) is an error of the round, not an exception: the
    segment's ``.log`` is already gone and journaled, and the partitions after it, their
    companions and the log-start-offset checkpoint must still be seen to."""
    try:
        fd = _partition_dir_fd(os.path.dirname(path))
    except OSError as e:
        result.errors.append(f"{path}: not removed: {e}")
        return
    name = os.path.basename(path)
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            result.errors.append(f"{path}: not a regular file, left alone")
            return
        os.unlink(name, dir_fd=fd)
        result.deleted.append(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        result.errors.append(f"{path}: not removed: {e}")
    finally:
        os.close(fd)


def _create_empty_segment(part_dir: str, base: int, result: OfflineResult) -> None:
    """roll() as an offline tool may: empty ``.log``, ``.index`` and ``.timeindex`` (the broker
    sizes an active segment's indexes on load), and a producer snapshot at the new base unless
    one is there already (the broker's shutdown snapshot at the log end holds the real state).
    Without one the broker would rebuild the producer state from the now empty log, which is
    the empty snapshot's content."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    dfd = _partition_dir_fd(part_dir)
    try:
        files = [(fm.segment_file_name(base, sfx), b"") for sfx in fm.SEGMENT_SUFFIXES[:3]]
        snap = fm.segment_file_name(base, fm.SNAPSHOT_SUFFIX)
        try:
            os.stat(snap, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            files.insert(0, (snap, fm.empty_producer_snapshot()))
        for name, content in files:
            fd = os.open(name, flags, 0o644, dir_fd=dfd)
            try:
                os.write(fd, content)
                os.fsync(fd)
            finally:
                os.close(fd)
            result.created.append(os.path.join(part_dir, name))
        os.fsync(dfd)
    finally:
        os.close(dfd)


def prepare_partition(plan: PartitionPlan, result: OfflineResult, *, whole: bool = True) -> None:
    """Before the first unlink: roll (the empty segment at the log end) when every segment
    goes, so the partition never has no segment, and purge ``.deleted`` leftovers.
    ``whole``: the whole planned prefix is to go (no hold shortened it); a shortened run
    keeps the last segment, so there is nothing to roll, as in Kafka."""
    for leftover in plan.partition.leftovers:  # what the broker purges on load anyway
        _unlink(leftover, result)
    if whole and plan.deletions and plan.roll_offset is not None:
        _create_empty_segment(plan.partition.path, plan.roll_offset, result)


def remove_companions(plan: PartitionPlan, base_offset: int, result: OfflineResult) -> None:
    """After a segment's ``.log`` went: its indexes and its producer snapshot (§2.5)."""
    seg = next(s for s in plan.partition.segments if s.base_offset == base_offset)
    for suffix in (fm.TIME_INDEX_SUFFIX, fm.INDEX_SUFFIX, fm.TXN_INDEX_SUFFIX, fm.SNAPSHOT_SUFFIX):
        _unlink(seg.path(suffix), result)


def finish_partition(
    plan: PartitionPlan,
    deleted_bases: Sequence[int],
    lso_entries: dict[tuple[str, int], int],
) -> bool:
    """After the deletions that really happened (a prefix of the plan's): the leader-epoch
    cache truncated from the new log start offset, and the partition's entry in
    ``lso_entries`` (the log-start-offset checkpoint) set or dropped as LogManager would.
    True if anything changed."""
    if not deleted_bases:
        return False
    part = plan.partition
    tp = (part.topic, part.partition)
    last = max(deleted_bases)
    remaining = [s.base_offset for s in part.segments if s.base_offset > last]
    first = remaining[0] if remaining else plan.roll_offset
    if first is None:  # cannot happen: a full deletion always rolls
        return False
    new_lso = max(first, lso_entries.get(tp, 0))
    # LogManager checkpoints only partitions whose LSO is past their first segment.
    if new_lso > first:
        lso_entries[tp] = new_lso
    else:
        lso_entries.pop(tp, None)
    if part.leader_epochs is not None:
        epochs = fm.truncate_epochs_from_start(part.leader_epochs, new_lso)
        if list(epochs) != list(part.leader_epochs):
            path = os.path.join(part.path, fm.LEADER_EPOCH_CHECKPOINT)
            fm.write_atomically(path, fm.format_leader_epoch_checkpoint(epochs))
    fm.fsync_dir(part.path)
    return True


def write_log_start_checkpoint(
    snap: LogDirSnapshot, lso_entries: dict[tuple[str, int], int]
) -> None:
    """``log-start-offset-checkpoint``: temp file, fsync, rename, fsync the dir."""
    if snap.log_start_offsets is None and not lso_entries:
        return
    path = os.path.join(snap.path, fm.LOG_START_CHECKPOINT)
    fm.write_atomically(path, fm.format_offset_checkpoint(lso_entries))


def carry_out(snap: LogDirSnapshot, plans: Sequence[PartitionPlan], result: OfflineResult) -> None:
    """Delete what ``plans`` say, then rewrite the log dir's log-start-offset checkpoint.

    Call only while holding the dir's lock. Segments go oldest first, ``.log`` last, so a
    failure part-way leaves a contiguous suffix; the checkpoint names what really remains."""
    lso_entries = dict(snap.log_start_offsets or {})
    changed = False
    for plan in plans:
        part = plan.partition
        gone: list[int] = []
        try:
            prepare_partition(plan, result)
            for d in plan.deletions:
                assert d.start_offset is not None
                remove_companions(plan, d.start_offset, result)
                _unlink(d.path, result)
                gone.append(d.start_offset)
        except OSError as e:
            result.errors.append(f"{part.path}: {e}")
        changed |= finish_partition(plan, gone, lso_entries)
    if changed:
        write_log_start_checkpoint(snap, lso_entries)


def run_offline(
    log_dir: str,
    config_for: Callable[[str], TopicConfig | None],
    *,
    now_ms: int,
    cleaner_enabled: bool = True,
    dry_run: bool = False,
    time_index_compat: bool = False,
) -> OfflineResult:
    """One round on one log dir: lock, scan, plan, delete (unless plan-only), unlock."""
    with LogDirLock(log_dir) as lock:
        locked = lock.acquire()
        snap = scan_log_dir(log_dir)
        result = OfflineResult(log_dir, locked)
        result.errors.extend(snap.errors)
        for part in snap.partitions:
            result.plans.append(
                plan_partition(
                    part,
                    config_for(part.topic),
                    now_ms=now_ms,
                    high_watermarks=snap.high_watermarks,
                    log_start_offsets=snap.log_start_offsets,
                    cleaner_enabled=cleaner_enabled,
                    broker_running=not locked,
                    time_index_compat=time_index_compat,
                )
            )
        if locked and not dry_run:
            carry_out(snap, result.plans, result)
        return result
