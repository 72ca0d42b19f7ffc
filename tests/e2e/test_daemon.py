"""The daemon as an operator runs it: `retentiond run` in a subprocess under a real notify
socket, against a generated store, reconfigured by editing its file, driven by signals and by
`retentiond status` / `trigger-delete` in further subprocesses.

Evidence comes from outside the process: sd_notify datagrams, the journal's ``round`` and
``deletion`` records, the files left on disk, the exit code. Timing assertions are lower
bounds, except the 2 s exit that the issue demands.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from retentiond.storegen.rocketmq import PRESETS, write_config
from tests.conftest import ALL_HOURS, Daemon, make_store, run_cli
from tests.helpers.stores import config_keys

pytestmark = pytest.mark.slow

HOUR_MS = 3_600_000
# 40 CommitLog files of 64 KiB (63 messages each) whose ages spread evenly over 130 h: about
# seventeen are older than 72 h, about thirty-two older than 24 h.
SPEC = PRESETS["daemon-test"]


class NotifySocket:
    """What systemd would be: a datagram socket, read continuously as systemd reads it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[dict[str, str]] = []
        self._closed = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._closed.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            lines = data.decode().splitlines()
            self.messages.append(dict(line.split("=", 1) for line in lines if "=" in line))

    def wait_for(self, key: str, timeout: float = 20.0, after: int = 0) -> dict[str, str]:
        """The first message at index >= ``after`` that carries ``key``."""
        deadline = time.monotonic() + timeout
        while True:
            for message in self.messages[after:]:
                if key in message:
                    return message
            if time.monotonic() > deadline:
                raise AssertionError(f"no {key} within {timeout}s; got {self.messages}")
            time.sleep(0.05)

    def index_of(self, message: dict[str, str]) -> int:
        return next(i for i, m in enumerate(self.messages) if m is message)

    def close(self) -> None:
        self._closed.set()
        self._reader.join()
        self.sock.close()


@dataclass
class Running(Daemon):
    notify: NotifySocket | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    def commitlog_deletions(self) -> list[dict[str, Any]]:
        return [r for r in self.records("deletion") if r["kind"] == "commitlog"]

    def edit(self, **changes: Any) -> None:
        """Rewrite the config as an operator's editor would (new file, atomic rename), so
        the daemon's poll never sees a half-written file."""
        merged = {**self.overrides, **changes}
        tmp = self.config.with_suffix(".tmp.yaml")
        write_config(self.store.root, SPEC, tmp, **merged)
        os.replace(tmp, self.config)

    def edit_raw(self, text: str) -> None:
        tmp = self.config.with_suffix(".tmp.yaml")
        tmp.write_text(text)
        os.replace(tmp, self.config)


@pytest.fixture
def start_daemon(
    tmp_path: Path, short_dir: Path, spawn_daemon: Callable[..., Daemon]
) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(**overrides: Any) -> Running:
        defaults = {
            "cleanResourceInterval": 1000,
            "deleteCommitLogFilesInterval": 0,
            "deleteConsumeQueueFilesInterval": 0,
            "retentiond": {
                "initialDelay": 300,
                "controlSocket": str(short_dir / "control.sock"),
                "metrics": {"listen": "127.0.0.1:0"},
                "journal": {"roundSummaryInterval": 0},  # the tests count round records
            },
        }
        journal = tmp_path / "journal"
        made = make_store(tmp_path, SPEC, journal=journal, defaults=defaults, **overrides)
        notify = NotifySocket(short_dir / "notify.sock")
        env = {**os.environ, "NOTIFY_SOCKET": str(notify.path)}
        running = spawn_daemon(
            made,
            log=tmp_path / "daemon.log",
            env=env,
            cls=Running,
            notify=notify,
            overrides=config_keys(defaults, overrides, journal),
        )
        started.append(running)
        return running

    yield start
    for running in started:
        running.kill()
        running.notify.close()


def _age_hours_at_deletion(record: dict[str, Any]) -> float:
    return record["age_ms"] / HOUR_MS


