"""The human report: which brokers are at risk and why, with the numbers, and three charts.

Written as ``report.md`` (with the PNGs beside it) and ``report.html`` (the same content with
the PNGs embedded, one file to mail or attach to a ticket). Plain Python over rows the job
has already collected: nothing here touches Spark.
"""

from __future__ import annotations

import base64
import html
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Row = Mapping[str, Any]
TOP_CHARTED = 6
TOP_BROKERS = 20  # the short table between the charts and the full one


def _name(r: Row) -> str:
    return f"{r['cluster']}/{r['broker']}@{r['host']}"


def _fmt(value: object, spec: str = ".2f", none: str = "–") -> str:
    return none if value is None else format(value, spec)


def _gib(n: object) -> str:
    return f"{(n or 0) / 2**30:.2f}"


def _chart_disk(path: Path, fleet: Sequence[Row], pressure: Sequence[Row]) -> None:
    import matplotlib.pyplot as plt

    top = [r for r in fleet if r["risk_level"] in ("high", "medium")][:TOP_CHARTED] or list(
        fleet[:TOP_CHARTED]
    )
    series: dict[str, list[tuple[str, float]]] = defaultdict(list)
    wanted = {_name(r) for r in top}
    for p in pressure:
        if _name(p) in wanted and p.get("max_ratio") is not None:
            series[_name(p)].append((p["dt"], p["max_ratio"]))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name in sorted(series):
        points = sorted(series[name])
        ax.plot([d for d, _ in points], [v for _, v in points], marker="o", label=name)
    levels = {r.get("warning_level_ratio") for r in top if r.get("warning_level_ratio")}
    for lvl in sorted(levels):
        ax.axhline(lvl, color="red", linestyle="--", linewidth=1)
    ax.set_title("Daily peak disk ratio of the riskiest brokers (red: warning level)")
    ax.set_ylabel("disk ratio")
    ax.tick_params(axis="x", rotation=45)
    if series:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _chart_reclaim(path: Path, reclaim: Sequence[Row]) -> None:
    import matplotlib.pyplot as plt

    by: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in reclaim:
        by[r["reason"]][r["dt"]] += (r["bytes"] or 0) / 2**30
    days = sorted({r["dt"] for r in reclaim})
    fig, ax = plt.subplots(figsize=(9, 4.5))
    bottom = [0.0] * len(days)
    for reason in sorted(by):
        values = [by[reason].get(d, 0.0) for d in days]
        ax.bar(days, values, bottom=bottom, label=reason)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_title("Bytes reclaimed per day across the fleet, by reason")
    ax.set_ylabel("GiB")
    ax.tick_params(axis="x", rotation=45)
    if days:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _chart_retention(path: Path, fleet: Sequence[Row]) -> None:
    import matplotlib.pyplot as plt

    rows = [r for r in fleet if r.get("retention_p50_hours") is not None][:30]
    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.3 * len(rows) + 1)))
    names = [_name(r) for r in rows]
    ax.barh(names, [r["retention_p50_hours"] for r in rows], label="median age at deletion")
    ax.scatter(
        [r.get("file_reserved_time_hours") or 0 for r in rows],
        names,
        color="red",
        marker="|",
        s=200,
        label="fileReservedTime",
        zorder=3,
    )
    ax.set_xlabel("hours")
    ax.set_title("Effective retention of CommitLog data vs fileReservedTime")
    ax.invert_yaxis()
    if rows:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


CHARTS = ("disk_ratio.png", "reclaim.png", "retention.png")


