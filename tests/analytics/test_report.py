"""The fleet report as an operator gets it: the demo fleet (``analytics.synth``: RocketMQ and
Kafka clusters, a broker crossing its warning level, one losing a group's messages, a Kafka
broker rescued, old daemons writing schema 2), ``retentiond analyze`` on a local Spark as a
subprocess, the new tables read back with DuckDB against plain-Python sums over the same
records, and ``report.html`` opened in headless Chromium.

Screenshots (desktop and narrow) are written to ``$RETENTIOND_ARTEFACTS`` (else the test's
temporary directory) and to /work/artefacts when it exists; their paths are printed.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import need

pytestmark = pytest.mark.slow

KEY = ("cluster", "broker", "host")
SECTIONS = [
    "What this report read",
    "Needs action today",
    "RocketMQ and Kafka side by side",
    "Per cluster",
    "Top offenders",
    "Across the fleet",
    "Full tables",
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo fleet, analysed once by the real command (one Spark for the module)."""
    try:
        import duckdb  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        need(False, "pyspark and duckdb are not installed (pip install -e '.[spark]')")
    need(shutil.which("java") is not None, "java is not installed")
    from retentiond.analytics.synth import Plan, write_fleet

    tmp = tmp_path_factory.mktemp("demo")
    plan = Plan(layout=3)
    write_fleet(tmp / "target", plan)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, "-m", "retentiond", "analyze", "--master", "local[2]",
         "--input", str(tmp / "target"), "--output", str(tmp / "out")],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {"plan": plan, "dir": tmp, "out": tmp / "out", "proc": proc}


