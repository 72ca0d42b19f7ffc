"""The text plan: per partition the segments the passes hand over and the first one kept,
with what stopped the prefix, then how many are kept behind it; ``plan --all`` lists every
segment with its own reason. The compact form is what makes a plan over 10,000 partitions
cheap; these tests pin what it still shows. Real log dirs (``KafkaLog``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from retentiond.kinds.kafka.config import load_server_properties
from retentiond.kinds.kafka.kind import Kafka
from retentiond.kinds.kafka.plan import KafkaPlan, LogDirPlan
from retentiond.kinds.kafka.policy import PartitionPlan, TopicConfig
from retentiond.reasons import Reason, Verdict
from tests.kinds.kafka.kafkalog import KafkaLog, R, plan_one_partition, segment_bases

NOW = 1_700_000_000_000
OLD = NOW - 100_000
CFG = TopicConfig(retention_ms=10_000)


def rows(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines()]


def render(log_dir: Path, plans: list[PartitionPlan], *, every: bool = False) -> str:
    (log_dir / "server.properties").write_text(f"node.id=1\nlog.dirs={log_dir}\n")
    kind = Kafka(
        SimpleNamespace(config_hash="h"), load_server_properties(str(log_dir / "server.properties"))
    )  # type: ignore[arg-type]
    plan = KafkaPlan(NOW, "h", (LogDirPlan(str(log_dir), True, tuple(plans)),), None)
    return kind.render_plan(plan, all_queue_files=every)


def planned(log: KafkaLog, config: TopicConfig | None = CFG) -> PartitionPlan:
    return plan_one_partition(log.log_dir, config, NOW)


def six_segments(tmp_path: Path, recent_ts: int = NOW - 1000) -> KafkaLog:
    log = KafkaLog(tmp_path, segment_bytes=5 * R)
    log.append_records(15, OLD)
    log.append_records(15, recent_ts)
    log.write(hw=30)
    assert segment_bases(log.dir) == [0, 5, 10, 15, 20, 25]
    return log


def test_deletions_and_the_first_kept_are_listed_the_rest_counted(tmp_path: Path) -> None:
    log = six_segments(tmp_path)
    p = planned(log)
    assert p.prefix == 3 and p.behind == 2 and p.stop is p.head[3]
    assert p.head == p.decisions[:4]  # the head is the start of the full list
    text = rows(render(log.log_dir, [p]))
    assert text[1] == "test-0: LSO 0 HW 30 LEO 30 -> LSO 15"
    assert [r.split()[:3] for r in text[2:6]] == [
        ["0", "delete", "retention_ms_breach"],
        ["5", "delete", "retention_ms_breach"],
        ["10", "delete", "retention_ms_breach"],
        ["15", "keep", "within_retention"],
    ]
    assert text[6] == "... 2 more kept behind 15 (within_retention)"
    assert len(text) == 7


def test_all_lists_every_segment_with_its_reason(tmp_path: Path) -> None:
    log = six_segments(tmp_path)
    p = planned(log)
    text = rows(render(log.log_dir, [p], every=True))
    assert [r.split()[:3] for r in text[2:]] == [
        [str(d.start_offset), d.verdict.value, d.reason.value] for d in p.decisions
    ]
    assert [d.reason for d in p.decisions[4:]] == [
        Reason.AFTER_FIRST_KEPT,
        Reason.WITHIN_RETENTION,
    ]


def test_a_future_timestamp_that_pins_the_partition_is_named(tmp_path: Path) -> None:
    """The first kept segment says its largest timestamp is in the future; the segments it
    pins are counted behind it (``--all`` names it in each of their reasons)."""
    log = six_segments(tmp_path, recent_ts=NOW + 3_600_000)
    p = planned(log)
    text = rows(render(log.log_dir, [p]))
    assert text[5].startswith("15 keep   future_timestamp (largest timestamp")
    assert text[6] == "... 2 more kept behind 15 (future_timestamp)"
    first = p.decisions[3].path
    assert all(first in (d.detail or "") for d in p.decisions[4:5])


def test_a_partition_left_alone_says_why_once(tmp_path: Path) -> None:
    """Unknown topic config: every segment kept for that one reason, said on the first and
    counted for the rest."""
    log = six_segments(tmp_path)
    p = planned(log, None)
    text = rows(render(log.log_dir, [p]))
    assert text[2] == "0 keep   unknown_topic_config (no effective config for test)"
    assert text[3] == "... 5 more kept (unknown_topic_config)"
    assert {(d.verdict, d.reason) for d in p.decisions} == {
        (Verdict.KEEP, Reason.UNKNOWN_TOPIC_CONFIG)
    }
    assert len(p.decisions) == 6


def test_streamed_document_is_the_json_document(tmp_path: Path) -> None:
    """``plan --json`` streams the Kafka plan (``as_document`` through ``jsonstream``): the
    text is byte for byte ``json.dumps(as_dict(), indent=2)``, every segment listed."""
    import io
    import json

    from retentiond.text import jsonstream

    log = six_segments(tmp_path / "a")
    other = six_segments(tmp_path / "b", recent_ts=NOW + 3_600_000)
    plans = [planned(log), planned(log, None), planned(other)]
    for locked in (True, False):
        plan = KafkaPlan(NOW, "h", (LogDirPlan(str(tmp_path), locked, tuple(plans)),), None)
        for every in (True, False):
            out = io.StringIO()
            jsonstream.dump(plan.as_document(all_queue_files=every), out)
            assert out.getvalue() == json.dumps(plan.as_dict(all_queue_files=every), indent=2)
    plan = KafkaPlan(NOW, "h", (LogDirPlan(str(tmp_path), True, tuple(plans)),), None)
    doc = plan.as_dict()
    assert [len(p["segments"]) for p in doc["log_dirs"][0]["partitions"]] == [6, 6, 6]  # type: ignore[index]
