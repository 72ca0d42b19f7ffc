"""``retentiond.initialDelay`` is when the first round runs, 0 included."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Daemon, Store


def _rounds_done(daemon: Daemon) -> int:
    return sum(
        1
        for line in daemon.log.read_text().splitlines()
        if line.startswith("{") and json.loads(line).get("event") == "round done"
    )


def test_an_initial_delay_of_0_runs_the_first_round_at_once_not_one_interval_later(
    store: Callable[..., Store], spawn_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    # An hour between rounds: only the first round, run at start, can be seen in the test.
    s = store(
        cleanResourceInterval=3_600_000,
        retentiond={
            "initialDelay": 0,
            "controlSocket": str(tmp_path / "c.sock"),
            "metrics": {"listen": "127.0.0.1:0"},
        },
    )
    daemon = spawn_daemon(s)
    daemon.wait_until("the first round", lambda: _rounds_done(daemon) >= 1, timeout=120)
    assert daemon.records("round"), "the first round wrote no round record"
    code, _ = daemon.terminate(timeout=60)
    assert code == 0
