"""``once --json`` writes the plan with ``all_queue_files=False``: only the partitions the
round hands segments over in. In a plan-only dir (the broker holds ``.lock``) those segments
are kept as ``broker_running``, and the issue asks that the plan show each one: the partition
must still be listed, with them. Real log dirs (``KafkaLog``)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from retentiond.kinds.kafka.plan import KafkaPlan, LogDirPlan
from retentiond.kinds.kafka.policy import TopicConfig, plan_partition
from retentiond.kinds.kafka.scan import scan_log_dir
from retentiond.text import jsonstream
from tests.kinds.kafka.kafkalog import KafkaLog, R

NOW = 1_700_000_000_000


def test_plan_only_partitions_are_in_the_round_document(tmp_path: Path) -> None:
    log = KafkaLog(tmp_path, segment_bytes=5 * R)
    log.append_records(15, NOW - 100_000)
    log.append_records(5, NOW)
    log.write(hw=20)
    quiet = KafkaLog(tmp_path, "quiet", 0, segment_bytes=5 * R)
    quiet.append_records(10, NOW)
    quiet.write(hw=10)
    snap = scan_log_dir(str(tmp_path))
    plans = tuple(
        plan_partition(
            p,
            TopicConfig(retention_ms=10_000),
            now_ms=NOW,
            high_watermarks=snap.high_watermarks,
            log_start_offsets=snap.log_start_offsets,
            broker_running=True,
        )
        for p in snap.partitions
    )
    plan = KafkaPlan(NOW, "h", (LogDirPlan(str(tmp_path), False, plans),), None)
    doc = plan.as_dict(all_queue_files=False)
    (ld,) = doc["log_dirs"]  # type: ignore[misc]
    assert ld["plan_only"] is True
    assert [p["topic"] for p in ld["partitions"]] == ["test"]  # not the quiet one
    (part,) = ld["partitions"]
    would = [s for s in part["segments"] if s["reason"] == "broker_running"]
    assert [s["start_offset"] for s in would] == [0, 5, 10]
    out = io.StringIO()
    jsonstream.dump(plan.as_document(all_queue_files=False), out)
    assert out.getvalue() == json.dumps(doc, indent=2)
