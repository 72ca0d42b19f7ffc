"""What a store kind hands the engine to carry out (``Run``) and what it gets back
(``Outcome``): value types shared by the kinds, ``engine.round`` and the executor."""

from __future__ import annotations

from dataclasses import dataclass

from retentiond.engine.decision import Decision


@dataclass(frozen=True)
class Outcome:
    decision: Decision
    deleted: bool
    error: str | None = None  # why it was not deleted (re-check failed, unlink failed, ...)
    cause: str | None = None  # why it was not deleted, for metrics: a ``reasons.Cause``
    freed_bytes: int | None = None  # allocated bytes (st_blocks * 512) the unlink released
    errno: int | None = None  # the unlink's errno when it failed


@dataclass(frozen=True)
class Run:
    """One ordered prefix of a file queue, carried out oldest first.

    The run stops at the first file that is not deleted (never past a kept file), after
    ``batch_max`` deletions, or at a stop request. The pauses are the store kind's pacing:
    ``pause_between_ms`` after each deletion but the last (and after the last too when
    ``pause_after_last``: more candidates followed it), ``pause_after_ms`` once after a run
    that deleted anything.
    """

    decisions: tuple[Decision, ...]
    pause_between_ms: int = 0
    pause_after_last: bool = False
    pause_after_ms: int = 0
    batch_max: int | None = None
    floor: int | None = None  # what the kind's re-check compares against (a minimum offset)
