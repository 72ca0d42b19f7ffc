"""Files in use, across rounds: the store's owner, the per-round holder map, and the bytes that
unlinked files still occupy because some process has not let go of them.

Upstream's destroy unmaps and frees at once. We can only unlink: the blocks stay allocated
until every process that has the inode open or mapped lets go (the broker keeps its files
mapped until its own list drops them). Those bytes are *pending release*; pressure decisions
subtract them (``disk.adjusted``) so a round never deletes more, and never forces out
unexpired data, only because the broker has not yet released what was already deleted.

Pending entries come from two sources: files this process unlinked while someone still held
them, and deleted-but-open files found under the store's directories in ``/proc`` (so a
restarted daemon, or an operator's ``rm``, is accounted for too). An entry is dropped as soon
as a holder map shows nobody referencing its inode.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

import structlog

from retentiond.engine.proc.files import PROC, HolderMap, LockOwner, build_holder_map, find_owner
from retentiond.engine.proc.processes import describe

log = structlog.get_logger(__name__)

UNREADABLE_NAMED = 10  # processes named in the warning (all are counted)
_CAP_SYS_PTRACE = 19  # bit of the capability sets in /proc/self/status


def _has_cap_sys_ptrace() -> bool | None:
    """Whether this process may look into others whatever their owner (None: cannot tell).
    Read from our own ``/proc/self``, never the engine's ``proc_root``: it is about us."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_PTRACE & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _remedy(hm: HolderMap) -> str:
    """What would let this process see every process, in sentences: it depends on who we are
    (root, with or without CAP_SYS_PTRACE) and on /proc's hidepid."""
    parts: list[str] = []
    if hm.unreadable:
        if os.geteuid() != 0:
            parts.append("Run retentiond as root (or with CAP_SYS_PTRACE) to look into them.")
        elif _has_cap_sys_ptrace() is False:
            parts.append(
                "It runs as root but without CAP_SYS_PTRACE (its unit or container drops it): "
                "grant CAP_SYS_PTRACE to look into them."
            )
        else:
            parts.append(
                "Even root may not look into them (a VM's or a container's init, or a process "
                "of another user namespace): expected there, nothing to change."
            )
    if hm.hidden:
        parts.append(
            "/proc is mounted with hidepid, which hides other users' processes: mount it "
            "without hidepid (systemd: ProtectProc=default)."
        )
    return " ".join(parts)


def incomplete_view_text(hm: HolderMap, proc_root: str) -> str:
    """The one message about an incomplete view of /proc, in words: what cannot be seen
    (the processes named, so the operator can judge them), what follows for deletions, and
    the remedy if there is one. A VM's or a container's init (pid 1) is unreadable even to
    root, so this is the normal case there, not a fault."""
    seen: list[str] = []
    if hm.unreadable:
        named = "; ".join(str(p) for p in describe(hm.unreadable[:UNREADABLE_NAMED], proc_root))
        more = len(hm.unreadable) - min(len(hm.unreadable), UNREADABLE_NAMED)
        n = len(hm.unreadable)
        seen.append(
            f"{n} process{'es' if n != 1 else ''} cannot be looked into ({named}"
            + (f"; and {more} more" if more else "")
            + ")"
        )
    if hm.hidden:
        seen.append("/proc hides other users' processes (hidepid)")
    return (
        "cannot see every process's open files: "
        + " and ".join(seen)
        + ". Deletions go on: a file to delete that nobody has open is proven free by a "
        "lease and deleted as usual; a file that any process has open (the broker included) "
        "is treated as held by another process and deleted only after its forcible interval. "
        + _remedy(hm)
    )


def _counts(hm: HolderMap) -> dict[str, object]:
    return {"unreadable_count": len(hm.unreadable), "hidepid": hm.hidden}


class PendingTotals(NamedTuple):
    files: int
    bytes: int


@dataclass(frozen=True)
class PendingFile:
    path: str
    dev: int
    ino: int
    bytes: int
    since_ms: int

    def as_dict(self) -> dict[str, object]:
        return {"file": self.path, "bytes": self.bytes, "since_ms": self.since_ms}


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


