"""Realistic Kafka log dirs on disk, byte-exact, for the demo, the tests and benchmarks.

Everything is written as a broker leaves it after a clean shutdown (spec §3–§4): magic-2
record batches (our own encoder: product code does not depend on a Kafka client), sparse
offset and time indexes every ``index.interval.bytes``, a final time-index entry on roll, a
producer snapshot named after each rolled-to offset, the root checkpoints, ``meta.properties``,
a ``-delete`` dir left by a topic deletion and a KRaft ``__cluster_metadata-0`` whose records
carry the topics and their overrides. The summary returned lets a test check the cleaner
against what was written rather than against what the cleaner reads back.
"""

from __future__ import annotations

import dataclasses
import os
import random
import struct
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retentiond.kinds.kafka import formats as fm
from retentiond.storegen import GenStoreRefused, GenStoreRequest

_DAY_MS = 86_400_000


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _varint(n: int) -> bytes:
    return _uvarint((n << 1) ^ (n >> 63))


def encode_record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes) -> bytes:
    """One v2 record (DefaultRecord): length, attributes, deltas, key, value, no headers."""
    body = b"\x00" + _varint(ts_delta) + _varint(offset_delta)
    body += _varint(-1) if key is None else _varint(len(key)) + key
    body += _varint(len(value)) + value + _varint(0)
    return _varint(len(body)) + body


def encode_batch(
    base_offset: int,
    records: Sequence[tuple[int, bytes | None, bytes]],
    *,
    attributes: int = 0,
    producer: tuple[int, int, int] = (-1, -1, -1),
    leader_epoch: int = 0,
) -> bytes:
    """A magic-2 batch (DefaultRecordBatch) of ``(timestamp, key, value)`` records."""
    base_ts = records[0][0]
    max_ts = max(r[0] for r in records)
    payload = b"".join(encode_record(i, ts - base_ts, k, v) for i, (ts, k, v) in enumerate(records))
    pid, epoch, seq = producer
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            len(records) - 1,
            base_ts,
            max_ts,
            pid,
            epoch,
            seq,
            len(records),
        )
        + payload
    )
    length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, rest
    head = struct.pack(">qiibI", base_offset, length, leader_epoch, 2, fm.crc32c(after_crc))
    return head + after_crc


# ---- KRaft metadata records (spec §10.2) -------------------------------------------------


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def _meta(api_key: int, body: bytes) -> bytes:
    return _uvarint(1) + _uvarint(api_key) + _uvarint(0) + body + b"\x00"


def topic_record(name: str, topic_id: bytes) -> bytes:
    return _meta(2, _cstr(name) + topic_id)


def config_record(resource_type: int, resource: str, key: str, value: str | None) -> bytes:
    return _meta(4, struct.pack(">b", resource_type) + _cstr(resource) + _cstr(key) + _cstr(value))


# ---- the store ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaStoreSpec:
    """What to generate. Timestamps spread evenly over ``span_ms`` before ``now_ms``."""

    topics: Mapping[str, int] = field(
        default_factory=lambda: {"orders": 3, "clicks": 2, "audit-log": 1}
    )
    now_ms: int = 1_700_000_000_000
    span_ms: int = 10 * _DAY_MS
    records_per_partition: int = 600
    records_per_batch: int = 5
    value_bytes: int = 200
    segment_bytes: int = 32 * 1024
    index_interval_bytes: int = 4096
    overrides: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: {"audit-log": {"cleanup.policy": "compact"}}
    )
    # its partition 0 gets a record an hour in the future, ``future_at`` of the way through:
    # in the expired part of the log, where it pins itself and the expired segments behind it
    future_topic: str | None = "clicks"
    future_at: float = 0.2
    # > 0: only this many distinct partitions per topic are built, partition p a byte copy of
    # p % distinct_partitions (large stores for benchmarks; 0: every partition its own)
    distinct_partitions: int = 0
    seed: int = 7


@dataclass(frozen=True)
class WrittenSegment:
    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int


@dataclass
class GeneratedKafkaStore:
    log_dir: Path
    partitions: dict[tuple[str, int], list[WrittenSegment]] = field(default_factory=dict)
    high_watermarks: dict[tuple[str, int], int] = field(default_factory=dict)


def _write(path: Path, data: bytes, mtime_ms: int | None = None) -> None:
    path.write_bytes(data)
    if mtime_ms is not None:
        os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


