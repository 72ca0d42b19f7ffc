"""A log dir holding the leftovers Kafka itself leaves (``consumers.md`` B.3), for the tests of
leftover partition dirs and of ``retentiond rescue``: a ``-delete`` dir (a topic deletion the
broker had not finished), a ``-stray`` dir (KRaft's renamed stray replica), an orphan (a plain
partition dir whose topic id the metadata log no longer has), beside live topics named in a
real KRaft metadata log. Segments come from kafka-python's record builder (``KafkaLog``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

from retentiond.kinds.kafka.leftovers import topic_id_text
from retentiond.storegen.kafka import KafkaStoreSpec, write_metadata_log
from tests.kinds.kafka.kafkalog import KafkaLog, R

DAY = 86_400_000


@dataclass
class LeftoverDirs:
    log_dir: Path
    live: dict[tuple[str, int], KafkaLog] = field(default_factory=dict)
    delete_dir: Path = Path()
    stray_dir: Path = Path()
    orphan_dir: Path = Path()
    topic_ids: dict[str, bytes] = field(default_factory=dict)


def write_partition_metadata(part_dir: Path, topic_id: bytes) -> None:
    part_dir.joinpath("partition.metadata").write_text(
        f"version: 0\ntopic_id: {topic_id_text(topic_id)}\n"
    )


def _filled(log_dir: Path, name: str, records: int, ts: int, segment_bytes: int) -> Path:
    """A partition dir of ``records`` records written under the plain name ``name``-0 and
    then renamed to ``name`` (a leftover's name)."""
    log = KafkaLog(log_dir, f"tmp{uuid.uuid4().hex[:8]}", 0, segment_bytes=segment_bytes)
    log.append_records(records, ts)
    log.write()
    target = log_dir / name
    log.dir.rename(target)
    return target


def build_leftover_dirs(
    log_dir: Path,
    now_ms: int,
    *,
    live: dict[str, tuple[int, int]] | None = None,
    leftover_records: int = 60,
    records_per_day: int = 30,
    segment_bytes: int = 10 * R,
    value: bytes = b"test",
) -> LeftoverDirs:
    """``live``: topic → (partitions, days of data); each partition gets
    ``records_per_day`` records a day, oldest first, its high watermark at its end."""
    live = live if live is not None else {"orders": (2, 3)}
    log_dir.mkdir(parents=True, exist_ok=True)
    out = LeftoverDirs(log_dir)
    for topic, (partitions, days) in live.items():
        out.topic_ids[topic] = uuid.uuid4().bytes
        for p in range(partitions):
            log = KafkaLog(log_dir, topic, p, segment_bytes=segment_bytes)
            total = days * records_per_day
            for i in range(total):
                ts = now_ms - days * DAY + (i * DAY) // records_per_day
                log.append(_batch(log.next_offset, ts, value))
            log.write(hw=log.leo)
            write_partition_metadata(log.dir, out.topic_ids[topic])
            out.live[(topic, p)] = log
    old = now_ms - 10 * DAY
    out.delete_dir = _filled(
        log_dir, f"gone-0.{uuid.uuid4().hex}-delete", leftover_records, old, segment_bytes
    )
    out.stray_dir = _filled(
        log_dir, f"moved-1.{uuid.uuid4().hex}-stray", leftover_records, old, segment_bytes
    )
    out.orphan_dir = _filled(log_dir, "forgotten-0", leftover_records, old, segment_bytes)
    write_partition_metadata(out.orphan_dir, uuid.uuid4().bytes)
    write_metadata_log(log_dir / "__cluster_metadata-0", KafkaStoreSpec(), out.topic_ids)
    (log_dir / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=leftovers\n")
    return out


def _batch(offset: int, ts: int, value: bytes) -> bytes:
    from tests.kinds.kafka.kafkalog import v2_batch

    return v2_batch(offset, [ts], value=value)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
