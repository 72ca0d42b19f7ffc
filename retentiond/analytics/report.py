"""The human report: what needs action today and why, per cluster, the top offenders, then
the full tables.

Written as ``report.html`` (one self-contained file: SVG charts embedded as data, a few lines
of inline script to sort tables, no network) and ``report.md`` (the summary, for chat and
tickets), with the SVG charts beside them. Plain Python over rows the job has already
collected: nothing here touches Spark.

Charts are matplotlib's SVG output: it is the best kept plotting library in the Python world
(every release tested on every platform Spark runs on), writes SVG that needs no script or
font to render and so stays sharp when zoomed, and the job already has it as a dependency.
"""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from retentiond.analytics.risk import count, size

Row = Mapping[str, Any]
CLUSTERS_CHARTED = 12  # the riskiest clusters get a small multiple; the rest are in the tables
BROKERS_PER_CLUSTER_CHART = 8  # the riskiest brokers of a charted cluster
RETENTION_CHARTED = 30
FULL_ROWS_MAX = 500  # data_at_risk rows in the report (the Parquet table has them all)
TOP_SHOWN = 20
AT_RISK = ("high", "medium")
KIND_NAMES = {"rocketmq": "RocketMQ", "kafka": "Kafka"}
SECTIONS = (
    ("inputs", "What this report read"),
    ("action", "Needs action today"),
    ("kinds", "RocketMQ and Kafka side by side"),
    ("clusters", "Per cluster"),
    ("offenders", "Top offenders"),
    ("fleet", "Across the fleet"),
    ("tables", "Full tables"),
)
HOUR_MS = 3_600_000


@dataclass
class ReportData:
    as_of: str
    inputs: list[str]
    fleet: list[dict[str, Any]]  # ranked, one row per broker (fleet_summary)
    hourly: list[dict[str, Any]] = field(default_factory=list)  # charted brokers: hour, ratio
    broker_reclaim: list[dict[str, Any]] = field(default_factory=list)  # dt, broker, reason
    fleet_reclaim: list[dict[str, Any]] = field(default_factory=list)  # dt, reason, bytes
    kind_reclaim: list[dict[str, Any]] = field(default_factory=list)  # kind, reason
    top_topics: list[dict[str, Any]] = field(default_factory=list)
    top_groups: list[dict[str, Any]] = field(default_factory=list)
    data_at_risk: list[dict[str, Any]] = field(default_factory=list)
    data_at_risk_rows: int = 0
    rescue: list[dict[str, Any]] = field(default_factory=list)


# --- helpers -------------------------------------------------------------------------------


def name(r: Row) -> str:
    return f"{r['cluster']}/{r['broker']}@{r['host']}"


def _key(r: Row) -> tuple:
    return (r["cluster"], r["broker"], r["host"])


def _kind(r: Row) -> str:
    return KIND_NAMES.get(str(r.get("store_kind")), str(r.get("store_kind") or "?"))


def _fmt(value: object, spec: str = ".2f", none: str = "–") -> str:
    return none if value is None else format(value, spec)


