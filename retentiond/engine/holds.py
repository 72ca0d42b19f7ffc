"""Files another process holds: defer, then force (upstream ReferenceResource, spec §4.6-4.7).

Upstream's ``destroy(intervalForcibly)`` fails while a reader holds the file, remembers the
first attempt, and succeeds once ``intervalForcibly`` has passed since then. The pass stops at
the file that failed ("the round stops there"). Here a *reader* is any process other than the
store's owner (the lock holder) and ourselves with the file open or mapped; when we cannot see
every process, every file counts as held (never delete on doubt).

The intervals belong to the store kind (``HoldIntervals``); this module only applies them, to
any ordered run of deletions: the first file that must wait keeps everything behind it.

Pure functions: the caller supplies who holds what and the remembered first attempts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from retentiond.engine.decision import Decision
from retentiond.engine.identity import FileIdentity
from retentiond.reasons import AnyReason, FileKind, Reason, Verdict


class HoldIntervals(Protocol):
    """A store kind's forcible interval per file kind, in ms (upstream's intervalForcibly)."""

    def interval(self, kind: FileKind) -> int: ...


# Who holds a planned file: pids other than the owner and us; None when that cannot be known.
HoldersOf = Callable[[Decision], frozenset[int] | None]


@dataclass(frozen=True)
class HeldFile:
    """A file whose deletion was deferred because it was held: upstream's firstShutdown."""

    kind: FileKind
    first_attempt_ms: int
    identity: FileIdentity | None
    reason: AnyReason  # why it was to be deleted when first attempted
    holders: tuple[int, ...]  # () when the holders could not be seen

    def as_dict(self, path: str) -> dict[str, object]:
        return {
            "file": path,
            "kind": str(self.kind),
            "first_attempt_ms": self.first_attempt_ms,
            "reason": str(self.reason),
            "holders": list(self.holders),
        }


def _holders_text(holders: frozenset[int] | None) -> str:
    if holders is None:
        return "holders cannot be seen (unreadable /proc entries)"
    return "held by pid " + ",".join(str(p) for p in sorted(holders))


def resolve(
    d: Decision,
    holders: frozenset[int] | None,
    held: HeldFile | None,
    now_ms: int,
    interval_ms: int,
) -> tuple[Decision, HeldFile | None]:
    """One planned deletion against its holders: go, wait, or go forcibly.

    Returns the decision to act on and the held record to remember (None: nothing to remember).
    """
    if held is not None and held.identity != d.identity:
        held = None  # a different file under the same name: its own first attempt
    if holders is not None and not holders:
        return d, held  # nobody else holds it: its own reason stands
    if held is not None and now_ms - held.first_attempt_ms >= interval_ms:  # upstream ">="
        detail = f"{_holders_text(holders)}; first attempt {now_ms - held.first_attempt_ms} ms ago"
        return d._replace(reason=Reason.FORCED_AFTER_HOLD, detail=detail), held
    if held is None:
        held = HeldFile(d.kind, now_ms, d.identity, d.reason, tuple(sorted(holders or ())))
    wait = interval_ms - (now_ms - held.first_attempt_ms)
    detail = f"{_holders_text(holders)}; forced in {wait} ms"
    kept = d._replace(verdict=Verdict.KEEP, reason=Reason.HELD_BY_OTHER_PROCESS, detail=detail)
    return kept, held


def _behind(d: Decision) -> Decision:
    detail = "behind a held file"
    return d._replace(verdict=Verdict.KEEP, reason=Reason.AFTER_FIRST_KEPT, detail=detail)


def hold_in_order(
    decisions: tuple[Decision, ...],
    holders_of: HoldersOf,
    held: Mapping[str, HeldFile],
    now_ms: int,
    rules: HoldIntervals,
    seen: dict[str, HeldFile],
) -> tuple[Decision, ...]:
    """Oldest first; the first file that must wait keeps everything behind it. The very
    ``decisions`` tuple comes back when nothing changed (the common case, checked by
    identity by callers that plan 100k+ queues)."""
    out: list[Decision] = []
    stopped = False
    changed = False
    for d in decisions:
        if not d.delete:
            out.append(d)
            continue
        if stopped:
            out.append(_behind(d))
            changed = True
            continue
        nd, record = resolve(d, holders_of(d), held.get(d.path), now_ms, rules.interval(d.kind))
        if record is not None:
            seen[d.path] = record
        out.append(nd)
        changed = changed or nd is not d
        stopped = not nd.delete
    return tuple(out) if changed else decisions
