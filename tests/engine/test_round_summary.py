"""Idle rounds folded into ``round_summary`` records (``journal/rollup.py``), on a real store,
the real RocketMQ kind and the real journal, with a clock the test moves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retentiond.journal.writer import Journal
from tests.conftest import ORIGIN, expired_spec, make_store, records

DAY_MS = 86_400_000
START = 1_709_596_800_000 - 7 * 60_000  # 2024-03-04T23:53:00Z: the day ends 7 minutes in
STEP = 10_000  # cleanResourceInterval


def _run(tmp: Path, rounds: int, **journal_keys: Any) -> tuple[list[dict[str, Any]], int]:
    """``rounds`` rounds 10 s apart on a store with nothing to delete; the records written,
    after the shutdown flush, and the number of rounds."""
    spec = expired_spec(4, oldest_age_hours=2.0, newest_age_hours=0.0, now_ms=START)
    store = make_store(
        tmp,
        spec,
        cleanResourceInterval=STEP,
        retentiond={"journal": {"dir": str(tmp / "journal"), **journal_keys}},
    )
    clock = {"now": START}
    journal = Journal(store.journal, ORIGIN, clock_ms=lambda: clock["now"])
    proc = tmp / "proc"
    proc.mkdir()
    (proc / "locks").write_text("")
    cleaner = store.cleaner(journal, clock_ms=lambda: clock["now"], proc_root=str(proc))
    for i in range(rounds):
        clock["now"] = START + i * STEP
        cleaner.run_round()
    assert cleaner.flush_journal()
    journal.close()
    return records(store.journal, "round", "round_summary"), rounds


def test_idle_rounds_become_summaries_that_account_for_every_round(tmp_path: Path) -> None:
    written, ran = _run(tmp_path, 90)  # 15 minutes, across midnight UTC
    full = [r for r in written if r["type"] == "round"]
    summaries = [r for r in written if r["type"] == "round_summary"]
    assert len(full) == 1, "only the first round, the reference, is written in full"
    assert sum(s["rounds"] for s in summaries) + len(full) == ran
    assert len(written) <= 6
    for s in summaries:
        assert s["time_ms"] // DAY_MS == s["last_time_ms"] // DAY_MS, "never spans a UTC day"
        assert s["last_time_ms"] - s["time_ms"] < 300_000, "at most the interval (5 min)"
        assert s["ratio"]["n"] == s["rounds"]
        assert s["ratio"]["min"] <= s["ratio"]["last"] <= s["ratio"]["max"]
        # the gaps between its own rounds, each 10 s, all in one state
        assert s["state_ms"] == {s["disk_state"]: (s["rounds"] - 1) * STEP}
        assert s["stuck_rounds"] == 0 and s["interval_ms"] == STEP
        assert s["config_hash"] == full[0]["config_hash"]
        assert s["thresholds"] == full[0]["thresholds"]
    assert {s["time_ms"] // DAY_MS for s in summaries} == {
        START // DAY_MS,
        START // DAY_MS + 1,
    }
    times = [r["time_ms"] for r in written]
    assert times == sorted(times)
    assert summaries[-1]["last_time_ms"] == START + (ran - 1) * STEP, "flushed at shutdown"


def test_interval_zero_writes_every_round(tmp_path: Path) -> None:
    written, ran = _run(tmp_path, 5, roundSummaryInterval=0)
    assert [r["type"] for r in written] == ["round"] * ran


def test_a_round_that_deletes_closes_the_summary_first(tmp_path: Path) -> None:
    """Idle rounds, then files expire: the summary is written before the deleting round's
    record (after its deletions, which the executor journals as they happen)."""
    spec = expired_spec(4, oldest_age_hours=60.0, newest_age_hours=0.0, now_ms=START)
    store = make_store(
        tmp_path,
        spec,
        cleanResourceInterval=STEP,
        retentiond={"journal": {"dir": str(tmp_path / "journal")}},  # the default interval
    )
    clock = {"now": START}
    journal = Journal(store.journal, ORIGIN, clock_ms=lambda: clock["now"])
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "locks").write_text("")
    cleaner = store.cleaner(
        journal, clock_ms=lambda: clock["now"], proc_root=str(tmp_path / "proc")
    )
    for now in (START, START + STEP, START + 2 * STEP, START + 30 * 3_600_000):
        clock["now"] = now  # the last round: the oldest file is past its 72 h
        cleaner.run_round()
    cleaner.flush_journal()
    journal.close()
    types = [r["type"] for r in records(store.journal, "round", "round_summary", "deletion")]
    first_deletion = types.index("deletion")
    assert types[:first_deletion] == ["round"]
    assert types[first_deletion:] == ["deletion"] * (len(types) - 3) + ["round_summary", "round"]
    (summary,) = records(store.journal, "round_summary")
    assert summary["rounds"] == 2 and summary["last_time_ms"] == START + 2 * STEP
