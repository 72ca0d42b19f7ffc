"""`retentiond run --dry-run`: a real daemon on a store full of expired files plans every round
and deletes nothing, journals nothing, and `status` says it is a dry run, even though the file
says ``dryRun: false`` and is reloaded while it runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import Daemon, make_store
from tests.helpers.daemons import RETENTIOND

pytestmark = pytest.mark.slow


def test_run_dry_run_deletes_nothing_and_status_says_so(tmp_path: Path, short_dir: Path) -> None:
    keys = {
        "cleanResourceInterval": 1000,
        "retentiond": {
            "dryRun": False,  # the flag wins over the file
            "initialDelay": 100,
            "controlSocket": str(short_dir / "control.sock"),
        },
    }
    store = make_store(tmp_path, **keys)
    files = sorted(p for p in store.root.rglob("*") if p.is_file())
    before = {p: p.stat().st_ino for p in files}
    log = tmp_path / "daemon.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [*RETENTIOND, "run", "--dry-run", "--config", str(store.config)],
            stdout=fh,
            stderr=fh,
        )
    d = Daemon(proc, store.config, store.generated, store.journal, log)
    try:
        d.wait_until("the control socket", lambda: d.cli("status").code == 0)
        # The flag is this run's, not the file's: a client reading the file sees the daemon's
        # settings as the file states them, so no "a reload was refused" warning.
        assert "warning" not in d.cli("status").err
        d.wait_until("two rounds", lambda: d.status()["rounds"]["count"] >= 2)
        status = d.status()
        assert status["dry_run"] is True
        assert status["rounds"]["last"]["dry_run"] is True
        assert status["pending_expired"] > 0  # a real round would have deleted them

        # A reload of the file (still dryRun: false, now another fileReservedTime) keeps the
        # run dry: the flag holds for the whole run.
        data = yaml.safe_load(store.config.read_text())
        data["fileReservedTime"] = 48
        tmp = store.config.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(data))
        os.replace(tmp, store.config)
        d.wait_until("the reload", lambda: d.status()["config"]["reloads"]["applied"] >= 1)
        reloaded = d.status()["rounds"]["count"]
        d.wait_until("a round after it", lambda: d.status()["rounds"]["count"] >= reloaded + 2)
        status = d.status()
        assert status["dry_run"] is True
        assert status["rounds"]["last"]["dry_run"] is True
        assert "warning" not in d.cli("status").err

        code, _ = d.terminate()
        assert code == 0
    finally:
        d.kill()
    assert {p: p.stat().st_ino for p in files if p.exists()} == before, "a file was deleted"
    assert d.records() == []  # dry runs journal nothing
    assert '"dry_run": true' in log.read_text()  # the start-up line says so
