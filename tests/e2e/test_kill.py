"""SIGKILL at random moments during deletion batches, many times over, against one store.

Each iteration starts `retentiond once` (now and then the daemon, `retentiond run`), waits
until it is deleting (a new ``intent`` in the journal) or, every fifth time, for a random time,
kills it with SIGKILL after a further random delay, and checks, from outside the process:

* the journal parses (a torn last line is skipped and counted, never fatal);
* no file that had to be kept is gone — judged against the generator's summary of what it
  wrote and the policy rules (CommitLog: expired, oldest first, never the newest data file;
  ConsumeQueue and index: wholly below the CommitLog minimum, oldest first, never the last);
* no file has two deletion records, and every deletion record names a file that is gone;
* after each restart (the next process reconciles before its round): every intent written
  before the newest ``round`` record has exactly one outcome.

A last, uninterrupted run then leaves the strongest state: every file missing from the store
has exactly one deletion record and every intent exactly one outcome; and every intent a kill
left without its outcome (read from the journal after that kill, not assumed) got it from a
reconciliation (``reconciled: true``). Where each kill lands is up to the scheduler, so the
test asserts nothing about how many kills land inside a batch or leave an intent open, only
what must hold wherever they land.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from retentiond.journal.writer import ReadStats, list_segments, read_records
from retentiond.storegen.rocketmq import GeneratedStore, StoreSpec
from tests.conftest import make_store
from tests.helpers.daemons import RETENTIOND

pytestmark = pytest.mark.slow

KILLS = int(os.environ.get("RETENTIOND_KILLS", "55"))
HOUR_MS = 3_600_000
RESERVED_HOURS = 10
# 600 CommitLog files of 4 KiB (three 1 KiB messages each) aged 200 h .. 0 h: about 570 are
# older than fileReservedTime=10 h, enough for every kill to land inside a deletion batch.
SPEC = StoreSpec(
    commitlog_file_size=4096,
    cq_file_size=6 * 20,
    max_hash_slot_num=16,
    max_index_num=24,
    messages=600 * 3 - 1,
    message_size=1024,
    topics=2,
    queues_per_topic=2,
    oldest_age_hours=200.0,
    newest_age_hours=0.0,
)


class Store:
    """The generator's summary, and the policy rules judged against it."""

    def __init__(self, store: GeneratedStore) -> None:
        self.store = store
        self.data = [f for f in store.commitlog_files if not f.preallocated]
        self.protected = {str(self.data[-1].path)} | {
            str(f.path) for f in store.commitlog_files if f.preallocated
        }

    def cl_min(self) -> int:
        """Start offset of the first CommitLog file still on disk."""
        for f in self.store.commitlog_files:
            if f.path.exists():
                return f.start_offset
        raise AssertionError("the whole CommitLog is gone")

    def missing(self) -> set[str]:
        paths = [f.path for f in self.store.commitlog_files]
        paths += [f.path for f in self.store.iter_cq_files()]
        paths += [f.path for f in self.store.index_files]
        return {str(p) for p in paths if not p.exists()}

    def check_nothing_wrongly_gone(self, now_ms: int) -> None:
        gone_cl = [not f.path.exists() for f in self.store.commitlog_files]
        first_kept = gone_cl.index(False)
        assert not any(gone_cl[first_kept:]), "a CommitLog file was deleted in the middle"
        for f in self.store.commitlog_files[:first_kept]:
            assert str(f.path) not in self.protected, f"newest data file deleted: {f.path}"
            assert f.mtime_ms + RESERVED_HOURS * HOUR_MS <= now_ms, f"not expired: {f.path}"
        minimum = self.cl_min()
        for files in self.store.queues.values():
            gone = [not f.path.exists() for f in files]
            assert not gone[-1], f"the last file of a queue was deleted: {files[-1].path}"
            kept = gone.index(False)
            assert not any(gone[kept:]), "a ConsumeQueue file was deleted in the middle"
            for f in files[:kept]:
                assert f.last_commitlog_offset < minimum, f"live ConsumeQueue file gone: {f.path}"
        index = self.store.index_files
        gone = [not f.path.exists() for f in index]
        assert not gone[-1]
        kept = gone.index(False)
        assert not any(gone[kept:])
        for f in index[:kept]:
            assert f.header.end_phy_offset < minimum, f"live index file gone: {f.path}"


def journal_state(journal: Path) -> tuple[list[dict], ReadStats]:
    stats = ReadStats()
    records = list(read_records(journal, stats)) if journal.exists() else []
    return records, stats


def check_restart(records: list[dict], before: int) -> None:
    """The process that just ran reached its round, so it reconciled first: every intent
    written before it started has exactly one outcome by now."""
    outcomes = Counter(r["id"] for r in records if r["type"] in ("deletion", "abort"))
    for r in records[:before]:
        if r["type"] == "intent":
            assert outcomes[r["id"]] == 1, f"not reconciled after a restart: {r}"


