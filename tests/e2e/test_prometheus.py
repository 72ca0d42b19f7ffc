"""A real Prometheus (Debian's binary) scraping a real `retentiond run` on a generated store.

After the daemon has deleted everything that was expired, the Prometheus query API must return
deletion counters equal to the ``deletion`` records of the daemon's journal, disk ratios equal
to RocketMQ's arithmetic on the store paths, and round timestamps; every PromQL expression of
the Grafana dashboard and of the alert rules must evaluate in that Prometheus, against series
that exist; and Prometheus itself must load and evaluate the alert rules without error.
promtool checks and unit-tests the rules.

Without the binaries this skips on a developer machine and fails in CI (``.ci/run`` installs
them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from retentiond.storegen.rocketmq import StoreSpec
from tests.conftest import Daemon, free_port, make_store, need, rocketmq_ratio, wait_until
from tests.helpers.broker_proc import FakeBroker

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "config" / "prometheus" / "alerts.yml"
ALERTS_TEST = REPO / "config" / "prometheus" / "alerts_test.yml"
EXAMPLE_CONFIG = REPO / "config" / "prometheus" / "prometheus.yml"
DASHBOARD = REPO / "config" / "grafana" / "retentiond.json"
CLUSTER, BROKER = "e2e-cluster", "e2e-broker"
# 30 CommitLog files of 64 KiB over 130 h: about 13 expired at 72 h, gone in two rounds.
SPEC = StoreSpec(
    commitlog_file_size=64 * 1024,
    cq_file_size=30 * 20,
    max_hash_slot_num=100,
    max_index_num=256,
    messages=30 * 63 - 30,
    message_size=1024,
    topics=2,
    queues_per_topic=2,
    oldest_age_hours=130.0,
    newest_age_hours=0.0,
)
# Grafana's variables, as the dashboard would send them with "All" selected.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "${datasource}": "",
    "$cluster": ".*",
    "$broker": ".*",
}


@dataclass
class Prometheus:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def api(self, path: str, **params: str) -> dict[str, Any]:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as r:
            return json.load(r)

    def query(self, expr: str) -> dict[str, Any]:
        """The whole API answer (status, data or error), even for a bad expression."""
        data = urllib.parse.urlencode({"query": expr}).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/query", data=data)
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as exc:  # 400/422 carry a JSON error document
            return json.loads(exc.read())

    def vector(self, expr: str) -> list[tuple[dict[str, str], float]]:
        answer = self.query(expr)
        assert answer["status"] == "success", (expr, answer)
        return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False


class PromDaemon(Daemon):
    @property
    def store_root(self) -> Path:
        return self.store.root

    @property
    def commitlog_paths(self) -> list[str]:
        return [str(d) for d in self.store.commitlog_dirs]


@pytest.fixture
def start_daemon(
    tmp_path: Path, spawn_daemon: Callable[..., Daemon]
) -> Iterator[Callable[[int], Daemon]]:
    brokers: list[FakeBroker] = []

    def start(metrics_port: int) -> Daemon:
        made = make_store(
            tmp_path,
            SPEC,
            brokerName=BROKER,
            brokerClusterName=CLUSTER,
            deleteFileBatchMax=8,
            cleanResourceInterval=1000,
            retentiond={
                "initialDelay": 1500,  # Prometheus scrapes the counters at 0 before they move
                "controlSocket": str(tmp_path / "c.sock")[:100],
                "metrics": {"listen": f"127.0.0.1:{metrics_port}"},
            },
        )
        # A stand-in broker owns the store, so the owner's retentiond_owner_* series exist.
        brokers.append(FakeBroker(made.root / "lock"))
        return spawn_daemon(made, log=tmp_path / "daemon.log", cls=PromDaemon)

    yield start
    for broker in brokers:
        broker.stop()


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[[str], Prometheus]]:
    binary = shutil.which("prometheus")
    need(binary is not None, "the prometheus binary is missing (apt-get install prometheus)")
    started: list[Prometheus] = []

    def start(target_url: str) -> Prometheus:
        parsed = urllib.parse.urlparse(target_url)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [
                {
                    "job_name": "retentiond",
                    "metrics_path": parsed.path,
                    "static_configs": [{"targets": [parsed.netloc]}],
                }
            ],
        }
        path = tmp_path / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        log = tmp_path / "prometheus.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={path}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdout=fh,
                stderr=fh,
            )
        prom = Prometheus(proc, f"http://127.0.0.1:{port}", log)
        started.append(prom)
        wait_until("Prometheus to be ready", prom.ready, 30, log)
        return prom

    yield start
    for prom in started:
        prom.proc.terminate()
        try:
            prom.proc.wait(10)
        except subprocess.TimeoutExpired:
            prom.proc.kill()
            prom.proc.wait()


# --- expressions ---------------------------------------------------------------------------


def dashboard_expressions() -> list[str]:
    """Every target expression and variable query of the dashboard, as PromQL."""
    doc = json.loads(DASHBOARD.read_text())
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                found.append(node["expr"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc["panels"])
    for variable in doc["templating"]["list"]:
        query = variable.get("query")
        text = query.get("query") if isinstance(query, dict) else None
        if text:  # Grafana's label_values(series, label) is not PromQL; ask the same thing
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text)
            assert m, text
            found.append(f"count by ({m.group(2)}) ({m.group(1)})")
    return found


def alert_expressions() -> list[str]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in doc["groups"] for rule in group["rules"]]


def as_promql(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"an unknown Grafana variable in {expr}"
    return expr


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bretentiond_[a-z_]+\b", expr))


# --- tests ---------------------------------------------------------------------------------


def test_prometheus_scrapes_the_daemon_and_every_expression_is_valid(
    start_daemon: Callable[[int], Daemon], start_prometheus: Callable[[str], Prometheus]
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    prom = start_prometheus(url)  # before the daemon: it sees every counter from 0
    daemon = start_daemon(port)
    assert wait_until("the daemon's metrics address", daemon.metrics_url, 20, daemon.log) == url

    # Everything expired goes (CommitLog, then ConsumeQueue and index files), then two rounds
    # delete nothing: from then on the counters cannot move.
    def settled() -> bool:
        rounds = daemon.records("round")
        done = [i for i, r in enumerate(rounds) if r["expired_pending"] == 0]
        if not done:
            return False
        after = rounds[done[0] + 1 :]
        quiet = [r for r in after if not any(c["files"] for c in r["deleted"].values())]
        return len(quiet) >= 2

    wait_until("the daemon to delete all it may", settled, 40, daemon.log)
    daemon.proc.send_signal(signal.SIGHUP)  # an unchanged reload, to be counted
    settled_at = time.time()
    wait_until(
        "a scrape after the store settled and the reload",
        lambda: (
            prom.vector(f"timestamp(retentiond_build_info) > {settled_at + 0.5}")
            and prom.vector('retentiond_config_reloads_total{result="unchanged"} == 1')
            and prom.vector("count_over_time(retentiond_build_info[1m]) > 3")
        ),
        20,
        prom.log,
    )

    # Deletion counters equal the journal, per kind and reason, in files and in bytes.
    deletions = daemon.records("deletion")
    kinds = {r["kind"] for r in deletions}
    assert {"commitlog", "consumequeue", "index"} <= kinds, kinds
    files = Counter((r["kind"], r["reason"]) for r in deletions)
    size: Counter[tuple[str, str]] = Counter()
    for r in deletions:
        size[(r["kind"], r["reason"])] += r["bytes"]
    for name, expected in (("files", files), ("bytes", size)):
        got = {
            (m["kind"], m["reason"]): v for m, v in prom.vector(f"retentiond_deleted_{name}_total")
        }
        assert {k: v for k, v in got.items() if v} == dict(expected), name
    labels = prom.vector("retentiond_deleted_files_total")[0][0]
    assert (labels["cluster"], labels["broker"], labels["job"]) == (CLUSTER, BROKER, "retentiond")
    assert prom.vector("retentiond_forced_deletions_total")[0][1] == 0
    assert prom.vector("sum(retentiond_delete_failures_total)")[0][1] == 0

    # The disk ratio is RocketMQ's arithmetic on each store path.
    cq = str(daemon.store_root / "consumequeue")
    before = {p: rocketmq_ratio(p) for p in [*daemon.commitlog_paths, cq]}
    got_ratio = {m["path"]: (m["kind"], v) for m, v in prom.vector("retentiond_disk_used_ratio")}
    after = {p: rocketmq_ratio(p) for p in [*daemon.commitlog_paths, cq]}
    assert set(got_ratio) == set(before)
    for path, (kind, value) in got_ratio.items():
        assert kind == ("consumequeue" if path == cq else "commitlog")
        assert value in (before[path], after[path]), (path, value, before[path])
    state = prom.vector("retentiond_disk_state == 1")
    assert len(state) == 1

    # Round timestamps: every cleaner succeeded, recently, and rounds were timed.
    rounds = daemon.records("round")
    last_round_s = max(r["time_ms"] for r in rounds) / 1000
    for cleaner in ("commitlog", "consumequeue"):
        ((_, stamp),) = prom.vector(
            f'retentiond_last_round_success_timestamp_seconds{{cleaner="{cleaner}"}}'
        )
        assert last_round_s - 5 <= stamp <= time.time()
        ((_, count),) = prom.vector(
            f'retentiond_round_duration_seconds_count{{cleaner="{cleaner}"}}'
        )
        assert count >= len([r for r in rounds if r["time_ms"] / 1000 < settled_at - 2])

    # Store figures agree with the disk now that nothing moves.
    left = sum(len(os.listdir(p)) for p in daemon.commitlog_paths)
    assert prom.vector('retentiond_files{kind="commitlog"}')[0][1] == left
    assert prom.vector("retentiond_expired_files_pending")[0][1] == 0

    # Every expression of the dashboard and of the alert rules is valid PromQL here, and
    # names only series this daemon exports.
    exported = set(prom.api("label/__name__/values")["data"])
    # Families the daemon declares but has no sample of yet (no consumer group at risk on
    # this store): their names are exported all the same.
    with urllib.request.urlopen(url, timeout=10) as r:
        declared = {
            line.split()[2] for line in r.read().decode().splitlines() if line.startswith("# TYPE ")
        }
    exported |= declared
    expressions = [as_promql(e) for e in dashboard_expressions() + alert_expressions()]
    assert len(expressions) > 25
    for expr in expressions:
        answer = prom.query(expr)
        assert answer["status"] == "success", (expr, answer.get("error"))
        for name in metric_names(expr):
            assert name in exported, f"{expr} uses {name}, which retentiond does not export"
    # The headline panels have data.
    for expr in (
        'max by (cluster, broker) (retentiond_disk_used_ratio{cluster=~".*", broker=~".*"})',
        'sum by (reason) (increase(retentiond_deleted_bytes_total{cluster=~".*"}[1m]))',
    ):
        assert prom.vector(expr), expr

    # Prometheus loaded the alert rules and evaluates them without error; none fires.
    def evaluated() -> list[dict[str, Any]]:
        groups = prom.api("rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return (
            rules
            if rules and all(r.get("lastEvaluation", "0001").startswith("20") for r in rules)
            else []
        )

    rules = wait_until("every rule to be evaluated", evaluated, 20, prom.log)
    assert {r["name"] for r in rules} == {
        rule["alert"]
        for group in yaml.safe_load(ALERTS.read_text())["groups"]
        for rule in group["rules"]
    }
    for rule in rules:
        assert rule["health"] == "ok", rule
        assert rule["state"] == "inactive", rule

    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(5) == 0


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    need(binary is not None, "promtool is missing (apt-get install prometheus)")
    assert binary is not None
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=60, cwd=ALERTS.parent
    )


def test_promtool_checks_the_rules_and_the_example_config() -> None:
    rules = _promtool("check", "rules", str(ALERTS))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = _promtool("check", "config", str(EXAMPLE_CONFIG))
    assert config.returncode == 0, config.stdout + config.stderr


def test_promtool_unit_tests_fire_and_stay_quiet_for_every_rule() -> None:
    result = _promtool("test", "rules", str(ALERTS_TEST))
    assert result.returncode == 0, result.stdout + result.stderr
    tests = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    alerts = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in tests:
        for case in test["alert_rule_test"]:
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    assert firing == alerts and quiet == alerts