def test_rounds_reload_refusal_status_and_stop(start_daemon: Callable[..., Running]) -> None:
    d = start_daemon(deleteWhen=ALL_HOURS, fileReservedTime=72, deleteFileBatchMax=2)

    ready = d.notify.wait_for("READY")
    assert "STATUS" in ready

    # Expired files go over successive rounds, never more than deleteFileBatchMax per round.
    d.wait_until("two rounds that deleted", lambda: len(_deleting_rounds(d)) >= 2)
    first_hash = d.records("round")[0]["config_hash"]

    # An invalid edit is refused; the daemon keeps cleaning with the settings it had.
    d.edit(fileReservedTime=-5, deleteFileBatchMax=1000)
    d.wait_until("the refusal", lambda: d.status()["config"]["reloads"]["refused"] == 1)
    refused_at = len(d.records("round"))
    d.wait_until(
        "two more deleting rounds",
        lambda: sum(1 for r in d.records("round")[refused_at:] if _cl_deleted(r)) >= 2,
    )
    status = d.status()
    assert status["config"]["hash"] == first_hash
    assert status["config"]["version"] == 1
    assert "fileReservedTime" in " ".join(status["config"]["last_reload"]["problems"])
    assert "fileReservedTime" in d.log.read_text()  # every problem is logged
    # each round's log line carries the CommitLog triggers it saw
    done = [
        json.loads(line)
        for line in d.log.read_text().splitlines()
        if line.startswith("{") and '"round done"' in line
    ]
    assert done and all(r["fired"] in (True, False) and "disk_ratio" in r for r in done)
    for r in d.records("round")[refused_at:]:
        assert r["config_hash"] == first_hash
    for r in d.commitlog_deletions():
        assert _age_hours_at_deletion(r) >= 72

    # Everything older than 72 h goes; nothing younger.
    d.wait_until(
        "no expired file left at 72 h",
        lambda: any(r["expired_pending"] == 0 for r in d.records("round")),
    )
    kept = [f for f in d.store.data_files if f.path.exists()]
    assert kept and all(time.time() * 1000 - f.mtime_ms < 72 * HOUR_MS for f in kept)

    # A valid edit changes what the next round deletes, without a restart.
    d.edit(fileReservedTime=24)
    younger = d.wait_until(
        "a deletion under the new fileReservedTime",
        lambda: [r for r in d.commitlog_deletions() if _age_hours_at_deletion(r) < 72],
    )
    new_hash = younger[0]["config_hash"]
    assert new_hash != first_hash
    assert all(_age_hours_at_deletion(r) >= 24 for r in d.commitlog_deletions())
    status = d.status()
    assert status["pid"] == d.proc.pid
    assert status["config"]["version"] == 2
    assert status["config"]["reloads"] == {"applied": 1, "unchanged": 0, "refused": 1}
    assert "fileReservedTime: 72 -> 24" in status["config"]["last_reload"]["changes"]

    # Every round of the whole run respected the batch limit.
    for r in d.records("round"):
        assert _cl_deleted(r) <= 2

    # SIGHUP: RELOADING=1 with a monotonic timestamp, then READY=1 again.
    mark = len(d.notify.messages)
    d.proc.send_signal(signal.SIGHUP)
    reloading = d.notify.wait_for("RELOADING", after=mark)
    assert int(reloading["MONOTONIC_USEC"]) > 0
    d.notify.wait_for("READY", after=d.notify.index_of(reloading) + 1)
    d.wait_until("the unchanged reload", lambda: d.status()["config"]["reloads"]["unchanged"])

    # The human status is readable and names the essentials.
    text = d.cli("status")
    assert text.code == 0, text.err
    for word in ("rounds", "next", "pending", "disk", "manual", "version 2"):
        assert word in text.out

    mark = len(d.notify.messages)
    code, _ = d.terminate()
    assert code == 0
    d.notify.wait_for("STOPPING", after=mark, timeout=2)


