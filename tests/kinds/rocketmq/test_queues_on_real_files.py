"""ConsumeQueue and index deletion by CommitLog offset on real files (MappedFileQueueTest
deleteExpiredFileByOffset, the index service rules; spec §4.10-4.13, §5.2)."""

from __future__ import annotations

import os

from retentiond.kinds.rocketmq.queues import plan_index, plan_queues
from retentiond.kinds.rocketmq.reader import BinaryReader
from retentiond.kinds.rocketmq.scan import iter_queues
from retentiond.reasons import Reason
from retentiond.storegen.rocketmq import StoreSpec, generate_store

# MappedFileQueueTest: 256 units per 5120-B file, 2048 units -> 8 files in one queue.
BY_OFFSET = StoreSpec(
    commitlog_file_size=64 * 1024, cq_file_size=5120, max_hash_slot_num=64, max_index_num=300,
    messages=2048, message_size=100, topics=1, queues_per_topic=1, topic_prefix="T",
    oldest_age_hours=0, preallocate=False,
)  # fmt: skip


def plan(store, min_offset, last=0, reader=None, memo=None):
    from retentiond.kinds.rocketmq.scan import _scan_index

    index = _scan_index(str(store.root / "index"), [])
    return plan_queues(
        iter_queues(str(store.root / "consumequeue"), []), index, str(store.root / "index"),
        min_offset=min_offset, last_min_offset=last,
        reader=reader or BinaryReader(store.spec.cq_file_size), memo=memo,
    )  # fmt: skip


def test_everything_below_the_minimum_goes_but_the_newest_file(tmp_path):
    store = generate_store(tmp_path / "s", BY_OFFSET)
    files = store.queues[("T", 0)]
    assert len(files) == 8
    qp = plan(store, store.max_offset + 1)
    (q,) = qp.queues
    assert q.delete_count == 7
    assert [d.reason for d in q.decisions()][-1] is Reason.NEWEST_FILE


def test_a_file_with_a_live_last_unit_stops_the_queue(tmp_path):
    store = generate_store(tmp_path / "s", BY_OFFSET)
    files = store.queues[("T", 0)]
    # the minimum falls inside file 3: files 0-2 go, 3 holds a live offset, 4-7 stay
    qp = plan(store, files[3].last_commitlog_offset)
    (q,) = qp.queues
    assert q.delete_count == 3
    assert q.stop.reason is Reason.HOLDS_LIVE_OFFSET
    assert q.stop.end_offset == files[3].last_commitlog_offset
    # strictly below: a minimum equal to the last unit keeps the file (upstream's "<")
    assert plan(store, files[2].last_commitlog_offset).queues[0].delete_count == 2


def test_nothing_is_examined_when_the_minimum_did_not_move(tmp_path):
    store = generate_store(tmp_path / "s", BY_OFFSET)
    reader = BinaryReader(store.spec.cq_file_size)
    qp = plan(store, 1000, last=1000, reader=reader)
    assert not qp.examined and qp.skip_reason is Reason.MIN_OFFSET_UNCHANGED
    assert reader.reads == 0


def test_values_of_full_files_are_read_once_then_reused(tmp_path):
    """The values an earlier decision read (the memo) are reused, each after an lstat (a
    fresh listing each time here: nothing is trusted without one)."""
    store = generate_store(tmp_path / "s", BY_OFFSET)
    reader, memo = BinaryReader(store.spec.cq_file_size), {}
    files = store.queues[("T", 0)]
    plan(store, files[3].last_commitlog_offset, reader=reader, memo=memo)
    assert reader.reads == 4
    plan(store, files[3].last_commitlog_offset + 1, last=0, reader=reader, memo=memo)
    assert reader.reads == 5  # only file 4 had not been read
    # a file rewritten in place (same size, mtime put back) is read again: its size, inode
    # and mtime match, so this is what the executor's re-check is for; a truncated one is
    # seen by its size
    os.truncate(files[2].path, 100)
    qp = plan(store, files[3].last_commitlog_offset + 1, last=0, reader=reader, memo=memo)
    assert reader.reads == 6
    assert qp.queues[0].delete_count == 2 and qp.queues[0].stop.reason is Reason.UNREADABLE


def test_unreadable_consume_queue_files_stop_the_queue_and_are_reported(tmp_path):
    store = generate_store(tmp_path / "s", BY_OFFSET)
    files = store.queues[("T", 0)]
    os.truncate(files[1].path, 100)  # truncated
    qp = plan(store, store.max_offset + 1)
    (q,) = qp.queues
    assert q.delete_count == 1
    assert q.stop.reason is Reason.UNREADABLE
    assert qp.problems and str(files[1].path) in qp.problems[0]


def test_zero_filled_last_unit_is_never_taken_for_offset_zero(tmp_path):
    store = generate_store(tmp_path / "s", BY_OFFSET)
    files = store.queues[("T", 0)]
    with open(files[0].path, "r+b") as fh:
        fh.seek(5120 - 20)
        fh.write(b"\0" * 20)
    (q,) = plan(store, store.max_offset + 1).queues
    assert q.delete_count == 0 and q.stop.reason is Reason.UNREADABLE


