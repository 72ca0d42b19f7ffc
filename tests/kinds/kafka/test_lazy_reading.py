"""The plan reads a segment only where Kafka's passes look: the prefix that goes and the first
segment that stays (and the active one, for the log end offset). What lies behind the first
kept segment is never read, so nothing wrong with it can change a decision; what lies inside
the prefix is read, and a fault there stops the prefix and is reported.

Real log dirs (``KafkaLog``: batches packed per spec §4.4), real corruption on disk.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from types import SimpleNamespace

from retentiond.config.settings import DaemonSettings
from retentiond.engine.identity import identity_of
from retentiond.kinds.kafka.config import load_server_properties
from retentiond.kinds.kafka.kind import Kafka
from retentiond.kinds.kafka.offline import run_offline
from retentiond.kinds.kafka.plan import KafkaPlan, LogDirPlan
from retentiond.kinds.kafka.policy import TopicConfig, plan_partition
from retentiond.kinds.kafka.scan import scan_log_dir
from retentiond.reasons import Kind, Reason, Verdict
from tests.kinds.kafka.kafkalog import KafkaLog, R, plan_one_partition, segment_bases

NOW = 1_700_000_000_000
OLD = NOW - 100_000
CFG = TopicConfig(retention_ms=10_000)


def six_segments(tmp_path: Path) -> KafkaLog:
    """Six segments of 5 records: the first three expired, the last three recent."""
    log = KafkaLog(tmp_path, segment_bytes=5 * R)
    log.append_records(15, OLD)
    log.append_records(15, NOW - 1000)
    log.write(hw=30)
    assert segment_bases(log.dir) == [0, 5, 10, 15, 20, 25]
    return log


def corrupt_magic(log: KafkaLog, base: int) -> None:
    """An unknown record batch magic: reading this .log is a FormatError."""
    path = log.dir / f"{base:020d}.log"
    data = bytearray(path.read_bytes())
    data[16] = 9
    path.write_bytes(bytes(data))


def future_time_index(log: KafkaLog, base: int) -> None:
    """A .timeindex whose last entry says an hour from now (the strict mode reads it)."""
    path = log.dir / f"{base:020d}.timeindex"
    path.write_bytes(path.read_bytes() + struct.pack(">qi", NOW + 3_600_000, 4))


def plan(log: KafkaLog, *, compat: bool = False):  # type: ignore[no-untyped-def]
    return plan_one_partition(log.log_dir, CFG, NOW, time_index_compat=compat)


def verdicts(p) -> list[tuple[Verdict, Reason]]:  # type: ignore[no-untyped-def]
    return [(d.verdict, d.reason) for d in p.decisions]


INTACT = [
    *[(Verdict.DELETE, Reason.RETENTION_MS_BREACH)] * 3,
    (Verdict.KEEP, Reason.WITHIN_RETENTION),
    (Verdict.KEEP, Reason.AFTER_FIRST_KEPT),
    (Verdict.KEEP, Reason.WITHIN_RETENTION),  # the active one: read for the LEO anyway
]


def test_behind_the_first_kept_segment_nothing_is_read(tmp_path: Path) -> None:
    """The segments between the first kept one and the active one are never opened: they
    carry no identity and say where the prefix ended; deletions carry the identity an
    ``lstat`` gives now, which is what the executor re-checks."""
    log = six_segments(tmp_path)
    p = plan(log)
    assert verdicts(p) == INTACT
    first_kept = p.decisions[3]
    assert first_kept.path in (p.decisions[4].detail or "")
    assert "within_retention" in (p.decisions[4].detail or "")
    assert p.decisions[4].identity is None  # never stat'ed, never read
    for d in p.decisions[:3]:
        assert d.identity == identity_of(os.lstat(d.path))
    segs = p.partition.segments
    assert segs[4].known_largest(False) is None
    assert segs[5].known_largest(False) is not None  # the active one, read for the LEO


def test_corrupt_segment_behind_the_prefix_changes_nothing(tmp_path: Path) -> None:
    """A .log that cannot be read, behind the first kept segment: the same plan as with it
    intact (Kafka's pass never reaches it either), and the same deletions carried out."""
    log = six_segments(tmp_path)
    corrupt_magic(log, 20)
    p = plan(log)
    assert verdicts(p) == INTACT
    r = run_offline(str(log.log_dir), lambda _t: CFG, now_ms=NOW)
    assert segment_bases(log.dir) == [15, 20, 25]
    assert [d.reason for d in r.plans[0].deletions] == [Reason.RETENTION_MS_BREACH] * 3


def test_corrupt_segment_inside_the_prefix_stops_it_and_is_reported(tmp_path: Path) -> None:
    """The same fault in the second expired segment: the time pass reads it, cannot judge
    it, and stops there; the plan names the fault and keeps everything behind it."""
    log = six_segments(tmp_path)
    corrupt_magic(log, 5)
    p = plan(log)
    assert verdicts(p) == [
        (Verdict.DELETE, Reason.RETENTION_MS_BREACH),
        (Verdict.KEEP, Reason.UNREADABLE),
        *[(Verdict.KEEP, Reason.AFTER_FIRST_KEPT)] * 3,
        (Verdict.KEEP, Reason.WITHIN_RETENTION),
    ]
    assert "magic 9" in (p.decisions[1].detail or "")
    assert all(p.decisions[1].path in (d.detail or "") for d in p.decisions[2:5])
    run_offline(str(log.log_dir), lambda _t: CFG, now_ms=NOW)
    assert segment_bases(log.dir) == [5, 10, 15, 20, 25]


def test_strict_mode_future_time_index_behind_the_prefix_changes_nothing(tmp_path: Path) -> None:
    """Strict mode (§4.3: the time index decides): a time index claiming the future in a
    segment behind the first kept one is never read."""
    log = six_segments(tmp_path)
    future_time_index(log, 20)
    assert verdicts(plan(log, compat=True)) == INTACT


def test_strict_mode_future_time_index_inside_the_prefix_pins_it(tmp_path: Path) -> None:
    """The same time index in the second segment: it is read, it is in the future, and it
    pins itself and everything behind it, named in the plan."""
    log = six_segments(tmp_path)
    future_time_index(log, 5)
    p = plan(log, compat=True)
    assert verdicts(p) == [
        (Verdict.DELETE, Reason.RETENTION_MS_BREACH),
        *[(Verdict.KEEP, Reason.FUTURE_TIMESTAMP)] * 4,
        (Verdict.KEEP, Reason.WITHIN_RETENTION),  # the active one's own (batch) timestamp
    ]
    assert "in the future" in (p.decisions[1].detail or "")
    assert all(p.decisions[1].path in (d.detail or "") for d in p.decisions[2:5])


def test_future_active_segment_is_still_named(tmp_path: Path) -> None:
    """The active segment is read anyway (for the log end offset), so a future timestamp in
    it is told even behind the first kept segment."""
    log = KafkaLog(tmp_path, segment_bytes=5 * R)
    log.append_records(5, OLD)
    log.append_records(5, NOW - 1000)
    log.append_records(5, NOW - 1000)
    log.append_records(1, NOW + 3_600_000)
    log.write(hw=16)
    p = plan(log)
    assert [d.reason for d in p.decisions] == [
        Reason.RETENTION_MS_BREACH,
        Reason.WITHIN_RETENTION,
        Reason.AFTER_FIRST_KEPT,
        Reason.FUTURE_TIMESTAMP,
    ]


def test_size_pass_reads_sizes_not_batches(tmp_path: Path) -> None:
    """retention.bytes needs every size (one stat each) but no batch: a corrupt .log behind
    the size prefix does not matter when the time pass is off."""
    log = six_segments(tmp_path)
    corrupt_magic(log, 20)
    snap = scan_log_dir(str(log.log_dir))
    (part,) = snap.partitions
    p = plan_partition(
        part,
        TopicConfig(retention_ms=-1, retention_bytes=4 * 5 * R),
        now_ms=NOW,
        high_watermarks=snap.high_watermarks,
        log_start_offsets=snap.log_start_offsets,
    )
    assert [d.reason for d in p.deletions] == [Reason.RETENTION_BYTES_BREACH] * 2
    assert {d.reason for d in p.decisions[2:]} == {Reason.WITHIN_RETENTION}
    assert all(d.identity is not None for d in p.decisions)  # every size was needed


def test_segment_replaced_by_a_symlink_after_the_scan_is_never_followed(tmp_path: Path) -> None:
    """A .log swapped for a symlink between the listing and the read: the read refuses it
    (O_NOFOLLOW), the partition's prefix stops there, nothing outside is read."""
    log = six_segments(tmp_path)
    snap = scan_log_dir(str(log.log_dir))
    (part,) = snap.partitions
    victim = log.dir / f"{0:020d}.log"
    outside = tmp_path / "outside.log"
    outside.write_bytes(victim.read_bytes())
    victim.unlink()
    victim.symlink_to(outside)
    p = plan_partition(
        part,
        CFG,
        now_ms=NOW,
        high_watermarks=snap.high_watermarks,
        log_start_offsets=snap.log_start_offsets,
    )
    assert p.decisions[0].reason is Reason.UNREADABLE
    assert not p.deletions


def test_store_stats_count_the_segments_never_examined(tmp_path: Path) -> None:
    """The daemon's figures of what is left (segments, bytes, oldest mtime) include the kept
    segments the plan never stat'ed: they are measured after the round."""
    log = six_segments(tmp_path)
    (log.log_dir / "server.properties").write_text(f"node.id=1\nlog.dirs={log.log_dir}\n")
    server = load_server_properties(str(log.log_dir / "server.properties"))
    kind = Kafka(
        SimpleNamespace(config_hash="h", daemon=DaemonSettings()),
        server,
    )  # type: ignore[arg-type]
    snap = scan_log_dir(str(log.log_dir))
    (part,) = snap.partitions
    p = plan_partition(
        part,
        CFG,
        now_ms=NOW,
        high_watermarks=snap.high_watermarks,
        log_start_offsets=snap.log_start_offsets,
    )
    assert p.decisions[4].identity is None
    plan = KafkaPlan(NOW, "h", (LogDirPlan(str(log.log_dir), True, (p,)),), None)
    gone = frozenset(d.path for d in p.deletions)
    stats = kind.store_stats(plan, gone, None).kinds[Kind.KAFKA_SEGMENT]  # type: ignore[arg-type]
    left = [log.dir / f"{b:020d}.log" for b in (15, 20, 25)]
    assert stats.files == 3
    assert stats.bytes == sum(f.stat().st_size for f in left)
    assert stats.oldest_mtime_ms == min(f.stat().st_mtime_ns // 1_000_000 for f in left)
