"""The fleet analysis end to end: a week of twelve brokers' journals, written by the real
engine over generated stores (``fleet_sim``), shipped by the real shipper, analysed by the job
on a local Spark; every table is checked against values computed here, in plain Python, from
the records the journals acknowledged. The Parquet output is read back with DuckDB, so no
Spark code is involved on the checking side either.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from retentiond.reasons import SCHEMA_VERSION
from tests.analytics import fleet_sim
from tests.conftest import need

pytestmark = pytest.mark.slow

HOUR = 3_600_000.0
KEY = ("cluster", "broker", "host")
OVER_MAX = {"over_max_ratio", "clean_forcibly", "warning_level"}
OVER_FORCIBLY = {"clean_forcibly", "warning_level"}


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local Spark for the whole module (starting a JVM costs seconds)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        need(False, "pyspark is not installed (pip install -e '.[spark]')")
    import shutil

    need(shutil.which("java") is not None, "java is not installed")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("retentiond-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> fleet_sim.Fleet:
    logging.getLogger().setLevel(logging.WARNING)
    return fleet_sim.build(tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="module")
def analysis(spark: Any, fleet: fleet_sim.Fleet, tmp_path_factory: pytest.TempPathFactory):
    from retentiond.analytics.job import analyze

    out = tmp_path_factory.mktemp("analysis")
    result = analyze(spark, str(fleet.target), str(out / "tables"), report_dir=out / "report")
    return out, result


def table(analysis: tuple[Path, Any], name: str) -> list[dict[str, Any]]:
    import duckdb

    out, _ = analysis
    con = duckdb.connect()
    rel = con.sql(
        f"SELECT * FROM read_parquet('{out}/tables/{name}/*/*.parquet', hive_partitioning=true)"
    )
    cols = rel.columns
    rows = [dict(zip(cols, values, strict=True)) for values in rel.fetchall()]
    for r in rows:
        r["dt"] = str(r["dt"])
    return rows


# --- independent expectations --------------------------------------------------------------


def day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    pos = p * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def key(r: dict[str, Any], *extra: str) -> tuple:
    return tuple(r[k] for k in (*KEY, *extra))


def deletions(fleet: fleet_sim.Fleet) -> list[dict[str, Any]]:
    return [
        {**r, "dt": day(r["time_ms"])}
        for r in fleet.records()
        if r["type"] == "deletion" and not r["dry_run"]
    ]


def items(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``round`` and ``round_summary`` records as runs of rounds, with what the tables read
    of them and the time each stands for (see docs/journal.md): a round is a run of one."""
    by_broker: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        t = r.get("triggers")
        if r["type"] == "round":
            ratios = [x for x in (t["physic_ratio"], t["logics_ratio"]) if x is not None]
            ratio = max(ratios) if ratios else None
            item = {
                "last_time_ms": r["time_ms"],
                "n": 1,
                "ratio": ratio,
                "ratio_max": ratio,
                "ratio_sum": ratio or 0.0,
                "ratio_n": int(ratio is not None),
                "state": t["disk_state"],
                "inner": {},
                "stuck": int(t["usage_exceeds"] and r["deleted"]["commitlog"]["files"] == 0),
                "expired_pending": r["expired_pending"],
            }
        elif r["type"] == "round_summary":
            item = {
                "last_time_ms": r["last_time_ms"],
                "n": r["rounds"],
                "ratio": r["ratio"]["last"],
                "ratio_max": r["ratio"]["max"],
                "ratio_sum": r["ratio"]["sum"] or 0.0,
                "ratio_n": r["ratio"]["n"],
                "state": r["disk_state"],
                "inner": r["state_ms"],
                "stuck": r["stuck_rounds"],
                "expired_pending": r["max"]["expired_pending"],
            }
        else:
            continue
        by_broker[key(r)].append({**r, **item, "dt": day(r["time_ms"])})
    out = []
    for rs in by_broker.values():
        rs.sort(key=lambda r: r["time_ms"])
        for i, r in enumerate(rs):
            if i + 1 < len(rs):
                tail = min(rs[i + 1]["time_ms"] - r["last_time_ms"], 2 * r["interval_ms"])
            else:
                tail = r["interval_ms"]
            r["ms"] = lambda states, r=r, tail=tail: (
                (tail if r["state"] in states else 0)
                + sum(v for s, v in r["inner"].items() if s in states)
            )
            out.append(r)
    return out


