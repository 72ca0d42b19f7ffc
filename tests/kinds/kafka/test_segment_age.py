"""A segment's age is counted from the figure Kafka's retention judged it by: its largest
timestamp (spec §2.3: the batches' largest, else the ``.log``'s mtime), not the file's mtime.
``plan --json`` and the journal's deletion records say the same age of the same segment; a
segment deleted by size, whose timestamps no pass had to read, keeps the mtime's age in both.

The ``.log`` files are written by kafka-python's record-batch builder (``kafkalog.py``) and
touched an hour ago, as a copy or a restore leaves them, while their records are ten days old;
``plan`` and ``once`` run through the real command line (the clock is the real one)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.conftest import records, run_cli
from tests.kinds.kafka.kafkalog import KafkaLog, R

DAY = 86_400_000
HOUR = 3_600_000
RETENTION_MS = 7 * DAY


def _log_dir(tmp_path: Path, now: int) -> tuple[Path, dict[str, int], int]:
    """``orders``: four segments of ten-day-old records and an active one of a minute ago;
    ``sized``: five segments of a minute ago, two of them over its retention.bytes. Every
    ``.log`` touched an hour ago. Returns the config, the largest timestamp of each of
    ``orders``' segments by path, and that mtime."""
    log_dir = tmp_path / "kafka-logs"
    touched = now - HOUR
    largest: dict[str, int] = {}
    orders = KafkaLog(log_dir, "orders", 0, segment_bytes=5 * R)
    for i in range(25):
        orders.append_records(1, now - 10 * DAY + i * 1000 if i < 20 else now - 60_000 + i)
    for seg in orders.segments:
        largest[str(orders.dir / f"{seg.base:020d}.log")] = seg.max_ts
    orders.write(hw=orders.leo, mtime_ms=touched)
    sized = KafkaLog(log_dir, "sized", 0, segment_bytes=5 * R)
    for i in range(25):
        sized.append_records(1, now - 60_000 + i)
    sized.write(hw=sized.leo, mtime_ms=touched)
    (log_dir / "meta.properties").write_text("version=1\nnode.id=3\ncluster.id=age-test\n")
    overrides = tmp_path / "topics.yaml"
    overrides.write_text(
        f"orders: {{retention.ms: {RETENTION_MS}}}\nsized: {{retention.bytes: {15 * R}}}\n"
    )
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=broker\nnode.id=3\n"
        f"log.dirs={log_dir}\nlog.retention.hours=168\n"
        f"retentiond.kafka.topicOverrides={overrides}\n"
        f"retentiond.journal.dir={tmp_path / 'journal'}\n"
    )
    return config, largest, touched


def _rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["path"]: s for ld in doc["log_dirs"] for p in ld["partitions"] for s in p["segments"]}


def test_age_counts_from_the_largest_timestamp_in_the_plan_and_the_journal(
    tmp_path: Path,
) -> None:
    now = int(time.time() * 1000)
    config, largest, touched = _log_dir(tmp_path, now)
    plan = run_cli("plan", "--json", "--config", str(config))
    assert plan.code == 0, plan.err
    doc = json.loads(plan.out)
    rows = _rows(doc)

    by_time = [r for r in rows.values() if r["reason"] == "retention_ms_breach"]
    assert len(by_time) == 4 and all(r["verdict"] == "delete" for r in by_time)
    for path, ts in largest.items():
        row = rows[path]
        assert row["mtime_ms"] == touched
        assert row["age_ms"] == doc["now_ms"] - ts  # not now - mtime: an hour
        assert row["expires_ms"] == ts + RETENTION_MS + 1
    assert all(r["age_ms"] > RETENTION_MS for r in by_time)
    by_size = [r for r in rows.values() if r["reason"] == "retention_bytes_breach"]
    assert len(by_size) == 2
    assert all(r["age_ms"] == doc["now_ms"] - touched for r in by_size)  # never read

    once = run_cli("once", "--config", str(config))
    assert once.code == 0, once.err
    deletions = records(tmp_path / "journal", "deletion")
    assert {r["file"] for r in deletions} == {r["path"] for r in by_time + by_size}
    for r in deletions:
        assert r["mtime_ms"] == touched
        if r["reason"] == "retention_ms_breach":
            assert r["age_ms"] == r["time_ms"] - largest[r["file"]]
            assert r["age_ms"] != r["time_ms"] - r["mtime_ms"]
        # the plan's age of the same segment, counted from the same instant
        assert r["age_ms"] - (r["time_ms"] - doc["now_ms"]) == rows[r["file"]]["age_ms"]
