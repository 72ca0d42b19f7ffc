"""``retentiond rescue``: what a kind that can bring a stopped broker with a full disk back
offers the command (an optional protocol: ``Rescues``), and the value types it speaks.

A kind without it refuses ``rescue`` (exit 2). The command asks the kind which of its store
directories another process holds (exit 8, nothing deleted), hands it the request, runs one
round through the engine (a dry run or a real one: the same code, stopped before every unlink
in the first), and prints the kind's report; exit 9 when the target was not reached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class RescueRequest:
    """What to free: down to ``target_ratio`` of each filesystem holding a store directory,
    or until ``free_bytes`` are available on each; ``beyond_retention``: past the configured
    retention if that is not enough."""

    target_ratio: float | None = None
    free_bytes: int | None = None
    beyond_retention: bool = False


@dataclass(frozen=True)
class RescueReport:
    """What a rescue did (or, in a dry run, would do): the lines to print, whether every
    filesystem reached its target, and the store directories another process held;
    ``documented`` makes ``rescue --json``'s document (only that option asks for it)."""

    lines: tuple[str, ...] = ()
    reached: bool = False
    held: tuple[str, ...] = ()
    documented: Callable[[], dict[str, object]] | None = None

    @property
    def document(self) -> dict[str, object]:
        """``rescue --json``'s document ({} when there is none)."""
        return {} if self.documented is None else self.documented()


@runtime_checkable
class Rescues(Protocol):
    """A kind that can free space on a stopped broker's store beyond one round."""

    def held_store_dirs(self) -> list[str]:
        """The store directories whose lock another process holds now (a running broker)."""
        ...

    def begin_rescue(self, request: RescueRequest | None) -> None:
        """The next round is a rescue (None: back to ordinary rounds)."""
        ...

    def rescue_report(self) -> RescueReport:
        """What the last round, a rescue, did or would do."""
        ...