def rounds(fleet: fleet_sim.Fleet) -> list[dict[str, Any]]:
    """Every round the engine ran, unfolded: the history the tables must describe."""
    return items(fleet.every_round())


def journal_rounds(fleet: fleet_sim.Fleet) -> list[dict[str, Any]]:
    """The same history as the journals tell it: full rounds and summaries of idle ones."""
    return items(fleet.records())


def group(rows: list[dict[str, Any]], *extra: str) -> dict[tuple, list[dict[str, Any]]]:
    out: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[(r["dt"], *key(r, *extra))].append(r)
    return out


def close(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)  # type: ignore[arg-type]
    return a == b


def assert_table(got: list[dict[str, Any]], expected: dict[tuple, dict[str, Any]], keys: tuple):
    by_key = {tuple(r[k] for k in keys): r for r in got}
    assert set(by_key) == set(expected)
    for k, want in expected.items():
        row = by_key[k]
        bad = {c: (row[c], v) for c, v in want.items() if not close(row[c], v)}
        assert not bad, f"{k}: (got, expected) {bad}"


# --- the scenario really covers what the tables are about ----------------------------------


def test_the_simulated_week_exercises_every_story(fleet: fleet_sim.Fleet) -> None:
    dels = deletions(fleet)
    rs = rounds(fleet)
    assert len({(r["cluster"], r["broker"]) for r in rs}) == 12
    assert len({r["dt"] for r in rs}) == 7
    reasons = {r["reason"] for r in dels}
    assert {"expired", "disk_over_max_ratio", "forced_over_clean_forcibly_ratio"} <= reasons
    assert "below_commitlog_min_offset" in reasons
    assert any(r["state"] == "warning_level" for r in rs)
    assert any(r["stuck"] for r in rs)
    assert all(not r.error for r in fleet.ship_results)


def test_every_acknowledged_record_is_shipped_exactly_once(fleet: fleet_sim.Fleet) -> None:
    shipped = []
    layouts = {b.name: fleet_sim.layout_of(b) for b in fleet.brokers}
    assert set(layouts.values()) == {1, 2, 3}
    families = {"deletions": {"intent", "deletion", "abort"}, "rounds": {"round", "round_summary"}}
    for path in sorted(fleet.target.rglob("*.jsonl.gz")):
        parts = dict(p.split("=", 1) for p in path.parent.parts if "=" in p)
        kind, family = path.relative_to(fleet.target).parts[:2]
        layout = {"v2": 2, "v3": 3}.get(kind, 1)
        assert layout == layouts[parts["broker"]], path
        with gzip.open(path, "rt") as fh:
            for line in fh:
                record = json.loads(line)
                if layout == 1:
                    assert record["type"] == kind
                elif layout == 3:
                    assert record["type"] in families[family]
                assert (day(record["time_ms"]), record["cluster"], record["broker"]) == (
                    parts["dt"],
                    parts["cluster"],
                    parts["broker"],
                )
                shipped.append(record)
    assert not list(fleet.target.rglob(".*")), "temporary files left behind"
    canon = sorted(json.dumps(r, sort_keys=True) for r in fleet.records())
    # The journal stamps store and schema version too; the ledger knows all other fields.
    got = sorted(
        json.dumps({k: v for k, v in r.items() if k not in ("store", "schema_version")},
                   sort_keys=True)
        for r in shipped
    )  # fmt: skip
    assert got == canon
    for b in fleet.brokers:
        assert [p.name for p in b.journal_dir.glob("journal-*.jsonl")] == [
            p.name for p in sorted(b.journal_dir.glob("journal-*.jsonl"))[-1:]
        ], "only the (empty) active segment stays local"


