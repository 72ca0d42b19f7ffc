"""A store path that is not there is a store error, never a refusal, for the real CLI and the
real daemon: one of two Kafka log dirs missing, ``once`` cleans the other and exits 4 and
``plan``, ``status`` and ``/metrics`` name the missing one, which is never created; a
RocketMQ store missing when the daemon starts: the daemon runs, sends READY after its first
round with ``STATUS=`` naming the error, and cleans once the store appears (a unit with
``RestartPreventExitStatus=3`` is not left dead by a mount that comes late)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ALL_HOURS, Daemon, make_store, run_cli, spawn_run
from tests.e2e.test_daemon import SPEC, NotifySocket
from tests.e2e.test_kafka_cli import build_log_dir, tree, write_config
from tests.e2e.test_kafka_daemon import metric_lines, status

pytestmark = pytest.mark.slow


def test_one_missing_kafka_log_dir_is_its_own_error_and_the_other_is_cleaned(
    tmp_path: Path,
) -> None:
    good, missing, empty = tmp_path / "disk1", tmp_path / "disk2", tmp_path / "disk3"
    build_log_dir(good, int(time.time() * 1000))
    empty.mkdir()  # a mount point whose disk is not mounted
    config = write_config(tmp_path, [good, missing, empty])
    before = tree(good)

    plan = run_cli("plan", "--json", "--config", str(config))
    assert plan.code == 4, plan.err
    doc = json.loads(plan.out)
    assert [d["path"] for d in doc["log_dirs"]] == [str(good)]
    assert any(e.startswith(f"{missing}: log dir does not exist") for e in doc["errors"])
    assert any(e.startswith(f"{empty}: log dir is empty") for e in doc["errors"])
    text = run_cli("plan", "--config", str(config))
    assert text.code == 4 and f"ERROR: {missing}: log dir does not exist" in text.out

    once = run_cli("once", "--config", str(config))
    assert once.code == 4, once.err
    assert f"error: {missing}: log dir does not exist" in once.err
    gone = set(before) - set(tree(good))
    assert gone and all("/orders-" in p for p in gone), sorted(gone)  # the other dir cleaned
    assert not missing.exists()  # never created
    assert list(empty.iterdir()) == []  # nothing created in it, not even .lock


def test_the_daemon_names_a_missing_log_dir_in_status_and_metrics(tmp_path: Path) -> None:
    good, missing = tmp_path / "disk1", tmp_path / "disk2"
    build_log_dir(good, int(time.time() * 1000))
    config = write_config(tmp_path, [good, missing])
    log = tmp_path / "daemon.log"
    daemon = Daemon(spawn_run(config, log), config, None, tmp_path / "journal", log)  # type: ignore[arg-type]
    try:
        doc: dict[str, Any] = daemon.wait_until(
            "a round",
            lambda: (s := status(daemon)) is not None and s["rounds"]["count"] >= 1 and s,
        )
        assert doc["ready"] is True
        assert list(doc["store_dir_errors"]) == [str(missing)]
        assert "does not exist" in doc["store_dir_errors"][str(missing)]
        assert str(missing) in (doc["rounds"]["last_error"] or "")
        text = daemon.cli("status")
        assert text.code == 0 and f"{missing}: log dir does not exist" in text.out, text.out
        daemon.wait_until(
            "the other log dir cleaned",
            lambda: any(r["type"] == "deletion" for r in daemon.records()),
        )
        lines = {
            line.split('dir="')[1].split('"')[0]: line.rsplit(" ", 1)[1]
            for line in metric_lines(daemon, "retentiond_store_dir_error")
        }
        assert lines == {str(good): "0.0", str(missing): "1.0"}, lines
        assert not missing.exists()
    finally:
        daemon.kill()


def test_a_store_missing_at_start_is_reported_and_cleaned_once_it_appears(
    tmp_path: Path, short_dir: Path, spawn_daemon: Callable[..., Daemon]
) -> None:
    defaults = {
        "cleanResourceInterval": 500,
        "deleteCommitLogFilesInterval": 0,
        "deleteConsumeQueueFilesInterval": 0,
        "deleteWhen": ALL_HOURS,
        "fileReservedTime": 72,
        "retentiond": {
            "initialDelay": 0,
            "controlSocket": str(short_dir / "control.sock"),
            "metrics": {"listen": "127.0.0.1:0"},
        },
    }
    journal = tmp_path / "journal"
    store = make_store(tmp_path, SPEC, journal=journal, defaults=defaults)
    away = tmp_path / "not-mounted-yet"
    os.rename(store.root, away)
    notify = NotifySocket(short_dir / "notify.sock")
    try:
        env = {**os.environ, "NOTIFY_SOCKET": str(notify.path)}
        daemon = spawn_daemon(store, env=env)
        ready = notify.wait_for("READY", timeout=60)
        assert "store root does not exist" in ready.get("STATUS", ""), ready
        assert daemon.proc.poll() is None  # running, not exit 3
        assert not store.root.exists()  # never created
        doc = daemon.status()
        assert doc["ready"] is True and str(store.root) in doc["store_dir_errors"]
        os.rename(away, store.root)  # the mount appears
        daemon.wait_until(
            "cleaning once the store is there",
            lambda: any(r["type"] == "deletion" for r in daemon.records()),
            timeout=60,
        )
        daemon.wait_until(
            "the error cleared", lambda: daemon.status()["store_dir_errors"] == {}, timeout=30
        )
    finally:
        notify.close()
