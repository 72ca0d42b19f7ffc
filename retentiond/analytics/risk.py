"""How brokers are ranked by risk: a small points table, plain Python, run on the driver over
one row per broker (thousands at most), so the rule is readable and the same in the report.

| factor | points |
|---|---|
| reaches the warning level within 7 days (or is there) | 40 |
| reaches it within 30 days | 20 |
| spent time above the warning level (the broker rejected writes) | 30 |
| force-deleted unexpired data | 20 |
| rounds over diskMaxUsedSpaceRatio that could delete nothing | 15 |
| median CommitLog age at deletion below fileReservedTime | 10 |
| rounds that could not read or measure the store | 10 |

``high`` from 40 points, ``medium`` from 20, ``low`` from 1, else ``ok``. Ties are broken by
the sooner projected date, then the fuller disk.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

WITHIN_7_DAYS = 40
WITHIN_30_DAYS = 20
HIT_WARNING = 30
FORCED = 20
STUCK = 15
SHORT_RETENTION = 10
STORE_ERRORS = 10
HIGH, MEDIUM = 40, 20


def _n(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def assess(row: Mapping[str, Any]) -> tuple[int, list[str], list[str]]:
    """(score, factor codes, human reasons with the numbers) for one broker's window row."""
    score, codes, why = 0, [], []
    days = row.get("days_to_warning")
    warning = row.get("warning_level_ratio")
    if days is not None and days <= 30:
        pts = WITHIN_7_DAYS if days <= 7 else WITHIN_30_DAYS
        score += pts
        codes.append("warning_within_7d" if days <= 7 else "warning_within_30d")
        slope = _n(row.get("slope_per_day"))
        when = row.get("projected_warning_date") or "now"
        trend = (
            f"peak ratio {_n(row.get('last_day_max_ratio')):.2f} on {row.get('last_dt')}, "
            f"trend {slope:+.4f}/day"
        )
        if days <= 0:
            why.append(f"disk is at the warning level {_n(warning):.2f} already: {trend}")
        else:
            why.append(
                f"disk reaches the warning level {_n(warning):.2f} in {days:.1f} days "
                f"({when}): {trend}"
            )
    if _n(row.get("ms_over_warning_level")) > 0:
        score += HIT_WARNING
        codes.append("hit_warning_level")
        why.append(
            f"{_n(row.get('ms_over_warning_level')) / 3.6e6:.1f} h above the warning level "
            f"{_n(warning):.2f} (the broker rejects writes there)"
        )
    if _n(row.get("forced_files")) > 0:
        score += FORCED
        codes.append("forced_deletions")
        why.append(
            f"force-deleted {int(_n(row.get('forced_files')))} unexpired files "
            f"({_size(_n(row.get('forced_bytes')))}), the youngest "
            f"{_n(row.get('forced_min_age_hours')):.1f} h old vs fileReservedTime "
            f"{int(_n(row.get('file_reserved_time_hours')))} h"
        )
    if _n(row.get("stuck_rounds")) > 0:
        score += STUCK
        codes.append("stuck_over_max_ratio")
        why.append(
            f"{int(_n(row.get('stuck_rounds')))} rounds over diskMaxUsedSpaceRatio could "
            "delete no CommitLog file"
        )
    p50, reserved = row.get("retention_p50_hours"), row.get("file_reserved_time_hours")
    if p50 is not None and reserved and p50 < reserved:
        score += SHORT_RETENTION
        codes.append("retention_below_reserved")
        why.append(
            f"median CommitLog age at deletion {p50:.1f} h is below fileReservedTime "
            f"{reserved} h: consumers behind by more than that lose data"
        )
    if _n(row.get("error_rounds")) > 0:
        score += STORE_ERRORS
        codes.append("store_errors")
        why.append(f"{int(_n(row.get('error_rounds')))} rounds could not read the store")
    return score, codes, why


def level(score: int) -> str:
    if score >= HIGH:
        return "high"
    if score >= MEDIUM:
        return "medium"
    return "low" if score > 0 else "ok"


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with risk_score, risk_level, risk_factors, risk_reasons and rank (1 = riskiest)."""
    out = []
    for row in rows:
        score, codes, why = assess(row)
        out.append(
            {
                **row,
                "risk_score": score,
                "risk_level": level(score),
                "risk_factors": codes,
                "risk_reasons": why,
            }
        )

    def order(r: dict[str, Any]) -> tuple:
        days = r.get("days_to_warning")
        return (
            -r["risk_score"],
            days if days is not None else math.inf,
            -_n(r.get("latest_ratio")),
            str(r.get("cluster")),
            str(r.get("broker")),
            str(r.get("host")),
        )

    out.sort(key=order)
    for i, r in enumerate(out, 1):
        r["rank"] = i
    return out
