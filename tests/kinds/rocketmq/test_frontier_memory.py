"""The frontier memory (``kinds.rocketmq.frontiers``): what a daemon's round found of each
queue's frontiers, used by later counts while the queue directory keeps its identity.

Real files: a generated store with groups caught up, behind, far behind and from the start,
the progress written byte-exactly by the test-only writer, a dry-run round in process (as a
daemon's) writing the memory beside the scan cache, and the losses compared with a count
that reads every queue and with a full read of the queues by the test itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from retentiond.engine.cleaner import Cleaner
from retentiond.engine.loss import Loss
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.rocketmq.formats import CQ_UNIT
from retentiond.kinds.rocketmq.frontiers import MAGIC, Frontiers, memory_file
from retentiond.kinds.rocketmq.loss import commitlog_losses
from retentiond.kinds.rocketmq.progress import read_progress
from retentiond.kinds.rocketmq.scan import DIR_KEY
from retentiond.storegen.rocketmq import GeneratedStore
from tests.kinds.rocketmq.progress_files import consumer_offset_json, write_text
from tests.kinds.rocketmq.test_loss_acceptance import units
from tests.kinds.rocketmq.test_loss_worker import SPEC, build

NOW_MS = int(time.time() * 1000)


def daemon_round(config: Path) -> None:
    """A dry-run round as a daemon's: it records the frontiers it counts (beside the scan
    cache, in the journal directory a daemon makes)."""
    (config.parent / "journal").mkdir(exist_ok=True)
    Cleaner(kind_for(load_settings(config)), clock_ms=lambda: NOW_MS).run_round(dry_run=True)


def files_of(config: Path) -> list[tuple[int, int]]:
    """The CommitLog files the plan deletes, as (start, end)."""
    kind = kind_for(load_settings(config))
    plan = Cleaner(kind, announce_proc_view=False, clock_ms=lambda: NOW_MS).plan()
    return [
        (d.start_offset or 0, d.end_offset or 0)
        for d in plan.commitlog.decisions  # type: ignore[attr-defined]
        if d.delete
    ]


def memory_of(store: GeneratedStore, tmp: Path) -> Frontiers:
    cq = str(store.root / "consumequeue")
    return Frontiers.load(memory_file(tmp / "journal", cq), cq, SPEC.cq_file_size, recording=False)


def counted(
    store: GeneratedStore, files: list[tuple[int, int]], memory: Frontiers | None
) -> list[Loss]:
    progress = read_progress(store.root)
    return commitlog_losses(
        progress, store.root / "consumequeue", SPEC.cq_file_size, files, memory=memory
    )


def by_hand(
    store: GeneratedStore, tmp: Path, files: list[tuple[int, int]]
) -> list[dict[tuple[str, str], int]]:
    """Each file's unread messages per (group, topic), from a full read of the queues."""
    table = json.loads((tmp / "offsets.json").read_text())
    out = []
    for start, end in files:
        want: dict[tuple[str, str], int] = {}
        for key, offsets in table.items():
            topic, group = key.split("@")
            n = sum(
                1 for qid, o in offsets.items()
                for i, p in enumerate(units(store, topic, int(qid)))
                if i >= o and start <= p < end
            )  # fmt: skip
            if n:
                want[group, topic] = n
        out.append(want)
    return out


def as_counts(losses: list[Loss] | list[Loss | None]) -> list[dict[tuple[str, str], int]]:
    return [{(g.group, g.topic): g.messages for g in loss.groups} for loss in losses if loss]


def look(
    memory: Frontiers, bounds: tuple[int, ...], key: bytes
) -> tuple[int, int, list[int]] | None:
    get = memory.reader(bounds)
    return None if get is None else get(key)


