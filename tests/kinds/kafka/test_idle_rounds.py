"""Idle Kafka rounds fold into ``round_summary`` records like RocketMQ's (``journal/rollup.py``
through ``Kafka.idle_view``): real rounds of the engine on a generated log dir, with the
clock moved forward, journaled to a real journal."""

from __future__ import annotations

from pathlib import Path

from retentiond.engine.cleaner import Cleaner
from retentiond.journal.writer import Journal
from retentiond.kinds import kind_for, load_settings
from retentiond.storegen.kafka import KafkaStoreSpec, generate_kafka_store, write_server_properties
from tests.conftest import ORIGIN, records


def test_idle_kafka_rounds_fold_into_a_summary(tmp_path: Path) -> None:
    spec = KafkaStoreSpec(topics={"orders": 2}, records_per_partition=300)
    store = generate_kafka_store(tmp_path / "logs", spec)
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
    rounds = records(tmp_path / "journal", "round")
    summaries = records(tmp_path / "journal", "round_summary")
    # the deleting round and the first idle one (its verdicts differ) in full; four folded
    assert len(rounds) == 2 and len(summaries) == 1
    [s] = summaries
    assert s["rounds"] == 4 and s["disk_state"] == "offline" and s["stuck_rounds"] == 0
    assert s["interval_ms"] == 10_000 and s["plan_only_log_dirs"] == []
    assert s["reasons"] == rounds[1]["reasons"] and s["max"] == {"broker_running_kept": 0}
    assert s["state_ms"] == {"offline": 30_000}