# --- the tables ----------------------------------------------------------------------------


def test_daily_reclaim(fleet, analysis) -> None:
    expected = {
        k: {"files": len(rs), "bytes": sum(r["bytes"] for r in rs)}
        for k, rs in group(deletions(fleet), "kind", "reason").items()
    }
    assert_table(table(analysis, "daily_reclaim"), expected, ("dt", *KEY, "kind", "reason"))


def test_forced_deletions(fleet, analysis) -> None:
    forced = [r for r in deletions(fleet) if r["forced"]]
    assert forced
    expected = {}
    for k, rs in group(forced).items():
        ages = [r["age_ms"] for r in rs]
        expected[k] = {
            "files": len(rs),
            "bytes": sum(r["bytes"] for r in rs),
            "min_age_hours": min(ages) / HOUR,
            "median_age_hours": pct(ages, 0.5) / HOUR,
            "max_age_hours": max(ages) / HOUR,
            "file_reserved_time_hours": max(r["file_reserved_time_hours"] for r in rs),
        }
    assert_table(table(analysis, "forced_deletions"), expected, ("dt", *KEY))
    # Forced means younger than fileReservedTime, which is what makes it worth a table.
    assert all(r["age_ms"] < r["file_reserved_time_hours"] * HOUR for r in forced)


def test_effective_retention(fleet, analysis) -> None:
    cl = [r for r in deletions(fleet) if r["kind"] == "commitlog"]
    expected = {}
    for k, rs in group(cl).items():
        ages = [r["age_ms"] for r in rs]
        reserved = max(r["file_reserved_time_hours"] for r in rs)
        expected[k] = {
            "files": len(rs),
            "forced_files": sum(r["forced"] for r in rs),
            "min_age_hours": min(ages) / HOUR,
            "p50_age_hours": pct(ages, 0.5) / HOUR,
            "p95_age_hours": pct(ages, 0.95) / HOUR,
            "max_age_hours": max(ages) / HOUR,
            "file_reserved_time_hours": reserved,
            "p50_vs_reserved": pct(ages, 0.5) / HOUR / reserved,
        }
    assert_table(table(analysis, "effective_retention"), expected, ("dt", *KEY))