def test_index_files_below_the_minimum_go_and_the_newest_stays(tmp_path):
    store = generate_store(tmp_path / "s", BY_OFFSET)
    idx = store.index_files
    assert len(idx) >= 3
    ends = [f.header.end_phy_offset for f in idx]
    qp = plan(store, ends[1] + 1)
    verdicts = [d.delete for d in qp.index]
    assert verdicts == [True, True] + [False] * (len(idx) - 2)
    assert qp.index[2].reason is Reason.HOLDS_LIVE_OFFSET
    everything = plan_index(tuple(_index(store)), str(store.root / "index"), 1 << 62)
    assert [d.delete for d in everything] == [True] * (len(idx) - 1) + [False]
    assert everything[-1].reason is Reason.NEWEST_FILE


def test_truncated_index_header_stops_the_index_pass(tmp_path):
    store = generate_store(tmp_path / "s", BY_OFFSET)
    os.truncate(store.index_files[1].path, 10)
    qp = plan(store, 1 << 62)
    assert [d.delete for d in qp.index][:2] == [True, False]
    assert qp.index[1].reason is Reason.UNREADABLE


def _index(store):
    from retentiond.kinds.rocketmq.scan import _scan_index

    return _scan_index(str(store.root / "index"), [])


def _age_dirs(root, seconds=3600):
    """Directory mtimes in the past: listings of them are not 'racy' and may be cached."""
    old = os.stat(root).st_mtime - seconds
    for dirpath, _, _ in os.walk(root):
        os.utime(dirpath, (old, old))


def test_unchanged_directories_are_not_listed_again_and_changes_are_seen(tmp_path):
    from retentiond.kinds.rocketmq.scan import QueueLister

    store = generate_store(tmp_path / "s", MANY_QUEUES)
    cq = str(store.root / "consumequeue")
    _age_dirs(cq)
    lister = QueueLister()
    first = list(lister.iter_queues(cq, []))
    assert lister.listed == 1 + 2 + 6  # consumequeue/, 2 topics, 6 queues
    second = list(lister.iter_queues(cq, []))
    assert lister.listed == 0 and all(q.unchanged for q in second)
    assert [q.names for q in second] == [q.names for q in first]
    # a new file changes its directory's mtime: that queue (only) is listed again
    target = second[0]
    new_name = f"{int(target.names[-1]) + MANY_QUEUES.cq_file_size:020d}"
    (store.root / "consumequeue" / target.topic / str(target.queue_id) / new_name).write_bytes(b"")
    third = {q.directory: q for q in lister.iter_queues(cq, [])}
    assert lister.listed == 1
    assert third[target.directory].names[-1] == new_name
    assert not third[target.directory].unchanged


def test_a_new_topic_is_seen_through_a_symlinked_consumequeue_directory(tmp_path):
    """consumequeue/ may be a symlink to another disk (taken as configured): its listing is
    remembered under the target directory's identity, so a topic created there is listed."""
    from retentiond.kinds.rocketmq.scan import QueueLister

    store = generate_store(tmp_path / "s", MANY_QUEUES)
    real = tmp_path / "other-disk"
    os.rename(store.root / "consumequeue", real)
    os.symlink(real, store.root / "consumequeue")
    _age_dirs(str(real))
    os.utime(store.root / "consumequeue", (0, 0), follow_symlinks=False)
    cq = str(store.root / "consumequeue")
    lister = QueueLister()
    first = {q.directory for q in lister.iter_queues(cq, [])}
    (real / "NewTopic" / "0").mkdir(parents=True)
    (real / "NewTopic" / "0" / f"{0:020d}").write_bytes(b"")
    second = {q.directory for q in lister.iter_queues(cq, [])}
    assert second == first | {f"{cq}/NewTopic/0"}


def test_memoised_decisions_are_reused_only_while_still_right(tmp_path):
    from retentiond.kinds.rocketmq.scan import QueueLister

    store = generate_store(tmp_path / "s", MANY_QUEUES)
    cq = str(store.root / "consumequeue")
    _age_dirs(cq)
    lister, reader, memo = QueueLister(), BinaryReader(MANY_QUEUES.cq_file_size), {}

    def run(min_offset):
        return plan_queues(lister.iter_queues(cq, []), (), "/none", min_offset=min_offset,
                           last_min_offset=0, reader=reader, memo=memo)  # fmt: skip

    lowest = min(files[0].last_commitlog_offset for files in store.queues.values())
    run(1)  # first listing
    a = run(2)  # listings now cached (unchanged)
    b = run(3)  # same listings, minimum still below every stop: the same decisions
    assert all(x is y for x, y in zip(a.queues, b.queues, strict=True))
    c = run(lowest + 1)  # now at least one queue's first file is wholly below
    assert sum(q.delete_count for q in c.queues) >= 1
    fresh = plan_queues(
        iter_queues(cq, []),
        (),
        "/none",
        min_offset=lowest + 1,
        last_min_offset=0,
        reader=BinaryReader(MANY_QUEUES.cq_file_size),
    )
    assert [q.delete_count for q in c.queues] == [q.delete_count for q in fresh.queues]


MANY_QUEUES = StoreSpec(
    commitlog_file_size=64 * 1024, cq_file_size=60, max_hash_slot_num=16, max_index_num=64,
    messages=120, message_size=200, topics=2, queues_per_topic=3, oldest_age_hours=0,
)  # fmt: skip