@dataclass(frozen=True)
class _PartitionFiles:
    """One partition's files, built in memory: (name, bytes, mtime ms or None) and what the
    segments hold. Written once per partition, or copied to many (``distinct_partitions``)."""

    files: tuple[tuple[str, bytes, int | None], ...]
    segments: tuple[WrittenSegment, ...]


def _build_partition(spec: KafkaStoreSpec, rng: random.Random, future: bool) -> _PartitionFiles:
    n = spec.records_per_partition
    step = spec.span_ms // max(n, 1)
    start_ts = spec.now_ms - spec.span_ms
    future_at = int(n * spec.future_at)
    files: list[tuple[str, bytes, int | None]] = []
    segments: list[WrittenSegment] = []
    data = bytearray()
    index: list[tuple[int, int]] = []
    tindex: list[tuple[int, int]] = []
    base = offset = 0
    max_ts, max_ts_off, since = -1, -1, 0
    snapshots: list[int] = []

    def time_entry() -> None:
        if max_ts > (tindex[-1][0] if tindex else -1):
            tindex.append((max_ts, max_ts_off - base))

    def close_segment() -> None:
        time_entry()
        stem = fm.offset_prefix(base)
        mtime = max_ts if max_ts >= 0 else spec.now_ms
        files.append((f"{stem}.log", bytes(data), min(mtime, spec.now_ms)))
        files.append((f"{stem}.index", fm.encode_offset_index(index), None))
        files.append((f"{stem}.timeindex", fm.encode_time_index(tindex), None))
        segments.append(WrittenSegment(base, offset, len(data), max_ts))

    while offset < n:
        count = min(spec.records_per_batch, n - offset)
        recs = []
        for i in range(count):
            ts = start_ts + (offset + i) * step + rng.randrange(step or 1)
            if future and offset + i == future_at:
                ts = spec.now_ms + 3_600_000
            value = rng.randbytes(spec.value_bytes)
            recs.append((ts, f"k{(offset + i) % 50}".encode(), value))
        batch = encode_batch(offset, recs)
        if data and len(data) > spec.segment_bytes - len(batch):
            close_segment()
            base = offset
            snapshots.append(offset)
            data, index, tindex = bytearray(), [], []
            max_ts, max_ts_off, since = -1, -1, 0
        batch_max = max(r[0] for r in recs)
        last = offset + count - 1
        if batch_max > max_ts:
            max_ts, max_ts_off = batch_max, last
        if since > spec.index_interval_bytes:
            index.append((last - base, len(data)))
            time_entry()
            since = 0
        data += batch
        since += len(batch)
        offset += count
    close_segment()
    snapshot = fm.empty_producer_snapshot()
    for snap in [*snapshots, offset]:  # the shutdown snapshot at the log end too
        files.append((fm.segment_file_name(snap, fm.SNAPSHOT_SUFFIX), snapshot, None))
    epochs = fm.format_leader_epoch_checkpoint([(0, 0)]).encode()
    files.append((fm.LEADER_EPOCH_CHECKPOINT, epochs, None))
    return _PartitionFiles(tuple(files), tuple(segments))


def _write_partition(part_dir: Path, built: _PartitionFiles) -> None:
    part_dir.mkdir(parents=True)
    for name, data, mtime_ms in built.files:
        _write(part_dir / name, data, mtime_ms)


