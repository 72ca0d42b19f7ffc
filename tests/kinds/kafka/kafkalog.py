"""A Kafka partition written the way the broker writes it, for the ported upstream tests.

Batches come from kafka-python's record builders (an encoder we did not write); the indexes,
producer snapshots and checkpoints are packed here straight from the spec (§3–§4), not through
``retentiond.kinds.kafka.formats``, so a reader bug cannot hide behind a matching writer bug.
``KafkaLog`` follows ``UnifiedLog.append``/``roll`` closely enough that Kafka's own test numbers
(segment.bytes = k·R gives k single-record batches per segment) carry over unchanged.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from kafka.record._crc32c import crc as crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from retentiond.kinds.kafka.policy import PartitionPlan, TopicConfig, plan_partition
from retentiond.kinds.kafka.scan import scan_log_dir

R = 72  # TestUtils.singletonRecords("test"): 61-byte v2 header + 11-byte record
NO_TIMESTAMP = -1


def v2_batch(
    base_offset: int,
    timestamps: list[int],
    *,
    value: bytes = b"test",
    key: bytes | None = None,
    producer: tuple[int, int, int] = (-1, -1, -1),
) -> bytes:
    """One magic-2 batch of len(timestamps) records starting at ``base_offset``."""
    pid, epoch, seq = producer
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 20,
    )
    for i, ts in enumerate(timestamps):
        b.append(i, timestamp=ts, key=key, value=value, headers=[])
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, base_offset)  # baseOffset is outside the CRC
    return bytes(data)


def v1_message(offset: int, timestamp: int, value: bytes = b"test") -> bytes:
    """One uncompressed magic-1 message (a legacy "batch" of one)."""
    b = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    b.append(offset, timestamp=timestamp, key=None, value=value)
    return bytes(b.build())


def _empty_snapshot() -> bytes:
    body = struct.pack(">i", 0)
    return struct.pack(">hI", 1, crc32c(body)) + body


@dataclass
class _Segment:
    base: int
    data: bytearray = field(default_factory=bytearray)
    index: list[tuple[int, int]] = field(default_factory=list)
    timeindex: list[tuple[int, int]] = field(default_factory=list)
    max_ts: int = NO_TIMESTAMP
    offset_of_max_ts: int = -1
    since_index: int = 0


class KafkaLog:
    """One partition dir being appended to, as a leader would (HW set by ``write``)."""

    def __init__(
        self,
        log_dir: Path,
        topic: str = "test",
        partition: int = 0,
        *,
        segment_bytes: int = 1 << 30,
        index_interval_bytes: int = 4096,
        start_offset: int = 0,
        epochs: list[tuple[int, int]] | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.topic = topic
        self.partition = partition
        self.dir = log_dir / f"{topic}-{partition}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.index_interval = index_interval_bytes
        self.segments = [_Segment(start_offset)]
        self.next_offset = start_offset
        self.snapshots: list[int] = []
        self.epochs = epochs if epochs is not None else [(0, start_offset)]

    def append(self, batch: bytes, *, last_offset_delta: int | None = None) -> None:
        """LogSegment.append of one batch, rolling first as UnifiedLog.maybeRoll would."""
        active = self.segments[-1]
        if len(active.data) > 0 and len(active.data) > self.segment_bytes - len(batch):
            self.roll()
            active = self.segments[-1]
        (base,) = struct.unpack_from(">q", batch, 0)
        magic = batch[16]
        if magic == 2:
            (delta,) = struct.unpack_from(">i", batch, 23)
            (max_ts,) = struct.unpack_from(">q", batch, 35)
        else:
            delta = 0
            max_ts = struct.unpack_from(">q", batch, 18)[0] if magic == 1 else NO_TIMESTAMP
        last = base + delta
        if max_ts > active.max_ts:
            active.max_ts, active.offset_of_max_ts = max_ts, last
        if active.since_index > self.index_interval:
            active.index.append((last - active.base, len(active.data)))
            self._time_entry(active)
            active.since_index = 0
        active.data += batch
        active.since_index += len(batch)
        self.next_offset = last + 1

    def append_records(self, n: int, ts: int, *, key: bytes | None = None) -> None:
        for _ in range(n):
            self.append(v2_batch(self.next_offset, [ts], key=key))

    @staticmethod
    def _time_entry(seg: _Segment) -> None:
        last_ts = seg.timeindex[-1][0] if seg.timeindex else NO_TIMESTAMP
        if seg.max_ts > last_ts:
            seg.timeindex.append((seg.max_ts, seg.offset_of_max_ts - seg.base))

    def roll(self) -> None:
        """onBecomeInactiveSegment (final time-index entry), a new segment at LEO, and the
        producer snapshot named after it."""
        self._time_entry(self.segments[-1])
        self.segments.append(_Segment(self.next_offset))
        self.snapshots.append(self.next_offset)

    def write(
        self,
        *,
        hw: int | None = None,
        log_start_offset: int | None = None,
        mtime_ms: int | None = None,
    ) -> None:
        """Every file as a clean shutdown leaves it; ``hw`` and ``log_start_offset`` go into
        the root checkpoints (None: no entry written)."""
        for seg in self.segments:
            self._time_entry(seg)
            stem = self.dir / f"{seg.base:020d}"
            Path(f"{stem}.log").write_bytes(bytes(seg.data))
            Path(f"{stem}.index").write_bytes(
                b"".join(struct.pack(">ii", r, p) for r, p in seg.index)
            )
            Path(f"{stem}.timeindex").write_bytes(
                b"".join(struct.pack(">qi", t, r) for t, r in seg.timeindex)
            )
            if mtime_ms is not None:
                os.utime(f"{stem}.log", ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        for off in self.snapshots:
            (self.dir / f"{off:020d}.snapshot").write_bytes(_empty_snapshot())
        lines = ["0", str(len(self.epochs))] + [f"{e} {s}" for e, s in self.epochs]
        (self.dir / "leader-epoch-checkpoint").write_text("\n".join(lines) + "\n")
        if hw is not None:
            set_checkpoint(self.log_dir / "replication-offset-checkpoint", self.tp, hw)
        if log_start_offset is not None:
            set_checkpoint(self.log_dir / "log-start-offset-checkpoint", self.tp, log_start_offset)
        (self.log_dir / "meta.properties").touch()

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def leo(self) -> int:
        return self.next_offset


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    assert lines[0] == "0"
    assert int(lines[1]) == len(lines) - 2
    out = {}
    for line in lines[2:]:
        t, p, o = line.split()
        out[(t, int(p))] = int(o)
    return out


def set_checkpoint(path: Path, tp: tuple[str, int], offset: int | None) -> None:
    """Write (or drop, for None) one entry of an offset checkpoint, as CheckpointFile does."""
    entries = read_checkpoint(path)
    if offset is None:
        entries.pop(tp, None)
    else:
        entries[tp] = offset
    lines = ["0", str(len(entries))] + [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    path.write_text("\n".join(lines) + "\n")


def segment_bases(part_dir: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in part_dir.glob("*.log"))


def leader_epochs(part_dir: Path) -> list[tuple[int, int]]:
    lines = (part_dir / "leader-epoch-checkpoint").read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2
    return [(int(a), int(b)) for a, b in (line.split() for line in lines[2:])]


def plan_one_partition(
    log_dir: Path,
    config: TopicConfig | None,
    now_ms: int,
    *,
    time_index_compat: bool = False,
    broker_running: bool = False,
) -> PartitionPlan:
    """Scan a log dir holding one partition and plan it with the dir's own checkpoints, as a
    round would (``config``: the partition's ``TopicConfig``, or None when unknown;
    ``broker_running``: a plan-only dir, as beside a live broker)."""
    snap = scan_log_dir(str(log_dir))
    (part,) = snap.partitions
    return plan_partition(
        part,
        config,
        now_ms=now_ms,
        high_watermarks=snap.high_watermarks,
        log_start_offsets=snap.log_start_offsets,
        time_index_compat=time_index_compat,
        broker_running=broker_running,
    )