def daily_pressure(rs: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    expected = {}
    for k, day_rs in group(rs).items():
        expected[k] = {
            "rounds": sum(r["n"] for r in day_rs),
            "max_ratio": max(r["ratio_max"] for r in day_rs),
            "avg_ratio": sum(r["ratio_sum"] for r in day_rs) / sum(r["ratio_n"] for r in day_rs),
            "ms_over_max_ratio": sum(r["ms"](OVER_MAX) for r in day_rs),
            "ms_over_clean_forcibly": sum(r["ms"](OVER_FORCIBLY) for r in day_rs),
            "ms_over_warning_level": sum(r["ms"]({"warning_level"}) for r in day_rs),
            "stuck_rounds": sum(r["stuck"] for r in day_rs),
            "error_rounds": 0,
            "max_expired_pending": max(r["expired_pending"] for r in day_rs),
        }
    return expected


def test_disk_pressure(fleet, analysis) -> None:
    expected = daily_pressure(rounds(fleet))
    folded = daily_pressure(journal_rounds(fleet))
    assert set(folded) == set(expected)
    for k, want in expected.items():
        assert all(close(folded[k][c], v) for c, v in want.items()), (k, folded[k], want)
    assert_table(table(analysis, "disk_pressure"), expected, ("dt", *KEY))


def test_the_journals_fold_idle_rounds_into_summaries(fleet: fleet_sim.Fleet) -> None:
    """Most hourly rounds of the simulated week did nothing: the shipped journals hold them
    as round_summary records, each within one UTC day, and far fewer round records."""
    ran = fleet.every_round()
    shipped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in fleet.target.rglob("*.jsonl.gz"):
        with gzip.open(path, "rt") as fh:
            for line in fh:
                record = json.loads(line)
                shipped[record["type"]].append(record)
    full, summaries = shipped["round"], shipped["round_summary"]
    assert summaries and len(full) + sum(s["rounds"] for s in summaries) == len(ran)
    assert len(full) < len(ran) / 2, (len(full), len(ran))
    assert len(full) + len(summaries) < 0.7 * len(ran)
    assert any(s["rounds"] >= 5 for s in summaries)
    for s in summaries:
        assert day(s["time_ms"]) == day(s["last_time_ms"])
        assert s["last_time_ms"] - s["time_ms"] < fleet_sim.SUMMARY_INTERVAL_MS
        assert s["schema_version"] == SCHEMA_VERSION
    # every round that deleted something is still there in full
    deleting = [r for r in ran if any(c["files"] for c in r["deleted"].values())]
    assert deleting and {key(r, "time_ms") for r in deleting} <= {key(r, "time_ms") for r in full}


def forecasts(fleet: fleet_sim.Fleet, source=rounds) -> dict[tuple, dict[str, Any]]:
    rs = source(fleet)
    as_of = max(r["dt"] for r in rs)
    peaks: dict[tuple, dict[str, float]] = defaultdict(dict)
    for k, day_rounds in group(rs).items():
        peaks[k[1:]][k[0]] = max(r["ratio_max"] for r in day_rounds)
    out = {}
    for k, by_day in peaks.items():
        xs = [float((date.fromisoformat(d) - date(1970, 1, 1)).days) for d in sorted(by_day)]
        ys = [by_day[d] for d in sorted(by_day)]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
            (x - mx) ** 2 for x in xs
        )
        fitted = my - slope * mx + slope * xs[-1]
        last = max(
            (r for r in rs if key(r) == k), key=lambda r: r["last_time_ms"]
        )  # the broker's latest round
        warning = last["thresholds"]["warning_level_ratio"]
        if fitted >= warning:
            days: float | None = 0.0
        elif slope > 1e-9:  # tables.FLAT_SLOPE_PER_DAY: a flat disk's noise is no trend
            days = (warning - fitted) / slope
        else:
            days = None
        projected = None
        if days is not None and days <= 3650:
            whole = math.ceil(round(days, 6))  # as the job: a millionth of a day first
            projected = (date.fromisoformat(max(by_day)) + timedelta(whole)).isoformat()
        out[(as_of, *k)] = {
            "n_days": len(xs),
            "first_dt": min(by_day),
            "last_dt": max(by_day),
            "latest_ratio": last["ratio"],
            "last_day_max_ratio": ys[-1],
            "slope_per_day": slope,
            "fitted_ratio_now": fitted,
            "warning_level_ratio": warning,
            "days_to_warning": days,
            "projected_warning_date": projected,
        }
    return out


def test_a_flat_disk_projects_no_warning_date(spark) -> None:
    """Peaks that go up and back down again (0.46, 0.46, 0.47, 0.47, 0.46, 0.46) have no
    trend; least squares give 1.5e-16 a day, rounding noise, which must neither project the
    warning level 2.9e15 days out nor rank the broker ahead of those with no projection."""
    from retentiond.analytics.tables import capacity_forecast

    peaks = [0.46, 0.46, 0.47, 0.47, 0.46, 0.46]
    rows = [
        ("c", "b", "h", f"2024-03-0{i + 4}", y, y, 1_709_510_400_000 + i * 86_400_000, 0.9)
        for i, y in enumerate(peaks)
    ]
    pressure = spark.createDataFrame(
        rows,
        "cluster string, broker string, host string, dt string, max_ratio double, "
        "_ratio double, _ratio_ms long, _warning double",
    )
    [row] = capacity_forecast(pressure, "2024-03-09").collect()
    assert abs(row["slope_per_day"]) < 1e-12
    assert row["days_to_warning"] is None and row["projected_warning_date"] is None