def generate_kafka_store(
    log_dir: Path,
    spec: KafkaStoreSpec | None = None,
    progress: Callable[[str], None] | None = None,
) -> GeneratedKafkaStore:
    """A log dir under ``log_dir`` (created; must not hold a store already). ``progress``, if
    given, is told which partition is being written (``gen-store`` on a terminal)."""
    spec = spec or KafkaStoreSpec()
    rng = random.Random(spec.seed)
    log_dir.mkdir(parents=True, exist_ok=True)
    if any(log_dir.iterdir()):
        raise FileExistsError(f"{log_dir}: not empty")
    store = GeneratedKafkaStore(log_dir)
    topic_ids: dict[str, bytes] = {}
    total = sum(spec.topics.values())
    for topic, partitions in spec.topics.items():
        topic_ids[topic] = uuid.UUID(int=rng.getrandbits(128)).bytes
        built: list[_PartitionFiles] = []
        for p in range(partitions):
            if progress is not None:
                progress(f"partition {len(store.partitions) + 1:,} of {total:,} ({topic}-{p})")
            variant = p % spec.distinct_partitions if spec.distinct_partitions > 0 else p
            if variant == len(built):
                future = topic == spec.future_topic and variant == 0
                built.append(_build_partition(spec, rng, future))
            _write_partition(log_dir / f"{topic}-{p}", built[variant])
            segs = list(built[variant].segments)
            store.partitions[(topic, p)] = segs
            store.high_watermarks[(topic, p)] = segs[-1].next_offset
    # a topic deleted while the broker ran: Kafka's own, never ours to judge
    gone = log_dir / f"old-topic-0.{uuid.UUID(int=rng.getrandbits(128)).hex}-delete"
    gone.mkdir()
    _write(
        gone / fm.segment_file_name(0, fm.LOG_SUFFIX), encode_batch(0, [(spec.now_ms, None, b"x")])
    )
    write_metadata_log(log_dir / "__cluster_metadata-0", spec, topic_ids)
    hws = dict(store.high_watermarks)
    for name, entries in (
        (fm.REPLICATION_CHECKPOINT, hws),
        (fm.RECOVERY_CHECKPOINT, hws),
        (fm.LOG_START_CHECKPOINT, {}),
    ):
        (log_dir / name).write_text(fm.format_offset_checkpoint(entries))
    (log_dir / "meta.properties").write_text(
        "#\n#Generated by retentiond storegen\nversion=1\nnode.id=1\n"
        f"cluster.id={uuid.UUID(int=rng.getrandbits(128)).hex[:22]}\n"
    )
    (log_dir / ".lock").touch()
    return store


def write_metadata_log(
    part_dir: Path, spec: KafkaStoreSpec, topic_ids: Mapping[str, bytes]
) -> None:
    """``__cluster_metadata-0``: the topics and ``spec.overrides`` as KRaft records (a bench
    rewrites it alone to change every topic's retention without regenerating the data)."""
    part_dir.mkdir()
    records = [topic_record(t, tid) for t, tid in topic_ids.items()]
    for topic, keys in spec.overrides.items():
        records += [config_record(2, topic, k, v) for k, v in keys.items()]
    batches = b"".join(
        encode_batch(i, [(spec.now_ms - spec.span_ms, None, r)]) for i, r in enumerate(records)
    )
    _write(part_dir / fm.segment_file_name(0, fm.LOG_SUFFIX), batches)
    _write(part_dir / fm.segment_file_name(0, fm.INDEX_SUFFIX), b"")
    _write(part_dir / fm.segment_file_name(0, fm.TIME_INDEX_SUFFIX), b"")


def write_server_properties(path: Path, log_dirs: Sequence[Path], **props: str) -> Path:
    """A ``server.properties`` for the generated dirs; ``props`` use ``_`` for ``.``."""
    lines = [
        "process.roles=broker",
        "node.id=1",
        f"log.dirs={','.join(str(d) for d in log_dirs)}",
        "log.retention.hours=168",
    ]
    lines += [f"{k.replace('_', '.')}={v}" for k, v in props.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def gen_store(request: GenStoreRequest) -> list[str]:
    """``gen-store --kind kafka``: a realistic log dir whose newest data is now, and with a
    config path a server.properties pointing at it."""
    if request.sparse:
        raise GenStoreRefused("--sparse is for RocketMQ stores")
    spec = KafkaStoreSpec(now_ms=int(time.time() * 1000))
    overrides: dict[str, Any] = {}
    if request.topics is not None:
        overrides["topics"] = request.topics
    if request.messages is not None:
        overrides["records_per_partition"] = request.messages
    if request.file_size is not None:
        overrides["segment_bytes"] = request.file_size
    if request.oldest_hours is not None:
        overrides["span_ms"] = int(request.oldest_hours * 3_600_000)
    spec = dataclasses.replace(spec, **overrides)
    log_dir = request.dir.absolute()
    store = generate_kafka_store(log_dir, spec, request.progress)
    segments = sum(len(s) for s in store.partitions.values())
    lines = [
        f"generated Kafka log dir at {log_dir}: {len(spec.topics)} topics, "
        f"{len(store.partitions)} partitions, {segments} segments, checkpoints, a KRaft "
        "metadata log with the topic overrides"
    ]
    if request.config_out is not None:
        path = write_server_properties(request.config_out.absolute(), [log_dir])
        lines.append(f"wrote config {path}")
    return lines