def test_trigger_delete_outside_the_delete_hour(start_daemon: Callable[..., Running]) -> None:
    not_now = f"{(datetime.now(UTC).hour + 12) % 24:02d}"
    d = start_daemon(
        deleteWhen=not_now,
        fileReservedTime=72,
        deleteFileBatchMax=2,
        retentiond={"timezone": "UTC"},
    )
    d.notify.wait_for("READY")
    d.wait_until("two idle rounds", lambda: len(d.records("round")) >= 2)
    assert not d.records("deletion")
    assert not any(r["triggers"]["fired"] for r in d.records("round"))

    result = d.cli("trigger-delete")
    assert result.code == 0, result.err
    assert "20" in result.out

    manual = d.wait_until(
        "a manual round that deleted",
        lambda: [r for r in d.records("round") if r["manual"] and _cl_deleted(r)],
    )
    assert manual[0]["triggers"]["time_up"] is False
    assert {r["reason"] for r in d.commitlog_deletions()} == {"manual"}
    assert all(_age_hours_at_deletion(r) >= 72 for r in d.commitlog_deletions())
    left = d.status()["manual_rounds_left"]
    assert 0 < left < 20
    assert d.terminate()[0] == 0


def test_sigterm_while_sleeping_between_deletions(start_daemon: Callable[..., Running]) -> None:
    d = start_daemon(
        deleteWhen=ALL_HOURS,
        fileReservedTime=72,
        deleteFileBatchMax=10,
        deleteCommitLogFilesInterval=60_000,
    )
    d.notify.wait_for("READY")
    d.wait_until("the first deletion", d.commitlog_deletions)
    time.sleep(0.3)  # well inside the 60 s pause that follows it
    mark = len(d.notify.messages)

    code, elapsed = d.terminate()

    assert code == 0
    # SIGTERM ends the 60 s pause rather than waiting it out (a wide bar, not a timing).
    assert elapsed < 30.0
    d.notify.wait_for("STOPPING", after=mark, timeout=1)
    assert len(d.commitlog_deletions()) == 1
    intents = {r["id"] for r in d.records("intent")}
    assert intents == {r["id"] for r in d.records("deletion")}  # no file left half-handled
    assert d.records("round")[-1]["stopped"] is True


def test_rounds_never_overlap_when_a_round_outlasts_the_interval(
    start_daemon: Callable[..., Running],
) -> None:
    pause_ms = 800
    d = start_daemon(
        deleteWhen=ALL_HOURS,
        fileReservedTime=72,
        deleteFileBatchMax=3,
        deleteCommitLogFilesInterval=pause_ms,
        cleanResourceInterval=300,
    )
    d.wait_until("three deleting rounds", lambda: len(_deleting_rounds(d)) >= 3, timeout=60)
    status = d.status()
    assert d.terminate()[0] == 0

    rounds = sorted(d.records("round"), key=lambda r: r["time_ms"])
    for r in _deleting_rounds(d):
        if _cl_deleted(r) == 3:  # two pauses: after the first and the second deletion
            assert r["duration_ms"] >= 2 * pause_ms
    for before, after in itertools.pairwise(rounds):
        # 5 ms of slack: time_ms is the wall clock, duration_ms the monotonic one.
        assert after["time_ms"] >= before["time_ms"] + before["duration_ms"] - 5, (before, after)
    assert status["rounds"]["missed"]["overlap"] >= 1


def _cl_deleted(record: dict[str, Any]) -> int:
    return int(record["deleted"]["commitlog"]["files"])


def _deleting_rounds(d: Running) -> list[dict[str, Any]]:
    return [r for r in d.records("round") if _cl_deleted(r)]


def test_config_file_refused_at_start_exits_with_config_code(tmp_path: Path) -> None:
    config = make_store(tmp_path, SPEC, defaults={}, fileReservedTime="soon").config
    result = run_cli("run", "--config", str(config), timeout=30)
    assert result.code == 3
    assert "fileReservedTime" in result.err
    assert yaml.safe_load(config.read_text())["fileReservedTime"] == "soon"


def test_status_without_a_daemon_says_so(tmp_path: Path, short_dir: Path) -> None:
    control = {"controlSocket": str(short_dir / "control.sock")}
    config = make_store(tmp_path, SPEC, defaults={}, retentiond=control).config
    result = run_cli("status", "--config", str(config), timeout=30)
    assert result.code == 7
    assert "is retentiond running" in result.err
