"""Offline deletion (spec §9): what is left is a log dir the broker loads as if it had run
retention itself; with the broker's lock held by another process nothing is touched."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.offline import LogDirLock, OfflineResult, carry_out, run_offline
from retentiond.kinds.kafka.policy import TopicConfig, plan_partition
from retentiond.kinds.kafka.scan import scan_log_dir
from retentiond.reasons import Reason, Verdict
from tests.conftest import chattr
from tests.kinds.kafka.kafkalog import KafkaLog, R, leader_epochs, read_checkpoint, segment_bases

NOW = 1_700_000_000_000


def two_partitions(tmp_path: Path) -> tuple[KafkaLog, KafkaLog]:
    a = KafkaLog(tmp_path, "orders", 0, segment_bytes=5 * R, epochs=[(0, 0), (3, 12)])
    a.append_records(30, NOW - 10_000)
    a.write(hw=30)
    b = KafkaLog(tmp_path, "orders", 1, segment_bytes=5 * R)
    b.append_records(10, NOW)
    b.write(hw=10, log_start_offset=3)
    return a, b


def test_after_deletion_the_dir_is_consistent(tmp_path: Path) -> None:
    a, b = two_partitions(tmp_path)
    # a third partition whose LSO sits inside its new first segment keeps its checkpoint entry
    c = KafkaLog(tmp_path, "orders", 2, segment_bytes=5 * R)
    c.append_records(15, NOW)
    c.write(hw=15, log_start_offset=7)
    config = TopicConfig(retention_bytes=12 * R, retention_ms=-1)
    r = run_offline(str(tmp_path), lambda _t: config, now_ms=NOW)
    assert r.locked and not r.errors

    # contiguous: the survivors are a suffix, each starts where the previous ended
    assert segment_bases(a.dir) == [15, 20, 25]
    assert segment_bases(b.dir) == [0, 5]
    assert segment_bases(c.dir) == [5, 10]
    snap = scan_log_dir(str(tmp_path))
    for part in snap.partitions:
        segs = part.segments
        for s, nxt in itertools.pairwise(segs):
            assert s.summary.next_offset == nxt.base_offset
        # no orphan index or snapshot
        bases = {s.base_offset for s in segs}
        for p in Path(part.path).iterdir():
            parsed = fm.parse_segment_file_name(p.name)
            if parsed and parsed[1] != fm.SNAPSHOT_SUFFIX:
                assert parsed[0] in bases, p
            if parsed and parsed[1] == fm.SNAPSHOT_SUFFIX:
                assert parsed[0] >= min(bases), p
    assert not any(f for f, _ in snap.foreign)

    # the checkpoint parses; only partitions with LSO past their first segment are in it
    lso = read_checkpoint(tmp_path / "log-start-offset-checkpoint")
    assert lso == {("orders", 1): 3, ("orders", 2): 7}  # "orders-0" has LSO 15 = first base
    assert fm.parse_offset_checkpoint((tmp_path / "log-start-offset-checkpoint").read_text())
    assert not (tmp_path / "log-start-offset-checkpoint.tmp").exists()
    assert leader_epochs(a.dir) == [(3, 15)]

    # a second round finds nothing more to do
    again = run_offline(str(tmp_path), lambda _t: config, now_ms=NOW)
    assert not again.deleted


def test_lock_held_by_another_process_is_plan_only(tmp_path: Path) -> None:
    a, b = two_partitions(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
            "fcntl.lockf(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n",
            str(tmp_path / ".lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = sorted(str(p) for p in tmp_path.rglob("*"))
        config = TopicConfig(retention_ms=0)
        r = run_offline(str(tmp_path), lambda _t: config, now_ms=NOW + 10**9)
        assert not r.locked and not r.deleted and not r.created
        reasons = [d for p in r.plans for d in p.decisions if d.reason is Reason.BROKER_RUNNING]
        assert reasons and all(d.verdict is Verdict.KEEP for d in reasons)
        assert all(d.detail == "would go: retention_ms_breach" for d in reasons)
        assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    finally:
        holder.kill()
        holder.wait()
    # the broker has stopped: the same round deletes
    with LogDirLock(str(tmp_path)) as lock:
        assert lock.acquire()
    r = run_offline(str(tmp_path), lambda _t: TopicConfig(retention_ms=0), now_ms=NOW + 10**9)
    assert r.locked and r.deleted
    assert segment_bases(a.dir) == [30] and segment_bases(b.dir) == [10]


def test_symlinks_inside_a_log_dir_are_never_followed(tmp_path: Path) -> None:
    """A configured log dir may be a symlink; a symlinked partition dir or segment inside it
    is foreign: never scanned, never deleted from. A symlinked segment is one the broker's
    loader would follow (``File::isFile``), so its partition is left alone altogether."""
    real = tmp_path / "real"
    a = KafkaLog(real, "orders", 0, segment_bytes=5 * R)
    a.append_records(15, 10)
    a.write(hw=15)
    outside = KafkaLog(tmp_path / "elsewhere", "victim", 0, segment_bytes=5 * R)
    outside.append_records(15, 10)
    outside.write(hw=15)
    (real / "victim-0").symlink_to(outside.dir)
    (a.dir / f"{99:020d}.log").symlink_to(outside.dir / f"{0:020d}.log")
    link = tmp_path / "logs"
    link.symlink_to(real)
    r = run_offline(str(link), lambda _t: TopicConfig(retention_ms=0), now_ms=NOW)
    assert {p.partition.topic for p in r.plans} == {"orders"}
    assert segment_bases(a.dir) == [0, 5, 10, 99]  # 99: the symlink, left alone
    assert (a.dir / f"{99:020d}.log").is_symlink()
    (plan,) = r.plans
    assert not plan.deletions and "symlink" in (plan.decisions[0].detail or "")
    assert segment_bases(outside.dir) == [0, 5, 10]
    foreign = dict(scan_log_dir(str(link)).foreign)
    assert str(link / "victim-0") in foreign


def test_partition_dir_swapped_for_a_symlink_after_the_scan(tmp_path: Path) -> None:
    """The unlinks reach the partition dir without following a link: a dir replaced by a
    symlink between scan and deletion fails there, and nothing it points at is touched."""
    a = KafkaLog(tmp_path / "logs", "orders", 0, segment_bytes=5 * R)
    a.append_records(15, 10)
    a.write(hw=15)
    twin = KafkaLog(tmp_path / "elsewhere", "orders", 0, segment_bytes=5 * R)
    twin.append_records(15, 10)
    twin.write(hw=15)
    snap = scan_log_dir(str(a.log_dir))
    plans = [
        plan_partition(
            p,
            TopicConfig(retention_ms=0),
            now_ms=NOW,
            high_watermarks=snap.high_watermarks,
            log_start_offsets=snap.log_start_offsets,
        )
        for p in snap.partitions
    ]
    a.dir.rename(a.dir.with_name("moved"))
    a.dir.symlink_to(twin.dir)
    result = OfflineResult(str(a.log_dir), True)
    carry_out(snap, plans, result)
    assert result.errors and not result.deleted
    assert segment_bases(twin.dir) == [0, 5, 10]


def test_only_regular_companions_are_unlinked(tmp_path: Path) -> None:
    """A segment's indexes, snapshot and ``.deleted`` leftovers go with it only when they are
    regular files: a symlink under such a name is left alone (never followed, never
    removed), said so in the result, and reported as foreign by the scan; the segment's own
    ``.log`` still goes."""
    a = KafkaLog(tmp_path / "logs", "orders", 0, segment_bytes=5 * R)
    a.append_records(15, 10)
    a.write(hw=15)
    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    index = a.dir / f"{0:020d}.index"
    index.unlink()
    index.symlink_to(target)
    leftover = a.dir / f"{77:020d}.log.deleted"
    leftover.symlink_to(target)
    snap = scan_log_dir(str(a.log_dir))
    assert {str(index), str(leftover)} <= set(dict(snap.foreign))
    r = run_offline(str(a.log_dir), lambda _t: TopicConfig(retention_ms=0), now_ms=NOW)
    assert segment_bases(a.dir) == [15]  # 0, 5 and 10 went, the roll made 15
    assert index.is_symlink() and leftover.is_symlink()
    assert target.read_bytes() == b"keep me"
    assert any(str(index) in e for e in r.errors)


def test_a_companion_that_cannot_be_removed_is_an_error_not_a_stop(immutable_dir: Path) -> None:
    """An immutable ``.timeindex`` (unlink: EPERM) after its ``.log`` went: the round says so
    in its errors and goes on with the other segments, the other partition and the
    log-start-offset checkpoint, instead of ending with the exception."""
    a = KafkaLog(immutable_dir / "logs", "orders", 0, segment_bytes=5 * R)
    a.append_records(15, NOW - 10_000)
    a.write(hw=15, log_start_offset=3)
    b = KafkaLog(immutable_dir / "logs", "orders", 1, segment_bytes=5 * R)
    b.append_records(15, NOW - 10_000)
    b.write(hw=15, log_start_offset=2)
    checkpoint = a.log_dir / "log-start-offset-checkpoint"
    assert read_checkpoint(checkpoint) == {("orders", 0): 3, ("orders", 1): 2}
    stuck = a.dir / f"{0:020d}.timeindex"
    chattr("+i", stuck)
    try:
        r = run_offline(str(a.log_dir), lambda _t: TopicConfig(retention_ms=0), now_ms=NOW)
    finally:
        chattr("-i", stuck)
    assert [e for e in r.errors if str(stuck) in e and "not removed" in e], r.errors
    assert segment_bases(a.dir) == [15] and segment_bases(b.dir) == [15]
    assert not (a.dir / f"{5:020d}.timeindex").exists()  # the next segments' companions went
    # rewritten: both partitions now start at their first segment (15), so no entry is left
    assert read_checkpoint(checkpoint) == {}
