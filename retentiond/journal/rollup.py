"""Idle rounds folded into ``round_summary`` records (docs/journal.md, ``round_summary``).

A daemon runs a round every ``cleanResourceInterval`` (10 s by default): 8,640 ``round``
records a day per broker, most of them saying that nothing happened. Those idle rounds are
folded here into one summary written at most every ``retentiond.journal.roundSummaryInterval``,
carrying exactly what the fleet tables read of them, so the tables give the same answers on
the same history with a fraction of the records.

Kind-neutral: what makes two rounds "the same" (the state), the disk ratio and a stuck round
come from the store kind (``StoreKind.idle_view``); this module only folds.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

DAY_MS = 86_400_000
RATIO_TOLERANCE = 0.01  # an idle round's ratio is within this of the last round written
_EPS = 1e-9  # ratios are hundredths: 0.51 - 0.50 must count as 0.01


@dataclass(frozen=True)
class IdleView:
    """A round record as the folding reads it; built by the store kind.

    ``state`` must be equal for two rounds to fold (the kind's triggers and disk state);
    ``disk_state`` names the state the time is counted in (the tables' ``ms_over_*``);
    ``carried`` are fields constant over a summary, copied from its last round (thresholds,
    intervals); ``maxima`` are figures whose maximum over the folded rounds the tables read.
    """

    state: Hashable
    disk_state: str
    ratio: float | None
    stuck: bool
    interval_ms: int | None
    carried: Mapping[str, Any] = field(default_factory=dict)
    maxima: Mapping[str, int | None] = field(default_factory=dict)


def engine_idle(record: Mapping[str, Any]) -> bool:
    """The kind-neutral half of "idle": a real, automatic round that deleted nothing, failed
    nothing, met no store or journal error and was not interrupted."""
    deleted = record.get("deleted") or {}
    return (
        not record.get("manual")
        and not record.get("failures")
        and not record.get("errors")
        and not record.get("stopped")
        and record.get("journal_error") is None
        and all(not (c or {}).get("files") for c in deleted.values())
    )


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= RATIO_TOLERANCE + _EPS


@dataclass
class _Summary:
    first_ms: int
    last_ms: int
    config_hash: str | None
    view: IdleView
    rounds: int = 1
    ratio_min: float | None = None
    ratio_max: float | None = None
    ratio_sum: float = 0.0
    ratio_n: int = 0
    stuck_rounds: int = 0
    state_ms: dict[str, int] = field(default_factory=dict)
    maxima: dict[str, int | None] = field(default_factory=dict)

    def add_ratio(self, ratio: float | None) -> None:
        if ratio is None:
            return
        self.ratio_min = ratio if self.ratio_min is None else min(self.ratio_min, ratio)
        self.ratio_max = ratio if self.ratio_max is None else max(self.ratio_max, ratio)
        self.ratio_sum += ratio
        self.ratio_n += 1

    def add_maxima(self, values: Mapping[str, int | None]) -> None:
        for name, value in values.items():
            old = self.maxima.get(name)
            self.maxima[name] = value if old is None else old if value is None else max(old, value)

    def record(self) -> dict[str, Any]:
        return {
            "type": "round_summary",
            "time_ms": self.first_ms,
            "last_time_ms": self.last_ms,
            "rounds": self.rounds,
            "config_hash": self.config_hash,
            "disk_state": self.view.disk_state,
            "ratio": {
                "min": self.ratio_min,
                "max": self.ratio_max,
                "sum": round(self.ratio_sum, 6) if self.ratio_n else None,
                "n": self.ratio_n,
                "last": self.view.ratio,
            },
            "state_ms": dict(self.state_ms),
            "stuck_rounds": self.stuck_rounds,
            "max": dict(self.maxima),
            **self.view.carried,
        }


class RoundFolder:
    """Decides, round by round, what the journal gets: the round in full, or nothing yet
    (folded into the open summary), preceded by the summary it closes, if any.

    The reference is the last ``round`` record written in full: every folded round is within
    the tolerance of a round someone can read, so a slow drift still shows up as new rounds.
    A summary closes when a round is not idle, when it has covered the interval, at a UTC day
    boundary (the tables are per day) and at shutdown (``flush``).
    """

    def __init__(self) -> None:
        self._ref: IdleView | None = None
        self._ref_hash: str | None = None
        self._open: _Summary | None = None

    def offer(
        self, record: Mapping[str, Any], view: IdleView | None, interval_ms: int
    ) -> list[dict[str, Any]]:
        """The records to write for this round, in order (possibly none)."""
        now = int(record["time_ms"])
        config_hash = record.get("config_hash")
        idle = (
            interval_ms > 0
            and view is not None
            and self._ref is not None
            and engine_idle(record)
            and config_hash == self._ref_hash
            and view.state == self._ref.state
            and _close(view.ratio, self._ref.ratio)
        )
        out: list[dict[str, Any]] = []
        if not idle or view is None:
            out.extend(self.flush())
            self._ref, self._ref_hash = view, config_hash
            out.append(dict(record))
            return out
        s = self._open
        if s is not None and (
            now // DAY_MS != s.first_ms // DAY_MS or now - s.first_ms >= interval_ms
        ):
            out.extend(self.flush())
            s = None
        if s is None:
            self._open = s = _Summary(now, now, config_hash, view)
        else:
            # the previous folded round stands for the time up to this one, as the tables
            # weigh a round: the gap to the next, capped at twice the interval
            gap = now - s.last_ms
            cap = 2 * s.view.interval_ms if s.view.interval_ms is not None else gap
            state = s.view.disk_state
            s.state_ms[state] = s.state_ms.get(state, 0) + max(0, min(gap, cap))
            s.rounds += 1
            s.last_ms = now
            s.view = view
        s.add_ratio(view.ratio)
        s.stuck_rounds += int(view.stuck)
        s.add_maxima(view.maxima)
        return out

    def flush(self) -> list[dict[str, Any]]:
        """The open summary, if any, now closed."""
        s, self._open = self._open, None
        return [s.record()] if s is not None else []
