"""Generated stores, checked against the byte formats rather than against the generator's word.

The cleaner's tests trust ``generate_store``; these tests earn that trust by reading the files
back with the decoders and checking each cross-reference the broker relies on.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from retentiond.kinds.rocketmq.formats import (
    CQ_UNIT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SLOT_SIZE,
    MESSAGE_MAGIC_V1,
    decode_blank,
    decode_checkpoint,
    decode_cq_unit,
    decode_index_entry,
    decode_index_header,
    decode_message,
    decode_record_header,
    index_key_hash,
    is_never_written,
    iter_records,
    tags_code,
)
from retentiond.kinds.rocketmq.names import offset_to_name, parse_offset_name
from retentiond.storegen.rocketmq import (
    PRESETS,
    GeneratedStore,
    StoreSpec,
    generate_store,
    write_config,
)

NOW_MS = 1_790_000_000_000
HOUR_MS = 3_600_000
UPSTREAM = replace(PRESETS["upstream-test"], now_ms=NOW_MS)
# Several topics and queues, several files of every kind, a bit of everything.
MIXED = StoreSpec(
    commitlog_file_size=8 * 1024,
    cq_file_size=7 * CQ_UNIT_SIZE,
    max_hash_slot_num=16,
    max_index_num=20,
    messages=400,
    message_size=300,
    topics=3,
    queues_per_topic=2,
    keys="k{i} shared",
    tags="Tag{i}",
    oldest_age_hours=48.0,
    newest_age_hours=1.0,
    now_ms=NOW_MS,
)


def read(path: Path) -> bytes:
    return path.read_bytes()


def mtime_ms(path: Path) -> int:
    return os.stat(path).st_mtime_ns // 1_000_000


def commitlog_reader(store: GeneratedStore):
    """Bytes of the record at a physical offset, found through the summary's file list."""
    size = store.spec.commitlog_file_size
    by_start = {f.start_offset: read(f.path) for f in store.data_files}

    def at(offset: int, length: int) -> bytes:
        start = offset - offset % size
        return by_start[start][offset - start : offset - start + length]

    return at


# --- The §5.1 store -----------------------------------------------------------------------


def test_upstream_store_has_55_commitlog_8_cq_and_8_index_files(tmp_path):
    store = generate_store(tmp_path, UPSTREAM)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    assert names == [offset_to_name(128 * i) for i in range(55)]
    assert all(os.path.getsize(tmp_path / "commitlog" / n) == 128 for n in names)
    cq = sorted(os.listdir(tmp_path / "consumequeue" / "test" / "0"))
    assert cq == [offset_to_name(140 * i) for i in range(8)]
    assert all(os.path.getsize(tmp_path / "consumequeue/test/0" / n) == 140 for n in cq)
    index = sorted(os.listdir(tmp_path / "index"))
    assert len(index) == 8 and all(re.fullmatch(r"\d{17}", n) for n in index)
    assert all(os.path.getsize(tmp_path / "index" / n) == 600 for n in index)
    assert len(store.commitlog_files) == 55 and not any(f.preallocated for f in store.data_files)
    assert (store.min_offset, store.max_offset) == (0, 54 * 128 + 120)


def test_upstream_store_is_one_120_byte_message_and_an_8_byte_blank_per_file(tmp_path):
    store = generate_store(tmp_path, UPSTREAM)
    for i, f in enumerate(store.commitlog_files):
        data = read(f.path)
        msg = decode_message(data[:120])
        assert msg is not None
        h = msg.header
        assert (h.total_size, h.magic, h.queue_id, h.queue_offset, h.physical_offset) == (
            120,
            MESSAGE_MAGIC_V1,
            0,
            i,
            128 * i,
        )
        assert (msg.topic, msg.properties, len(msg.body)) == ("test", {"KEYS": "hello"}, 14)
        if i < 54:
            assert decode_blank(data[120:]) == 8
            assert f.write_position == 128
        else:  # the active file is not rolled: no blank, zero tail
            assert data[120:] == bytes(8)
            assert f.write_position == 120


