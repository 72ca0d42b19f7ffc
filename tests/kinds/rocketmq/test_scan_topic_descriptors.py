"""The queue walk stats each queue directory relative to its topic directory, opened once per
topic (``scan.QueueLister.iter_queues``): the descriptor never outlives the walk, however the
walk ends, and a topic replaced by a symlink during the walk is skipped, never followed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from retentiond.kinds.rocketmq.scan import QueueLister
from retentiond.storegen.rocketmq import StoreSpec, generate_store

SPEC = StoreSpec(
    commitlog_file_size=64 * 1024, cq_file_size=600, max_hash_slot_num=64, max_index_num=300,
    messages=600, message_size=100, topics=3, queues_per_topic=2, topic_prefix="T",
    oldest_age_hours=0, preallocate=False,
)  # fmt: skip


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_no_descriptor_outlives_a_walk_however_it_ends(tmp_path: Path) -> None:
    store = generate_store(tmp_path / "s", SPEC)
    cq = str(store.root / "consumequeue")
    before = _open_fds()
    assert len(list(QueueLister().iter_queues(cq, []))) == 6  # to the end
    walk = QueueLister().iter_queues(cq, [])
    next(walk)  # a topic's descriptor is open while the walk is inside it
    assert len(_open_fds() - before) == 1
    walk.close()  # a consumer that stops early
    assert _open_fds() - before == set()
    walk = QueueLister().iter_queues(cq, [])
    next(walk)
    del walk  # dropped without a close
    assert _open_fds() - before == set()


def test_a_topic_replaced_by_a_symlink_during_the_walk_is_not_followed(tmp_path: Path) -> None:
    store = generate_store(tmp_path / "s", SPEC)
    cq = store.root / "consumequeue"
    outside = tmp_path / "outside"
    shutil.copytree(cq / "T1", outside)  # queue directories with real files, outside the store
    walk = QueueLister().iter_queues(str(cq), [])
    first = next(walk)  # consumequeue/ is listed: every topic is a directory there
    others = sorted({"T0", "T1", "T2"} - {first.topic})
    victim = cq / others[-1]
    shutil.rmtree(victim)
    victim.symlink_to(outside, target_is_directory=True)
    rest = list(walk)
    assert {q.topic for q in rest} <= {first.topic, others[0]}
    assert not any(q.directory.startswith(str(victim)) for q in rest)
    assert all(os.path.realpath(q.directory).startswith(str(cq)) for q in [first, *rest])
