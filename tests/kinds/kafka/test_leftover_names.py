"""``.deleted`` leftovers: the broker renames a segment's files and its producer snapshot to
``<base><suffix>.deleted`` and purges them at its next load; a round that deletes in the
partition purges them first. Only those names: a file that merely ends in ``.deleted``
(``notes.deleted``, a sign or other digits in the prefix) is not of Kafka's naming scheme and
is never unlinked (rule 2). Real log dirs (``KafkaLog``), a real offline round."""

from __future__ import annotations

from pathlib import Path

from retentiond.kinds.kafka.offline import run_offline
from retentiond.kinds.kafka.policy import TopicConfig
from tests.kinds.kafka.kafkalog import KafkaLog, R

NOW = 1_700_000_000_000

KAFKA_LEFTOVERS = [
    f"{99:020d}.log.deleted",
    f"{99:020d}.index.deleted",
    f"{99:020d}.timeindex.deleted",
    f"{99:020d}.txnindex.deleted",
    f"{99:020d}.snapshot.deleted",
]
NOT_KAFKAS = [
    "notes.deleted",
    ".deleted",
    "leader-epoch-checkpoint.deleted",
    "+0000000000000000099.log.deleted",
    "\u0660" * 20 + ".log.deleted",
    f"{99:020d}.deleted",
    f"{99:020d}.log.deleted.deleted",
]


def test_only_kafkas_leftovers_are_purged(tmp_path: Path) -> None:
    log = KafkaLog(tmp_path, segment_bytes=5 * R)
    log.append_records(15, NOW - 100_000)
    log.append_records(5, NOW)
    log.write(hw=20)
    for n in KAFKA_LEFTOVERS + NOT_KAFKAS:
        (log.dir / n).write_bytes(b"x")
    r = run_offline(str(tmp_path), lambda _t: TopicConfig(retention_ms=10_000), now_ms=NOW)
    assert not r.errors
    assert [n for n in KAFKA_LEFTOVERS if (log.dir / n).exists()] == []
    assert [n for n in NOT_KAFKAS if not (log.dir / n).exists()] == []
