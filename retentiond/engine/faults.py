"""Faults a round meets and survives: counted, and logged once rather than every round.

A bad file (wrong size, unreadable last unit or header, a name outside the scheme) is skipped
by the planner every round; logging it every 10 seconds would bury everything else, so it is
reported the first time it is seen. A store that cannot be read (a path gone, unmounted) is
logged when it starts and when it ends, and every round it affects is counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from retentiond.engine.kind import RoundPlan

log = structlog.get_logger(__name__)

_REMEMBER = 10_000  # distinct bad files remembered; beyond it the oldest are forgotten


@dataclass
class FaultCounters:
    """Cumulative since start (gauges noted). Read by `status` and the metrics."""

    store_error_rounds: int = 0  # rounds in which a store path could not be read or measured
    unlink_failed: int = 0  # unlinks the OS refused (EPERM, EROFS, EACCES, ...)
    journal_failures: int = 0  # rounds ended because the journal refused a record
    bad_files: int = 0  # distinct bad files reported
    reconciled: int = 0  # orphaned intents given an outcome at start-up
    torn_journal_lines: int = 0  # seen at start-up reconciliation

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class OnceReporter:
    """Logs each (path, problem) the first time it is seen."""

    counters: FaultCounters
    _seen: dict[str, str] = field(default_factory=dict)

    def observe(self, plan: RoundPlan) -> list[tuple[str, str]]:
        new = [(p, why) for p, why in plan.problems() if self._seen.get(p) != why]
        for path, why in new:
            if path not in self._seen:
                self.counters.bad_files += 1
            self._seen[path] = why
            log.warning("skipped: bad or foreign file (reported once)", file=path, problem=why)
        if len(self._seen) > _REMEMBER:
            for path in list(self._seen)[: len(self._seen) // 2]:
                del self._seen[path]
        return new


@dataclass
class StoreErrorWatch:
    """Counts rounds with store errors; logs when errors start, change, and end."""

    counters: FaultCounters
    _last: tuple[str, ...] = ()

    def observe(self, plan: RoundPlan) -> None:
        errors = plan.store_errors()
        key = tuple(sorted(errors))
        if errors:
            self.counters.store_error_rounds += 1
        if key == self._last:
            return
        if errors:
            log.error("store cannot be read: nothing is deleted where it could not", errors=errors)
        else:
            log.warning("store readable again: cleaning resumes", was=list(self._last))
        self._last = key
