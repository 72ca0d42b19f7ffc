"""The Cleaner's view of other processes: the owner, holds on files to delete, pending bytes.

One ``Guard`` lives as long as its Cleaner. Per round it looks up the store's owner (the lock
holder; cheap), builds at most one holder map, and only when the round has files to delete or
unlinked files whose release it is waiting for (``InUse``). It turns that map into the two
inputs the pure policies take: "who else holds this file" (``policy.holds``) and "how full will
the disk be once the held-but-deleted bytes are released" (``disk.adjusted``).

"Never delete on doubt": when the map is incomplete (unreadable or hidden processes), or the
owner holds the lock but is not visible here (another PID namespace), nobody can say who else
holds a file, so every file counts as held and waits for its forcible interval.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import structlog

from retentiond.execute import Outcome
from retentiond.policy.holds import HeldFile, HoldersOf, HoldRules, hold_commitlog, hold_queues
from retentiond.policy.plan import CommitLogPlan, Decision, QueuesPlan
from retentiond.settings import Settings
from retentiond.store import disk as disk_mod
from retentiond.store.holders import PROC, HolderMap, LockOwner, nobody_has_open
from retentiond.store.inuse import InUse

log = structlog.get_logger("retentiond.guard")

STATUS_HELD = 50  # held files listed in `status` (all are counted)


def store_dirs(settings: Settings) -> list[str]:
    """The store's file directories, as configured and as resolved (``/proc`` shows the
    resolved path of an open file)."""
    dirs = [*map(str, settings.store_path_commitlog), str(settings.consumequeue_dir)]
    dirs.append(str(settings.index_dir))
    return sorted({*dirs, *(os.path.realpath(d) for d in dirs)})


def _device(path: str) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


class Guard:
    def __init__(self, proc_root: str = PROC, hold_rules: HoldRules | None = None) -> None:
        self.inuse = InUse(proc_root)
        self.hold_rules = hold_rules  # None: from the settings (tests pass short intervals)
        self._warned_invisible_owner = False

    def rules(self, settings: Settings) -> HoldRules:
        return self.hold_rules or HoldRules.from_settings(settings)

    # ---- per round ----------------------------------------------------------------------
    def begin_round(self, settings: Settings) -> None:
        self.inuse.begin_round(str(settings.store_path_root_dir / "lock"))

    def holder_map(self, settings: Settings, now_ms: int) -> HolderMap:
        return self.inuse.holder_map(store_dirs(settings), now_ms)

    def refresh_pending(self, settings: Settings, now_ms: int) -> None:
        """Before the disk is judged: drop released files (only when some are pending)."""
        if self.inuse.has_pending():
            self.holder_map(settings, now_ms)

    def adjusted(self, usage: disk_mod.DiskUsage) -> disk_mod.DiskUsage:
        """Usage as it will be once pending files are released, per filesystem."""
        if not self.inuse.has_pending():
            return usage

        def one(u: disk_mod.PathUsage) -> disk_mod.PathUsage:
            dev = _device(u.path)
            return u if dev is None else disk_mod.adjusted(u, self.inuse.pending_on(dev))

        return disk_mod.DiskUsage(tuple(one(u) for u in usage.commitlog), one(usage.consumequeue))

    def holders_of(self, settings: Settings, now_ms: int) -> HoldersOf:
        """Other processes holding a planned file; None when that cannot be known.

        Visible holders other than the owner settle it. Otherwise a complete view (and a
        visible owner) means nobody; an incomplete one means doubt, unless a lease proves
        that no process at all has the file open (``nobody_has_open``).
        """
        hm = self.holder_map(settings, now_ms)
        owner = self.inuse.owner
        invisible_owner = bool(owner.running and not owner.pids)
        if invisible_owner and not self._warned_invisible_owner:
            self._warned_invisible_owner = True
            log.error(
                "a broker holds the store lock but is not visible in /proc (another PID "
                "namespace?): files it may hold are treated as held by others"
            )
        sure = hm.complete and not invisible_owner

        def holders_of(d: Decision) -> frozenset[int] | None:
            ident = d.identity
            if ident is None:
                return None
            found = hm.holders(ident.dev, ident.ino) - owner.pids - {hm.self_pid}
            if found:
                return frozenset(found)
            if sure or nobody_has_open(d.path, ident.dev, ident.ino):
                return frozenset()
            return None

        return holders_of

    def hold_commitlog(
        self, plan: CommitLogPlan, held: Mapping[str, HeldFile], settings: Settings, now_ms: int
    ) -> tuple[CommitLogPlan, dict[str, HeldFile]]:
        seen: dict[str, HeldFile] = {}
        if not plan.deletions():
            return plan, seen
        of = self.holders_of(settings, now_ms)
        return hold_commitlog(plan, of, held, now_ms, self.rules(settings), seen), seen

    def hold_queues(
        self, plan: QueuesPlan, held: Mapping[str, HeldFile], settings: Settings, now_ms: int
    ) -> tuple[QueuesPlan, dict[str, HeldFile]]:
        seen: dict[str, HeldFile] = {}
        if not any(True for _ in plan.deletions()):
            return plan, seen
        of = self.holders_of(settings, now_ms)
        return hold_queues(plan, of, held, now_ms, self.rules(settings), seen), seen

    def note_outcome(self, outcome: Outcome, now_ms: int) -> None:
        """After an unlink: still referenced by anyone? Then its bytes are pending release."""
        d = outcome.decision
        if outcome.deleted and d.identity is not None:
            size = outcome.freed_bytes if outcome.freed_bytes is not None else d.identity.size
            if self.inuse.note_unlinked(d.path, d.identity.dev, d.identity.ino, size, now_ms):
                log.info("deleted but still held: blocks stay until released", file=d.path)

    # ---- reading ------------------------------------------------------------------------
    @property
    def owner(self) -> LockOwner:
        return self.inuse.owner

    def status(self, held: Mapping[str, HeldFile]) -> dict[str, object]:
        totals = self.inuse.totals()
        pending = self.inuse.pending_files()
        return {
            "owner": self.inuse.owner.as_dict(),
            "proc_view_complete": self.inuse.view_complete,
            "pending_release": {
                "files": totals.files,
                "bytes": totals.bytes,
                "list": [p.as_dict() for p in pending[:20]],
            },
            # A large store in doubt can have a held file per queue: show the first few.
            "held_count": len(held),
            "held_files": [h.as_dict(path) for path, h in sorted(held.items())[:STATUS_HELD]],
        }
