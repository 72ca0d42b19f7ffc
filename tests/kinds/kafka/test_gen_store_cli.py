"""`retentiond gen-store --kind kafka`: a log dir and a server.properties that `check-config`
and `plan` accept as they are; the per-topic configs come from the generated metadata log."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli


def test_gen_store_kafka_writes_a_usable_config(tmp_path: Path) -> None:
    log_dir, config = tmp_path / "kafka-logs", tmp_path / "server.properties"
    result = run_cli(
        "gen-store",
        "--kind",
        "kafka",
        str(log_dir),
        "--topics",
        "orders:2,audit-log",
        "--messages",
        "300",
        "--oldest-hours",
        "720",
        "--config-out",
        str(config),
    )
    assert result.code == 0, result.err
    assert "2 topics, 3 partitions" in result.out
    assert f"log.dirs={log_dir}" in config.read_text()
    assert (log_dir / "__cluster_metadata-0").is_dir() and (log_dir / "meta.properties").is_file()

    check = run_cli("check-config", str(config))
    assert check.code == 0 and "kafka store" in check.out, check.err
    plan = run_cli("plan", "--json", "--config", str(config))
    assert plan.code == 0, plan.err
    doc = json.loads(plan.out)
    assert doc["kind"] == "kafka" and doc["metadata"]["error"] is None
    parts = {(p["topic"], p["partition"]): p for p in doc["log_dirs"][0]["partitions"]}
    assert {("orders", 0), ("orders", 1), ("audit-log", 0)} <= set(parts)
    reasons = {
        tp: {s["reason"] for s in p["segments"]}
        for tp, p in parts.items()
        if tp[0] != "__cluster_metadata"
    }
    assert reasons[("audit-log", 0)] == {"compacted"}  # the override in the metadata log
    # thirty days of data against 7-day retention: the oldest segments of orders go
    assert "retention_ms_breach" in reasons[("orders", 0)]
    assert all("unknown_topic_config" not in r for r in reasons.values())


def test_gen_store_kafka_refuses_sparse(tmp_path: Path) -> None:
    result = run_cli("gen-store", "--kind", "kafka", str(tmp_path / "x"), "--sparse")
    assert result.code == 2 and "--sparse" in result.err
