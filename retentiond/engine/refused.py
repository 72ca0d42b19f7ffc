"""Files whose unlink the kernel refused: retried with backoff, not every round.

An unlink that fails with EPERM (``chattr +i``), EROFS or EACCES will usually fail again the
next round, and every attempt costs an ``intent`` and an ``abort`` in the journal and a log
line. Retrying every round would write two records per round per stuck file for as long as the
fault lasts (17,280 a day at 10 s rounds). So the engine remembers each refused file and
turns its planned deletion into a KEEP (``unlink_refused``) until the next attempt is due:
the delay doubles from ``BACKOFF_BASE_MS`` up to ``redeleteHangedFileInterval``. A file whose
identity (inode, size, mtime) changed is a different file and is attempted at once.

Keeping the refused file keeps everything behind it too, as for every kept file: never delete
past a file that did not go.

Pure functions and values, like ``holds``: the Cleaner keeps the records between rounds.
"""

from __future__ import annotations

import errno as errno_mod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from retentiond.engine.decision import Decision
from retentiond.engine.identity import FileIdentity
from retentiond.reasons import FileKind, Reason, Verdict

BACKOFF_BASE_MS = 1000  # the first retry; each further one waits twice as long, up to the cap


@dataclass(frozen=True)
class RefusedFile:
    """One file whose last unlink attempt failed, and when it is tried again."""

    kind: FileKind
    identity: FileIdentity | None
    error: str  # the unlink's error text, as journaled in the abort
    errno: int | None
    attempts: int  # failed attempts in a row
    first_failure_ms: int
    last_failure_ms: int
    next_attempt_ms: int

    def errno_name(self) -> str:
        if self.errno is None:
            return "unknown error"
        return errno_mod.errorcode.get(self.errno, str(self.errno))

    def as_dict(self, path: str) -> dict[str, object]:
        return {
            "file": path,
            "kind": str(self.kind),
            "error": self.error,
            "errno": self.errno_name(),
            "attempts": self.attempts,
            "first_failure_ms": self.first_failure_ms,
            "last_failure_ms": self.last_failure_ms,
            "next_attempt_ms": self.next_attempt_ms,
        }


def backoff_ms(attempts: int, cap_ms: int) -> int:
    """The wait after ``attempts`` failures in a row: 1 s, 2 s, 4 s, ... up to ``cap_ms``
    (``redeleteHangedFileInterval``, upstream's cadence for retrying a hung file)."""
    cap = max(cap_ms, 1)
    return min(cap, BACKOFF_BASE_MS << min(max(attempts - 1, 0), 30))


def record_refusal(
    previous: RefusedFile | None,
    d: Decision,
    error: str,
    errno: int | None,
    now_ms: int,
    cap_ms: int,
) -> RefusedFile:
    """The record after one more failed attempt on ``d`` (a new series if the file changed)."""
    if previous is not None and previous.identity != d.identity:
        previous = None
    attempts = previous.attempts + 1 if previous is not None else 1
    first = previous.first_failure_ms if previous is not None else now_ms
    return RefusedFile(
        kind=d.kind,
        identity=d.identity,
        error=error,
        errno=errno,
        attempts=attempts,
        first_failure_ms=first,
        last_failure_ms=now_ms,
        next_attempt_ms=now_ms + backoff_ms(attempts, cap_ms),
    )


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def waiting(d: Decision, refused: RefusedFile | None, now_ms: int) -> bool:
    """The planned deletion ``d`` must wait: its last unlink was refused, the very same file is
    still there (same identity) and the next attempt is not due yet."""
    return (
        refused is not None and refused.identity == d.identity and now_ms < refused.next_attempt_ms
    )


def keep_refused(
    decisions: tuple[Decision, ...], refused: Mapping[str, RefusedFile], now_ms: int
) -> tuple[Decision, ...]:
    """An ordered run with files still in their backoff kept (``unlink_refused``), and every
    deletion behind the first of them kept too (``after_first_kept``)."""
    if not refused:
        return decisions
    out: list[Decision] = []
    stopped = False
    for d in decisions:
        if not d.delete:
            out.append(d)
            continue
        if stopped:
            detail = "behind a file whose unlink was refused"
            out.append(
                d._replace(verdict=Verdict.KEEP, reason=Reason.AFTER_FIRST_KEPT, detail=detail)
            )
            continue
        r = refused.get(d.path)
        if r is not None and waiting(d, r, now_ms):
            detail = (
                f"unlink refused {r.attempts}x ({r.errno_name()}: {r.error}); "
                f"next attempt at {_iso(r.next_attempt_ms)} (in {r.next_attempt_ms - now_ms} ms)"
            )
            out.append(
                d._replace(verdict=Verdict.KEEP, reason=Reason.UNLINK_REFUSED, detail=detail)
            )
            stopped = True
            continue
        out.append(d)
    return tuple(out)