def test_capacity_forecast(fleet, analysis) -> None:
    expected = forecasts(fleet)
    folded = forecasts(fleet, journal_rounds)
    assert set(folded) == set(expected)
    for k, want in expected.items():
        assert all(close(folded[k][c], v) for c, v in want.items()), (k, folded[k], want)
    assert_table(table(analysis, "capacity_forecast"), expected, ("dt", *KEY))
    days = [v["days_to_warning"] for v in expected.values()]
    assert any(d == 0.0 for d in days), "a broker already at the warning level"
    assert any(d is not None and 0 < d <= 30 for d in days), "a broker heading there"
    assert any(d is None for d in days), "a broker with a flat or falling trend"


def expected_fleet(fleet: fleet_sim.Fleet) -> dict[tuple, dict[str, Any]]:
    """The risk points of docs/journal.md, applied to plain-Python aggregates."""
    dels, rs, fc = deletions(fleet), rounds(fleet), forecasts(fleet)
    out = {}
    for (as_of, *k), f in fc.items():
        mine = [r for r in dels if list(key(r)) == k]
        cl_ages = [r["age_ms"] for r in mine if r["kind"] == "commitlog"]
        forced = [r for r in mine if r["forced"]]
        my_rounds = sorted((r for r in rs if list(key(r)) == k), key=lambda r: r["time_ms"])
        row = {
            "files_deleted": len(mine),
            "bytes_reclaimed": sum(r["bytes"] for r in mine),
            "forced_files": len(forced),
            "forced_bytes": sum(r["bytes"] for r in forced),
            "forced_min_age_hours": min(r["age_ms"] for r in forced) / HOUR if forced else None,
            "messages_lost": sum(
                g["messages"] for r in mine for g in (r.get("loss") or {}).get("groups") or []
            ),
            "retention_p50_hours": pct(cl_ages, 0.5) / HOUR if cl_ages else None,
            "file_reserved_time_hours": my_rounds[-1]["file_reserved_time_hours"],
            "rounds": sum(r["n"] for r in my_rounds),
            "ms_over_warning_level": sum(r["ms"]({"warning_level"}) for r in my_rounds),
            "stuck_rounds": sum(r["stuck"] for r in my_rounds),
            "error_rounds": 0,
            "days_to_warning": f["days_to_warning"],
            "projected_warning_date": f["projected_warning_date"],
        }
        score, factors = 0, []
        d = row["days_to_warning"]
        if d is not None and d <= 7:
            score, factors = score + 40, [*factors, "warning_within_7d"]
        elif d is not None and d <= 30:
            score, factors = score + 20, [*factors, "warning_within_30d"]
        if row["ms_over_warning_level"] > 0:
            score, factors = score + 30, [*factors, "hit_warning_level"]
        if row["forced_files"] > 0:
            score, factors = score + 20, [*factors, "forced_deletions"]
        if row["stuck_rounds"] > 0:
            score, factors = score + 15, [*factors, "stuck_over_max_ratio"]
        p50, reserved = row["retention_p50_hours"], row["file_reserved_time_hours"]
        if p50 is not None and p50 < reserved:
            score, factors = score + 10, [*factors, "retention_below_reserved"]
        row["risk_score"] = score
        row["risk_factors"] = factors
        row["risk_level"] = (
            "high" if score >= 40 else "medium" if score >= 20 else "low" if score else "ok"
        )
        row["_latest"] = f["latest_ratio"]
        out[(as_of, *k)] = row
    ranked = sorted(
        out.items(),
        key=lambda kv: (
            -kv[1]["risk_score"],
            kv[1]["days_to_warning"] if kv[1]["days_to_warning"] is not None else math.inf,
            -kv[1]["_latest"],
            kv[0][1:],
        ),
    )
    for i, (_, row) in enumerate(ranked, 1):
        row["rank"] = i
        del row["_latest"]
    return out


