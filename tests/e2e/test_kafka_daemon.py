"""`retentiond run` on a Kafka ``server.properties``, as a subprocess: rounds every
``log.retention.check.interval.ms``; while the broker (a process holding ``.lock``) runs, the
log dir is plan-only and ``status``, ``status --json`` and ``/metrics`` say so; once it stops,
the next round deletes; ``trigger-delete`` answers; a reload that changes ``log.dirs`` is
refused and the running config kept."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.conftest import Daemon, run_cli, spawn_run
from tests.e2e.test_kafka_cli import broker_holding, build_log_dir, tree, write_config

DASHBOARD = Path(__file__).resolve().parents[2] / "config" / "grafana" / "retentiond.json"


def metrics_text(daemon: Daemon) -> str:
    url = daemon.metrics_url()
    assert url is not None
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def metric_lines(daemon: Daemon, name: str) -> list[str]:
    return [line for line in metrics_text(daemon).splitlines() if line.startswith(name + "{")]


def kafka_row_metrics() -> set[str]:
    """The series the dashboard's Kafka row reads."""
    doc = json.loads(DASHBOARD.read_text())
    exprs = [
        t["expr"] for p in doc["panels"] if p["title"].startswith("Kafka:") for t in p["targets"]
    ]
    assert len(exprs) >= 3
    return {n for e in exprs for n in re.findall(r"\bretentiond_[a-z_]+\b", e)}


def status(daemon: Daemon) -> dict[str, Any] | None:
    """The status document, or None while the control socket is not up yet."""
    result = daemon.cli("status", "--json")
    return json.loads(result.out) if result.code == 0 else None


def test_daemon_plan_only_while_the_broker_runs_then_deletes(tmp_path: Path) -> None:
    log_dir = tmp_path / "kafka-logs"
    build_log_dir(log_dir, int(time.time() * 1000))
    config = write_config(tmp_path, [log_dir])
    before = tree(log_dir)
    journal = tmp_path / "journal"
    with broker_holding(log_dir):
        log = tmp_path / "daemon.log"
        daemon = Daemon(spawn_run(config, log), config, None, journal, log)  # type: ignore[arg-type]
        try:
            doc = daemon.wait_until(
                "two rounds",
                lambda: (s := status(daemon)) is not None and s["rounds"]["count"] >= 2 and s,
            )
            assert doc["store_kind"] == "kafka" and doc["store"] == str(log_dir)
            assert doc["rounds"]["interval_ms"] == 1000  # log.retention.check.interval.ms
            assert doc["plan_only_log_dirs"] == [str(log_dir)]
            assert doc["scan"]["reasons"]["keep:broker_running"] == 12
            text = daemon.cli("status")
            assert text.code == 0 and "PLAN-ONLY" in text.out, text.out
            assert "broker_running" in text.out
            [plan_only] = metric_lines(daemon, "retentiond_store_dir_plan_only")
            assert f'dir="{log_dir}"' in plan_only and plan_only.endswith(" 1.0")
            [info] = metric_lines(daemon, "retentiond_store_info")
            assert 'store_kind="kafka"' in info
            # the settings in force are Kafka's own; RocketMQ's keys are left empty
            [config_info] = metric_lines(daemon, "retentiond_config_info")
            assert 'log_retention_ms="604800000"' in config_info, config_info
            assert 'log_retention_bytes="-1"' in config_info
            assert 'log_cleanup_policy="delete"' in config_info
            assert 'clean_resource_interval_ms="1000"' in config_info
            assert 'file_reserved_time_hours=""' in config_info
            assert 'delete_when=""' in config_info
            # the round log carries what a Kafka scan reports, not RocketMQ's triggers
            rounds = [
                json.loads(line)
                for line in log.read_text().splitlines()
                if line.startswith("{") and '"round done"' in line
            ]
            assert rounds, log.read_text()
            assert rounds[-1]["plan_only_log_dirs"] == [str(log_dir)]
            assert "fired" not in rounds[-1] and "disk_ratio" not in rounds[-1]
            exported = metrics_text(daemon)
            for name in kafka_row_metrics():  # the dashboard's Kafka row has data
                assert f"\n{name}{{" in exported, name
            trig = daemon.cli("trigger-delete")
            assert trig.code == 0 and "Kafka" in trig.out, trig.out
            assert tree(log_dir) == before
            assert not daemon.records("deletion")

            # a reload that points at other log dirs is refused; the running config stays
            text_before = config.read_text()
            other = tmp_path / "other-logs"
            build_log_dir(other, int(time.time() * 1000))
            config.write_text(text_before.replace(f"log.dirs={log_dir}", f"log.dirs={other}"))
            refused = daemon.wait_until(
                "the reload refused",
                lambda: (s := daemon.status())["config"]["reloads"]["refused"] >= 1 and s,
            )
            problems = refused["config"]["last_reload"]["problems"]
            assert any("log.dirs" in p and "cannot change while running" in p for p in problems)
            config.write_text(text_before)
        except BaseException:
            daemon.kill()
            raise
    # the broker stopped: the next round holds .lock itself and deletes
    try:
        daemon.wait_until("deletions", lambda: len(daemon.records("deletion")) == 12)
        doc = daemon.wait_until(
            "a round with no plan-only dir",
            lambda: (s := daemon.status())["plan_only_log_dirs"] == [] and s,
        )
        assert doc["safety"]["owner"]["running"] is False  # our own hold is no broker
        [plan_only] = metric_lines(daemon, "retentiond_store_dir_plan_only")
        assert plan_only.endswith(" 0.0")
        code, _ = daemon.terminate()
        assert code == 0
    finally:
        daemon.kill()


def test_retentiond_cluster_names_the_cluster_everywhere(tmp_path: Path) -> None:
    """``retentiond.cluster`` replaces the cluster-id of ``meta.properties``: the ``cluster``
    label of every series, the journal's records, ``status`` and the shipped layout."""
    log_dir = tmp_path / "kafka-logs"
    build_log_dir(log_dir, int(time.time() * 1000))  # meta.properties: kafkawire-test
    config = write_config(tmp_path, [log_dir], **{"retentiond.cluster": "payments"})
    log = tmp_path / "daemon.log"
    daemon = Daemon(spawn_run(config, log), config, None, tmp_path / "journal", log)  # type: ignore[arg-type]
    try:
        daemon.wait_until("deletions", lambda: len(daemon.records("deletion")) == 12)
        records = daemon.records()
        assert records and {r["cluster"] for r in records} == {"payments"}
        assert daemon.status()["cluster"] == "payments"
        samples = [
            line
            for line in metrics_text(daemon).splitlines()
            if line.startswith("retentiond_") and "{" in line
        ]
        assert samples
        assert all('cluster="payments"' in line for line in samples), [
            line for line in samples if 'cluster="payments"' not in line
        ]
        assert "kafkawire-test" not in metrics_text(daemon)
        code, _ = daemon.terminate()
        assert code == 0
    finally:
        daemon.kill()
    target = tmp_path / "fleet"
    target.mkdir()
    shipped = run_cli("ship", "--config", str(config), "--flush", "--target", str(target))
    assert shipped.code == 0, shipped.err
    leaves = {p.parent.name for p in target.rglob("*.jsonl.gz")}
    parents = {p.parent.parent.name for p in target.rglob("*.jsonl.gz")}
    assert leaves == {"broker=kafka-3"} and parents == {"cluster=payments"}
