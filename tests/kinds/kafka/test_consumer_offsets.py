"""Kafka consumer progress from ``__consumer_offsets`` partitions and what a deletion loses.

The batches are built by kafka-python's record-batch builder (an encoder we did not write);
the coordinator's keys and values inside them are packed here from ``consumers.md`` §B.1.4,
and control batches are the builder's output with the control bit set and the CRC redone, as
the transaction coordinator's markers are. The replay must give exactly §B.2's answer: last
write by record offset wins, tombstones remove, transactional commits wait for COMMIT and
vanish on ABORT, unknown record types are skipped.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

from kafka.record._crc32c import crc as crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from retentiond.engine.loss import OTHER_GROUPS, Progress, top_risks
from retentiond.kinds.kafka.offsets import partition_for, read_progress
from tests.conftest import Daemon, records, run_cli, spawn_run
from tests.e2e.test_kafka_daemon import metric_lines, status
from tests.kinds.kafka.kafkalog import KafkaLog

DAY = 86_400_000


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def commit_key(group: str, topic: str, partition: int, key_type: int = 1) -> bytes:
    return struct.pack(">h", key_type) + _s(group) + _s(topic) + struct.pack(">i", partition)


def commit_v3(offset: int, ts: int = 1_700_000_000_000) -> bytes:
    return struct.pack(">hqi", 3, offset, -1) + _s("") + struct.pack(">q", ts)


def commit_v1(offset: int, ts: int = 1_700_000_000_000) -> bytes:
    return struct.pack(">hq", 1, offset) + _s("") + struct.pack(">qq", ts, ts + DAY)


def batch(
    base: int,
    recs: list[tuple[bytes, bytes | None]],
    *,
    pid: int = -1,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    now = int(time.time() * 1000)
    for i, (key, value) in enumerate(recs):
        b.append(i, timestamp=now, key=key, value=value, headers=[])
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, base)
    if control:  # the transaction coordinator's marker: the control bit, then the CRC again
        (attrs,) = struct.unpack_from(">h", data, 21)
        struct.pack_into(">h", data, 21, attrs | 0x20)
        struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def marker(base: int, pid: int, commit: bool) -> bytes:
    key = struct.pack(">hh", 0, 1 if commit else 0)
    return batch(base, [(key, struct.pack(">hi", 0, 0))], pid=pid, transactional=True, control=True)


def write_offsets(log_dir: Path, partition: int = 0) -> KafkaLog:
    """Commits, an overwrite, a tombstone, skipped types and three transactions."""
    log = KafkaLog(log_dir, "__consumer_offsets", partition, segment_bytes=400)
    batches = [
        batch(0, [(commit_key("G1", "orders", 0), commit_v3(5))]),
        batch(1, [(commit_key("G2", "orders", 0), commit_v3(3))]),
        batch(2, [(struct.pack(">h", 2) + _s("G1"), b"\x00\x03opaque")]),  # group metadata
        batch(3, [(struct.pack(">h", 99) + b"future", b"\x00\x00??")]),  # an unknown type
        batch(4, [(commit_key("G1", "orders", 0, key_type=0), commit_v1(12))]),  # overwrite
        batch(5, [(commit_key("G3", "orders", 1), commit_v3(7))]),
        batch(6, [(commit_key("G3", "orders", 1), None)]),  # tombstone
        batch(7, [(commit_key("G2", "orders", 1), commit_v3(20))], pid=7, transactional=True),
        marker(8, 7, commit=True),
        batch(9, [(commit_key("G4", "orders", 0), commit_v3(1))], pid=8, transactional=True),
        marker(10, 8, commit=False),
        batch(11, [(commit_key("G5", "orders", 0), commit_v3(2))], pid=9, transactional=True),
    ]
    for b in batches:
        log.append(b)
    log.write(hw=log.leo)
    return log


def _read(log_dir: Path, partition: int, n: int = 1) -> Any:
    part = log_dir / f"__consumer_offsets-{partition}"
    logs = sorted(str(p) for p in part.glob("*.log"))
    return read_progress([(partition, logs, 0)], n)


def test_replay_as_the_coordinator_loads(tmp_path: Path) -> None:
    log = write_offsets(tmp_path)
    assert len(log.segments) > 1  # the replay crosses segment boundaries
    got = _read(tmp_path, 0)
    assert got.progress is Progress.KNOWN
    assert {k: dict(v) for k, v in got.committed.items()} == {
        ("orders", 0): {"G1": 12, "G2": 3},  # G4 aborted, G5 still pending
        ("orders", 1): {"G2": 20},  # G3 tombstoned, G2's transaction committed
    }


def test_a_transactional_commit_wins_only_over_an_older_record(tmp_path: Path) -> None:
    key = commit_key("G", "t", 0)
    consumer_wins = KafkaLog(tmp_path / "a", "__consumer_offsets", 0)
    for b in (
        batch(0, [(key, commit_v3(23))], pid=5, transactional=True),
        batch(1, [(key, commit_v3(24))]),
        marker(2, 5, commit=True),
    ):
        consumer_wins.append(b)
    consumer_wins.write()
    txn_wins = KafkaLog(tmp_path / "b", "__consumer_offsets", 0)
    for b in (
        batch(0, [(key, commit_v3(24))]),
        batch(1, [(key, commit_v3(23))], pid=5, transactional=True),
        marker(2, 5, commit=True),
    ):
        txn_wins.append(b)
    txn_wins.write()
    assert _read(tmp_path / "a", 0).committed == {("t", 0): {"G": 24}}
    assert _read(tmp_path / "b", 0).committed == {("t", 0): {"G": 23}}


def test_coverage_and_loss(tmp_path: Path) -> None:
    write_offsets(tmp_path)
    got = _read(tmp_path, 0, n=3)
    assert got.progress is Progress.PARTIAL and got.coverage() == {
        "progress": "partial",
        "partitions": [0],
        "of": 3,
    }
    loss = got.loss("orders", 0, 10, 15)
    assert [(g.group, g.messages) for g in loss.groups] == [("G1", 3), ("G2", 5)]
    assert got.loss("orders", 0, 0, 3).as_dict()["groups"] == []  # both caught up there
    assert read_progress([], 50).loss("orders", 0, 0, 5).progress is Progress.UNKNOWN


def test_a_corrupt_partition_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    write_offsets(tmp_path)
    path = tmp_path / "__consumer_offsets-0" / f"{0:020d}.log"
    data = bytearray(path.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    path.write_bytes(bytes(data))
    got = _read(tmp_path, 0)
    assert got.progress is Progress.CORRUPT and got.committed == {}
    assert "CRC mismatch" in got.problems[0][1]


def test_group_partition_is_java_string_hash() -> None:
    table = {"my-group": 12, "console-consumer-12345": 6, "test": 48, "": 0}
    table |= {"été": 42, "😀grp": 36, "polygenelubricants": 0}
    assert {g: partition_for(g, 50) for g in table} == table


def _log_dir(tmp_path: Path, first_ts: int | None = None, *extra: str) -> tuple[Path, Path]:
    log_dir = tmp_path / "kafka-logs"
    if first_ts is None:
        first_ts = int(time.time() * 1000) - 10 * DAY
    for p in (0, 1):
        log = KafkaLog(log_dir, "orders", p, segment_bytes=5 * 72)
        for i in range(30):
            log.append_records(1, first_ts + i * 1000)
        log.write(hw=log.leo)
    write_offsets(log_dir, 0)
    (log_dir / "meta.properties").write_text("version=1\nnode.id=3\ncluster.id=c\n")
    overrides = tmp_path / "topics.yaml"
    overrides.write_text("orders: {retention.ms: 604800000}\n")
    config = tmp_path / "server.properties"
    config.write_text(
        "\n".join(
            [
                "process.roles=broker",
                "node.id=3",
                f"log.dirs={log_dir}",
                "offsets.topic.num.partitions=3",
                "log.retention.check.interval.ms=1000",
                f"retentiond.kafka.topicOverrides={overrides}",
                f"retentiond.journal.dir={tmp_path / 'journal'}",
                f"retentiond.controlSocket={tmp_path / 'control.sock'}",
                "retentiond.metrics.listen=127.0.0.1:0",
                "retentiond.initialDelay=0",
                *extra,
            ]
        )
        + "\n"
    )
    return log_dir, config


# orders-0: G1 committed 12, G2 3; orders-1: G2 20. Segments of 5 records, 0..25 expire.
EXPECTED = {
    ("orders", 0, 0): [("G2", 2)],
    ("orders", 0, 5): [("G2", 5)],
    ("orders", 0, 10): [("G1", 3), ("G2", 5)],
    **{("orders", 0, b): [("G1", 5), ("G2", 5)] for b in (15, 20, 25)},
    **{("orders", 1, b): [] for b in (0, 5, 10, 15)},
    **{("orders", 1, b): [("G2", 5)] for b in (20, 25)},
}


def test_plan_and_journal_name_the_lagging_groups(tmp_path: Path) -> None:
    log_dir, config = _log_dir(tmp_path)
    result = run_cli("plan", "--json", "--config", str(config))
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["consumer_progress"] == {
        "progress": "partial",
        "partitions": [0],
        "of": 3,
        "problems": [],
    }
    got = {}
    for p in doc["log_dirs"][0]["partitions"]:
        for s in p["segments"]:
            if s["verdict"] == "delete":
                loss = s["loss"]
                assert loss["progress"] == "partial"
                assert loss["messages"] == sum(g["messages"] for g in loss["groups"])
                got[(p["topic"], p["partition"], s["start_offset"])] = [
                    (g["group"], g["messages"]) for g in loss["groups"]
                ]
    assert got == EXPECTED

    text = run_cli("plan", "--config", str(config))
    assert text.code == 0, text.err
    assert "consumer progress partial: 1 of 3 __consumer_offsets partitions here" in text.out
    assert "segment 10 loses 8 unread: G1@orders 3, G2@orders 5 (partial coverage)" in text.out

    once = run_cli("once", "--config", str(config))
    assert once.code == 0, once.err
    journaled = {
        (r["topic"], r["partition"], r["base_offset"]): [
            (g["group"], g["messages"]) for g in r["loss"]["groups"]
        ]
        for r in records(tmp_path / "journal", "deletion")
    }
    assert journaled == EXPECTED
    assert (log_dir / "__consumer_offsets-0").is_dir()  # compacted: never deleted from


def test_top_groups_bound_the_labels() -> None:
    acc: dict[str, list[int | None]] = {"a": [5, 300], "b": [9, None], "c": [1, 100], "d": [0, 1]}
    assert [(r.group, r.messages, r.first_ms) for r in top_risks(acc, 1)] == [
        ("b", 9, None),
        (OTHER_GROUPS, 6, 100),  # a and c summed, the soonest of theirs; d loses nothing
    ]


def test_daemon_exports_what_each_group_has_at_risk_and_when(tmp_path: Path) -> None:
    """Nothing expired yet: orders' first segments pass retention.ms two hours from now. The
    groups' unread records in every segment but the active one are at risk, the first going
    when segment 0 expires (largest timestamp + retention.ms + 1 ms)."""
    first_ts = int(time.time() * 1000) - 7 * DAY + 2 * 3_600_000
    _, config = _log_dir(tmp_path, first_ts, "retentiond.guard.topGroups=1")
    log = tmp_path / "daemon.log"
    daemon = Daemon(spawn_run(config, log), config, None, tmp_path / "journal", log)  # type: ignore[arg-type]
    try:
        doc = daemon.wait_until(
            "a round",
            lambda: (s := status(daemon)) is not None and s["rounds"]["count"] >= 1 and s,
        )
        goes = first_ts + 4 * 1000 + 7 * DAY + 1
        # G2: 2 + 25 records in orders-0 (committed 3), 10 in orders-1 (committed 20);
        # G1 (committed 12 in orders-0): 18, beyond topGroups=1, so summed as __other__
        assert doc["groups_at_risk"] == [
            {"group": "G2", "messages": 37, "first_loss_ms": goes},
            {"group": OTHER_GROUPS, "messages": 18, "first_loss_ms": goes},
        ]
        assert not daemon.records("deletion")
        at_risk = metric_lines(daemon, "retentiond_group_unread_at_risk_messages")
        assert sorted(line.rsplit(" ", 1)[1] for line in at_risk) == ["18.0", "37.0"]
        assert any('group="G2"' in line for line in at_risk)
        [first, _other] = metric_lines(daemon, "retentiond_group_first_loss_timestamp_seconds")
        assert float(first.rsplit(" ", 1)[1]) == goes / 1000
        text = daemon.cli("status")
        assert "at risk   G2 37 unread, the first goes in" in text.out, text.out
    finally:
        daemon.kill()


def test_rescue_beyond_retention_takes_consumed_segments_first(tmp_path: Path) -> None:
    """Every __consumer_offsets partition is here (offsets.topic.num.partitions=1), so rescue
    knows which segments are consumed: orders-1's first four (G2 committed 20) go before
    any of orders-0 (G2 committed 3), though they are as old."""
    first_ts = int(time.time() * 1000) - 3 * DAY
    log_dir, config = _log_dir(tmp_path, first_ts)
    config.write_text(config.read_text().replace("num.partitions=3", "num.partitions=1"))
    # more free space than the disk has: every segment rescue may take, in its order
    result = run_cli(
        "rescue", "--config", str(config), "--free", str(1 << 60), "--beyond-retention",
        "--dry-run", "--json",
    )  # fmt: skip
    assert result.code == 9, result.out + result.err  # the target is out of reach
    [fs] = json.loads(result.out)["filesystems"]
    went = [i["path"] for s in fs["steps"] for i in s["items"]]
    consumed = [str(log_dir / "orders-1" / f"{b:020d}.log") for b in (0, 5, 10, 15)]
    assert went[:4] == consumed and len(went) > 4, went
