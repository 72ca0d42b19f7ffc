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
| deleted messages a protected consumer group had not consumed (``loss``) | 40 |
| needed ``retentiond rescue`` (a stopped Kafka broker, deletions beyond retention) | 20 |

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
DATA_LOST = 40
RESCUED = 20
HIGH, MEDIUM = 40, 20


def _n(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def size(n: float) -> str:
    """Bytes in the unit that reads best: 512 B, 3.4 KiB, 870.0 MiB, 1.2 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def count(n: float) -> str:
    return f"{int(n):,}"


def _days(n: float) -> str:
    return f"{n:.1f} day" + ("" if f"{n:.1f}" == "1.0" else "s")


def assess(
    row: Mapping[str, Any], losses: list[Mapping[str, Any]] | None = None
) -> tuple[int, list[str], list[str]]:
    """(score, factor codes, human reasons with the numbers) for one broker's window row;
    ``losses``: its groups that lost messages, the worst first (group, topic, messages)."""
    score, codes, why = 0, [], []
    days = row.get("days_to_warning")
    warning = row.get("warning_level_ratio")
    now = row.get("latest_ratio")
    now_text = f"disk {_n(now):.2f}" if now is not None else "disk"
    slope = _n(row.get("slope_per_day"))
    trend = f"rising {slope:.3f}/day" if slope > 0 else f"trend {slope:+.3f}/day"
    if days is not None and days <= 30:
        pts = WITHIN_7_DAYS if days <= 7 else WITHIN_30_DAYS
        score += pts
        codes.append("warning_within_7d" if days <= 7 else "warning_within_30d")
        if days <= 0:
            why.append(
                f"disk at the warning level {_n(warning):.2f}: peak "
                f"{_n(row.get('last_day_max_ratio')):.2f} on {row.get('last_dt')}, "
                f"{now_text.replace('disk', 'now')}, {trend}"
            )
        else:
            when = row.get("projected_warning_date")
            why.append(
                f"{now_text} and {trend}: warning level {_n(warning):.2f} in {_days(days)}"
                + (f" ({when})" if when else "")
            )
    if _n(row.get("ms_over_warning_level")) > 0:
        score += HIT_WARNING
        codes.append("hit_warning_level")
        rejects = " (the broker rejects writes there)" if row.get("store_kind") != "kafka" else ""
        why.append(
            f"{_n(row.get('ms_over_warning_level')) / 3.6e6:.1f} h above the warning level "
            f"{_n(warning):.2f}{rejects}"
        )
    lost = _n(row.get("messages_lost"))
    if lost > 0:
        score += DATA_LOST
        codes.append("data_lost")
        named = [
            f"group {g['group']} lost {count(g['messages'])} messages of {g['topic']}"
            for g in (losses or [])[:3]
        ]
        more = len(losses or []) - len(named)
        text = "; ".join(named) if named else f"{count(lost)} unconsumed messages deleted"
        if more > 0:
            text += f" (and {more} more group/topic pairs; {count(lost)} messages in all)"
        why.append(text)
    if _n(row.get("forced_files")) > 0:
        score += FORCED
        codes.append("forced_deletions")
        recent = int(_n(row.get("forced_days_7d")))
        on = f"forced deletions on {recent} of the last 7 days: " if recent else ""
        why.append(
            f"{on}force-deleted {count(_n(row.get('forced_files')))} unexpired files "
            f"({size(_n(row.get('forced_bytes')))}), the youngest "
            f"{_n(row.get('forced_min_age_hours')):.1f} h old vs fileReservedTime "
            f"{int(_n(row.get('file_reserved_time_hours')))} h"
        )
    if _n(row.get("rescue_files")) > 0:
        score += RESCUED
        codes.append("rescued")
        why.append(
            f"needed a rescue: {count(_n(row.get('rescue_files')))} files "
            f"({size(_n(row.get('rescue_bytes')))}) deleted by `retentiond rescue`, "
            f"last on {row.get('last_rescue_dt')}"
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


def rank(
    rows: list[dict[str, Any]], losses: Mapping[tuple, list[Mapping[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """Rows with risk_score, risk_level, risk_factors, risk_reasons and rank (1 = riskiest);
    ``losses``: per (cluster, broker, host), its groups that lost messages, worst first."""
    out = []
    for row in rows:
        key = (row.get("cluster"), row.get("broker"), row.get("host"))
        score, codes, why = assess(row, (losses or {}).get(key))
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
