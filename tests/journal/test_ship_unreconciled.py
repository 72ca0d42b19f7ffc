"""No intent is shipped away unreconciled (issue 14, part 1).

A real daemon (``python -m retentiond run``: real rounds that delete nothing, a 1 s shipping
job, 1 s segments) and a real ``retentiond once`` share one journal. The ``once`` runs in a
wrapper that replaces ``os.unlink`` in its own process only, so that it stops itself (SIGSTOP)
just before its first store unlink, or just after it: between intent and unlink, or between
unlink and outcome. While it is stopped it is a live writer: the closed segment holding its
intent must stay local, pass after pass. Then it is SIGKILLed, and the daemon's next shipping
pass must reconcile the intent (``abort`` if the file is still there, ``deletion`` if it is
gone) before the segment leaves. In the end the shipped records pair every intent with exactly
one outcome.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from retentiond.journal.writer import closed_segments, list_segments, read_records
from retentiond.storegen.rocketmq import generate_store, write_config
from tests.conftest import ALL_HOURS, expired_spec, run_cli

pytestmark = pytest.mark.slow

SPEC = expired_spec(16)  # 16 CommitLog files of 64 KiB, aged 100 to 90 h

# Runs `retentiond <args>` with os.unlink replaced in this process: the first unlink relative
# to a directory handle (the executor's, on a store file) stops the process before or after
# the real unlink, for good (a stray SIGCONT stops it again: it never gets past that point;
# the test SIGKILLs it). The journal and everything else keep the real function.
STOPPING_ONCE = r"""
import os, signal, sys

real_unlink = os.unlink
point = sys.argv[1]

def stop_here():
    while True:
        os.kill(os.getpid(), signal.SIGSTOP)

def unlink(path, *args, dir_fd=None, **kwargs):
    if dir_fd is None:
        return real_unlink(path, *args, **kwargs)
    if point == "before_unlink":
        stop_here()
    real_unlink(path, *args, dir_fd=dir_fd, **kwargs)
    if point == "after_unlink":
        stop_here()

os.unlink = unlink
from retentiond.cli import main
sys.exit(main(sys.argv[2:]))
"""


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 60, log: Path | None = None
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")


def stopped(pid: int) -> bool:
    """The process is in the stopped state (``T``) in /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] == "T"


