"""No flood while an unlink keeps failing (issue 14, part 2).

A CommitLog file made immutable (``chattr +i``: unlink fails with EPERM) is retried with
backoff, up to ``redeleteHangedFileInterval`` between attempts, instead of every round: the
rounds in between keep it (``unlink_refused``, with the error and the next attempt) and
everything behind it, and write no intent/abort pair. Once the attribute is cleared it goes on
the first round after its backoff has passed.

Two views: a real daemon process (60 rounds of 100 ms; the journal, ``status``, ``/metrics``
and its log), and the engine in this process on the same kind of store (the plan a round
would make, the identity rule).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from retentiond.engine.cleaner import Cleaner
from retentiond.engine.refused import BACKOFF_BASE_MS, backoff_ms
from retentiond.journal.writer import Journal, Origin, read_records
from retentiond.kinds import kind_for, load_settings
from retentiond.reasons import Reason, Verdict
from retentiond.storegen.rocketmq import GeneratedStore, generate_store, write_config
from tests.conftest import ALL_HOURS, chattr, expired_spec, run_cli

SPEC = expired_spec(16)  # 16 CommitLog files of 64 KiB, aged 100 to 90 h
CAP_MS = 8000  # redeleteHangedFileInterval: attempts 1, 2, 4 s apart, then every 8 s


@pytest.fixture
def first_immutable() -> Iterator[Callable[[GeneratedStore], Path]]:
    """Make a store's first CommitLog file immutable; always cleared again afterwards."""
    made: list[Path] = []

    def make(store: GeneratedStore) -> Path:
        first = store.commitlog_files[0].path
        chattr("+i", first)
        made.append(first)
        return first

    yield make
    for path in made:
        if path.exists():
            subprocess.run(["chattr", "-i", str(path)], check=False)


def wait_for(what: str, check: Callable[[], Any], proc: subprocess.Popen[bytes], log: Path,
             timeout: float = 60) -> Any:  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the daemon died:\n{log.read_text()[-3000:]}"
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}\n{log.read_text()[-3000:]}")


def journal_records(journal: Path, kind: str) -> list[dict[str, Any]]:
    if not journal.exists():
        return []
    return [r for r in read_records(journal) if r["type"] == kind]


def log_lines(log: Path, event: str) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines():
        if f'"{event}"' in line:
            out.append(json.loads(line))
    return out


def test_backoff_schedule_is_capped_by_the_redelete_interval() -> None:
    assert [backoff_ms(n, 120_000) for n in (1, 2, 3, 4)] == [1000, 2000, 4000, 8000]
    assert backoff_ms(8, 120_000) == 120_000 and backoff_ms(500, 120_000) == 120_000
    assert backoff_ms(1, 200) == 200  # a short interval caps even the first wait
    assert BACKOFF_BASE_MS == 1000