def _n(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _median(values: Iterable[float]) -> float | None:
    s = sorted(values)
    if not s:
        return None
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _risky(r: Row) -> bool:
    return r["risk_level"] in AT_RISK


def charted_brokers(fleet: Sequence[Row]) -> list[Row]:
    """The brokers drawn in the per-cluster charts: the riskiest of the riskiest clusters."""
    by_cluster: dict[str, list[Row]] = defaultdict(list)
    for r in fleet:  # ranked: each cluster's list is riskiest first
        by_cluster[str(r["cluster"])].append(r)
    clusters = sorted(by_cluster, key=lambda c: (by_cluster[c][0]["rank"], c))
    return [
        r for c in clusters[:CLUSTERS_CHARTED] for r in by_cluster[c][:BROKERS_PER_CLUSTER_CHART]
    ]


# --- charts --------------------------------------------------------------------------------

_PALETTE = {
    "expired": "#4c78a8",
    "disk_over_max_ratio": "#f58518",
    "forced_over_clean_forcibly_ratio": "#e45756",
    "below_commitlog_min_offset": "#72b7b2",
    "retention_ms_breach": "#54a24b",
    "retention_bytes_breach": "#b279a2",
    "log_start_offset_breach": "#9d755d",
    "rescue_beyond_retention": "#d62728",
}
_OTHER_COLOURS = ("#bab0ac", "#eeca3b", "#ff9da6", "#79706e", "#17becf", "#8c564b")


def _colour(reason: str, reasons: Sequence[str]) -> str:
    if reason in _PALETTE:
        return _PALETTE[reason]
    others = [r for r in reasons if r not in _PALETTE]
    return _OTHER_COLOURS[others.index(reason) % len(_OTHER_COLOURS)]


def _unit(max_bytes: float) -> tuple[str, float]:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if max_bytes >= scale:
            return unit, scale
    return "B", 1.0


def _svg(fig: Any, *, tight: bool = True) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    box = "tight" if tight else None
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches=box)
    plt.close(fig)
    return buf.getvalue()


def _day(dt: str) -> datetime:
    return datetime.strptime(dt, "%Y-%m-%d").replace(tzinfo=UTC)


def _reclaim_bars(
    ax: Any, rows: Sequence[Row], days: list[str], title: str, *, legend: bool = True
) -> None:
    """Bytes reclaimed per day, stacked by reason, in the unit that reads best."""
    by: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in rows:
        by[r["reason"]][r["dt"]] += r["bytes"] or 0
    totals = [sum(by[reason].get(d, 0.0) for reason in by) for d in days]
    unit, scale = _unit(max(totals, default=0))
    x = [_day(d) for d in days]
    bottom = [0.0] * len(days)
    reasons = sorted(by)
    for reason in reasons:
        values = [by[reason].get(d, 0.0) / scale for d in days]
        ax.bar(x, values, bottom=bottom, label=reason, color=_colour(reason, reasons), width=0.8)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel(unit, fontsize=7)
    ax.set_title(title, fontsize=9)
    if reasons and legend:  # under the axes: never over the bars
        ax.legend(
            fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False
        )


def _date_axis(ax: Any) -> None:
    import matplotlib.dates as mdates

    ax.xaxis.set_major_locator(mdates.AutoDateLocator(maxticks=6))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d"))
    ax.tick_params(labelsize=7)


def chart_broker(b: Row, hourly: Sequence[Row], reclaim: Sequence[Row], days: list[str]) -> bytes:
    """One broker's small multiple: disk ratio by hour with its warning level (top), bytes
    reclaimed per day by reason (below)."""
    import matplotlib.pyplot as plt

    fig, (top, below) = plt.subplots(
        2, 1, figsize=(3.4, 4.3), gridspec_kw={"height_ratios": [3, 2]}
    )
    points = sorted((h["hour"], h["ratio"]) for h in hourly)
    top.plot(
        [datetime.fromtimestamp(p[0] * 3600, UTC) for p in points],
        [p[1] for p in points],
        linewidth=0.9,
        color="#4c78a8",
    )
    warning = b.get("warning_level_ratio")
    if warning:
        top.axhline(warning, color="#d62728", linestyle="--", linewidth=0.8)
        top.text(
            0.01, warning, f" warning {warning:.2f}", transform=top.get_yaxis_transform(),
            fontsize=6, color="#d62728", va="bottom",
        )  # fmt: skip
    top.set_ylim(0, 1)
    level = b["risk_level"]
    colour = {"high": "#d62728", "medium": "#e67e00"}.get(level, "black")
    top.set_title(f"{b['broker']} ({_kind(b)}): {level}", fontsize=9, color=colour)
    top.set_ylabel("disk ratio, hourly peak", fontsize=7)
    _date_axis(top)
    if days:
        top.set_xlim(_day(days[0]), _day(days[-1]).replace(hour=23, minute=59))
    _reclaim_bars(below, reclaim, days, "reclaimed per day", legend=False)
    _date_axis(below)
    handles, labels = below.get_legend_handles_labels()
    if handles:  # the same room on every broker's figure, so that all are the same size
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=6, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return _svg(fig, tight=False)


