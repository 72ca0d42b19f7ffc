"""Who has store files open or mapped, and who owns the store, read from ``/proc``.

Upstream refuses to destroy a mapped file while another thread holds a reference to it
(spec §4.6). Outside the broker the equivalent of a reference is another *process* with the
file open (``/proc/<pid>/fd``) or mapped (``/proc/<pid>/maps``). The broker that owns the store
holds every live file itself, so its hold is the owner's reference and not a reader's: the
owner is the process holding the POSIX lock on ``<storePathRootDir>/lock`` (``/proc/locks``).

Everything takes a ``proc_root`` so tests can point it at a fixture tree. Nothing here raises
on a process that exits while it is being read; a process whose entries cannot be read
(EACCES: another user's process without CAP_SYS_PTRACE) or a ``/proc`` mounted with
``hidepid`` makes the map *incomplete*, and an incomplete map answers "cannot tell" for every
file, which callers must treat as held — unless ``nobody_has_open`` proves, with a lease,
that no process at all has that file open.
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import time
from dataclasses import dataclass, field

# RETENTIOND_PROC_ROOT: a container that mounts the host's /proc elsewhere (to see the broker's
# processes) points us at it; tests use it for a filtered view.
PROC = os.environ.get("RETENTIOND_PROC_ROOT", "/proc")
_PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: kernel threads hold no user files


@dataclass(frozen=True)
class LockOwner:
    """The process(es) holding the store's lock: the broker that owns the store."""

    running: bool | None  # None: the lock table could not be read
    pids: frozenset[int] = frozenset()  # empty while running: the holder is not visible here
    error: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {"running": self.running, "pids": sorted(self.pids), "error": self.error}


def parse_lock_line(line: str) -> tuple[int, int, int, int] | None:
    """``(pid, major, minor, inode)`` of one ``/proc/locks`` line, or None.

    ``1: POSIX  ADVISORY  WRITE 14475 fe:00:2146365 0 0`` — device numbers in hex, inode in
    decimal. Waiters (``1: -> POSIX ...``) hold nothing and are skipped. OFD locks show pid -1.
    """
    parts = line.split()
    if len(parts) < 6 or parts[1] == "->":
        return None
    try:
        pid = int(parts[4])
        major, minor, ino = parts[5].split(":")
        return pid, int(major, 16), int(minor, 16), int(ino)
    except ValueError:
        return None


