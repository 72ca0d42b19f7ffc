"""Per-topic configs from a real KRaft metadata log (spec §10): a snapshot plus later records,
encoded here from the record schemas, framed by kafka-python's batch builder."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from kafka.record._crc32c import crc as crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from retentiond.kinds.kafka.config import load_server_properties
from retentiond.kinds.kafka.metadata import MetadataError, read_metadata
from retentiond.kinds.kafka.offline import run_offline
from retentiond.reasons import Reason
from tests.kinds.kafka.kafkalog import KafkaLog

ORDERS, LOGS, METRICS_OLD, METRICS_NEW = (bytes([i]) * 16 for i in (1, 2, 3, 4))


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def frame(api_key: int, body: bytes, version: int = 0) -> bytes:
    return uvarint(1) + uvarint(api_key) + uvarint(version) + body + b"\x00"  # no tagged fields


def topic(name: str, tid: bytes) -> bytes:
    return frame(2, cstr(name) + tid)


def remove_topic(tid: bytes) -> bytes:
    return frame(9, tid)


def config(rtype: int, rname: str, key: str, value: str | None) -> bytes:
    return frame(4, struct.pack(">b", rtype) + cstr(rname) + cstr(key) + cstr(value))


def partition_record() -> bytes:
    return frame(3, struct.pack(">i", 0) + ORDERS + b"\x01\x01\x01")  # not parsed: skipped


def batch(base: int, values: list[bytes], *, control: bool = False) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, v in enumerate(values):
        b.append(i, timestamp=1000, key=None, value=v, headers=[])
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, base)
    if control:
        (attrs,) = struct.unpack_from(">h", data, 21)
        struct.pack_into(">h", data, 21, attrs | 0x20)
        struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def control_value(kind: int) -> bytes:
    return struct.pack(">hh", 0, 0)  # version 0, no fields beyond (content not used)


def build_metadata(root: Path) -> Path:
    """Snapshot at 10, log from 0 (the records below 10 contradict it: they must be ignored)."""
    part = root / "__cluster_metadata-0"
    part.mkdir(parents=True)
    snap = (
        batch(0, [control_value(3)], control=True)
        + batch(
            0,
            [
                topic("orders", ORDERS),
                config(2, "orders", "retention.ms", "1000"),
                topic("logs", LOGS),
                config(4, "", "log.retention.ms", "5000"),
            ],
        )
        + batch(4, [control_value(4)], control=True)
    )
    (part / f"{10:020d}-{1:010d}.checkpoint").write_bytes(snap)
    old = batch(0, [config(2, "orders", "retention.ms", "1")] * 10)
    new = batch(
        10,
        [
            config(2, "orders", "retention.ms", "2000"),  # changed
            config(2, "logs", "retention.bytes", "77"),  # set
            config(2, "orders", "retention.ms", None),  # deleted
            topic("metrics", METRICS_OLD),
            config(2, "metrics", "cleanup.policy", "compact"),
            remove_topic(METRICS_OLD),  # and its configs with it
            topic("metrics", METRICS_NEW),  # recreated: no overrides
            config(4, "1", "log.retention.bytes", "123"),  # this node
            config(4, "2", "log.retention.bytes", "456"),  # another node
            partition_record(),
        ],
    )
    (part / f"{0:020d}.log").write_bytes(old + new)
    (part / f"{0:020d}.index").write_bytes(b"")
    return part


def test_snapshot_plus_later_records(tmp_path: Path) -> None:
    part = build_metadata(tmp_path)
    state = read_metadata(str(part))
    assert state.topic_overrides() == {
        "orders": {},
        "logs": {"retention.bytes": "77"},
        "metrics": {},
    }
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={tmp_path}\nnode.id=1\nlog.retention.hours=1\n")
    server = load_server_properties(str(props))
    layers = state.broker_layers(server.node_id)
    orders = server.config_for("orders", state.topic_overrides(), layers)
    assert orders is not None
    assert (orders.retention_ms, orders.retention_bytes) == (5000, 123)
    logs = server.config_for("logs", state.topic_overrides(), layers)
    assert logs is not None and (logs.retention_ms, logs.retention_bytes) == (5000, 77)
    metrics = server.config_for("metrics", state.topic_overrides(), layers)
    assert metrics is not None and metrics.delete and not metrics.compact
    assert server.config_for("ghost", state.topic_overrides(), layers) is None


def test_unknown_topic_keeps_every_segment(tmp_path: Path) -> None:
    build_metadata(tmp_path)
    log = KafkaLog(tmp_path, "ghost", segment_bytes=5 * 72)
    log.append_records(15, 10)
    log.write(hw=15)
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={tmp_path}\nlog.retention.ms=1\n")
    server = load_server_properties(str(props))
    state = read_metadata(str(tmp_path / "__cluster_metadata-0"))
    r = run_offline(
        str(tmp_path),
        lambda t: server.config_for(t, state.topic_overrides(), state.broker_layers(None)),
        now_ms=10**13,
    )
    by_topic = {p.partition.topic: p for p in r.plans}
    assert {d.reason for d in by_topic["ghost"].decisions} == {Reason.UNKNOWN_TOPIC_CONFIG}
    assert {d.reason for d in by_topic["__cluster_metadata"].decisions} == {Reason.CLUSTER_METADATA}
    assert not r.deleted


def test_truncated_log_names_file_and_position(tmp_path: Path) -> None:
    part = build_metadata(tmp_path)
    log = part / f"{0:020d}.log"
    data = log.read_bytes()
    log.write_bytes(data[:-5])
    with pytest.raises(MetadataError, match=r"00000000000000000000\.log: position \d+: truncated"):
        read_metadata(str(part))


def test_corrupt_batch_names_file_and_position(tmp_path: Path) -> None:
    part = build_metadata(tmp_path)
    log = part / f"{0:020d}.log"
    data = bytearray(log.read_bytes())
    data[-3] ^= 0xFF
    log.write_bytes(bytes(data))
    with pytest.raises(MetadataError, match=r"\.log: position \d+: batch CRC mismatch"):
        read_metadata(str(part))


def test_truncated_record_value_names_position(tmp_path: Path) -> None:
    part = tmp_path / "__cluster_metadata-0"
    part.mkdir()
    cut = config(2, "orders", "retention.ms", "1000")[:-4]
    (part / f"{0:020d}.log").write_bytes(batch(0, [topic("orders", ORDERS), cut]))
    with pytest.raises(MetadataError, match=r"\.log: position \d+\+\d+: truncated"):
        read_metadata(str(part))


def test_log_starting_after_the_snapshot_is_refused(tmp_path: Path) -> None:
    part = tmp_path / "__cluster_metadata-0"
    part.mkdir()
    (part / f"{50:020d}.log").write_bytes(batch(50, [topic("a", ORDERS)]))
    with pytest.raises(MetadataError, match="records in between are gone"):
        read_metadata(str(part))