def chart_fleet_reclaim(rows: Sequence[Row], days: list[str]) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6))
    _reclaim_bars(ax, rows, days, "Bytes reclaimed per day across the fleet, by reason")
    _date_axis(ax)
    fig.tight_layout()
    return _svg(fig)


def chart_retention(fleet: Sequence[Row]) -> bytes:
    """Median age at deletion against the configured retention, per broker."""
    import matplotlib.pyplot as plt

    rows = [r for r in fleet if r.get("retention_p50_hours") is not None][:RETENTION_CHARTED]
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.28 * len(rows) + 1)))
    names = [f"{r['cluster']}/{r['broker']} ({_kind(r)})" for r in rows]
    colours = ["#54a24b" if r.get("store_kind") == "kafka" else "#4c78a8" for r in rows]
    ax.barh(names, [r["retention_p50_hours"] for r in rows], color=colours)
    configured = [(n, r["file_reserved_time_hours"]) for n, r in zip(names, rows, strict=True)]
    configured = [(n, h) for n, h in configured if h]
    if configured:
        ax.scatter(
            [h for _, h in configured], [n for n, _ in configured], color="#d62728",
            marker="|", s=200, label="fileReservedTime", zorder=3,
        )  # fmt: skip
        ax.legend(fontsize=7)
    ax.set_xlabel("median age at deletion (hours)")
    ax.set_title("Effective retention vs configured (Kafka: retention is per topic)", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.invert_yaxis()
    fig.tight_layout()
    return _svg(fig)


# --- the content, once for both formats ----------------------------------------------------


@dataclass
class Table:
    """A table for both formats: ``cells`` are (text, sort value) pairs."""

    headers: list[str]
    rows: list[list[tuple[str, object]]]
    numeric: set[int] = field(default_factory=set)  # columns sorted as numbers
    classes: dict[int, str] = field(default_factory=dict)  # a column's cells' class

    def markdown(self) -> list[str]:
        out = ["| " + " | ".join(self.headers) + " |", "|" + "---|" * len(self.headers)]
        for row in self.rows:
            out.append("| " + " | ".join(t.replace("|", "\\|") for t, _ in row) + " |")
        return out

    def html(self, cls: str = "") -> str:
        head = "".join(
            f"<th{' class=num' if i in self.numeric else ''} title='sort'>{html.escape(h)}</th>"
            for i, h in enumerate(self.headers)
        )
        body = []
        for row in self.rows:
            cells = []
            for i, (text, value) in enumerate(row):
                attr = ""
                if value is not None and value != text:
                    attr = f" data-v='{html.escape(str(value), quote=True)}'"
                names = " ".join(
                    c for c in ("num" if i in self.numeric else "", self.classes.get(i, "")) if c
                )
                css = f" class='{names}'" if names else ""
                cells.append(f"<td{css}{attr}>{html.escape(text)}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        return (
            f"<div class=scroll><table class='sortable {cls}'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )


def _cell_bytes(n: object) -> tuple[str, object]:
    return size(_n(n)), int(_n(n))


def _cell_num(n: object) -> tuple[str, object]:
    return count(_n(n)), int(_n(n))


def _cell_ratio(v: object, spec: str = ".2f") -> tuple[str, object]:
    return _fmt(v, spec), v if v is not None else ""


def fleet_table(fleet: Sequence[Row]) -> Table:
    rows = []
    for r in fleet:
        reserved = r.get("file_reserved_time_hours")
        configured = f"{reserved} h" if reserved else ("per topic" if _kind(r) == "Kafka" else "–")
        rows.append(
            [
                (str(r["rank"]), r["rank"]),
                (name(r), name(r)),
                (_kind(r), _kind(r)),
                (f"{r['risk_level']} {r['risk_score']}", r["risk_score"]),
                _cell_ratio(r.get("latest_ratio")),
                _cell_ratio(r.get("slope_per_day"), "+.4f"),
                _cell_ratio(r.get("warning_level_ratio")),
                (r.get("projected_warning_date") or "–", r.get("projected_warning_date") or ""),
                _cell_bytes(r.get("bytes_reclaimed")),
                _cell_num(r.get("forced_files")),
                _cell_num(r.get("rescue_files")),
                _cell_num(r.get("messages_lost")),
                _cell_ratio(r.get("retention_p50_hours"), ".1f"),
                (configured, reserved or ""),
                ("; ".join(r.get("risk_reasons") or []) or "–", None),
            ]
        )
    return Table(
        [
            "#", "broker", "kind", "risk", "disk now", "trend/day", "warning level",
            "warning level on", "reclaimed", "forced files", "rescue files", "messages lost",
            "median age at deletion (h)", "configured retention", "why",
        ],
        rows,
        numeric={0, 3, 4, 5, 6, 8, 9, 10, 11, 12},
        classes={1: "name", 14: "why"},
    )  # fmt: skip


def kinds_table(fleet: Sequence[Row]) -> Table:
    """The figures both kinds share, side by side; a kind without a figure says why."""
    by: dict[str, list[Row]] = defaultdict(list)
    for r in fleet:
        by[_kind(r)].append(r)
    kinds = [k for k in ("RocketMQ", "Kafka") if k in by] + sorted(
        k for k in by if k not in ("RocketMQ", "Kafka")
    )

    def ratios(rs: list[Row], col: str) -> str:
        values = [r[col] for r in rs if r.get(col) is not None]
        if not values:
            return "– (no disk figures in its rounds)"
        return f"median {_median(values):.2f}, max {max(values):.2f}"

    def total(rs: list[Row], col: str) -> float:
        return sum(_n(r.get(col)) for r in rs)

    def retention(rs: list[Row]) -> str:
        med = _median(r["retention_p50_hours"] for r in rs if r.get("retention_p50_hours"))
        conf = _median(
            r["file_reserved_time_hours"] for r in rs if r.get("file_reserved_time_hours")
        )
        text = "–" if med is None else f"{med:.1f} h"
        if conf is not None:
            return f"{text} vs fileReservedTime {conf:.0f} h"
        if rs and _kind(rs[0]) == "Kafka":
            return f"{text} (retention.ms is per topic)"
        return text

    def forced(k: str, rs: list[Row]) -> str:
        if k == "Kafka":
            return "none by design (Kafka deletes nothing before its retention)"
        return f"{count(total(rs, 'forced_files'))} files, {size(total(rs, 'forced_bytes'))}"

    def rescued(k: str, rs: list[Row]) -> str:
        if k == "RocketMQ":
            return "– (rescue is Kafka's)"
        return f"{count(total(rs, 'rescue_files'))} files, {size(total(rs, 'rescue_bytes'))}"

    lines = [
        ("brokers", lambda k, rs: str(len(rs))),
        ("at risk (high or medium)", lambda k, rs: str(sum(_risky(r) for r in rs))),
        ("disk ratio now", lambda k, rs: ratios(rs, "latest_ratio")),
        ("warning level", lambda k, rs: ratios(rs, "warning_level_ratio")),
        ("bytes reclaimed", lambda k, rs: size(total(rs, "bytes_reclaimed"))),
        ("files deleted", lambda k, rs: count(total(rs, "files_deleted"))),
        ("median age at deletion", lambda k, rs: retention(rs)),
        ("forced deletions", forced),
        ("rescue deletions", rescued),
        ("unconsumed messages deleted", lambda k, rs: count(total(rs, "messages_lost"))),
    ]  # fmt: skip
    return Table(
        ["figure", *kinds],
        [[(label, None), *((f(k, by[k]), None) for k in kinds)] for label, f in lines],
    )


def kind_reasons_table(rows: Sequence[Row]) -> Table:
    ordered = sorted(rows, key=lambda r: (str(r["kind"]), -_n(r["bytes"])))
    return Table(
        ["file kind", "reason", "files", "bytes"],
        [
            [(r["kind"], r["kind"]), (r["reason"], r["reason"]), _cell_num(r["files"]),
             _cell_bytes(r["bytes"])]
            for r in ordered
        ],
        numeric={2, 3},
    )  # fmt: skip


def losses_table(rows: Sequence[Row], by: str) -> Table:
    return Table(
        [by, "messages lost", "files", "brokers", "where", "last day"],
        [
            [(str(r[by]), r[by]), _cell_num(r["messages_lost"]), _cell_num(r["files"]),
             _cell_num(r["brokers"]), (", ".join(r["where"][:4]) + (" …" if len(r["where"]) > 4
             else ""), None), (r["last_dt"], r["last_dt"])]
            for r in rows
        ],
        numeric={1, 2, 3},
    )  # fmt: skip


def forced_table(fleet: Sequence[Row]) -> Table:
    rows = sorted(
        (r for r in fleet if _n(r.get("forced_files")) > 0),
        key=lambda r: (-_n(r.get("forced_files")), r["rank"]),
    )[:TOP_SHOWN]
    return Table(
        ["broker", "forced files", "bytes", "days of the last 7", "youngest (h)",
         "fileReservedTime (h)"],
        [
            [(name(r), name(r)), _cell_num(r.get("forced_files")),
             _cell_bytes(r.get("forced_bytes")),
             _cell_num(r.get("forced_days_7d")), _cell_ratio(r.get("forced_min_age_hours"), ".1f"),
             (str(r.get("file_reserved_time_hours") or "–"), r.get("file_reserved_time_hours"))]
            for r in rows
        ],
        numeric={1, 2, 3, 4, 5},
    )  # fmt: skip


def rescue_table(rows: Sequence[Row]) -> Table:
    return Table(
        ["day", "broker", "reason", "files", "bytes"],
        [
            [(r["dt"], r["dt"]), (name(r), name(r)), (r["reason"], r["reason"]),
             _cell_num(r["files"]), _cell_bytes(r["bytes"])]
            for r in rows
        ],
        numeric={3, 4},
    )  # fmt: skip


def risk_rows_table(rows: Sequence[Row]) -> Table:
    return Table(
        ["day", "broker", "file kind", "topic", "group", "messages lost", "files"],
        [
            [(r["dt"], r["dt"]), (name(r), name(r)), (r["kind"], r["kind"]),
             (str(r["topic"]), r["topic"]), (str(r["group"]), r["group"]),
             _cell_num(r["messages_lost"]), _cell_num(r["files"])]
            for r in rows
        ],
        numeric={5, 6},
    )  # fmt: skip


def cluster_table(brokers: Sequence[Row]) -> Table:
    return Table(
        ["broker", "kind", "risk", "disk now", "trend/day", "reclaimed", "forced files",
         "messages lost"],
        [
            [(f"{r['broker']}@{r['host']}", r["broker"]), (_kind(r), _kind(r)),
             (f"{r['risk_level']} {r['risk_score']}", r["risk_score"]),
             _cell_ratio(r.get("latest_ratio")), _cell_ratio(r.get("slope_per_day"), "+.4f"),
             _cell_bytes(r.get("bytes_reclaimed")), _cell_num(r.get("forced_files")),
             _cell_num(r.get("messages_lost"))]
            for r in brokers
        ],
        numeric={2, 3, 4, 5, 6, 7},
    )  # fmt: skip


# --- the two documents ---------------------------------------------------------------------


@dataclass
class _Content:
    data: ReportData
    days: list[str]
    at_risk: list[Row]
    watch: list[Row]
    clusters: dict[str, list[Row]]
    headline: str


def _content(data: ReportData) -> _Content:
    fleet = data.fleet
    days = sorted({r["dt"] for r in data.fleet_reclaim} | {
        datetime.fromtimestamp(h["hour"] * 3600, UTC).strftime("%Y-%m-%d") for h in data.hourly
    })  # fmt: skip
    clusters: dict[str, list[Row]] = defaultdict(list)
    for r in fleet:
        clusters[str(r["cluster"])].append(r)
    kinds = defaultdict(int)
    for r in fleet:
        kinds[_kind(r)] += 1
    reclaimed = sum(_n(r.get("bytes_reclaimed")) for r in fleet)
    files = sum(_n(r.get("files_deleted")) for r in fleet)
    at_risk = [r for r in fleet if r["risk_level"] in AT_RISK]
    headline = (
        f"As of {data.as_of}: {len(fleet)} brokers ("
        + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        + f") in {len(clusters)} clusters; {len(at_risk)} need action today. "
        f"{count(files)} files deleted, {size(reclaimed)} reclaimed."
    )
    return _Content(
        data, days, at_risk, [r for r in fleet if r["risk_level"] == "low"], clusters, headline
    )


def _markdown(c: _Content) -> str:
    d = c.data
    lines = ["# retentiond fleet report", "", c.headline, "", "## What this report read", ""]
    lines += [f"- {line}" for line in d.inputs]
    lines += ["", "## Needs action today", ""]
    if not c.at_risk:
        lines.append("Nothing: no broker is near its warning level, losing data or forced.")
    for r in c.at_risk:
        lines.append(
            f"- **#{r['rank']} {name(r)}** ({_kind(r)}) — {r['risk_level']} "
            f"{r['risk_score']}, disk now {_fmt(r.get('latest_ratio'))}:"
        )
        lines += [f"  - {why}" for why in r["risk_reasons"]]
    if c.watch:
        lines += ["", "To watch (low risk):", ""]
        lines += [f"- {name(r)}: {'; '.join(r['risk_reasons'])}" for r in c.watch]
    lines += ["", "## RocketMQ and Kafka side by side", ""]
    lines += kinds_table(d.fleet).markdown()
    lines += ["", "## Top offenders", ""]
    if d.top_groups:
        lines.append("Consumer groups that lost unconsumed messages:")
        lines.append("")
        lines += losses_table(d.top_groups[:5], "group").markdown()
        lines.append("")
    if d.top_topics:
        lines.append("Topics that lost unconsumed messages:")
        lines.append("")
        lines += losses_table(d.top_topics[:5], "topic").markdown()
        lines.append("")
    forced = forced_table(d.fleet)
    if forced.rows:
        lines += ["Brokers by forced deletions:", "", *forced.markdown(), ""]
    if d.rescue:
        lines += ["Rescues:", "", *rescue_table(d.rescue[:10]).markdown(), ""]
    if not (d.top_groups or d.top_topics or forced.rows or d.rescue):
        lines.append("None: no data lost, no forced deletion, no rescue.")
    lines += ["", "## Per cluster", ""]
    for cluster, brokers in c.clusters.items():
        n_risk = sum(r["risk_level"] in AT_RISK for r in brokers)
        lines.append(
            f"- {cluster}: {len(brokers)} brokers, {n_risk} at risk, "
            f"{size(sum(_n(r.get('bytes_reclaimed')) for r in brokers))} reclaimed"
        )
    lines += ["", "Charts and the full tables: report.html (one file, opens offline)."]
    return "\n".join(lines) + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:78em;padding:0 1em 3em;color:#222;line-height:1.4}
h1{margin-bottom:.2em}h2{border-bottom:2px solid #ddd;margin-top:1.8em}
nav{font-size:.9em;margin:.5em 0 1em}nav a{margin-right:1em}
.headline{font-size:1.1em}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3;cursor:pointer;user-select:none;white-space:nowrap}
th.asc::after{content:" \\25B2"}th.desc::after{content:" \\25BC"}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.risk{border-left:5px solid #e67e00;padding:.2em .8em;margin:.6em 0;background:#fff8ef}
.risk.high{border-color:#d62728;background:#fff1f1}
.risk ul{margin:.3em 0}
.badge{display:inline-block;padding:0 .5em;border-radius:.6em;color:#fff;font-size:.85em}
.badge.high{background:#d62728}.badge.medium{background:#e67e00}.badge.low{background:#888}
img{max-width:100%;height:auto}
.multiples{display:flex;flex-wrap:wrap;gap:.4em 1em}
.multiples img{width:18em}
td.name{white-space:nowrap}td.why{min-width:28em}
details{margin:.6em 0}summary{cursor:pointer;font-weight:600}
.inputs li{font-family:ui-monospace,monospace;font-size:.85em}
"""

_SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0];
      var asc = !th.classList.contains('asc');
      table.querySelectorAll('th').forEach(function (h) { h.classList.remove('asc', 'desc'); });
      th.classList.add(asc ? 'asc' : 'desc');
      var num = th.classList.contains('num');
      var key = function (tr) {
        var td = tr.cells[col];
        var v = td.hasAttribute('data-v') ? td.getAttribute('data-v') : td.textContent;
        if (num) { var n = parseFloat(v); return isNaN(n) ? -Infinity : n; }
        return v.toLowerCase();
      };
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
      });
      rows.forEach(function (tr) { body.appendChild(tr); });
    });
  });
});
"""


def _img(alt: str, svg: bytes, cls: str = "wide") -> str:
    data = base64.b64encode(svg).decode()
    return (
        f"<img class={cls} alt='{html.escape(alt, quote=True)}' "
        f"src='data:image/svg+xml;base64,{data}'>"
    )


def _chart_key(r: Row) -> str:
    return "broker:" + "/".join(str(v) for v in _key(r))


def _html(c: _Content, charts: dict[str, bytes]) -> str:
    d = c.data
    e = html.escape
    out = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        "<meta name=viewport content='width=device-width,initial-scale=1'>",
        # no request may leave the file: not even for a favicon
        "<link rel=icon href='data:,'>",
        f"<title>retentiond fleet report {e(d.as_of)}</title><style>{_CSS}</style></head><body>",
        "<h1>retentiond fleet report</h1>",
        f"<p class=headline>{e(c.headline)}</p>",
        "<nav>" + "".join(f"<a href='#{i}'>{e(t)}</a>" for i, t in SECTIONS) + "</nav>",
        f"<h2 id=inputs>{SECTIONS[0][1]}</h2><ul class=inputs>",
        *(f"<li>{e(line)}</li>" for line in d.inputs),
        "</ul>",
        f"<h2 id=action>{SECTIONS[1][1]}</h2>",
    ]
    if not c.at_risk:
        out.append("<p>Nothing: no broker is near its warning level, losing data or forced.</p>")
    for r in c.at_risk:
        level = r["risk_level"]
        out.append(
            f"<div class='risk {level}'><b>#{r['rank']} {e(name(r))}</b> ({_kind(r)}) "
            f"<span class='badge {level}'>{level} {r['risk_score']}</span> "
            f"disk now {_fmt(r.get('latest_ratio'))}<ul>"
            + "".join(f"<li>{e(why)}</li>" for why in r["risk_reasons"])
            + "</ul></div>"
        )
    if c.watch:
        out.append("<p>To watch (low risk):</p><ul>")
        out += [
            f"<li><b>{e(name(r))}</b> ({_kind(r)}): {e('; '.join(r['risk_reasons']))}</li>"
            for r in c.watch
        ]
        out.append("</ul>")
    out += [
        f"<h2 id=kinds>{SECTIONS[2][1]}</h2>",
        "<p>The same figure where it means the same for both kinds; a kind without it says "
        "why.</p>",
        kinds_table(d.fleet).html(),
        "<p>What each kind deleted, by its own reasons:</p>",
        kind_reasons_table(d.kind_reclaim).html(),
        f"<h2 id=clusters>{SECTIONS[3][1]}</h2>",
    ]
    for cluster, brokers in c.clusters.items():
        n_risk = sum(r["risk_level"] in AT_RISK for r in brokers)
        out.append(
            f"<h3>{e(cluster)}</h3><p>{len(brokers)} brokers, {n_risk} at risk, "
            f"{size(sum(_n(r.get('bytes_reclaimed')) for r in brokers))} reclaimed.</p>"
        )
        shown = [r for r in brokers if _chart_key(r) in charts]
        if shown:
            if len(shown) < len(brokers):
                out.append(f"<p>Charts of its {len(shown)} riskiest brokers.</p>")
            out.append("<div class=multiples>")
            out += [_img(f"{name(r)}", charts[_chart_key(r)], "multiple") for r in shown]
            out.append("</div>")
        out.append(cluster_table(brokers).html())
    uncharted = [
        c_ for c_, rs in c.clusters.items() if not any(_chart_key(r) in charts for r in rs)
    ]
    if uncharted:
        out.append(
            f"<p>{len(uncharted)} clusters are not charted (only the {CLUSTERS_CHARTED} "
            "riskiest are): their brokers are in the tables above and below.</p>"
        )
    out.append(f"<h2 id=offenders>{SECTIONS[4][1]}</h2>")
    out.append("<h3>Consumer groups that lost unconsumed messages</h3>")
    out.append(losses_table(d.top_groups, "group").html() if d.top_groups else "<p>None.</p>")
    out.append("<h3>Topics that lost unconsumed messages</h3>")
    out.append(losses_table(d.top_topics, "topic").html() if d.top_topics else "<p>None.</p>")
    forced = forced_table(d.fleet)
    out.append("<h3>Brokers by forced deletions</h3>")
    out.append(forced.html() if forced.rows else "<p>None.</p>")
    out.append("<h3>Rescues</h3>")
    out.append(rescue_table(d.rescue[:TOP_SHOWN]).html() if d.rescue else "<p>None.</p>")
    out += [
        f"<h2 id=fleet>{SECTIONS[5][1]}</h2>",
        "<p>" + _img("bytes reclaimed per day", charts["reclaim"]) + "</p>",
        "<p>" + _img("effective retention", charts["retention"]) + "</p>",
        f"<h2 id=tables>{SECTIONS[6][1]}</h2>",
        f"<details><summary>All {len(d.fleet)} brokers, ranked by risk</summary>",
        fleet_table(d.fleet).html("fleet"),
        "</details>",
        f"<details><summary>Data at risk: {d.data_at_risk_rows:,} rows "
        "(day, broker, topic, group)</summary>",
    ]
    if d.data_at_risk:
        if d.data_at_risk_rows > len(d.data_at_risk):
            out.append(
                f"<p>The {len(d.data_at_risk)} largest; all are in the data_at_risk table.</p>"
            )
        out.append(risk_rows_table(d.data_at_risk).html())
    else:
        out.append("<p>No row: no deletion lost a message a protected group had not read.</p>")
    out.append("</details>")
    out.append(f"<details><summary>Rescue deletions: {len(d.rescue)} rows</summary>")
    out.append(rescue_table(d.rescue).html() if d.rescue else "<p>No row.</p>")
    out.append("</details>")
    out.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(out) + "\n"


def write_report(directory: Path, data: ReportData) -> Path:
    """Write report.md, report.html and the SVG charts; returns the Markdown file's path."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "retentiond"  # stable ids: same data, same file
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    c = _content(data)
    charts: dict[str, bytes] = {
        "reclaim": chart_fleet_reclaim(data.fleet_reclaim, c.days),
        "retention": chart_retention(data.fleet),
    }
    hourly: dict[tuple, list[Row]] = defaultdict(list)
    for h in data.hourly:
        hourly[_key(h)].append(h)
    reclaim: dict[tuple, list[Row]] = defaultdict(list)
    for r in data.broker_reclaim:
        reclaim[_key(r)].append(r)
    for b in charted_brokers(data.fleet):
        charts[_chart_key(b)] = chart_broker(b, hourly[_key(b)], reclaim[_key(b)], c.days)
    for old in directory.glob("*.svg"):
        old.unlink()
    for key, svg in charts.items():
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in key)
        (directory / f"{safe}.svg").write_bytes(svg)
    (directory / "report.md").write_text(_markdown(c))
    (directory / "report.html").write_text(_html(c, charts))
    return directory / "report.md"