def find_owner(lock_path: str, proc_root: str = PROC, ignore_pid: int | None = None) -> LockOwner:
    """Whether a process holds a lock on ``lock_path``, and which (visible) pids do.

    No lock file means no broker has ever started on this store: not running. A lock held by
    ``ignore_pid`` (our own process: a Kafka round holds ``.lock`` itself so the broker cannot
    start mid-deletion) is no broker's.
    """
    # Hand-written: psutil has no view of /proc/locks.
    try:
        st = os.stat(lock_path)
    except FileNotFoundError:
        return LockOwner(False)
    except OSError as exc:
        return LockOwner(None, error=f"{lock_path}: {exc.strerror}")
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        with open(f"{proc_root}/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        return LockOwner(None, error=f"{proc_root}/locks: {exc.strerror}")
    running = False
    pids: set[int] = set()
    for line in lines:
        parsed = parse_lock_line(line)
        if parsed is None or parsed[1:] != want or parsed[0] == ignore_pid:
            continue
        running = True
        if parsed[0] > 0:
            pids.add(parsed[0])
    return LockOwner(running, frozenset(pids))


def parse_maps_line(line: str) -> tuple[int, int, str] | None:
    """``(st_dev, inode, path)`` of a file mapping in ``/proc/<pid>/maps``; None otherwise.

    ``7f2b3eba8000-7f2b3eba9000 rw-s 00000000 fe:00 2146365   /tmp/lk (deleted)``
    """
    parts = line.split(maxsplit=5)
    if len(parts) < 5 or parts[4] == "0":
        return None
    try:
        major, minor = parts[3].split(":")
        dev = os.makedev(int(major, 16), int(minor, 16))
        ino = int(parts[4])
    except (ValueError, OverflowError):
        return None
    return dev, ino, parts[5].rstrip("\n") if len(parts) > 5 else ""


def proc_hides_pids(proc_root: str = PROC) -> bool:
    """``/proc`` mounted with ``hidepid`` (systemd ProtectProc=): other users' processes are
    not even listed, so an empty answer proves nothing."""
    # Hand-written: psutil.disk_partitions may read a container's stale /etc/mtab.
    try:
        with open(f"{proc_root}/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                pre, _, post = line.partition(" - ")
                fields, post_fields = pre.split(), post.split()
                if len(fields) < 5 or len(post_fields) < 3 or post_fields[0] != "proc":
                    continue
                if fields[4] != os.path.realpath(proc_root):
                    continue
                for opt in post_fields[2].split(","):
                    key, _, value = opt.partition("=")
                    if key == "hidepid" and value not in ("0", "off"):
                        return True
    except OSError:
        return False
    return False


def _is_kernel_thread(proc_root: str, pid: int) -> bool:
    # Hand-written: psutil does not expose the flags field (PF_KTHREAD) of /proc/<pid>/stat.
    try:
        with open(f"{proc_root}/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
        flags = int(text[text.rindex(")") + 2 :].split()[6])
    except (OSError, ValueError, IndexError):
        return False
    return bool(flags & _PF_KTHREAD)


@dataclass(frozen=True)
class DeletedOpen:
    """A regular file some process still has open although its last name is gone."""

    path: str  # the name it had (readlink without the " (deleted)" suffix)
    dev: int
    ino: int
    bytes: int  # allocated bytes (st_blocks * 512), or the mapped length if only mapped
    from_maps: bool = False


@dataclass
class HolderMap:
    """Every (st_dev, inode) some process has open or mapped, with the pids, at one moment."""

    refs: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    deleted: dict[tuple[int, int], DeletedOpen] = field(default_factory=dict)
    unreadable: list[int] = field(default_factory=list)  # pids we could not look into
    hidden: bool = False  # hidepid: some processes are not even listed
    self_pid: int = 0
    processes: int = 0
    duration_s: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.unreadable and not self.hidden

    def holders(self, dev: int, ino: int) -> frozenset[int]:
        return frozenset(self.refs.get((dev, ino), ()))

    def others(self, dev: int, ino: int, owners: frozenset[int]) -> frozenset[int] | None:
        """Processes other than the owner (and us) holding the file; None: cannot tell."""
        found = self.holders(dev, ino) - owners - {self.self_pid}
        if found:
            return found
        return None if not self.complete else frozenset()

    def referenced(self, dev: int, ino: int) -> bool:
        """Anyone but us still has the inode open or mapped (its blocks are not free yet)."""
        return bool(self.holders(dev, ino) - {self.self_pid})


def _add(refs: dict[tuple[int, int], set[int]], key: tuple[int, int], pid: int) -> None:
    pids = refs.get(key)
    if pids is None:
        refs[key] = {pid}
    else:
        pids.add(pid)


def _scan_fds(proc_root: str, pid: int, hm: HolderMap) -> bool:
    """Add the regular files ``pid`` has open; False if its fd table was unreadable."""
    # Hand-written: psutil's open_files() has no inode and drops deleted (pending) files.
    fd_dir = f"{proc_root}/{pid}/fd"
    try:
        entries = list(os.scandir(fd_dir))
    except PermissionError:
        return False
    except OSError:
        return True  # exited, or a zombie: holds nothing
    for entry in entries:
        try:
            st = os.stat(entry.path)  # follows the magic link, even to a deleted file
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        key = (st.st_dev, st.st_ino)
        _add(hm.refs, key, pid)
        known = hm.deleted.get(key)
        if st.st_nlink == 0 and (known is None or known.from_maps):
            try:
                target = os.readlink(entry.path)
            except OSError:
                continue
            hm.deleted[key] = DeletedOpen(
                target.removesuffix(" (deleted)"), st.st_dev, st.st_ino, st.st_blocks * 512
            )
    return True


def _scan_maps(proc_root: str, pid: int, hm: HolderMap) -> bool:
    # Hand-written: psutil's memory_maps() has no inode and reads smaps (26x slower).
    try:
        with open(f"{proc_root}/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()
    except PermissionError:
        return False
    except OSError:
        return True
    for line in lines:
        parsed = parse_maps_line(line)
        if parsed is None:
            continue
        dev, ino, path = parsed
        _add(hm.refs, (dev, ino), pid)
        if path.endswith(" (deleted)") and path.startswith("/"):
            # Mapped only (its descriptor closed): the mapped range is what stays allocated.
            start, _, end = line.partition(" ")[0].partition("-")
            try:
                size = int(end, 16) - int(start, 16)
            except ValueError:
                continue
            known = hm.deleted.get((dev, ino))
            if known is None or (known.from_maps and known.bytes < size):
                name = path.removesuffix(" (deleted)")
                hm.deleted[(dev, ino)] = DeletedOpen(name, dev, ino, size, from_maps=True)
    return True


def build_holder_map(
    proc_root: str = PROC, *, self_pid: int | None = None, owners: frozenset[int] = frozenset()
) -> HolderMap:
    """One pass over every process: its open regular files and its file mappings.

    Costs one stat per open file descriptor (about 10 µs each), so callers build it at most
    once per round, and only when a round has files to delete or releases to check. The
    owner's descriptors are skipped: its holds are never a reader's, and the broker maps every
    store file it has open, so its ``maps`` (text, no stat) show what it still references —
    a broker with 200,000 mapped files costs a fraction of a second instead of seconds.
    """
    started = time.monotonic()
    hm = HolderMap(self_pid=os.getpid() if self_pid is None else self_pid)
    hm.hidden = proc_hides_pids(proc_root)
    # Hand-written: psutil.pids() raises IndexError on a /proc listing no process (hidepid).
    try:
        names = [e.name for e in os.scandir(proc_root) if e.name.isdigit()]
    except OSError:
        hm.hidden = True  # no /proc at all: nothing can be known
        names = []
    for name in names:
        pid = int(name)
        if pid == hm.self_pid:
            continue
        hm.processes += 1
        fds_ok = True if pid in owners else _scan_fds(proc_root, pid, hm)
        readable = _scan_maps(proc_root, pid, hm) and fds_ok
        if not readable and not _is_kernel_thread(proc_root, pid):
            hm.unreadable.append(pid)
    hm.duration_s = time.monotonic() - started
    return hm


# fcntl constants (Linux); Python's fcntl module has them only on some builds.
_F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
_F_SETSIG = getattr(fcntl, "F_SETSIG", 10)
_LEASE_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def nobody_has_open(path: str, dev: int, ino: int) -> bool:
    """True only if provably no process at all has this inode open or mapped.

    When ``/proc`` cannot show every process, a write lease settles it for one file: the
    kernel grants ``F_SETLEASE F_WRLCK`` only while the caller's descriptor is the sole open
    file description of the inode, and a mapping keeps its file open. The lease is dropped at
    once; an ``open`` by someone else in that instant waits for the release (microseconds).
    The break signal is redirected to SIGWINCH, which is ignored by default (SIGIO would
    terminate us). Needs ownership of the file or CAP_LEASE; any failure answers False.
    """
    try:
        fd = os.open(path, _LEASE_OPEN)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (dev, ino) or not stat.S_ISREG(st.st_mode):
            return False
        fcntl.fcntl(fd, _F_SETSIG, signal.SIGWINCH)
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_WRLCK)
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_UNLCK)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