def test_fleet_summary_ranks_every_broker_by_risk(fleet, analysis) -> None:
    got = table(analysis, "fleet_summary")
    assert len(got) == 12
    for r in got:
        r["risk_factors"] = list(r["risk_factors"])
    assert_table(got, expected_fleet(fleet), ("dt", *KEY))
    by_rank = sorted(got, key=lambda r: r["rank"])
    assert by_rank[0]["risk_level"] == "high"
    assert {r["risk_level"] for r in got} >= {"high", "ok"}


def test_report_names_the_brokers_at_risk_with_numbers(fleet, analysis) -> None:
    out, result = analysis
    text = (out / "report" / "report.md").read_text()
    at_risk = text.split("## Needs action today", 1)[1].split("## RocketMQ and Kafka", 1)[0]
    for r in table(analysis, "fleet_summary"):
        name = f"{r['cluster']}/{r['broker']}@{r['host']}"
        assert (name in at_risk) == (r["risk_level"] != "ok"), name
        assert (f"**#{r['rank']} {name}**" in at_risk) == (r["risk_level"] in ("high", "medium"))
        for reason in r["risk_reasons"]:
            assert reason in at_risk
    assert "force-deleted" in at_risk and "warning level" in at_risk
    html = (out / "report" / "report.html").read_text()
    assert html.count("data:image/svg+xml;base64,") == 12 + 2  # a multiple per broker + 2
    assert "<script src" not in html and "http://" not in html and "https://" not in html
    for svg in out.joinpath("report").glob("*.svg"):
        assert svg.read_bytes().lstrip().startswith(b"<?xml")
    assert len(list(out.joinpath("report").glob("*.svg"))) == 14
    assert result.counts["fleet_summary"] == 12


def test_data_at_risk_and_rescue(fleet, analysis) -> None:
    """``data_at_risk`` sums the journal's ``loss.groups`` (none when the records carry no
    ``loss``); nothing here ran ``retentiond rescue``, so ``rescue`` is empty, and an empty
    table is still readable with its columns."""
    import duckdb

    out, _ = analysis
    want: dict[tuple, dict[str, int]] = defaultdict(lambda: {"messages_lost": 0, "files": 0})
    for r in deletions(fleet):
        for g in (r.get("loss") or {}).get("groups") or []:
            if g["messages"] > 0:
                row = want[(r["dt"], *key(r), r["kind"], g["topic"], g["group"])]
                row["messages_lost"] += g["messages"]
                row["files"] += 1
    assert_table(
        table(analysis, "data_at_risk") if want else [],
        dict(want),
        ("dt", *KEY, "kind", "topic", "group"),
    )
    for name, cols in (
        ("data_at_risk", {"kind", "topic", "group", "messages_lost", "files"}),
        ("rescue", {"reason", "files", "bytes"}),
    ):
        rel = duckdb.sql(
            f"SELECT * FROM read_parquet('{out}/tables/{name}/**/*.parquet', union_by_name=true)"
        )
        assert cols | {"cluster", "broker", "host"} <= set(rel.columns)
        if name == "rescue" or not want:
            assert rel.fetchall() == []
    if not want:
        html = (out / "report" / "report.html").read_text()
        assert "No row: no deletion lost a message" in html


def test_since_limits_the_window_and_rerun_replaces_partitions(fleet, analysis, spark) -> None:
    from retentiond.analytics.job import analyze

    out, _ = analysis
    days = sorted({r["dt"] for r in table(analysis, "disk_pressure")})
    since = days[-2]
    again = analyze(spark, str(fleet.target), str(out / "tables"), since=since)
    assert again.as_of == days[-1]
    pressure = table(analysis, "disk_pressure")
    assert sorted({r["dt"] for r in pressure}) == days, "older partitions are kept"
    forecast = [r for r in table(analysis, "capacity_forecast")]
    assert {r["n_days"] for r in forecast} == {2}, "the forecast only saw the window"
    test_disk_pressure(fleet, analysis)  # the replaced days hold the same values


