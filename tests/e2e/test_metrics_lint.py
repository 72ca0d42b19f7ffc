"""``/metrics`` of a real `retentiond run` of each store kind, as Prometheus tooling sees it:
``promtool check metrics`` finds nothing to say, every series carries ``cluster`` and
``broker``, every ``retentiond_*`` family served is a row of the README's metrics table with
the same type, labels and text, ``/`` is a landing page linking ``/metrics`` and any other
path is a 404.

Each daemon runs with a stand-in broker owning its store (so the ``retentiond_owner_*``
series exist) and a ship target (so the ``retentiond_ship_*`` series have moved), and is
scraped after its first round.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from retentiond.observe.reference import metric_rows
from tests.conftest import Daemon, expired_spec, make_store, need, spawn_run
from tests.e2e.test_kafka_cli import broker_holding, build_log_dir, write_config
from tests.helpers.broker_proc import FakeBroker

pytestmark = pytest.mark.slow


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


def first_round_done(daemon: Daemon) -> str:
    url = daemon.wait_until("the metrics listener", daemon.metrics_url)
    daemon.wait_until("a round done", lambda: '"event": "round done"' in daemon.log.read_text())
    daemon.wait_until("a shipping pass", lambda: "retentiond_ship_last_success" in scrape(url))
    return url


@pytest.fixture
def rocketmq_daemon(tmp_path: Path, short_dir: Path) -> Iterator[tuple[Daemon, str]]:
    (tmp_path / "shipped").mkdir()
    store = make_store(
        tmp_path,
        expired_spec(4),
        brokerName="broker-a",
        brokerClusterName="lint",
        retentiond={
            "initialDelay": 500,
            "controlSocket": str(short_dir / "control.sock"),
            "metrics": {"listen": "127.0.0.1:0"},
            "ship": {"target": str(tmp_path / "shipped"), "interval": 1000},
        },
    )
    broker = FakeBroker(store.generated.root / "lock")
    daemon = Daemon(spawn_run(store.config, tmp_path / "d.log"), store.config, store.generated,
                    store.journal, tmp_path / "d.log")  # fmt: skip
    try:
        yield daemon, first_round_done(daemon)
    finally:
        daemon.kill()
        broker.stop()


@pytest.fixture
def kafka_daemon(tmp_path: Path) -> Iterator[tuple[Daemon, str]]:
    log_dir = tmp_path / "kafka-logs"
    build_log_dir(log_dir, int(time.time() * 1000))
    config = write_config(tmp_path, [log_dir])
    (tmp_path / "shipped").mkdir()
    with config.open("a") as fh:
        fh.write(f"retentiond.ship.target={tmp_path / 'shipped'}\nretentiond.ship.interval=1000\n")
    with broker_holding(log_dir):
        log = tmp_path / "d.log"
        daemon = Daemon(spawn_run(config, log), config, None, tmp_path / "journal", log)  # type: ignore[arg-type]
        try:
            yield daemon, first_round_done(daemon)
        finally:
            daemon.kill()


def promtool_check_metrics(exposition: str) -> str:
    binary = shutil.which("promtool")
    need(binary is not None, "promtool is missing (apt-get install prometheus)")
    assert binary is not None
    result = subprocess.run(
        [binary, "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60
    )
    return f"exit {result.returncode}\n{result.stdout}{result.stderr}"


def series_without_cluster_and_broker(exposition: str) -> list[str]:
    return [
        line
        for line in exposition.splitlines()
        if line and not line.startswith("#") and not ('cluster="' in line and 'broker="' in line)
    ]


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


@pytest.mark.parametrize("kind", ["rocketmq", "kafka"])
def test_a_live_scrape_lints_clean_and_labels_every_series(
    kind: str, request: pytest.FixtureRequest
) -> None:
    _, url = request.getfixturevalue(f"{kind}_daemon")
    text = scrape(url)
    assert promtool_check_metrics(text) == "exit 0\n"
    assert series_without_cluster_and_broker(text) == []
    for name in ("retentiond_endpoint_up", "retentiond_owner_info", "retentiond_ship_runs_total"):
        assert f"\n{name}{{" in text, name
    table = table_families()
    served = served_families(text)
    assert set(served) <= set(table), set(served) - set(table)
    for name, (type_, help_, labels) in served.items():
        assert (type_, help_) == table[name][:2], name
        if labels is not None:  # a family with samples
            assert labels == table[name][2], name


def served_families(exposition: str) -> dict[str, tuple[str, str, frozenset[str] | None]]:
    """Each retentiond family of a scrape: its type, HELP text and the label names of its
    samples (besides cluster, broker and a histogram's le; None: no sample)."""
    helps = dict(re.findall(r"^# HELP (retentiond_\w+) (.*)$", exposition, re.MULTILINE))
    types = dict(re.findall(r"^# TYPE (retentiond_\w+) (\w+)$", exposition, re.MULTILINE))
    labels: dict[str, set[str] | None] = dict.fromkeys(helps)
    for name, body in re.findall(r"^(retentiond_\w+)\{(.*)\} ", exposition, re.MULTILINE):
        stem = re.sub(r"_(bucket|count|sum)$", "", name)
        family = name if name in labels else stem
        seen = set(re.findall(r'(\w+)="', body)) - {"cluster", "broker", "le"}
        labels[family] = (labels[family] or set()) | seen
    return {
        name: (types[name], helps[name], None if labels[name] is None else frozenset(labels[name]))
        for name in helps
    }  # fmt: skip


def table_families() -> dict[str, tuple[str, str, frozenset[str]]]:
    return {r.name: (r.type, r.help, frozenset(r.labels)) for r in metric_rows()}


def test_the_root_is_a_landing_page_and_other_paths_are_404(
    kafka_daemon: tuple[Daemon, str],
) -> None:
    _, url = kafka_daemon
    root = url.removesuffix("/metrics")
    code, content_type, body = get(root + "/")
    assert code == 200 and content_type.startswith("text/html")
    assert '<a href="/metrics">' in body
    for path in ("/metric", "/metrics/x", "/favicon.ico", "/index.html"):
        code, _, body = get(root + path)
        assert code == 404, path
        assert "retentiond_" not in body
