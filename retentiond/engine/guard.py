"""The Cleaner's view of other processes: the owner, holds on files to delete, pending bytes.

One ``Guard`` lives as long as its Cleaner. Per round it looks up the store's owner (the lock
holder; cheap), builds at most one holder map, and only when the round has files to delete or
unlinked files whose release it is waiting for (``InUse``). It turns that map into the two
inputs the pure policies take: "who else holds this file" (``engine.holds``) and "how full will
the disk be once the held-but-deleted bytes are released" (``engine.disk.adjusted``).

"Never delete on doubt": when the map is incomplete (unreadable or hidden processes), or the
owner holds the lock but is not visible here (another PID namespace), nobody can say who else
holds a file, so every file counts as held and waits for its forcible interval.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import structlog

from retentiond.engine.decision import Decision
from retentiond.engine.disk import PathUsage, adjusted
from retentiond.engine.execute import Outcome
from retentiond.engine.holds import HeldFile, HoldersOf, HoldIntervals
from retentiond.engine.kind import AnyKind, BrokerMain
from retentiond.engine.proc.files import PROC, HolderMap, LockOwner, nobody_has_open
from retentiond.engine.proc.inuse import InUse
from retentiond.engine.proc.owner import OwnerReport, OwnerWatch

log = structlog.get_logger(__name__)

STATUS_HELD = 50  # held files listed in `status` (all are counted)


def _device(path: str) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


class Guard:
    def __init__(
        self,
        proc_root: str = PROC,
        hold_rules: HoldIntervals | None = None,
        brokers: Sequence[BrokerMain] = (),
        *,
        announce: bool = True,
    ) -> None:
        self.inuse = InUse(proc_root, announce=announce)
        self.owner_watch = OwnerWatch(proc_root, brokers)
        self.hold_rules = hold_rules  # None: the kind's own (tests pass short intervals)
        self._warned_invisible_owner = False
        # Files this round counted as held only because /proc could not show every process
        # (no holder seen, no lease could prove nobody): where an incomplete view changed
        # the answer.
        self.unseen_holds = 0

    def rules(self, kind: AnyKind) -> HoldIntervals:
        return self.hold_rules or kind.hold_intervals()

    # ---- per round ----------------------------------------------------------------------
    def begin_round(self, kind: AnyKind) -> None:
        self.inuse.begin_round(kind.owner_lock())
        self.unseen_holds = 0

    def describe_owner(self) -> OwnerReport:
        """Read the owner's process figures (after ``begin_round``): once per round."""
        return self.owner_watch.refresh(self.inuse.owner)

    def holder_map(self, kind: AnyKind, now_ms: int) -> HolderMap:
        return self.inuse.holder_map(list(kind.directories()), now_ms)

    def refresh_pending(self, kind: AnyKind, now_ms: int) -> None:
        """Before the disk is judged: drop released files (only when some are pending)."""
        if self.inuse.has_pending():
            self.holder_map(kind, now_ms)

    def adjusted(self, usage: PathUsage) -> PathUsage:
        """One path's usage as it will be once pending files on its filesystem are released."""
        if not self.inuse.has_pending():
            return usage
        dev = _device(usage.path)
        return usage if dev is None else adjusted(usage, self.inuse.pending_on(dev))

    def holders_of(self, kind: AnyKind, now_ms: int) -> HoldersOf:
        """Other processes holding a planned file; None when that cannot be known.

        Visible holders other than the owner settle it. Otherwise a complete view (and a
        visible owner) means nobody; an incomplete one means doubt, unless a lease proves
        that no process at all has the file open (``nobody_has_open``).
        """
        hm = self.holder_map(kind, now_ms)
        owner = self.inuse.owner
        invisible_owner = bool(owner.running and not owner.pids)
        if invisible_owner and not self._warned_invisible_owner:
            self._warned_invisible_owner = True
            # A warning, said once: nothing is wrong with the store and nothing unsafe
            # follows; deletions go at the forcible interval instead of at once.
            log.warning(
                "a broker holds the store lock but is not visible in /proc (another PID "
                "namespace?): files it may hold are treated as held by others, and go only "
                "once their forcible interval has passed"
            )
        sure = hm.complete and not invisible_owner

        nobody: frozenset[int] = frozenset()

        def holders_of(d: Decision) -> frozenset[int] | None:
            ident = d.identity
            if ident is None:
                return None
            if (ident.dev, ident.ino) in hm.refs:  # (most files are open nowhere: no set made)
                found = hm.holders(ident.dev, ident.ino) - owner.pids - {hm.self_pid}
                if found:
                    return frozenset(found)
            if sure or nobody_has_open(d.path, ident.dev, ident.ino):
                return nobody
            if not hm.complete:
                self.unseen_holds += 1
            return None

        return holders_of

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

    def _owner_process(self) -> dict[str, object]:
        report = self.owner_watch.report
        return report.as_dict() if report is not None else {"process": None}

    def status(self, held: Mapping[str, HeldFile]) -> dict[str, object]:
        totals = self.inuse.totals()
        pending = self.inuse.pending_files()
        return {
            "owner": {**self.inuse.owner.as_dict(), **self._owner_process()},
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