def test_an_empty_target_is_no_records_not_an_error(spark, tmp_path: Path) -> None:
    from retentiond.analytics.job import analyze

    (tmp_path / "target" / "round").mkdir(parents=True)  # a type with no files, the rest absent
    result = analyze(spark, str(tmp_path / "target"), str(tmp_path / "out"))
    assert result.as_of is None
    assert not (tmp_path / "out").exists()


def test_report_reads_in_order_and_renders_in_a_browser(fleet, analysis, tmp_path: Path) -> None:
    """What it read, what needs action, the kinds side by side, per cluster, the top
    offenders, the fleet, the full tables; opened in headless Chromium, every image decodes
    and the console stays clean."""
    from tests.e2e.browser import open_page
    from tests.helpers.browser import chromium

    out, _ = analysis
    text = (out / "report" / "report.md").read_text()
    order = [
        "# retentiond fleet report",
        "## What this report read",
        "## Needs action today",
        "## RocketMQ and Kafka side by side",
        "## Top offenders",
        "## Per cluster",
    ]
    assert [text.index(h) for h in order] == sorted(text.index(h) for h in order)
    need(chromium() is not None, "chromium is missing (apt-get install chromium)")
    shot = tmp_path / "report.png"
    page = open_page((out / "report" / "report.html").resolve().as_uri(), shot)
    assert page.errors == []
    assert len(page.images) == 14
    assert all(i["complete"] and i["naturalWidth"] > 0 for i in page.images), page.images
    assert page.headings[:4] == [
        "retentiond fleet report",
        "What this report read",
        "Needs action today",
        "RocketMQ and Kafka side by side",
    ]
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000


def test_an_empty_table_is_a_readable_parquet_dataset(spark, tmp_path: Path) -> None:
    """forced_deletions of a healthy fleet has no rows: Spark and DuckDB both read it as an
    empty table with its columns, instead of failing on an empty directory."""
    import duckdb

    from retentiond.analytics import tables
    from retentiond.analytics.job import _write, read_deletions, used_deletions

    deletions = used_deletions(read_deletions(spark, str(tmp_path / "in"), None)[0])
    empty = tables.forced_deletions(deletions)
    _write(empty, str(tmp_path / "out"), "forced_deletions")
    path = tmp_path / "out" / "forced_deletions"
    back = spark.read.parquet(str(path))
    assert back.count() == 0
    assert set(empty.columns) <= set(back.columns)
    got = duckdb.sql(f"select * from read_parquet('{path}/**/*.parquet', union_by_name=true)")
    assert got.fetchall() == []
    assert set(empty.columns) <= set(got.columns)


