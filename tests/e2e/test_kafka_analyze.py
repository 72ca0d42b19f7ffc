"""A Kafka journal through the fleet pipeline: `once` on a Kafka log dir (the real engine and
journal), `ship --flush` to a target, `analyze` on a local Spark as a subprocess, and the
Parquet tables read back with DuckDB: the Kafka deletions are there under their own kind and
reasons, with topic, partition and offsets, and the Kafka rounds' disk figures (each log dir's
filesystem, as a RocketMQ round's paths) give the broker its disk ratio, its warning level and
its effective retention in the tables and in the report, as a RocketMQ broker's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import need, records, run_cli
from tests.e2e.test_kafka_cli import build_log_dir, write_config

pytestmark = pytest.mark.slow


def test_kafka_journal_through_ship_and_analyze(tmp_path: Path) -> None:
    try:
        import duckdb
        import pyspark  # noqa: F401
    except ImportError:
        need(False, "pyspark and duckdb are not installed (pip install -e '.[spark]')")
    need(shutil.which("java") is not None, "java is not installed")

    log_dir = tmp_path / "kafka-logs"
    build_log_dir(log_dir, int(time.time() * 1000))
    config = write_config(tmp_path, [log_dir])
    assert run_cli("once", "--config", str(config)).code == 0
    assert run_cli("once", "--config", str(config)).code == 0  # an idle round too
    journaled = records(tmp_path / "journal", "deletion")
    assert len(journaled) == 12
    rounds = records(tmp_path / "journal", "round")
    assert len(rounds) == 2  # two processes: each one's first round is written in full
    ratios = [r["disk"][0]["ratio"] for r in rounds]
    assert all(r["disk"][0]["role"] == "log_dir" for r in rounds)
    assert None not in ratios and all(0 < x <= 1 for x in ratios)
    assert all(r["thresholds"] == {"warning_level_ratio": 0.9} for r in rounds)

    target, out = tmp_path / "target", tmp_path / "out"
    target.mkdir()  # the target is a mounted share: it must exist
    shipped = run_cli("ship", "--config", str(config), "--target", str(target), "--flush")
    assert shipped.code == 0, shipped.err
    assert list(target.glob("v3/deletions/dt=*/cluster=kafkawire-test/broker=kafka-3/*.jsonl.gz"))

    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, "-m", "retentiond", "analyze", "--master", "local[1]",
         "--input", str(target), "--output", str(out)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]

    reclaim = duckdb.sql(
        "SELECT cluster, broker, kind, reason, sum(files), sum(bytes) "
        f"FROM read_parquet('{out}/daily_reclaim/**/*.parquet', hive_partitioning=true) "
        "GROUP BY ALL"
    ).fetchall()
    assert reclaim == [
        (
            "kafkawire-test",
            "kafka-3",
            "kafka_segment",
            "retention_ms_breach",
            12,
            sum(r["bytes"] for r in journaled),
        )
    ]
    fleet = duckdb.sql(
        "SELECT broker, files_deleted, store_kind "
        f"FROM read_parquet('{out}/fleet_summary/**/*.parquet')"
    ).fetchall()
    assert fleet == [("kafka-3", 12, "kafka")]
    # the disk figures, as the journal's rounds gave them: the same columns as RocketMQ's
    pressure = duckdb.sql(
        "SELECT broker, sum(rounds), max(max_ratio) "
        f"FROM read_parquet('{out}/disk_pressure/**/*.parquet') GROUP BY ALL"
    ).fetchall()
    assert pressure == [("kafka-3", 2, max(ratios))]
    [(latest, warning, p50, configured)] = duckdb.sql(
        "SELECT latest_ratio, warning_level_ratio, retention_p50_hours, file_reserved_time_hours"
        f" FROM read_parquet('{out}/fleet_summary/**/*.parquet')"
    ).fetchall()
    assert (latest, warning) == (ratios[-1], 0.9)
    # effective retention: the segments' age at deletion (the journal's age_ms: from the
    # largest timestamp retention.ms judged);
    # no configured figure, Kafka's retention is per topic
    ages = sorted(r["age_ms"] for r in journaled)
    assert p50 == pytest.approx((ages[5] + ages[6]) / 2 / 3_600_000) and configured is None
    for empty in ("data_at_risk", "rescue"):  # this journal has no loss or rescue fields yet
        rows = duckdb.sql(
            f"SELECT * FROM read_parquet('{out}/{empty}/**/*.parquet', union_by_name=true)"
        ).fetchall()
        assert rows == []
    html = (out / "report" / "report.html").read_text()
    assert "<td>Kafka</td>" in html and "RocketMQ and Kafka side by side" in html
    assert "no disk figures in its rounds" not in html
    assert f"median {ratios[-1]:.2f}, max {ratios[-1]:.2f}" in html  # disk ratio now, Kafka
    assert "inputs: read " in proc.stderr and "12 deletion" in proc.stderr