@pytest.mark.slow
def test_an_immutable_file_is_retried_with_backoff_not_every_round(
    immutable_dir: Path, first_immutable: Callable[[GeneratedStore], Path], tmp_path: Path
) -> None:
    store = generate_store(immutable_dir / "store", SPEC)
    first = first_immutable(store)
    journal = tmp_path / "journal"
    sockets = Path(tempfile.mkdtemp(prefix="rd-backoff-", dir="/tmp"))
    config = write_config(
        store.root, SPEC, tmp_path / "broker.yaml",
        deleteWhen=ALL_HOURS, fileReservedTime=72, cleanResourceInterval=100,
        deleteCommitLogFilesInterval=0, deleteConsumeQueueFilesInterval=0,
        redeleteHangedFileInterval=CAP_MS,
        retentiond={
            "initialDelay": 0, "journal": {"dir": str(journal), "roundSummaryInterval": 0},
            "metrics": {"listen": "127.0.0.1:0"}, "controlSocket": str(sockets / "c.sock"),
        },
    )  # fmt: skip
    log = tmp_path / "daemon.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "retentiond", "--log-format", "json", "run",
             "--config", str(config)], stdout=fh, stderr=fh,
        )  # fmt: skip
    try:
        wait_for("60 rounds", lambda: len(journal_records(journal, "round")) >= 60, proc, log)
        rounds = journal_records(journal, "round")
        intents = journal_records(journal, "intent")
        aborts = journal_records(journal, "abort")
        # At most one attempt per backoff step in the time those rounds took (rounds slow
        # down on a loaded machine; the backoff is in time, not in rounds): a handful, never
        # one per round.
        span_ms = sorted(r["time_ms"] for r in rounds)[59] - min(r["time_ms"] for r in intents)
        allowed, waited = 1, 0
        while waited + backoff_ms(allowed, CAP_MS) <= span_ms + 1000:
            waited += backoff_ms(allowed, CAP_MS)
            allowed += 1
        assert 1 <= len(intents) <= allowed, f"{len(intents)} intents in {span_ms} ms: a flood"
        assert len(intents) <= len(rounds) // 10
        assert {r["id"] for r in aborts} == {r["id"] for r in intents}
        assert {r["file"] for r in intents} == {str(first)}
        assert all("Operation not permitted" in r["error"] for r in aborts)
        assert not journal_records(journal, "deletion"), "nothing behind the refused file goes"
        attempts = len(intents)

        # status: the refused file, its error and the next attempt; counters count attempts.
        # A reply is read while the rounds go on: an attempt landing between the reply's
        # counter and its table can put them one apart, so the equality is looked for over
        # a few replies (they agree whenever no attempt is under way).
        for _ in range(20):
            status = run_cli("status", "--json", "--config", str(config), timeout=30)
            assert status.code == 0, status.err
            safety = json.loads(status.out)["safety"]
            (refused,) = safety["unlink_refused"]
            if safety["faults"]["unlink_failed"] == refused["attempts"]:
                break
            time.sleep(0.2)
        assert refused["file"] == str(first) and refused["errno"] == "EPERM"
        assert refused["attempts"] >= attempts
        assert refused["next_attempt_ms"] > refused["last_failure_ms"]
        assert safety["faults"]["unlink_failed"] == refused["attempts"]
        human = run_cli("status", "--config", str(config), timeout=30)
        assert f"refused   {first}: EPERM" in human.out

        # /metrics: the failure counter counts every attempt.
        (listening,) = log_lines(log, "metrics listening")
        with urllib.request.urlopen(listening["url"], timeout=10) as resp:
            text = resp.read().decode()
        failures = [
            line for line in text.splitlines()
            if line.startswith("retentiond_delete_failures_total{")
            and 'cause="unlink_failed"' in line and 'kind="commitlog"' in line
        ]  # fmt: skip
        assert failures and float(failures[0].rsplit(" ", 1)[1]) >= attempts

        # The log says it once per backoff step (once per attempt), not once per round.
        before = len(journal_records(journal, "abort"))
        said = log_lines(log, "unlink refused: the file is kept and retried with backoff")
        after = len(journal_records(journal, "abort"))
        assert before <= len(said) <= after  # an attempt may land between the two reads
        # ... and nothing else says it: no "not deleted" beside it, no "file still not
        # deleted" from the hung-file pass (at start-up or after).
        about = [
            e for e in map(json.loads, filter(None, log.read_text().splitlines()))
            if e.get("file") == str(first)
        ]  # fmt: skip
        assert {e["event"] for e in about} == {said[0]["event"]}, about

        # The fault ends: the file goes on the first round after its backoff has passed.
        # The time that attempt is due must be known before the attribute is cleared (a
        # status read afterwards can come too late on a loaded machine: the file is gone and
        # its due time with it). So wait for an attempt to fail: the next one is a whole
        # backoff step away (8 s here); read it from status and clear at once.
        failed = len(journal_records(journal, "abort"))
        wait_for(
            "another refused attempt",
            lambda: len(journal_records(journal, "abort")) > failed,
            proc, log, timeout=2 * CAP_MS / 1000 + 10,
        )  # fmt: skip
        (refused,) = json.loads(run_cli("status", "--json", "--config", str(config)).out)["safety"][
            "unlink_refused"
        ]
        chattr("-i", first)
        cleared_ms = time.time_ns() // 1_000_000
        due_ms = refused["next_attempt_ms"]
        assert due_ms > cleared_ms, "the status read took longer than a backoff step"
        wait_for(
            "the file to go", lambda: not first.exists(), proc, log, timeout=2 * CAP_MS / 1000 + 10
        )
        aborts = journal_records(journal, "abort")
        assert len(aborts) == refused["attempts"], "an attempt failed after the status read"
        (deletion,) = [r for r in journal_records(journal, "deletion") if r["file"] == str(first)]
        assert deletion["time_ms"] >= due_ms, "attempted before its backoff had passed"
        # ... and in the very first round that planned at or after the due time.
        wait_for(
            "the round after",
            lambda: [r for r in journal_records(journal, "round") if r["time_ms"] >= due_ms][1:],
            proc, log,
        )  # fmt: skip
        later = [r for r in journal_records(journal, "round") if r["time_ms"] >= due_ms]
        assert deletion["time_ms"] < later[1]["time_ms"], "not deleted on the first round due"
        status = json.loads(run_cli("status", "--json", "--config", str(config)).out)
        assert status["safety"]["unlink_refused"] == []
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(sockets, ignore_errors=True)
    assert proc.returncode == 0, log.read_text()[-3000:]
    records = list(read_records(journal))
    outcomes = [r["id"] for r in records if r["type"] in ("deletion", "abort")]
    assert sorted(outcomes) == sorted(r["id"] for r in records if r["type"] == "intent")
    # Oldest first: the CommitLog files gone are a prefix.
    data = [f.path for f in store.data_files]
    gone = [p for p in data if not p.exists()]
    assert gone and gone == data[: len(gone)]


