"""The daemon's shipping job: `retentiond run` with a target ships its closed segments on its
own, every `retentiond.ship.interval`, while the rounds go on."""

from __future__ import annotations

import gzip
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from retentiond.storegen.rocketmq import StoreSpec
from tests.conftest import Daemon, make_store, wait_until

pytestmark = pytest.mark.slow


def test_the_daemon_ships_closed_segments_on_its_own(
    tmp_path: Path, spawn_daemon: Callable[..., Daemon]
) -> None:
    spec = StoreSpec(commitlog_file_size=4096, messages=20, message_size=500)
    target = tmp_path / "fleet"
    target.mkdir()
    made = make_store(
        tmp_path,
        spec,
        defaults={},
        brokerClusterName="cluster-9",
        brokerName="broker-z",
        cleanResourceInterval=200,
        retentiond={
            "initialDelay": 0,
            "controlSocket": str(tmp_path / "control.sock"),
            "journal": {"dir": str(tmp_path / "journal"), "maxSegmentAge": 1000},
            "ship": {"target": str(target), "interval": 1000},
            "metrics": {"listen": "127.0.0.1:0"},
        },
    )
    d = spawn_daemon(made, log=tmp_path / "daemon.log")
    log, proc = d.log, d.proc
    try:
        files: list[Path] = wait_until(
            "a shipped segment (nothing shipped within 30 s)",
            lambda: list(target.glob("v3/rounds/dt=*/cluster=cluster-9/broker=broker-z/*.gz")),
            30,
            log,
            interval=0.2,
        )
        assert files, "nothing shipped within 30 s"
        with gzip.open(files[0], "rt") as fh:
            first = json.loads(fh.readline())
        assert (first["type"], first["cluster"], first["broker"]) == (
            "round",
            "cluster-9",
            "broker-z",
        )
        url = d.metrics_url()
        assert url is not None
        with urllib.request.urlopen(url, timeout=10) as resp:
            metrics = resp.read().decode()
        shipped = [
            float(line.split()[-1])
            for line in metrics.splitlines()
            if line.startswith(
                'retentiond_ship_segments_shipped_total{broker="broker-z",cluster="cluster-9"}'
            )
        ]
        assert shipped and shipped[0] >= 1, metrics[-2000:]
    finally:
        d.terminate(timeout=15)
    out = log.read_text()
    assert proc.returncode == 0, out[-3000:]
    assert '"journal shipped"' in out
