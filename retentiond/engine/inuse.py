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

from retentiond.engine.holders import PROC, HolderMap, LockOwner, build_holder_map, find_owner
from retentiond.engine.processes import describe

log = structlog.get_logger("retentiond.inuse")

UNREADABLE_NAMED = 10  # processes named in the warning (all are counted)


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

    def __init__(self, proc_root: str = PROC, *, self_pid: int | None = None) -> None:
        self.proc_root = proc_root
        self.self_pid = os.getpid() if self_pid is None else self_pid
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, int], PendingFile] = {}
        self._owner = LockOwner(None)
        self._map: HolderMap | None = None
        self._warned_incomplete = False
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
        if not hm.complete and not self._warned_incomplete:
            self._warned_incomplete = True
            self._warn_incomplete(hm)
        self._map = hm
        self._refresh(hm, list(store_dirs), now_ms)
        return hm

    def _warn_incomplete(self, hm: HolderMap) -> None:
        """Once per process, as a warning: a VM's or a container's init (pid 1) is unreadable
        even to root, so this is the normal case there, not a fault. Names the processes so
        the operator can judge them, and says what it means for deletions."""
        named = describe(hm.unreadable[:UNREADABLE_NAMED], self.proc_root)
        log.warning(
            "cannot see every process's open files: "
            + (f"{len(hm.unreadable)} process(es) cannot be looked into" if hm.unreadable else "")
            + (" and " if hm.unreadable and hm.hidden else "")
            + ("/proc hides other users' processes (hidepid)" if hm.hidden else "")
            + ". Deletions go on: a file to delete that nobody has open is proven free by a "
            "lease and deleted as usual; a file that any process has open (the broker "
            "included) is treated as held by another process and deleted only after its "
            "forcible interval. Run as root, or with CAP_SYS_PTRACE and /proc without "
            "hidepid, to look into every process",
            unreadable=[str(p) for p in named],
            unreadable_count=len(hm.unreadable),
            hidepid=hm.hidden,
        )

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