def open_intents(records: list[dict]) -> set[str]:
    """Ids of intents without an outcome (yet): a kill landed between the two."""
    done = {r["id"] for r in records if r["type"] in ("deletion", "abort")}
    return {r["id"] for r in records if r["type"] == "intent" and r["id"] not in done}


def check_journal(records: list[dict], missing: set[str], *, final: bool) -> None:
    deletions = Counter(r["file"] for r in records if r["type"] == "deletion")
    twice = [f for f, n in deletions.items() if n > 1]
    assert not twice, f"deleted twice according to the journal: {twice}"
    assert set(deletions) <= missing, "a deletion record names a file that is still there"
    outcomes = Counter(r["id"] for r in records if r["type"] in ("deletion", "abort"))
    assert all(n == 1 for n in outcomes.values()), "an intent with two outcomes"
    last_round = max((i for i, r in enumerate(records) if r["type"] == "round"), default=-1)
    cutoff = len(records) if final else last_round
    for r in records[:cutoff]:
        if r["type"] == "intent":
            assert outcomes[r["id"]] == 1, f"intent without an outcome after a restart: {r}"
    if final:
        assert set(deletions) == missing, "a file is gone without its deletion record"


def _journal_size(journal: Path) -> int:
    if not journal.exists():
        return 0
    return sum(p.stat().st_size for _, p in list_segments(journal))


def _intents(journal: Path, after: int) -> bool:
    """A new intent since byte ``after`` of the newest segment(s)."""
    if not journal.exists():
        return False
    total = 0
    for _, path in list_segments(journal):
        size = path.stat().st_size
        if total + size > after:
            with open(path, "rb") as fh:
                fh.seek(max(0, after - total))
                if b'"type":"intent"' in fh.read():
                    return True
        total += size
    return False


def test_sigkill_during_deletion_batches(tmp_path: Path, short_dir: Path) -> None:
    rng = random.Random(int(os.environ.get("RETENTIOND_KILL_SEED", time.time_ns() % 10**6)))
    made = make_store(
        tmp_path, SPEC, fileReservedTime=RESERVED_HOURS,
        deleteFileBatchMax=8, deleteCommitLogFilesInterval=30,
        deleteConsumeQueueFilesInterval=10, cleanResourceInterval=150,
        retentiond={"initialDelay": 0, "controlSocket": str(short_dir / "control.sock")},
    )  # fmt: skip
    gen, journal, config = Store(made.generated), made.journal, made.config
    log = open(tmp_path / "runs.log", "ab")  # noqa: SIM115 - kept across iterations
    kills = during_batch = restarts_checked = 0
    before = 0  # records in the journal when the current process started
    left_open: set[str] = set()  # intents some kill left without an outcome
    try:
        while kills < KILLS:
            daemon = kills % 10 == 9
            args = ["run"] if daemon else ["once"]
            mark = _journal_size(journal)
            proc = subprocess.Popen([*RETENTIOND, *args, "--config", str(config)], stdout=log,
                                    stderr=log)  # fmt: skip
            reached = False
            if kills % 5 == 2:  # anywhere: start-up, reconciliation, scan, deletions
                time.sleep(rng.uniform(0.0, 1.2))
            else:  # inside a deletion batch: after the run's first intent
                # (a bound for a hung process only; start-up on a loaded machine is slow)
                deadline = time.monotonic() + 120
                while not _intents(journal, mark) and proc.poll() is None:
                    assert time.monotonic() < deadline, "no deletion started in 120 s"
                    time.sleep(0.003)
                reached = proc.poll() is None
                during_batch += reached
                time.sleep(rng.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            records, stats = journal_state(journal)
            assert stats.torn <= kills
            gen.check_nothing_wrongly_gone(int(time.time() * 1000))
            check_journal(records, gen.missing(), final=False)
            if reached:
                check_restart(records, before)
                restarts_checked += 1
            left_open |= open_intents(records)
            before = len(records)
        # How many kills found a batch running depends on the scheduler: none of them is
        # guaranteed, so only the count of checks is (one per kill that did).
        assert restarts_checked == during_batch

        # One run to the end: it reconciles the last kill's orphans, then a normal round.
        done = subprocess.run([*RETENTIOND, "once", "--config", str(config)],
                              stdout=log, stderr=log, timeout=60)  # fmt: skip
        assert done.returncode in (0, 5)
        records, stats = journal_state(journal)
        gen.check_nothing_wrongly_gone(int(time.time() * 1000))
        check_journal(records, gen.missing(), final=True)
        # Reconciling was needed exactly where a kill left an intent open: each such intent
        # got its one outcome from a later process's reconciliation.
        outcome = {r["id"]: r for r in records if r["type"] in ("deletion", "abort")}
        not_reconciled = [i for i in left_open if not outcome[i].get("reconciled")]
        assert not not_reconciled, f"open intents closed without reconciling: {not_reconciled}"
        assert gen.missing(), "nothing was deleted, not even by the uninterrupted run"
        print(f"{kills} kills, {during_batch} inside a batch, {len(left_open)} intents left open")
    finally:
        log.close()