def records(demo: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for path in sorted((demo["dir"] / "target").rglob("*.jsonl.gz")):
        dt = path.parent.parent.parent.name.removeprefix("dt=")
        with gzip.open(path, "rt") as fh:
            out += [{**json.loads(line), "dt": dt} for line in fh]
    return out


def table(demo: dict[str, Any], name: str) -> list[dict[str, Any]]:
    import duckdb

    rel = duckdb.sql(
        f"SELECT * FROM read_parquet('{demo['out']}/{name}/**/*.parquet', "
        "hive_partitioning=true, union_by_name=true)"
    )
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    for r in rows:
        if "dt" in r:
            r["dt"] = str(r["dt"])
    return rows


def deletions(demo: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in records(demo) if r["type"] == "deletion" and not r["dry_run"]]


# --- the tables ----------------------------------------------------------------------------


def test_data_at_risk_sums_the_groups_each_deletion_lost(demo) -> None:
    want: dict[tuple, dict[str, int]] = defaultdict(lambda: {"messages_lost": 0, "files": 0})
    versions = set()
    for r in deletions(demo):
        versions.add(r["schema_version"])
        for g in (r.get("loss") or {}).get("groups", []):
            row = want[(r["dt"], *(r[k] for k in KEY), r["kind"], g["topic"], g["group"])]
            row["messages_lost"] += g["messages"]
            row["files"] += 1
    assert versions == {2, 5}, "old daemons' records (no loss field) are in the input"
    assert {k[4] for k in want} == {"commitlog", "kafka_segment"}, "both kinds lose data"
    got = {
        (r["dt"], *(r[k] for k in KEY), r["kind"], r["topic"], r["group"]): {
            "messages_lost": r["messages_lost"],
            "files": r["files"],
        }
        for r in table(demo, "data_at_risk")
    }
    assert got == want


def test_rescue_counts_the_deletions_rescue_made(demo) -> None:
    want: dict[tuple, dict[str, int]] = defaultdict(lambda: {"files": 0, "bytes": 0})
    for r in deletions(demo):
        if r.get("rescue"):
            row = want[(r["dt"], *(r[k] for k in KEY), r["reason"])]
            row["files"] += 1
            row["bytes"] += r["bytes"]
    assert {k[-1] for k in want} == {"rescue_beyond_retention", "delete_dir_leftover"}
    got = {
        (r["dt"], *(r[k] for k in KEY), r["reason"]): {"files": r["files"], "bytes": r["bytes"]}
        for r in table(demo, "rescue")
    }
    assert got == want


def test_kafka_brokers_have_disk_figures_and_a_forecast(demo) -> None:
    fleet = table(demo, "fleet_summary")
    kafka = [r for r in fleet if r["store_kind"] == "kafka"]
    assert len(kafka) == 5 and len(fleet) == demo["plan"].brokers
    assert all(r["latest_ratio"] is not None for r in kafka)
    assert all(r["warning_level_ratio"] == 0.90 for r in kafka)
    assert any(r["ms_over_warning_level"] > 0 for r in kafka)
    rescued = [r for r in kafka if r["rescue_files"]]
    assert len(rescued) == 1 and "rescued" in rescued[0]["risk_factors"]


def test_the_job_states_what_it_read(demo) -> None:
    recs = records(demo)
    by_type: dict[str, int] = defaultdict(int)
    for r in recs:
        by_type[r["type"]] += 1
    log = demo["proc"].stderr
    used = by_type["deletion"] + by_type["round"] + by_type["round_summary"]
    files = len(list((demo["dir"] / "target").rglob("*.jsonl.gz")))
    assert f"inputs: read {demo['dir'] / 'target'}: {files} files of layout 3" in log
    assert f"{used:,} records used ({by_type['deletion']:,} deletion" in log
    assert "from 15 brokers in 3 clusters over 7 days (2024-03-04 to 2024-03-10)" in log
    versions: dict[int, int] = defaultdict(int)
    for r in recs:
        if r["type"] != "intent":
            versions[r["schema_version"]] += 1
    assert f"schema versions: 2: {versions[2]:,}, 5: {versions[5]:,}" in log
    assert "skipped: nothing" in log
    md = (demo["out"] / "report" / "report.md").read_text()
    assert f"{used:,} records used" in md.split("## Needs action today")[0]


# --- the report ----------------------------------------------------------------------------


def test_report_md_is_a_summary_for_chat(demo) -> None:
    md = (demo["out"] / "report" / "report.md").read_text()
    heads = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    assert heads == [
        "What this report read",
        "Needs action today",
        "RocketMQ and Kafka side by side",
        "Top offenders",
        "Per cluster",
    ]
    action = md.split("## Needs action today")[1].split("## ")[0]
    assert "at the warning level 0.90" in action
    assert "group billing-consumer lost" in action and "needed a rescue" in action
    assert "0.00 GiB" not in md


def _artefacts(tmp_path: Path) -> list[Path]:
    dirs = [Path(os.environ.get("RETENTIOND_ARTEFACTS") or tmp_path)]
    if Path("/work/artefacts").is_dir():
        dirs.append(Path("/work/artefacts"))
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return dirs


def test_report_in_a_browser(demo, tmp_path: Path) -> None:
    from tests.analytics.report_browser import opened
    from tests.helpers.browser import chromium

    need(chromium() is not None, "chromium is missing (apt-get install chromium)")
    html_path = (demo["out"] / "report" / "report.html").resolve()
    with opened(html_path.as_uri()) as page:
        headings = page.evaluate(
            "Array.from(document.querySelectorAll('h2')).map(h => h.id + ':' + h.textContent)"
        )
        assert [h.split(":", 1)[1] for h in headings] == SECTIONS
        # every section has content under it
        assert page.evaluate(
            "Array.from(document.querySelectorAll('h2')).every(h => h.nextElementSibling"
            " && h.nextElementSibling.tagName !== 'H2')"
        )
        at_risk = page.evaluate(
            "Array.from(document.querySelectorAll('#action ~ .risk')).map(d => d.innerText)"
        )
        assert at_risk, "no broker at risk"
        assert any("at the warning level" in t or "warning level 0.90 in" in t for t in at_risk), (
            at_risk
        )
        assert all(page.evaluate("document.querySelectorAll('.risk li').length") for _ in [0])
        # Kafka brokers with disk figures, in the full table
        kafka_disk = page.evaluate(
            "Array.from(document.querySelectorAll('table.fleet tbody tr'))"
            ".filter(tr => tr.cells[2].textContent === 'Kafka').map(tr => tr.cells[4].textContent)"
        )
        assert len(kafka_disk) == 5 and all(v not in ("", "–") for v in kafka_disk), kafka_disk
        images = page.evaluate(
            "Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth])"
        )
        assert len(images) == demo["plan"].brokers + 2  # a multiple per broker, two fleet charts
        assert all(ok and width > 0 for _, ok, width in images), images
        external = [u for u in page.requests() if not u.startswith(("file:", "data:"))]
        assert external == []
        assert page.errors() == []
        # sortable: a click on a header changes the order of the rows
        first = "document.querySelector('table.fleet tbody tr').cells[1].textContent"
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        before = page.evaluate(first)
        order = (
            "Array.from(document.querySelectorAll('table.fleet tbody tr'))"
            ".map(tr => tr.cells[1].textContent)"
        )
        rows_before = page.evaluate(order)
        page.click("table.fleet th:nth-child(2)")  # broker name, ascending
        rows_after = page.evaluate(order)
        assert rows_after == sorted(rows_before, key=str.lower) and rows_after != rows_before
        page.click("table.fleet th:nth-child(2)")  # again: descending
        assert page.evaluate(order) == rows_after[::-1]
        assert before == rows_before[0]
        page.evaluate("window.scrollTo(0, 0)")
        shots = []
        for d in _artefacts(tmp_path):
            shots.append(page.screenshot(d / "fleet-report-desktop.png", 1280))
            shots.append(page.screenshot(d / "fleet-report-narrow.png", 420))
        for s in shots:
            print(f"screenshot: {s}")
            assert s.read_bytes().startswith(b"\x89PNG") and s.stat().st_size > 20_000
