"""A writer at full speed beside the daemon, on a small real tmpfs, for a few minutes.

The writer (``stress_writer``, a broker stand-in: store lock, mapped files, pre-allocation,
rolling, ConsumeQueue units) keeps the disk above the clean-forcibly ratio, so the daemon (short
intervals) deletes CommitLog files it has just finished, and ConsumeQueue and index files
behind them, the whole time. The writer never errors (it checks that nothing it writes is
deleted), and the store stays consistent: the CommitLog and every queue are contiguous suffixes
ending at what the writer holds, and every deletion in the journal was below the minimum.

RETENTIOND_STRESS_SECONDS lengthens it (default 120).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from retentiond.journal.writer import read_records
from tests.conftest import Tmpfs, spawn_run
from tests.helpers.safety_procs import ProcView

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("RETENTIOND_STRESS_SECONDS", "120"))
FILE_SIZE = 256 * 1024
CQ_FILE_SIZE = 200 * 20
REPO = Path(__file__).resolve().parents[2]


def _contiguous(names: list[str], step: int) -> bool:
    offsets = sorted(int(n) for n in names)
    return all(b - a == step for a, b in itertools.pairwise(offsets))


def test_writer_and_daemon_side_by_side(tmp_path: Path, tmpfs: Tmpfs, short_dir: Path) -> None:
    root = tmpfs.path / "store"
    root.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.stress_writer", str(root),
         "--seconds", str(SECONDS), "--file-size", str(FILE_SIZE),
         "--cq-file-size", str(CQ_FILE_SIZE)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    proc = ProcView(tmp_path / "proc")  # the writer is the store's owner and must be visible
    journal = tmp_path / "journal"
    config = tmp_path / "broker.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storePathRootDir": str(root),
                "mappedFileSizeCommitLog": FILE_SIZE,
                "mappedFileSizeConsumeQueue": CQ_FILE_SIZE,
                "maxHashSlotNum": 16,
                "maxIndexNum": 16,
                "cleanResourceInterval": 100,
                "deleteCommitLogFilesInterval": 0,
                "deleteConsumeQueueFilesInterval": 0,
                "destroyMapedFileIntervalForcibly": 1000,
                "redeleteHangedFileInterval": 1000,
                "deleteFileBatchMax": 10,
                "retentiond": {
                    "initialDelay": 0,
                    "journal": {"dir": str(journal)},
                    "controlSocket": str(short_dir / "control.sock"),
                    "metrics": {"listen": "127.0.0.1:0"},
                },
            }
        )
    )
    log = tmp_path / "daemon.log"
    daemon = spawn_run(config, log, env={**os.environ, "RETENTIOND_PROC_ROOT": str(proc)})
    try:
        out, err = writer.communicate(timeout=SECONDS + 120)
        assert writer.returncode == 0, f"the writer failed: {err}"
        assert daemon.poll() is None, f"the daemon died:\n{log.read_text()[-3000:]}"
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=10) == 0
    finally:
        for p in (writer, daemon):
            if p.poll() is None:
                p.kill()
                p.wait()
    summary = json.loads(out.strip().splitlines()[-1])

    # The CommitLog is a contiguous suffix ending with the writer's active file (and the
    # pre-allocated one after it); every queue is a contiguous suffix too.
    names = sorted(os.listdir(root / "commitlog"))
    assert _contiguous(names, FILE_SIZE)
    active = Path(summary["active"]).name
    assert active in names and names[-1] == f"{int(active) + FILE_SIZE:020d}"
    cl_min = int(names[0])
    for q, offset in enumerate(summary["queue_offsets"]):
        files = sorted(os.listdir(root / "consumequeue" / "StressTopic" / str(q)))
        assert _contiguous(files, CQ_FILE_SIZE)
        assert int(files[-1]) == (offset - 1) // CQ_FILE_SIZE * CQ_FILE_SIZE

    records = list(read_records(journal))
    deletions = [r for r in records if r["type"] == "deletion"]
    cl = [r for r in deletions if r["kind"] == "commitlog"]
    cq = [r for r in deletions if r["kind"] == "consumequeue"]
    assert len(cl) >= 20 and cq, "the daemon kept deleting while the writer wrote"
    assert all(r["start_offset"] < cl_min for r in cl)
    assert all(r["end_offset"] < cl_min for r in cq)
    assert {r["id"] for r in records if r["type"] == "intent"} == {
        r["id"] for r in records if r["type"] in ("deletion", "abort")
    }
    assert summary["rolls"] > len(cl) // 2 and summary["messages"] > 1000
