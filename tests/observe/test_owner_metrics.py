"""The owner broker on a real daemon's /metrics and in `retentiond status`: a stand-in broker
holds the store lock, maps 1,000 pages and lowers its descriptor limit; the daemon's scrape
and status documents show exactly its figures, and scrapes never re-read them (the figures'
timestamp stays that of the startup scan while no round runs)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from retentiond.engine.cleaner import Cleaner
from retentiond.kinds import kind_for, load_settings
from retentiond.observe.metrics import RetentionMetrics
from retentiond.storegen.rocketmq import StoreSpec, generate_store, write_config
from tests.helpers.broker_proc import FakeBroker

SPEC = StoreSpec(
    commitlog_file_size=64 * 1024,
    cq_file_size=8 * 20,
    max_hash_slot_num=16,
    max_index_num=16,
    messages=4 * 63,
    message_size=1024,
    topics=1,
    queues_per_topic=2,
    oldest_age_hours=10.0,
)
RETENTIOND = [sys.executable, "-m", "retentiond", "--log-format", "json"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Unix socket paths are limited to 107 bytes; pytest's tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix="rd-owner-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of one scrape, by sample name."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def one(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    ((labels, value),) = metrics[name]
    assert labels["cluster"] == "c1" and labels["broker"] == "b1"
    return value


def wait_for_url(log: Path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith("{") and json.loads(line)["event"] == "metrics listening":
                return json.loads(line)["url"]
        time.sleep(0.1)
    raise AssertionError(f"no metrics address in the log:\n{log.read_text()[-3000:]}")


def test_owner_figures_on_metrics_and_in_status(tmp_path: Path, short_dir: Path) -> None:
    store = generate_store(tmp_path / "store", SPEC)
    config = write_config(
        store.root,
        SPEC,
        tmp_path / "broker.yaml",
        brokerClusterName="c1",
        brokerName="b1",
        cleanResourceInterval=3_600_000,  # no round while we scrape: only the startup scan
        retentiond={
            "initialDelay": 3_600_000,
            "controlSocket": str(short_dir / "c.sock"),
            "journal": {"dir": str(tmp_path / "journal")},
            "metrics": {"listen": f"127.0.0.1:{free_port()}"},
        },
    )
    log = tmp_path / "daemon.log"
    with FakeBroker(store.root / "lock") as broker:
        broker.map(1000, store.commitlog_files[0].path)
        broker.open(25, store.commitlog_files[1].path)
        broker.nofile(5000)
        with open(log, "wb") as fh:
            daemon = subprocess.Popen(
                [*RETENTIOND, "run", "--config", str(config)], stdout=fh, stderr=fh
            )
        try:
            url = wait_for_url(log)
            # /metrics is served before the startup scan reads the owner: wait for it.
            deadline = time.monotonic() + 30
            first = scrape(url)
            while "retentiond_owner_info" not in first and time.monotonic() < deadline:
                time.sleep(0.1)
                first = scrape(url)
            time.sleep(0.3)
            again = [scrape(url) for _ in range(3)]
            status = json.loads(
                subprocess.run(
                    [*RETENTIOND, "status", "--json", "--config", str(config)],
                    capture_output=True, text=True, timeout=30, check=True,
                ).stdout
            )  # fmt: skip
            text = subprocess.run(
                [*RETENTIOND, "status", "--config", str(config)],
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout  # fmt: skip
            # What the broker really has, read independently while it is idle.
            maps = len(Path(f"/proc/{broker.pid}/maps").read_text().splitlines())
            fds = len(os.listdir(f"/proc/{broker.pid}/fd"))
            started = psutil.Process(broker.pid).create_time()
        finally:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(10) == 0, log.read_text()[-3000:]

    ((info, value),) = first["retentiond_owner_info"]
    assert value == 1
    assert info["pid"] == str(broker.pid)
    assert info["type"] == "rocketmq"
    assert info["main_class"] == "org.apache.rocketmq.broker.BrokerStartup"
    assert info["name"].startswith("python")
    assert one(first, "retentiond_owner_running") == 1
    assert one(first, "retentiond_owner_memory_maps") == maps >= 1000
    assert one(first, "retentiond_owner_open_fds") == fds >= 25
    assert one(first, "retentiond_owner_max_fds") == 5000
    max_map_count = int(Path("/proc/sys/vm/max_map_count").read_text())
    assert one(first, "retentiond_owner_max_memory_maps") == max_map_count
    assert one(first, "retentiond_owner_resident_memory_bytes") > 1 << 20
    assert abs(one(first, "retentiond_owner_start_time_seconds") - started) < 0.02
    # Read by the startup scan, not by the scrapes.
    stamp = one(first, "retentiond_owner_figures_timestamp_seconds")
    assert all(one(m, "retentiond_owner_figures_timestamp_seconds") == stamp for m in again)

    owner = status["safety"]["owner"]
    assert owner["running"] is True and owner["pids"] == [broker.pid]
    assert owner["vm_max_map_count"] == max_map_count
    p = owner["process"]
    assert (p["pid"], p["type"], p["memory_maps"], p["open_fds"], p["max_fds"]) == (
        broker.pid, "rocketmq", maps, fds, 5000
    )  # fmt: skip
    assert f"broker    running (pid {broker.pid})" in text
    assert "RocketMQ broker (org.apache.rocketmq.broker.BrokerStartup)" in text
    share = f"{100 * maps / max_map_count:.1f} % of vm.max_map_count {max_map_count:,}"
    assert f"maps {maps:,} ({share})" in text
    assert f"descriptors {fds:,} ({100 * fds / 5000:.1f} % of RLIMIT_NOFILE 5,000)" in text


def test_figures_are_read_once_per_round_never_per_scrape(tmp_path: Path) -> None:
    """In process: each round reads the owner once (a dry run too); scrapes only read the
    report the round left."""
    store = generate_store(tmp_path / "store", SPEC)
    settings = load_settings(write_config(store.root, SPEC, tmp_path / "broker.yaml"))
    cleaner = Cleaner(kind_for(settings))
    metrics = RetentionMetrics(settings)
    metrics.watch(cleaner)
    assert b"retentiond_owner_info" not in generate_latest(metrics.registry)  # no round yet
    with FakeBroker(store.root / "lock") as broker:
        for _ in range(2):
            cleaner.run_round(dry_run=True)
        for _ in range(5):
            text = generate_latest(metrics.registry).decode()
        assert cleaner.guard.owner_watch.reads == 2
        assert f'pid="{broker.pid}"' in text
    cleaner.run_round(dry_run=True)  # the broker is gone: its figures go with it
    text = generate_latest(metrics.registry).decode()
    assert "retentiond_owner_info{" not in text
    assert 'retentiond_owner_running{broker="' in text and "} 0.0" in text
    assert cleaner.guard.owner_watch.reads == 2