class InUse:
    """Owner lookup, one lazily built holder map per round, and the pending-release set.

    Written by the round thread; read (``totals``, ``owner``, ``status``) by the control and
    metrics threads, hence the lock around the shared fields.
    """

    def __init__(
        self, proc_root: str = PROC, *, self_pid: int | None = None, announce: bool = True
    ) -> None:
        self.proc_root = proc_root
        self.self_pid = os.getpid() if self_pid is None else self_pid
        # Log an incomplete view (once per process); False for a read-only command, which
        # says it only where it changed its answer (``incomplete_text``).
        self.announce = announce
        self._incomplete: HolderMap | None = None  # who the first incomplete map missed
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, int], PendingFile] = {}
        self._owner = LockOwner(None)
        self._map: HolderMap | None = None
        self.maps_built = 0  # for tests and status: how many holder maps were built
        self.last_map_s: float | None = None
        self.view_complete: bool | None = None  # None until a map was built

    # ---- per round ----------------------------------------------------------------------
    def begin_round(self, lock_path: str) -> None:
        """Forget last round's map and look up the owner again (cheap: /proc/locks)."""
        owner = find_owner(lock_path, self.proc_root, ignore_pid=self.self_pid)
        if owner.error and owner.error != self._owner.error:
            log.warning("cannot tell whether a broker owns the store", error=owner.error)
        with self._lock:
            self._map = None
            self._owner = owner

    @property
    def owner(self) -> LockOwner:
        with self._lock:
            return self._owner

    @property
    def has_map(self) -> bool:
        return self._map is not None

    def holder_map(self, store_dirs: Iterable[str], now_ms: int) -> HolderMap:
        """This round's map (built on first use), with the pending set refreshed from it."""
        if self._map is not None:
            return self._map
        with self._lock:
            owners = self._owner.pids
        hm = build_holder_map(self.proc_root, self_pid=self.self_pid, owners=owners)
        self.maps_built += 1
        self.last_map_s = hm.duration_s
        self.view_complete = hm.complete
        if not hm.complete and self._incomplete is None:
            # only what the words need: the map itself holds every process's open files
            self._incomplete = HolderMap(unreadable=list(hm.unreadable), hidden=hm.hidden)
            if self.announce:
                log.warning(incomplete_view_text(hm, self.proc_root), **_counts(hm))
        self._map = hm
        self._refresh(hm, list(store_dirs), now_ms)
        return hm

    def incomplete_text(self) -> str | None:
        """In words: which processes could not be looked into, what follows for deletions and
        what would change it; None while every map so far saw every process."""
        hm = self._incomplete
        return None if hm is None else incomplete_view_text(hm, self.proc_root)

    def _refresh(self, hm: HolderMap, store_dirs: list[str], now_ms: int) -> None:
        with self._lock:
            released = [p for k, p in self._pending.items() if not hm.referenced(*k)]
            for p in released:
                del self._pending[(p.dev, p.ino)]
            for key, d in hm.deleted.items():
                if key not in self._pending and _under(d.path, store_dirs):
                    self._pending[key] = PendingFile(d.path, d.dev, d.ino, d.bytes, now_ms)
        for p in released:
            log.info("released: its blocks are free now", file=p.path, bytes=p.bytes)

    def note_unlinked(self, path: str, dev: int, ino: int, size: int, now_ms: int) -> bool:
        """After an unlink: if anyone still references the inode, its bytes are pending.

        Uses this round's map (built before the unlink); a holder that closes the file in
        between is noticed as released at the next refresh.
        """
        hm = self._map
        if hm is None or not hm.referenced(dev, ino):
            return False
        with self._lock:
            self._pending[(dev, ino)] = PendingFile(path, dev, ino, size, now_ms)
        return True

    # ---- reading ------------------------------------------------------------------------
    def has_pending(self) -> bool:
        with self._lock:
            return bool(self._pending)

    def pending_on(self, dev: int) -> int:
        with self._lock:
            return sum(p.bytes for p in self._pending.values() if p.dev == dev)

    def totals(self) -> PendingTotals:
        with self._lock:
            return PendingTotals(len(self._pending), sum(p.bytes for p in self._pending.values()))

    def pending_files(self) -> list[PendingFile]:
        with self._lock:
            return sorted(self._pending.values(), key=lambda p: p.path)