def queue_key(path: Path) -> bytes:
    st = os.stat(path, follow_symlinks=False)
    return DIR_KEY.pack(st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def settle(store: GeneratedStore) -> None:
    """Queue directories last changed more than a second ago (a count does not record a
    directory changed since: its listing might be racy)."""
    old = (NOW_MS - 10_000) * 1_000_000
    for topic in SPEC.topic_names():
        for qid in range(SPEC.queues_per_topic):
            os.utime(store.root / "consumequeue" / topic / str(qid), ns=(old, old))


def test_the_memory_gives_the_losses_a_full_read_gives(tmp_path: Path) -> None:
    store, config = build(tmp_path / "store", tmp_path)
    settle(store)
    daemon_round(config)
    memory = memory_of(store, tmp_path)
    assert len(memory) > 0
    files = files_of(config)
    assert files
    bounds = tuple(sorted({b for f in files for b in f}))
    q = store.root / "consumequeue" / SPEC.topic_names()[0] / "0"
    assert look(memory, bounds, queue_key(q)) is not None  # the queue is served from it
    want = by_hand(store, tmp_path, files)
    assert as_counts(counted(store, files, memory)) == want
    assert counted(store, files, memory) == counted(store, files, None)
    # and the plan, which reads the memory, says the same
    kind = kind_for(load_settings(config))
    plan = Cleaner(kind, announce_proc_view=False, clock_ms=lambda: NOW_MS).plan()
    got = [d.loss for d in plan.commitlog.decisions if d.delete]  # type: ignore[attr-defined]
    assert as_counts(got) == want


def test_a_queue_file_replaced_or_deleted_is_read_again(tmp_path: Path) -> None:
    """A queue directory whose entries changed has another identity: its record is not used.
    The units are made to say something else, so a record used would show."""
    store, config = build(tmp_path / "store", tmp_path)
    settle(store)
    daemon_round(config)
    files = files_of(config)
    topic = SPEC.topic_names()[0]
    qdir = store.root / "consumequeue" / topic / "0"
    names = sorted(os.listdir(qdir))
    # Replaced: the first file written again with every unit moved past the deleted files
    # (as if those messages were elsewhere), renamed into place.
    first = qdir / names[0]
    data = bytearray(first.read_bytes())
    past = files[-1][1]
    for at in range(0, len(data) - len(data) % 20, 20):
        _phy, size, tags = CQ_UNIT.unpack_from(data, at)
        if size > 0:
            CQ_UNIT.pack_into(data, at, past + at, size, tags)
    tmp = qdir.parent / "replacement.tmp"
    tmp.write_bytes(bytes(data))
    os.replace(tmp, first)
    memory = memory_of(store, tmp_path)
    assert as_counts(counted(store, files, memory)) == by_hand(store, tmp_path, files)
    assert counted(store, files, memory) == counted(store, files, None)
    # Deleted: the queue's first file gone (its readers clamped to the next one).
    settle(store)
    daemon_round(config)
    os.unlink(first)
    memory = memory_of(store, tmp_path)
    assert counted(store, files, memory) == counted(store, files, None)


def test_a_reader_below_the_recorded_floor_is_counted_from_the_queue(tmp_path: Path) -> None:
    store, config = build(tmp_path / "store", tmp_path)
    settle(store)
    daemon_round(config)
    files = files_of(config)
    # every group now reads from the start: below every floor the round recorded
    table = json.loads((tmp_path / "offsets.json").read_text())
    table = {k: {q: 0 for q in v} for k, v in table.items()}
    (tmp_path / "offsets.json").write_text(json.dumps(table))
    write_text(store.root / "config" / "consumerOffset.json", consumer_offset_json(table))
    memory = memory_of(store, tmp_path)
    assert as_counts(counted(store, files, memory)) == by_hand(store, tmp_path, files)


def test_a_foreign_or_corrupt_memory_is_ignored(tmp_path: Path) -> None:
    store, config = build(tmp_path / "store", tmp_path)
    settle(store)
    daemon_round(config)
    files = files_of(config)
    want = counted(store, files, None)
    cq = str(store.root / "consumequeue")
    path = memory_file(tmp_path / "journal", cq)
    good = path.read_bytes()
    assert good.startswith(MAGIC)
    cases = {
        "torn": good[: len(good) // 2],
        "flipped": good[:-40] + bytes([good[-40] ^ 1]) + good[-39:],
        "not ours": b"something else entirely\n" * 10,
        "empty": b"",
    }
    for what, data in cases.items():
        path.write_bytes(data)
        memory = memory_of(store, tmp_path)
        assert len(memory) == 0, what
        assert counted(store, files, memory) == want, what
    # another store's memory (another path, or another file size) holds nothing for this one
    path.write_bytes(good)
    other = Frontiers.load(path, cq + "-elsewhere", SPEC.cq_file_size)
    assert len(other) == 0
    assert len(Frontiers.load(path, cq, SPEC.cq_file_size * 2)) == 0


def test_a_round_writes_what_it_counted_and_a_plan_writes_nothing(tmp_path: Path) -> None:
    store, config = build(tmp_path / "store", tmp_path)
    settle(store)
    path = memory_file(tmp_path / "journal", str(store.root / "consumequeue"))
    files_of(config)
    assert not path.exists()  # plan changes nothing
    daemon_round(config)
    assert path.exists()
    first = path.read_bytes()
    memory = memory_of(store, tmp_path)
    queues = SPEC.topics * SPEC.queues_per_topic
    assert 0 < len(memory) <= queues
    daemon_round(config)  # nothing moved: the same records
    assert len(memory_of(store, tmp_path)) == len(memory)
    assert len(path.read_bytes()) == len(first)


def test_the_memory_round_trips_records_of_several_counts(tmp_path: Path) -> None:
    """Two counts of one round (this round's files, then the later ones) in one file; a
    boundary neither counted is not known."""
    memory = Frontiers(recording=True)
    a, b = (0, 10, 20), (20, 30, 40)
    k1, k2 = b"k" * 32, b"j" * 32
    memory.put(k1, 5, 0, a, [(0, 5), (1, 7)])
    memory.put(k1, 5, 0, b, [(0, 7), (1, 9), (2, -1)])
    memory.put(k2, 3, -1, b, [(0, 3)])
    path = tmp_path / "f.bin"
    assert memory.save(path, "/cq", 40)
    back = Frontiers.load(path, "/cq", 40, recording=False)
    assert look(back, (0, 10, 20, 30), k1) == (5, 0, [5, 7, 7, 9])
    assert look(back, (0, 10, 20, 30, 40), k1) is None  # 40: no unit at or above it yet
    assert look(back, (20, 30, 40), k2) == (3, -1, [3, 3, 3])
    assert look(back, (0, 20), k2) is None  # 0 was not counted for it
    assert look(back, (0, 15), k1) is None  # 15 was counted for no queue


def test_a_store_with_longer_queue_files_counts_the_same(tmp_path: Path) -> None:
    spec = dataclasses.replace(SPEC, cq_file_size=1000 * 20)
    store, config = build(tmp_path / "store", tmp_path, spec=spec)
    settle(store)
    daemon_round(config)
    files = files_of(config)
    cq = str(store.root / "consumequeue")
    memory = Frontiers.load(memory_file(tmp_path / "journal", cq), cq, spec.cq_file_size)
    assert len(memory) > 0
    progress = read_progress(store.root)
    with_memory = commitlog_losses(
        progress, store.root / "consumequeue", spec.cq_file_size, files, memory=memory
    )
    without = commitlog_losses(progress, store.root / "consumequeue", spec.cq_file_size, files)
    assert with_memory == without