def shipped(target: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted(target.rglob("*.jsonl.gz")):
        with gzip.open(path, "rt") as fh:
            records += [json.loads(line) for line in fh]
    return records


def local_records(journal: Path) -> list[dict[str, Any]]:
    while True:
        try:
            return list(read_records(journal))  # type: ignore[arg-type]
        except FileNotFoundError:  # a segment shipped away while we read: read again
            continue


def segment_of(journal: Path, op_id: str) -> int | None:
    """The number of the local segment holding the intent ``op_id`` (None: not local)."""
    for seq, path in list_segments(journal):
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        if f'"id":"{op_id}"' in text and '"type":"intent"' in text:
            return seq
    return None


@pytest.mark.parametrize("point", ["before_unlink", "after_unlink"])
def test_a_killed_once_is_reconciled_before_its_intent_ships(tmp_path: Path, point: str) -> None:
    store = generate_store(tmp_path / "store", SPEC)
    journal, target = tmp_path / "journal", tmp_path / "target"
    target.mkdir()
    sockets = Path(tempfile.mkdtemp(prefix="rd-shipu-", dir="/tmp"))
    far_hour = (time.localtime().tm_hour + 12) % 24
    # The daemon runs real rounds (a round record every 200 ms, so its segments close by age)
    # that delete no CommitLog file: not the hour, nothing expired, no disk trigger.
    daemon_config = write_config(
        store.root, SPEC, tmp_path / "daemon.yaml",
        deleteWhen=f"{far_hour:02d}", fileReservedTime=100_000, cleanResourceInterval=200,
        diskMaxUsedSpaceRatio=95, diskSpaceCleanForciblyRatio=0.85,
        diskSpaceWarningLevelRatio=0.90, cleanFileForciblyEnable=False,
        retentiond={
            "initialDelay": 0,
            "journal": {"dir": str(journal), "maxSegmentAge": 1000, "roundSummaryInterval": 0},
            "ship": {"target": str(target), "interval": 1000},
            "metrics": {"listen": "127.0.0.1:0"}, "controlSocket": str(sockets / "d.sock"),
        },
    )  # fmt: skip
    once_config = write_config(
        store.root, SPEC, tmp_path / "once.yaml",
        deleteWhen=ALL_HOURS, fileReservedTime=72, deleteCommitLogFilesInterval=0,
        retentiond={"journal": {"dir": str(journal)}, "controlSocket": str(sockets / "o.sock")},
    )  # fmt: skip
    daemon_log, once_log = tmp_path / "daemon.log", tmp_path / "once.log"
    with open(daemon_log, "wb") as fh:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "retentiond", "--log-format", "json", "run",
             "--config", str(daemon_config)], stdout=fh, stderr=fh,
        )  # fmt: skip
    once: subprocess.Popen[bytes] | None = None
    try:
        wait_for("the daemon's control socket", (sockets / "d.sock").exists, log=daemon_log)
        with open(once_log, "wb") as fh:
            once = subprocess.Popen(
                [sys.executable, "-c", STOPPING_ONCE, point, "--log-format", "json", "once",
                 "--config", str(once_config)], stdout=fh, stderr=fh,
            )  # fmt: skip
        wait_for(f"once to stop {point}", lambda: stopped(once.pid), log=once_log)
        # The once's own intents (the daemon may delete ConsumeQueue files that the once's
        # CommitLog deletion left below the minimum, as upstream's queue cleaner would).
        intents = [
            r for r in local_records(journal)
            if r["type"] == "intent" and r["writer"].split(":")[1] == str(once.pid)
        ]  # fmt: skip
        assert len(intents) == 1, ([(r["reason"], r["file"]) for r in intents], once_log)
        intent = intents[0]
        victim = Path(intent["file"])
        assert victim.exists() == (point == "before_unlink")

        # A live writer's open intent: its segment closes but stays local, pass after pass.
        seq = segment_of(journal, intent["id"])
        assert seq is not None
        wait_for(
            "the intent's segment to close",
            lambda: any(s == seq for s, _ in closed_segments(journal)),
            log=daemon_log,
        )
        wait_for("later segments to ship", lambda: shipped(target), log=daemon_log)
        time.sleep(2.5)  # at least two more shipping passes
        assert segment_of(journal, intent["id"]) == seq, "a live writer's intent was shipped"
        assert not [r for r in shipped(target) if r.get("id") == intent["id"]]

        # The writer dies: the next pass reconciles, then ships intent and outcome.
        os.kill(once.pid, signal.SIGKILL)
        once.wait()

        def outcome_shipped() -> bool:
            ids = Counter(r.get("id") for r in shipped(target))
            return ids[intent["id"]] == 2

        # Eventually, not at once: the daemon's own rounds may have put an intent of theirs
        # in the same segment (a ConsumeQueue file left below the minimum by the once's
        # deletion), and a file the stopped once still held open waits out its hold (60 s)
        # with that intent open, keeping the segment local until then.
        wait_for("the intent and its outcome to ship", outcome_shipped, timeout=180, log=daemon_log)
        assert daemon.poll() is None, daemon_log.read_text()[-3000:]
    finally:
        for proc in (once, daemon):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM) if proc is daemon else proc.kill()
                proc.wait(timeout=30)
    assert daemon.returncode == 0, daemon_log.read_text()[-3000:]
    flushed = run_cli("ship", "--config", str(daemon_config), "--flush")
    assert flushed.code == 0, flushed.err
    assert closed_segments(journal) == []

    records = shipped(target)
    outcomes = Counter(r["id"] for r in records if r["type"] in ("deletion", "abort"))
    intent_ids = [r["id"] for r in records if r["type"] == "intent"]
    assert intent_ids.count(intent["id"]) == 1
    assert all(outcomes[i] == 1 for i in intent_ids), "an intent without exactly one outcome"
    assert set(outcomes) <= set(intent_ids), "an outcome without its intent"
    deletions = Counter(r["file"] for r in records if r["type"] == "deletion")
    assert all(n == 1 for n in deletions.values()), "a file with two deletion records"

    (outcome,) = [r for r in records if r.get("id") == intent["id"] and r["type"] != "intent"]
    assert outcome["reconciled"] is True
    if point == "before_unlink":
        assert outcome["type"] == "abort" and victim.exists()
        assert "reconciled at shipping" in outcome["error"]
    else:
        assert outcome["type"] == "deletion" and not victim.exists()
    # Filed beside its intent, whoever wrote it.
    for key in ("cluster", "broker", "host", "store"):
        assert outcome[key] == intent[key]
    assert "journal reconciled at shipping" in daemon_log.read_text()