def test_upstream_cq_and_index_files_match_the_worked_example(tmp_path):
    store = generate_store(tmp_path, UPSTREAM)
    files = store.queues[("test", 0)]
    assert [f.last_commitlog_offset for f in files] == [min(7 * k + 6, 54) * 128 for k in range(8)]
    assert [f.header.end_phy_offset for f in store.index_files] == [
        min(7 * k + 6, 54) * 128 for k in range(8)
    ]
    assert [f.header.begin_phy_offset for f in store.index_files] == [7 * k * 128 for k in range(8)]
    assert [f.header.index_count for f in store.index_files] == [8] * 7 + [7]
    assert [f.entry_count for f in store.index_files] == [7] * 7 + [6]
    last = read(files[-1].path)
    assert last[6 * CQ_UNIT_SIZE :] == bytes(140 - 6 * CQ_UNIT_SIZE)


def test_upstream_index_entries_chain_through_one_hash_slot(tmp_path):
    store = generate_store(tmp_path, UPSTREAM)
    key_hash = index_key_hash("test", "hello")
    slot = key_hash % 100
    for k, info in enumerate(store.index_files):
        data = read(info.path)
        header = decode_index_header(data[:INDEX_HEADER_SIZE])
        assert header == info.header and header.hash_slot_count == 1
        slot_value = int.from_bytes(data[40 + slot * 4 : 44 + slot * 4], "big", signed=True)
        assert slot_value == info.entry_count  # the newest entry of the bucket
        for n in range(1, info.entry_count + 1):
            at = INDEX_HEADER_SIZE + 100 * INDEX_SLOT_SIZE + n * INDEX_ENTRY_SIZE
            entry = decode_index_entry(data[at : at + INDEX_ENTRY_SIZE])
            assert entry is not None
            assert (entry.key_hash, entry.phy_offset, entry.prev_index) == (
                key_hash,
                (7 * k + n - 1) * 128,
                n - 1,
            )


# --- Cross-references in a mixed store ----------------------------------------------------


def test_every_cq_unit_points_at_its_message(tmp_path):
    store = generate_store(tmp_path, MIXED)
    at = commitlog_reader(store)
    seen = 0
    for (topic, queue_id), files in store.queues.items():
        for f in files:
            data = read(f.path)
            assert len(data) == MIXED.cq_file_size
            assert parse_offset_name(f.path.name) == f.start
            for j in range(f.unit_count):
                unit = decode_cq_unit(data[j * CQ_UNIT_SIZE : (j + 1) * CQ_UNIT_SIZE])
                assert unit is not None
                msg = decode_message(at(unit.commitlog_offset, unit.size))
                assert msg is not None
                h = msg.header
                assert (msg.topic, h.queue_id) == (topic, queue_id)
                assert h.queue_offset == f.start // CQ_UNIT_SIZE + j
                assert (h.physical_offset, h.total_size) == (unit.commitlog_offset, unit.size)
                assert unit.tags_code == tags_code(msg.properties["TAGS"])
                seen += 1
            assert data[f.unit_count * CQ_UNIT_SIZE :] == bytes(
                len(data) - f.unit_count * CQ_UNIT_SIZE
            )
            last = decode_cq_unit(data[(f.unit_count - 1) * 20 : f.unit_count * 20])
            assert last is not None and last.commitlog_offset == f.last_commitlog_offset
        assert all(f.unit_count == 7 for f in files[:-1])
    assert seen == MIXED.messages


def test_commitlog_files_walk_like_the_broker_recovers_them(tmp_path):
    store = generate_store(tmp_path, MIXED)
    data_files = store.data_files
    total = 0
    for k, f in enumerate(data_files):
        records = list(iter_records(read(f.path), f.start_offset))
        messages = [r for r in records if not r.is_blank]
        assert len(messages) == f.message_count
        assert messages[0].physical_offset == f.first_message_offset == f.start_offset
        assert messages[-1].physical_offset == f.last_message_offset
        assert all(r.header.physical_offset == r.physical_offset for r in messages)
        if k < len(data_files) - 1:  # every rolled file ends with a blank of >= 8 bytes
            assert records[-1].is_blank
            assert records[-1].physical_offset + records[-1].total_size == f.start_offset + f.size
        else:
            assert not records[-1].is_blank
        total += len(messages)
    assert total == MIXED.messages
    assert store.max_offset == data_files[-1].start_offset + data_files[-1].write_position


