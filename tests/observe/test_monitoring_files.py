"""The shipped dashboard and alert rules, read as files: what an operator imports must be
complete (selectors, thresholds, annotations, runbooks). Their PromQL is evaluated by a real
Prometheus in tests/e2e/test_prometheus.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import need

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "config" / "grafana" / "retentiond.json"
ALERTS = REPO / "config" / "prometheus" / "alerts.yml"
PROVISIONING = REPO / "config" / "grafana" / "provisioning"
RUNBOOKS = REPO / "docs" / "runbooks.md"
README = REPO / "README.md"
PLACEHOLDER = "@RUNBOOK_BASE@"
# The README's install step, as an operator types it (with their own address).
INSTALL = 'sed "s|@RUNBOOK_BASE@|$RUNBOOK_BASE|g" config/prometheus/{name} > '


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
    anchors = github_anchors(RUNBOOKS.read_text())
    names = [r["alert"] for r in rules()]
    assert len(names) == len(set(names))
    for rule in rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], rule["alert"]
        assert notes["runbook_url"] == f"{PLACEHOLDER}#{rule['alert'].lower()}"
        assert rule["alert"].lower() in anchors, f"no runbook section for {rule['alert']}"
    # and no runbook for an alert that does not exist
    sections = re.findall(r"^## (Retentiond\w+)$", RUNBOOKS.read_text(), re.MULTILINE)
    assert sorted(sections) == sorted(names)


def install(name: str, base: str, into: Path) -> Path:
    """The README's install step for one file: sed the placeholder into the base."""
    assert INSTALL.format(name=name) in README.read_text()
    target = into / name
    with open(target, "w") as out:
        subprocess.run(
            ["sed", f"s|{PLACEHOLDER}|{base}|g", str(ALERTS.parent / name)], stdout=out, check=True
        )
    return target


def test_installed_rules_link_absolute_runbook_urls_and_pass_promtool(tmp_path: Path) -> None:
    base = "https://git.example.com/ops/retentiond/blob/v0.1.0/docs/runbooks.md"
    installed = install("alerts.yml", base, tmp_path)
    install("alerts_test.yml", base, tmp_path)
    text = installed.read_text()
    assert PLACEHOLDER not in text
    urls = {
        r["alert"]: r["annotations"]["runbook_url"]
        for g in yaml.safe_load(text)["groups"]
        for r in g["rules"]
    }
    assert urls == {alert: f"{base}#{alert.lower()}" for alert in urls}
    binary = shutil.which("promtool")
    need(binary is not None, "promtool is missing (apt-get install prometheus)")
    assert binary is not None
    for args in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
        result = subprocess.run(
            [binary, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        assert result.returncode == 0, result.stdout + result.stderr


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
    assert "retentiond_ship_backlog_segments" in by_name["RetentiondJournalNotShipped"]
    assert "retentiond_ship_segments_dropped_total" in by_name["RetentiondJournalSegmentsDropped"]


def test_provisioning_examples_are_valid_yaml() -> None:
    dashboards = yaml.safe_load((PROVISIONING / "dashboards" / "retentiond.yaml").read_text())
    assert dashboards["providers"][0]["type"] == "file"
    sources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    assert sources["datasources"][0]["type"] == "prometheus"