def _fleet_table(fleet: Sequence[Row]) -> list[str]:
    lines = [
        "| # | broker | risk | score | disk now | trend/day | warning level on | "
        "forced files | h above warning | median age at deletion (h) | fileReservedTime (h) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in fleet:
        lines.append(
            f"| {r['rank']} | {_name(r)} | {r['risk_level']} | {r['risk_score']} | "
            f"{_fmt(r.get('latest_ratio'))} | {_fmt(r.get('slope_per_day'), '+.4f')} | "
            f"{r.get('projected_warning_date') or '–'} | {r.get('forced_files') or 0} | "
            f"{(r.get('ms_over_warning_level') or 0) / 3.6e6:.1f} | "
            f"{_fmt(r.get('retention_p50_hours'), '.1f')} | "
            f"{r.get('file_reserved_time_hours') or '–'} |"
        )
    return lines


def _markdown(summary: Row, fleet: Sequence[Row]) -> str:
    """What a reader needs first comes first: the summary and the brokers at risk, then the
    charts, then the top brokers; the full table (pages long for a large fleet) is last."""
    at_risk = [r for r in fleet if r["risk_level"] in ("high", "medium")]
    lines = [
        "# retentiond fleet report",
        "",
        f"As of **{summary['as_of']}** (data from {summary['first_dt']}); "
        f"{summary['brokers']} brokers in {summary['clusters']} clusters, "
        f"{summary['deletions']} deletions ({_gib(summary['bytes'])} GiB) "
        f"in {summary['rounds']} rounds.",
        "",
        "## Brokers at risk",
        "",
    ]
    if not at_risk:
        lines.append("None: no broker is near its warning level or deleting unexpired data.")
    for r in at_risk:
        lines.append(
            f"- **#{r['rank']} {_name(r)}** — {r['risk_level']} risk "
            f"(score {r['risk_score']}, disk now {_fmt(r.get('latest_ratio'))}):"
        )
        lines += [f"  - {why}" for why in r["risk_reasons"]]
    lines += ["", "## Charts", ""]
    lines += [f"![{c}]({c})" for c in CHARTS]
    top = fleet[:TOP_BROKERS]
    lines += ["", f"## Top {len(top)} brokers by risk", ""]
    lines += _fleet_table(top)
    lines += ["", f"## All {len(fleet)} brokers, ranked by risk", ""]
    lines += _fleet_table(fleet)
    return "\n".join(lines) + "\n"


def _html(markdown: str, directory: Path) -> str:
    """A small Markdown subset to HTML: the report uses headings, lists, tables, images."""
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>retentiond fleet report"]
    out.append("</title><style>body{font-family:sans-serif;max-width:70em;margin:auto}")
    out.append("table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}")
    out.append("</style></head><body>")
    in_table = in_list = in_sub = False
    for line in markdown.splitlines():
        if line.startswith("|"):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            if set("".join(cells)) <= {"-"}:
                continue
            if not in_table:
                out.append("<table>")
                in_table = True
                out.append("<tr>" + "".join(f"<th>{c}</th>" for c in cells) + "</tr>")
                continue
            out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            out.append("</table>")
            in_table = False
        stripped = line.lstrip()
        if stripped.startswith("- "):
            nested = line.startswith("  ")  # a broker's reasons, under its line
            if not in_list:
                out.append("<ul>")
                in_list = True
            if nested and not in_sub:
                out.append("<ul>")
                in_sub = True
            elif not nested and in_sub:
                out.append("</ul>")
                in_sub = False
            text = html.escape(stripped[2:])
            while "**" in text:
                text = text.replace("**", "<b>", 1).replace("**", "</b>", 1)
            out.append(f"<li>{text}</li>")
            continue
        if in_sub:
            out.append("</ul>")
            in_sub = False
        if in_list:
            out.append("</ul>")
            in_list = False
        if line.startswith("#"):
            depth = len(line) - len(line.lstrip("#"))
            out.append(f"<h{depth}>{html.escape(line[depth:].strip())}</h{depth}>")
        elif line.startswith("!["):
            name = line[line.index("(") + 1 : -1]
            data = base64.b64encode((directory / name).read_bytes()).decode()
            out.append(f"<p><img alt='{name}' src='data:image/png;base64,{data}'></p>")
        elif line:
            text = html.escape(line)
            while "**" in text:
                text = text.replace("**", "<b>", 1).replace("**", "</b>", 1)
            out.append(f"<p>{text}</p>")
    if in_table:
        out.append("</table>")
    if in_sub:
        out.append("</ul>")
    if in_list:
        out.append("</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_report(
    directory: Path,
    summary: Row,
    fleet: Sequence[Row],
    pressure: Sequence[Row],
    reclaim: Sequence[Row],
) -> Path:
    """Write report.md, report.html and the charts; returns the Markdown file's path."""
    import matplotlib

    matplotlib.use("Agg")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _chart_disk(directory / CHARTS[0], fleet, pressure)
    _chart_reclaim(directory / CHARTS[1], reclaim)
    _chart_retention(directory / CHARTS[2], fleet)
    markdown = _markdown(summary, fleet)
    (directory / "report.md").write_text(markdown)
    (directory / "report.html").write_text(_html(markdown, directory))
    return directory / "report.md"