def test_index_headers_cover_the_real_offsets(tmp_path):
    store = generate_store(tmp_path, MIXED)
    at = commitlog_reader(store)
    slots = MIXED.max_hash_slot_num
    names = [f.path.name for f in store.index_files]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert sorted(os.listdir(tmp_path / "index")) == names
    previous_end = -1
    for f in store.index_files:
        data = read(f.path)
        assert len(data) == 40 + slots * 4 + MIXED.max_index_num * 20
        header = decode_index_header(data[:INDEX_HEADER_SIZE])
        assert header == f.header
        offsets = []
        for n in range(1, header.index_count):
            pos = INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE + n * INDEX_ENTRY_SIZE
            entry = decode_index_entry(data[pos : pos + INDEX_ENTRY_SIZE])
            assert entry is not None
            h = decode_record_header(at(entry.phy_offset, 128))
            assert h is not None and h.physical_offset == entry.phy_offset
            offsets.append(entry.phy_offset)
        assert header.begin_phy_offset == offsets[0] and header.end_phy_offset == offsets[-1]
        assert offsets[0] >= previous_end and offsets == sorted(offsets)
        previous_end = offsets[-1]
        assert f.full == (header.index_count == MIXED.max_index_num)
    # Two keys per message ("k{i} shared"): every message is indexed twice.
    assert sum(f.entry_count for f in store.index_files) == 2 * MIXED.messages


def test_file_mtimes_follow_the_last_write(tmp_path):
    store = generate_store(tmp_path, MIXED)
    data = store.data_files
    times = [mtime_ms(f.path) for f in data]
    assert times == [f.mtime_ms for f in data]
    assert times == sorted(times)
    assert times[-1] == NOW_MS - HOUR_MS
    assert times[0] - (NOW_MS - 48 * HOUR_MS) < 47 * HOUR_MS / len(data) * 2
    at = commitlog_reader(store)
    for f in store.iter_cq_files():
        assert mtime_ms(f.path) == f.mtime_ms
        header = decode_record_header(at(f.last_commitlog_offset, 128))
        assert header is not None and header.store_timestamp == f.mtime_ms
    for f in store.index_files:
        assert mtime_ms(f.path) == f.mtime_ms == f.header.end_timestamp


def test_multi_path_places_file_i_in_sorted_paths_i_mod_n(tmp_path):
    spec = replace(UPSTREAM, commitlog_paths=("p1", "p0", str(tmp_path / "p2")))
    store = generate_store(tmp_path, spec)
    placement = [tmp_path / "p0", tmp_path / "p1", tmp_path / "p2"]
    for i, f in enumerate(store.commitlog_files):
        assert f.path == placement[i % 3] / offset_to_name(128 * i)
        assert f.path.is_file()
    assert sum(len(os.listdir(p)) for p in placement) == 55
    assert not (tmp_path / "commitlog").exists()
    assert store.commitlog_dirs == (tmp_path / "p1", tmp_path / "p0", tmp_path / "p2")


def test_preallocated_file_is_zero_filled_and_last(tmp_path):
    for sparse in (False, True):
        root = tmp_path / f"sparse-{sparse}"
        store = generate_store(root, replace(MIXED, sparse=sparse))
        pre = store.commitlog_files[-1]
        assert pre.preallocated and sum(f.preallocated for f in store.commitlog_files) == 1
        last = store.data_files[-1]
        assert pre.start_offset == last.start_offset + last.size
        assert pre.path.name == offset_to_name(pre.start_offset)
        data = read(pre.path)
        assert len(data) == MIXED.commitlog_file_size and not any(data)
        assert is_never_written(data[:8])
        assert list(iter_records(data, pre.start_offset)) == []


def test_sparse_store_leaves_bodies_as_holes_and_still_decodes(tmp_path):
    spec = StoreSpec(
        commitlog_file_size=64 << 20,
        cq_file_size=60,
        messages=120,
        message_size=1 << 20,
        topics=2,
        queues_per_topic=3,
        sparse=True,
        now_ms=NOW_MS,
    )
    store = generate_store(tmp_path, spec)
    assert len(store.data_files) == 2 and store.commitlog_files[-1].preallocated
    for f in store.commitlog_files:
        st = os.stat(f.path)
        assert st.st_size == 64 << 20
        assert st.st_blocks * 512 < st.st_size / 50
    first = store.data_files[0]
    with open(first.path, "rb") as fh:
        record = fh.read(1 << 20)
    msg = decode_message(record)
    assert msg is not None and not any(msg.body) and len(record) == msg.header.total_size
    records = list(iter_records(read(first.path), 0))
    assert records[-1].is_blank and len(records) == first.message_count + 1


def test_dense_store_really_writes_its_bytes(tmp_path):
    store = generate_store(tmp_path, replace(MIXED, commitlog_file_size=256 * 1024))
    for f in store.commitlog_files:
        st = os.stat(f.path)
        assert st.st_blocks * 512 >= st.st_size


