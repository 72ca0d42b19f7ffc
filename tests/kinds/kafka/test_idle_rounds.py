"""Idle Kafka rounds fold into ``round_summary`` records like RocketMQ's (``journal/rollup.py``
through ``Kafka.idle_view``): real rounds of the engine on a generated log dir on a real tmpfs
(its disk moves only with what the test writes), with the clock moved forward, journaled to a
real journal. Every round carries each log dir's disk figures, as RocketMQ's carries its
paths', and a summary their ratios and disk state against ``diskWarningRatio``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from retentiond.engine.cleaner import Cleaner
from retentiond.engine.disk import measure_path
from retentiond.journal.writer import Journal
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.kafka.kind import disk_state
from retentiond.storegen.kafka import KafkaStoreSpec, generate_kafka_store, write_server_properties
from tests.conftest import ORIGIN, Tmpfs, records


def _rounds(tmp_path: Path, tmpfs: Tmpfs, fill: float | None) -> tuple[list[Any], list[Any]]:
    """One deleting round, then five idle ones 10 s apart, the disk filled to ``fill`` (of
    the tmpfs) before the first; the journal's rounds and summaries."""
    spec = KafkaStoreSpec(topics={"orders": 2}, records_per_partition=300)
    store = generate_kafka_store(tmpfs.path / "logs", spec)
    if fill is not None:
        tmpfs.fill_to(fill)
    config = write_server_properties(
        tmp_path / "server.properties",
        [store.log_dir],
        log_retention_check_interval_ms="10000",
        retentiond_journal_roundSummaryInterval="3600000",
    )
    settings = load_settings(config)
    clock = [spec.now_ms + 30 * 86_400_000]
    journal = Journal(tmp_path / "journal", ORIGIN)
    cleaner = Cleaner(kind_for(settings), journal=journal, clock_ms=lambda: clock[0])
    try:
        first = cleaner.run_round()
        assert first.counts()["kafka_segment"]["files"] > 0  # everything but the tails
        for _ in range(5):
            clock[0] += 10_000
            assert cleaner.run_round().counts()["kafka_segment"]["files"] == 0
        assert cleaner.flush_journal()
    finally:
        journal.close()
    return records(tmp_path / "journal", "round"), records(tmp_path / "journal", "round_summary")


def test_idle_kafka_rounds_fold_into_a_summary(tmp_path: Path, tmpfs: Tmpfs) -> None:
    rounds, summaries = _rounds(tmp_path, tmpfs, None)
    # the deleting round and the first idle one (its verdicts differ) in full; four folded
    assert len(rounds) == 2 and len(summaries) == 1
    [s] = summaries
    assert s["rounds"] == 4 and s["disk_state"] == "ok" and s["stuck_rounds"] == 0
    assert s["interval_ms"] == 10_000 and s["plan_only_log_dirs"] == []
    assert s["reasons"] == rounds[1]["reasons"] and s["max"] == {"broker_running_kept": 0}
    assert s["state_ms"] == {"ok": 30_000}
    assert s["thresholds"] == {"warning_level_ratio": 0.9}
    # nothing was written between the idle rounds: each measured what the last full one did
    ratio = rounds[1]["disk"][0]["ratio"]
    assert s["ratio"] == {"min": ratio, "max": ratio, "sum": round(4 * ratio, 6), "n": 4,
                          "last": ratio}  # fmt: skip


def test_kafka_rounds_carry_each_log_dirs_disk(tmp_path: Path, tmpfs: Tmpfs) -> None:
    """Filled to 0.95, above diskWarningRatio's default 0.90: every round names the log dir's
    filesystem as RocketMQ's names its paths (``disk[]``, ``thresholds.warning_level_ratio``),
    measured before the round deleted anything, and the folded rounds' time counts at the
    warning level."""
    rounds, summaries = _rounds(tmp_path, tmpfs, 0.95)
    log_dir = str(tmpfs.path / "logs")
    now = measure_path(log_dir)
    for r in rounds:
        assert r["thresholds"] == {"warning_level_ratio": 0.9}
        [disk] = r["disk"]
        assert disk["role"] == "log_dir" and disk["path"] == log_dir and disk["error"] is None
        assert disk["total_bytes"] == now.total_bytes == 64 << 20
        assert disk["used_bytes"] + disk["avail_bytes"] == disk["total_bytes"]
        assert disk["ratio"] is not None and 0.95 <= disk["ratio"] <= 0.97
    # the first round measured before its deletions: the segments it deleted were still there
    assert rounds[0]["disk"][0]["used_bytes"] > now.used_bytes
    assert rounds[1]["disk"][0]["used_bytes"] == now.used_bytes
    [s] = summaries
    assert s["disk_state"] == "warning_level" and s["state_ms"] == {"warning_level": 30_000}
    assert s["ratio"]["last"] == s["ratio"]["max"] == rounds[1]["disk"][0]["ratio"]


@pytest.mark.parametrize(
    ("ratios", "state"),
    [([0.5, 0.91], "warning_level"), ([0.9, 0.2], "ok"), ([None, 0.95], "warning_level"),
     ([None, 0.5], None)],
)  # fmt: skip
def test_the_disk_state_of_several_log_dirs(ratios: list[float | None], state: str | None) -> None:
    """Strictly above the ratio, as the daemon's disk metrics and the fleet job judge it; a
    dir that cannot be measured is never called ok."""
    assert disk_state(ratios, 0.9) == state