def test_the_plan_keeps_a_refused_file_and_everything_behind_it(
    immutable_dir: Path, first_immutable: Callable[[GeneratedStore], Path]
) -> None:
    store = generate_store(immutable_dir / "store", SPEC)
    first = first_immutable(store)
    journal = immutable_dir / "journal"
    config = write_config(
        store.root, SPEC, immutable_dir / "broker.yaml",
        deleteWhen=ALL_HOURS, fileReservedTime=72, deleteCommitLogFilesInterval=0,
        deleteConsumeQueueFilesInterval=0, redeleteHangedFileInterval=60_000,
        retentiond={"journal": {"dir": str(journal), "roundSummaryInterval": 0}},
    )  # fmt: skip
    settings = load_settings(config)
    # The clock stands still: every round below is inside the first backoff step, however
    # slowly a loaded machine runs them.
    now = time.time_ns() // 1_000_000
    cleaner = Cleaner(
        kind_for(settings), journal=Journal(journal, Origin("c", "b", "h", "/s")),
        clock_ms=lambda: now,
    )  # fmt: skip

    result = cleaner.run_round()
    assert [o.cause for o in result.outcomes] == ["unlink_failed"]
    assert cleaner.faults.unlink_failed == 1

    plan = cleaner.plan()
    by_path = {d.path: d for d in plan.decisions()}
    d0 = by_path[str(first)]
    assert d0.verdict is Verdict.KEEP and d0.reason is Reason.UNLINK_REFUSED
    assert "EPERM" in (d0.detail or "") and "next attempt at" in (d0.detail or "")
    behind = [by_path[str(f.path)] for f in store.data_files[1:]]
    assert not any(d.delete for d in behind), "a deletion past the refused file"
    assert plan.as_dict()["commitlog"]["files"][0]["reason"] == "unlink_refused"
    doc = cleaner.safety_status()["unlink_refused"]
    assert [r["file"] for r in doc] == [str(first)]  # type: ignore[index]

    # Rounds inside the backoff write nothing for it.
    before = len(list(read_records(journal)))
    for _ in range(10):
        cleaner.run_round()
    assert [r["type"] for r in list(read_records(journal))[before:]] == ["round"] * 10
    assert cleaner.faults.unlink_failed == 1

    # Another file under the same name (a new identity: the kernel may reuse the inode
    # number, so it is a second older too) is attempted at once, backoff or not.
    chattr("-i", first)
    old, data = first.stat(), first.read_bytes()
    first.unlink()
    first.write_bytes(data)
    os.utime(first, ns=(old.st_atime_ns, old.st_mtime_ns - 1_000_000_000))
    result = cleaner.run_round()
    assert str(first) in {o.decision.path for o in result.deleted}
    assert cleaner.safety_status()["unlink_refused"] == []