def test_checkpoint_lock_and_directories(tmp_path):
    store = generate_store(tmp_path, MIXED)
    raw = read(tmp_path / "checkpoint")
    assert len(raw) == 4096
    cp = decode_checkpoint(raw)
    assert cp == store.checkpoint
    assert cp.physic_msg_timestamp == cp.logics_msg_timestamp == NOW_MS - HOUR_MS
    full = [f for f in store.index_files if f.full]
    assert cp.index_msg_timestamp == full[-1].header.end_timestamp
    assert read(tmp_path / "lock") == b"lock"
    assert {p.name for p in tmp_path.iterdir()} == {
        "checkpoint",
        "commitlog",
        "config",
        "consumequeue",
        "index",
        "lock",
    }
    assert sorted(os.listdir(tmp_path / "consumequeue")) == [
        "TopicTest0",
        "TopicTest1",
        "TopicTest2",
    ]


def test_optional_parts_can_be_left_out(tmp_path):
    spec = replace(MIXED, checkpoint=False, lock_file=False, index=False, preallocate=False)
    store = generate_store(tmp_path, spec)
    assert not (tmp_path / "checkpoint").exists() and not (tmp_path / "lock").exists()
    assert os.listdir(tmp_path / "index") == [] and store.index_files == ()
    assert not any(f.preallocated for f in store.commitlog_files)


def test_fewer_messages_than_queues_and_no_messages_at_all(tmp_path):
    store = generate_store(tmp_path / "few", replace(MIXED, messages=4))
    assert len(store.queues) == 4 and len(store.commitlog_files) == 2
    empty = generate_store(tmp_path / "none", replace(MIXED, messages=0))
    assert empty.commitlog_files == () and empty.queues == {} and empty.max_offset == 0


def test_message_that_cannot_fit_a_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="does not fit"):
        generate_store(tmp_path / "a", replace(UPSTREAM, message_size=121))
    with pytest.raises(ValueError, match="multiple of 20"):
        generate_store(tmp_path / "b", replace(UPSTREAM, cq_file_size=128))


def test_an_existing_store_is_not_overwritten(tmp_path):
    generate_store(tmp_path, UPSTREAM)
    with pytest.raises(FileExistsError):
        generate_store(tmp_path, UPSTREAM)


def test_write_config_describes_the_store(tmp_path):
    spec = replace(UPSTREAM, commitlog_paths=("b", "a"))
    config = write_config(
        tmp_path,
        spec,
        tmp_path / "conf" / "broker.yaml",
        fileReservedTime=1,
        retentiond={"journal": {"dir": "/j"}},
    )
    data = yaml.safe_load(config.read_text())
    assert data == {
        "storePathRootDir": str(tmp_path),
        "storePathCommitLog": f"{tmp_path / 'b'},{tmp_path / 'a'}",
        "mappedFileSizeCommitLog": 128,
        "mappedFileSizeConsumeQueue": 140,
        "maxHashSlotNum": 100,
        "maxIndexNum": 8,
        "fileReservedTime": 1,
        "retentiond": {"journal": {"dir": "/j"}},
    }


def test_presets_are_valid_and_the_demo_is_what_it_says(tmp_path):
    for spec in PRESETS.values():
        spec.validate()
    bench = PRESETS["bench-100k"]
    assert bench.topics * bench.queues_per_topic == 100_000 and bench.sparse
    assert bench.messages // 100_000 > bench.cq_file_size // CQ_UNIT_SIZE  # >= 2 CQ files
    store = generate_store(tmp_path, replace(PRESETS["demo"], now_ms=NOW_MS))
    assert len(store.data_files) == 60
    assert len(store.queues) == 16
    ages = [(NOW_MS - f.mtime_ms) / HOUR_MS for f in store.data_files]
    assert ages[0] > 110 and ages[-1] == 0
    assert all(len(files) >= 2 for files in store.queues.values())
    assert store.summary().startswith("3750 messages, 61 CommitLog files (1 pre-allocated)")


def test_generation_is_deterministic(tmp_path):
    a = generate_store(tmp_path / "a", MIXED)
    b = generate_store(tmp_path / "b", MIXED)
    for fa, fb in zip(a.commitlog_files, b.commitlog_files, strict=True):
        assert read(fa.path) == read(fb.path)
    for fa, fb in zip(a.iter_cq_files(), b.iter_cq_files(), strict=True):
        assert read(fa.path) == read(fb.path)
