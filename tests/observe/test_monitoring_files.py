"""The shipped dashboard and alert rules, read as files: what an operator imports must be
complete (selectors, thresholds, annotations, runbooks). Their PromQL is evaluated by a real
Prometheus in tests/e2e/test_prometheus.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "config" / "grafana" / "retentiond.json"
ALERTS = REPO / "config" / "prometheus" / "alerts.yml"
PROVISIONING = REPO / "config" / "grafana" / "provisioning"
# The runbooks live in the README; until the lead splices it in, in docs/_readme_metrics.md.
RUNBOOK_SOURCES = [REPO / "README.md", REPO / "docs" / "_readme_metrics.md"]


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives headings: lower case, punctuation dropped, spaces to '-'."""
    anchors = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_dashboard_has_cluster_and_broker_selectors() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for name in ("cluster", "broker"):
        assert variables[name]["includeAll"] and variables[name]["multi"]
        assert variables[name]["allValue"] == ".*"
    assert 'cluster=~"$cluster"' in variables["broker"]["query"]["query"]


def test_every_query_is_filtered_by_cluster_and_broker() -> None:
    for panel in panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            for selector in re.findall(r"retentiond_\w+\{([^}]*)\}", target["expr"]):
                assert 'cluster=~"$cluster"' in selector, target["expr"]
                assert 'broker=~"$broker"' in selector, target["expr"]


def test_disk_panel_draws_the_75_85_90_thresholds() -> None:
    (disk,) = [p for p in panels() if p["title"] == "Disk used ratio per broker"]
    defaults = disk["fieldConfig"]["defaults"]
    steps = [s["value"] for s in defaults["thresholds"]["steps"]]
    assert steps == [None, 0.75, 0.85, 0.9]
    assert defaults["custom"]["thresholdsStyle"]["mode"] != "off"
    assert defaults["unit"] == "percentunit"


def test_dashboard_covers_what_the_issue_lists() -> None:
    exprs = " ".join(t["expr"] for p in panels() for t in p["targets"])
    for name in (
        "retentiond_disk_used_ratio",
        "retentiond_deleted_bytes_total",
        "retentiond_deleted_files_total",
        "retentiond_forced_deletions_total",
        "retentiond_expired_files_pending",
        "retentiond_oldest_file_age_seconds",
        "retentiond_file_reserved_time_seconds",
        "retentiond_round_duration_seconds_bucket",
        "retentiond_delete_failures_total",
        "retentiond_config_reloads_total",
    ):
        assert name in exprs, name


def test_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))
        assert g["x"] + g["w"] <= 24


def test_every_alert_has_severity_summary_description_and_a_runbook() -> None:
    anchors: set[str] = set()
    for source in RUNBOOK_SOURCES:
        if source.exists():
            anchors |= github_anchors(source.read_text())
    names = [r["alert"] for r in rules()]
    assert len(names) == len(set(names))
    for rule in rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], rule["alert"]
        page, _, anchor = notes["runbook_url"].partition("#")
        assert page == "README.md" and anchor == rule["alert"].lower()
        assert anchor in anchors, f"no runbook section for {rule['alert']}"


def test_the_alerts_the_issue_asks_for_exist() -> None:
    by_name = {r["alert"]: r["expr"] for r in rules()}
    assert "retentiond_disk_state" in by_name["RetentiondDiskOverMaxRatioNothingDeleted"]
    assert "over_max_ratio" in by_name["RetentiondDiskOverMaxRatioNothingDeleted"]
    assert "clean_forcibly" in by_name["RetentiondDiskOverCleanForciblyRatio"]
    assert "warning_level" in by_name["RetentiondDiskAtWarningLevel"]
    assert "predict_linear" in by_name["RetentiondDiskFillingUp"]
    assert "retentiond_forced_deletions_total" in by_name["RetentiondUnexpiredDataDeleted"]
    assert "retentiond_last_round_success" in by_name["RetentiondCleanerStalled"]
    assert "retentiond_delete_failures_total" in by_name["RetentiondDeleteFailures"]
    assert "reload" in by_name["RetentiondConfigReloadFailing"]


def test_provisioning_examples_are_valid_yaml() -> None:
    dashboards = yaml.safe_load((PROVISIONING / "dashboards" / "retentiond.yaml").read_text())
    assert dashboards["providers"][0]["type"] == "file"
    sources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    assert sources["datasources"][0]["type"] == "prometheus"
