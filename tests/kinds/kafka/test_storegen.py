"""The generated log dir, checked against an encoder we did not write (kafka-python) and read
back through scan, metadata and policy: the demo store exercises every kind of reason."""

from __future__ import annotations

from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch

from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.config import load_server_properties
from retentiond.kinds.kafka.metadata import read_metadata
from retentiond.kinds.kafka.offline import run_offline
from retentiond.kinds.kafka.scan import scan_log_dir
from retentiond.reasons import Reason
from retentiond.storegen.kafka import (
    KafkaStoreSpec,
    encode_batch,
    generate_kafka_store,
    write_server_properties,
)


def test_encoder_matches_kafka_python() -> None:
    data = encode_batch(42, [(1000, b"k", b"v" * 300), (900, None, b""), (1500, b"x", b"y")])
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert batch.base_offset == 42 and batch.max_timestamp == 1500
    recs = list(batch)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in recs] == [
        (42, 1000, b"k", b"v" * 300),
        (43, 900, None, b""),
        (44, 1500, b"x", b"y"),
    ]


def test_generated_store_reads_back(tmp_path: Path) -> None:
    spec = KafkaStoreSpec()
    store = generate_kafka_store(tmp_path / "logs", spec)
    snap = scan_log_dir(str(store.log_dir))
    assert not snap.foreign and not snap.errors
    parts = {(p.topic, p.partition): p for p in snap.partitions if p.name.special is None}
    for tp, written in store.partitions.items():
        segs = parts[tp].segments
        assert [s.base_offset for s in segs] == [w.base_offset for w in written]
        for s, w in zip(segs, written, strict=True):
            assert s.size == w.size and s.summary.next_offset == w.next_offset
            assert s.summary.max_timestamp == w.max_timestamp
            ti = fm.decode_time_index((Path(s.path(fm.TIME_INDEX_SUFFIX))).read_bytes())
            assert ti[-1][0] == w.max_timestamp  # the roll's final entry
    assert snap.high_watermarks == store.high_watermarks

    props = write_server_properties(tmp_path / "server.properties", [store.log_dir])
    server = load_server_properties(str(props))
    meta = read_metadata(str(store.log_dir / "__cluster_metadata-0"))
    overrides = meta.topic_overrides()
    r = run_offline(
        str(store.log_dir),
        lambda t: server.config_for(t, overrides, meta.broker_layers(server.node_id)),
        now_ms=spec.now_ms,
        dry_run=True,
    )
    reasons = {d.reason for p in r.plans for d in p.decisions}
    assert {
        Reason.RETENTION_MS_BREACH,
        Reason.WITHIN_RETENTION,
        Reason.FUTURE_TIMESTAMP,
        Reason.COMPACTED,
        Reason.CLUSTER_METADATA,
        Reason.TRANSIENT_PARTITION_DIR,
    } <= reasons
    clicks0 = next(
        p for p in r.plans if (p.partition.topic, p.partition.partition) == ("clicks", 0)
    )
    assert any(d.reason is Reason.FUTURE_TIMESTAMP for d in clicks0.decisions)