def test_the_inputs_count_what_was_left_out_in_every_layout(spark, tmp_path: Path) -> None:
    """What the job says it read: each record of each layout counted once, used or skipped
    with its reason (a line that is no record, a record filed under another type's or
    family's directory, a newer schema, a dry run), intents and aborts neither."""
    from retentiond.analytics.job import analyze
    from retentiond.analytics.schema import SUPPORTED_SCHEMA_VERSION

    t0 = 1_710_000_000_000
    base = {"cluster": "c", "broker": "b", "host": "h", "schema_version": 5}

    def deletion(i: int, **kw: Any) -> dict[str, Any]:
        return {**base, "type": "deletion", "time_ms": t0 + i, "kind": "commitlog",
                "reason": "expired", "bytes": 10, "age_ms": 5, "forced": False,
                "dry_run": False, **kw}  # fmt: skip

    def round_(i: int, **kw: Any) -> dict[str, Any]:
        trig = {"physic_ratio": 0.5, "logics_ratio": 0.4, "disk_state": "ok",
                "usage_exceeds": False, "error": None}  # fmt: skip
        return {**base, "type": "round", "time_ms": t0 + i, "interval_ms": 60_000,
                "triggers": trig, "deleted": {"commitlog": {"files": 0}}, **kw}  # fmt: skip

    intent = {**base, "type": "intent", "time_ms": t0}
    where = "dt=2024-03-09/cluster=c/broker=b/h-j-000000000001.jsonl.gz"

    def put(directory: str, lines: list[Any]) -> None:
        path = tmp_path / "in" / directory / where
        path.parent.mkdir(parents=True)
        text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
        path.write_bytes(gzip.compress(text.encode()))

    put("deletion", [deletion(1), round_(2)])  # layout 1: the round is misfiled
    put("round", [round_(3), round_(4, schema_version=99)])
    put("v2", [deletion(5), intent, round_(6), "not json", deletion(7, dry_run=True)])
    put("v3/deletions", [intent, deletion(8), round_(9), "{}"])  # a round in the wrong family
    put("v3/rounds", [round_(10), deletion(11), "[1]"])
    result = analyze(spark, str(tmp_path / "in"), str(tmp_path / "out"))
    inputs = result.inputs
    assert inputs is not None
    assert inputs.layouts == {"1": 2, "2": 1, "3": 2}
    assert inputs.records == {"deletion": 3, "round": 3}
    assert inputs.skipped == {
        "unreadable lines (not JSON, or not a journal record)": 3,
        "records filed under another type's directory": 3,
        f"records of a schema newer than this job's ({SUPPORTED_SCHEMA_VERSION})": 1,
        "dry-run deletions (nothing was deleted)": 1,
    }
    assert (inputs.brokers, inputs.clusters, inputs.days) == (1, 1, 1)


def test_the_rounds_are_sorted_once_and_added_up_per_hour_in_a_hash_map(fleet, spark) -> None:
    """Each broker's rounds are ordered once, for the one window function that finds the
    next record's start; the hourly sums that follow keep their state in a hash map (a
    name among them, say the store kind's, would make Spark sort every round again)."""
    from retentiond.analytics import job

    job.configure(spark, (str(fleet.target),))
    hourly, _ = job.read_rounds(spark, str(fleet.target), None)
    plan = hourly._jdf.queryExecution().executedPlan().toString()
    assert "SortAggregate" not in plan, plan
    assert plan.count("Sort [") == 1, plan
    assert plan.count("lead(") == 1, plan


def test_a_local_session_forgets_where_the_dropped_defaults_came_from(fleet, spark) -> None:
    """The YARN and MapReduce defaults a local session drops leave no trace in the record
    of each property's source (copied with the conf for every file read); the properties
    kept keep theirs."""
    from retentiond.analytics import job

    job.configure(spark, (str(fleet.target),))
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    dropped = "yarn.resourcemanager.hostname"  # a yarn-default.xml property
    assert conf.get(dropped) is None
    assert conf.getPropertySources(dropped) is None
    assert list(conf.getPropertySources("fs.defaultFS")) == ["core-default.xml"]


def test_the_type_filter_is_applied_to_parsed_records_not_inside_the_parser(fleet, spark) -> None:
    """A journal line names its type among its last keys, so a filter on the type pushed into
    the JSON parser skips nothing and costs a check after every field: the job's session
    reads with push-down off, and the records it keeps are the same."""
    from retentiond.analytics import job

    def records() -> list[list[tuple]]:
        frames = [job.read_family(spark, str(fleet.target), f, None)[0] for f in job.FAMILIES]
        return [sorted(map(tuple, df.collect()), key=repr) for df in frames]

    spark.conf.set("spark.sql.json.filterPushdown.enabled", "true")
    before = records()
    job.configure(spark, (str(fleet.target),))
    assert spark.conf.get("spark.sql.json.filterPushdown.enabled") == "false"
    assert records() == before
