"""The shipped alert rules and dashboard cover the owner broker's limits (the rules' firing
and quiet cases are promtool's: config/prometheus/alerts_test.yml, run by
tests/e2e/test_prometheus.py; here they are run directly too)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.conftest import need

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "config" / "prometheus"
DASHBOARD = REPO / "config" / "grafana" / "retentiond.json"
OWNER_ALERTS = (
    "RetentiondBrokerMemoryMapsNearLimit",
    "RetentiondBrokerOpenFilesNearLimit",
    "RetentiondBrokerMemoryMapsFillingUp",
)


def rules() -> dict[str, dict]:
    doc = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"]}


def test_the_owner_alerts_watch_maps_and_descriptors_at_85_percent_and_24_hours() -> None:
    r = rules()
    maps, fds, filling = (r[name]["expr"] for name in OWNER_ALERTS)
    assert "retentiond_owner_memory_maps" in maps and "retentiond_owner_max_memory_maps" in maps
    assert maps.rstrip().endswith("> 0.85")
    assert "retentiond_owner_open_fds" in fds and "retentiond_owner_max_fds" in fds
    assert fds.rstrip().endswith("> 0.85")
    assert "predict_linear(retentiond_owner_memory_maps" in filling and "24 * 3600" in filling


def test_promtool_fires_and_stays_quiet_for_each_owner_alert() -> None:
    binary = shutil.which("promtool")
    need(binary is not None, "promtool is missing (apt-get install prometheus)")
    result = subprocess.run(
        [binary, "test", "rules", "alerts_test.yml"],  # type: ignore[list-item]
        capture_output=True, text=True, timeout=60, cwd=PROMETHEUS,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    tests = yaml.safe_load((PROMETHEUS / "alerts_test.yml").read_text())["tests"]
    cases = [c for t in tests for c in t["alert_rule_test"] if c["alertname"] in OWNER_ALERTS]
    assert {c["alertname"] for c in cases if c["exp_alerts"]} == set(OWNER_ALERTS)
    assert {c["alertname"] for c in cases if not c["exp_alerts"]} == set(OWNER_ALERTS)


def test_the_dashboard_has_a_broker_process_row() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    (row,) = [p for p in panels if p["type"] == "row" and p["title"] == "Broker process"]
    below = [p for p in panels if p["gridPos"]["y"] > row["gridPos"]["y"]]
    exprs = " ".join(t["expr"] for p in below for t in p.get("targets", []))
    for name in (
        "retentiond_owner_memory_maps",
        "retentiond_owner_max_memory_maps",
        "retentiond_owner_open_fds",
        "retentiond_owner_max_fds",
        "retentiond_owner_resident_memory_bytes",
        "retentiond_owner_info",
        "retentiond_owner_start_time_seconds",
    ):
        assert name in exprs, name
    (share,) = [p for p in below if p["title"].startswith("Broker maps and descriptors")]
    steps = [s["value"] for s in share["fieldConfig"]["defaults"]["thresholds"]["steps"]]
    assert steps == [None, 0.85]
