"""DefaultMessageStoreCleanFilesTest (spec §5.1), ported to real files and the real CLI.

The store is the upstream test's: 55 CommitLog files of 128 B (one 120-B message and an 8-B
blank each), 8 ConsumeQueue files of 7 units, 8 index files of 7 entries. Each upstream
``cleanCommitLogService.run(); cleanConsumeQueueService.run()`` pair is one ``retentiond once``.
Disk pressure is real: the store lives on a 64 MiB tmpfs filled to the ratio the case needs.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from retentiond.storegen.rocketmq import PRESETS, generate_store, write_config
from tests.conftest import Tmpfs, run_cli

UPSTREAM = PRESETS["upstream-test"]
HOUR_MS = 3_600_000


def utc_hour(offset: int = 0) -> int:
    return (datetime.now(UTC).hour + offset) % 24


def this_hour() -> str:
    # the current and the next hour, so a test that straddles the hour still sees "time up"
    return f"{utc_hour():02d};{utc_hour(1):02d}"


def not_this_hour() -> str:
    return f"{utc_hour(12):02d}"


def make_store(root: Path, tmp: Path, *, expire: int = 15, paths: tuple[str, ...] = (), **cfg):
    spec = replace(UPSTREAM, commitlog_paths=paths)
    store = generate_store(root, spec)
    old_ns = (time.time_ns() // 1_000_000 - 2 * HOUR_MS) * 1_000_000
    for f in store.data_files[:expire]:  # upstream expireFiles(queue, 15)
        os.utime(f.path, ns=(old_ns, old_ns))
    settings = {
        "fileReservedTime": 1,
        "deleteCommitLogFilesInterval": 0,
        "deleteConsumeQueueFilesInterval": 0,
        "retentiond": {"timezone": "UTC", "journal": {"dir": str(tmp / "journal")}},
    }
    settings.update(cfg)
    config = write_config(root, spec, tmp / "broker.yaml", **settings)
    return store, config


def counts(store) -> tuple[int, int, int]:
    commitlog = sum(len(os.listdir(d)) for d in store.commitlog_dirs)
    cq = len(os.listdir(store.root / "consumequeue" / "test" / "0"))
    index = len(os.listdir(store.root / "index"))
    return commitlog, cq, index


def once(config: Path, *extra: str) -> dict:
    result = run_cli("once", "--config", str(config), "--json", *extra)
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_store_matches_upstream_shape(tmp_path):
    store, _ = make_store(tmp_path / "store", tmp_path)
    assert counts(store) == (55, 8, 8)


def test_delete_expired_files_by_time_up(tmp_path):
    store, config = make_store(tmp_path / "store", tmp_path, deleteWhen=this_hour())
    once(config)
    assert counts(store) == (45, 7, 7)
    once(config)
    assert counts(store) == (40, 6, 6)
    once(config)  # nothing else is expired
    assert counts(store) == (40, 6, 6)


def test_no_deletion_outside_the_delete_hour_with_a_healthy_disk(tmpfs: Tmpfs, tmp_path):
    store, config = make_store(tmpfs.path / "store", tmp_path, deleteWhen=not_this_hour())
    doc = once(config)
    assert not doc["commitlog"]["triggers"]["fired"]
    assert counts(store) == (55, 8, 8)


def test_delete_expired_files_by_space_full(tmpfs: Tmpfs, tmp_path):
    store, config = make_store(tmpfs.path / "store", tmp_path, deleteWhen=not_this_hour())
    tmpfs.fill_to(0.80)  # above diskMaxUsedSpaceRatio 75, below clean-forcibly 85
    doc = once(config)
    assert doc["commitlog"]["triggers"]["usage_exceeds"]
    assert not doc["commitlog"]["triggers"]["clean_immediately"]
    assert counts(store) == (45, 7, 7)
    once(config)
    assert counts(store) == (40, 6, 6)
    reasons = {f["reason"] for f in doc["commitlog"]["files"] if f["verdict"] == "delete"}
    assert reasons == {"disk_over_max_ratio"}


def test_delete_files_immediately_by_space_full(tmpfs: Tmpfs, tmp_path):
    store, config = make_store(tmpfs.path / "store", tmp_path, expire=0,
                               deleteWhen=not_this_hour())  # fmt: skip
    tmpfs.fill_to(0.88)  # above clean-forcibly 85: unexpired files go too
    expected = [(45, 7, 7), (35, 6, 6), (25, 4, 4), (15, 3, 3), (5, 1, 1)]
    for want in expected:
        doc = once(config)
        assert doc["commitlog"]["triggers"]["clean_at_once"]
        assert counts(store) == want
    reasons = {f["reason"] for f in doc["commitlog"]["files"] if f["verdict"] == "delete"}
    assert reasons == {"forced_over_clean_forcibly_ratio"}


def test_no_forced_deletion_when_clean_file_forcibly_is_disabled(tmpfs: Tmpfs, tmp_path):
    store, config = make_store(
        tmpfs.path / "store",
        tmp_path,
        expire=0,
        deleteWhen=not_this_hour(),
        cleanFileForciblyEnable=False,
    )
    tmpfs.fill_to(0.88)
    doc = once(config)
    assert doc["commitlog"]["triggers"]["clean_immediately"]
    assert not doc["commitlog"]["triggers"]["clean_at_once"]
    assert counts(store) == (55, 8, 8)


def test_forced_deletion_still_spares_the_newest_file(tmpfs: Tmpfs, tmp_path):
    store, config = make_store(
        tmpfs.path / "store", tmp_path, expire=0, deleteWhen=not_this_hour(), deleteFileBatchMax=100
    )
    tmpfs.fill_to(0.88)
    once(config)
    assert counts(store) == (1, 1, 1)
    assert os.listdir(store.commitlog_dirs[0]) == [store.data_files[-1].path.name]


def test_delete_expired_files_manually(tmpfs: Tmpfs, tmp_path):
    store, config = make_store(tmpfs.path / "store", tmp_path, deleteWhen=not_this_hour())
    doc = once(config, "--manual")
    assert counts(store) == (45, 7, 7)
    reasons = {f["reason"] for f in doc["commitlog"]["files"] if f["verdict"] == "delete"}
    assert reasons == {"manual"}
    once(config, "--manual")
    assert counts(store) == (40, 6, 6)
    once(config, "--manual")  # manual rounds still only take expired files
    assert counts(store) == (40, 6, 6)


def test_multi_path_commitlog(tmp_path):
    paths = ("cl0", "cl1", "cl2")
    store, config = make_store(tmp_path / "store", tmp_path, paths=paths,
                               deleteWhen=this_hour())  # fmt: skip
    assert [len(os.listdir(d)) for d in store.commitlog_dirs] == [19, 18, 18]
    once(config)
    assert counts(store) == (45, 7, 7)
    once(config)
    assert counts(store) == (40, 6, 6)
    # the oldest files went, wherever they lived
    left = sorted(n for d in store.commitlog_dirs for n in os.listdir(d))
    assert left == [f.path.name for f in store.data_files[15:]]


def test_deleting_ten_files_sleeps_between_them(tmp_path):
    store, config = make_store(tmp_path / "store", tmp_path, deleteWhen=this_hour(),
                               deleteCommitLogFilesInterval=100)  # fmt: skip
    started = time.monotonic()
    once(config)
    # 10 deletions, 9 sleeps of 100 ms: a lower bound only (machines are noisy)
    assert time.monotonic() - started >= 0.9
    assert counts(store)[0] == 45


@pytest.mark.parametrize("interval", [0, 100])
def test_pacing_sleeps_exactly_where_upstream_does(tmp_path, interval, open_journal):
    from retentiond.engine.cleaner import Cleaner
    from retentiond.kinds import kind_for, load_settings

    _, config = make_store(tmp_path / "store", tmp_path, deleteWhen=this_hour(),
                           deleteCommitLogFilesInterval=interval)  # fmt: skip
    settings = load_settings(config)
    journal = open_journal(tmp_path / "j")
    result = Cleaner(kind_for(settings), journal=journal).run_round()
    assert len(result.deleted) >= 10
    if interval == 0:
        assert result.slept_s == 0
    else:
        assert result.slept_s >= 0.9


def test_mapped_file_queue_delete_expired_file_by_time(tmp_path):
    """MappedFileQueueTest.testDeleteExpiredFileByTime on real files: 50 files, 0-4 and 21-49
    expired, 5-20 fresh; one pass with a batch of 50 deletes only 0-4 (never in the middle)."""
    from retentiond.storegen.rocketmq import StoreSpec

    spec = StoreSpec(
        commitlog_file_size=1024, message_size=504, messages=100, topics=1, queues_per_topic=1,
        cq_file_size=140, max_hash_slot_num=16, max_index_num=8, oldest_age_hours=0,
        preallocate=False,
    )  # fmt: skip
    store = generate_store(tmp_path / "store", spec)
    files = store.data_files
    assert len(files) == 50
    old_ns = (time.time_ns() // 1_000_000 - 200_000) * 1_000_000
    for f in [*files[:5], *files[21:]]:
        os.utime(f.path, ns=(old_ns, old_ns))
    # Upstream reserves 100 s; fileReservedTime counts whole hours, so reserve 0 h and give
    # the "fresh" files an mtime in the future: expired and fresh files sit where they do
    # upstream.
    future_ns = (time.time_ns() // 1_000_000 + 3_600_000) * 1_000_000
    for f in files[5:21]:
        os.utime(f.path, ns=(future_ns, future_ns))
    config = write_config(
        store.root, spec, tmp_path / "broker.yaml", fileReservedTime=0, deleteFileBatchMax=50,
        deleteWhen=this_hour(), deleteCommitLogFilesInterval=0,
        deleteConsumeQueueFilesInterval=0,
        retentiond={"timezone": "UTC", "journal": {"dir": str(tmp_path / "journal")}},
    )  # fmt: skip
    doc = once(config)
    assert sum(1 for f in doc["commitlog"]["files"] if f["verdict"] == "delete") == 5
    assert len(os.listdir(store.commitlog_dirs[0])) == 45
    kept = {f["path"]: f["reason"] for f in doc["commitlog"]["files"]}
    assert kept[str(files[5].path)] == "not_expired"
    assert {kept[str(f.path)] for f in files[21:49]} == {"after_first_kept"}
