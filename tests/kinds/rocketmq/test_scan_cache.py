"""The scan cache carried across restarts (``kinds/rocketmq/scancache``) is never trusted for
a directory or file that changed since it was written: each case below changes the store after
a first process wrote its cache, and a second process (a fresh kind that loads the file) must
plan exactly what a kind without any cache plans. A corrupt or foreign file is ignored with a
warning."""

from __future__ import annotations

import dataclasses
import json
import os
import struct

import pytest
from structlog.testing import capture_logs

from retentiond.config.loader import load_settings
from retentiond.engine.cleaner import Cleaner
from retentiond.kinds import kind_for
from retentiond.kinds.rocketmq.formats import CQ_UNIT_SIZE
from retentiond.kinds.rocketmq.triggers import hour_of_day
from retentiond.storegen.rocketmq import PRESETS, generate_store, write_config

SPEC = dataclasses.replace(PRESETS["daemon-test"], now_ms=1_790_000_000_000)
CLOCK = SPEC.now_ms + 60_000


@pytest.fixture
def env(tmp_path):
    store = generate_store(tmp_path / "store", SPEC)
    config = write_config(
        store.root, SPEC, tmp_path / "broker.yaml",
        fileReservedTime=24, deleteWhen=f"{hour_of_day(CLOCK, 'UTC'):02d}",
        diskMaxUsedSpaceRatio=95, deleteFileBatchMax=10,
        deleteCommitLogFilesInterval=0, deleteConsumeQueueFilesInterval=0,
        retentiond={"timezone": "UTC", "journal": {"dir": str(tmp_path / "state")}},
    )  # fmt: skip
    (tmp_path / "state").mkdir()
    old = os.stat(store.root).st_mtime - 3600  # listings of "racy" directories are not cached
    for dirpath, _, _ in os.walk(store.root / "consumequeue"):
        os.utime(dirpath, (old, old))
    settings = load_settings(config)
    # The first process: a dry-run round lists and reads every queue, then writes the cache.
    first = Cleaner(kind_for(settings), clock_ms=lambda: CLOCK)
    assert first.run_round(dry_run=True).plan.queues.examined
    cache = first.kind._scan_cache_path()
    assert cache is not None and cache.exists()
    return store, settings, cache


def _deleted(settings, *, use_cache: bool = True):
    kind = kind_for(settings)
    if not use_cache:
        kind._cache_loaded = True  # a kind that never looks at the file
    plan = Cleaner(kind, clock_ms=lambda: CLOCK).plan()
    assert plan.queues.examined
    return kind, sorted(d.path for q in plan.queues.queues for d in q.deleted)


def _first_queue_file(store):
    topic, qid = sorted(store.queues)[0]
    files = store.queues[(topic, qid)]
    return files[0].path, files


def _keep_dir_times(directory):
    """Put the directory's mtime back after a change (what utime can do; its ctime moves)."""
    st = os.stat(directory)
    return lambda: os.utime(directory, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_an_unchanged_store_is_planned_from_the_cache_as_without_it(env):
    _, settings, _ = env
    kind, cached = _deleted(settings)
    assert kind.cache_loaded_queues > 0
    assert kind.reader.reads == 0  # every value came from the file, each after an lstat
    assert cached == _deleted(settings, use_cache=False)[1]
    assert cached  # the store has queue files below the minimum


def _live_unit() -> bytes:
    return struct.pack(">qiq", 2**62, 100, 0)  # a CommitLog offset far above any minimum


def _mutate(case: str, store) -> None:
    path, files = _first_queue_file(store)
    directory = str(path.parent)
    restore = _keep_dir_times(directory)
    size = path.stat().st_size
    if case == "replaced":  # same name, new inode, a live last unit; dir mtime put back
        tmp = path.parent / "x.tmp"
        tmp.write_bytes(b"\0" * (size - CQ_UNIT_SIZE) + _live_unit())
        os.replace(tmp, path)
        restore()
    elif case == "truncated":  # in place: the directory does not change at all
        st = path.stat()
        os.truncate(path, size // 2)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif case == "renamed":  # the oldest file renamed past the newest; dir mtime put back
        newest = int(files[-1].path.name)
        os.rename(path, path.parent / f"{newest + size:020d}")
        restore()
    elif case == "new file beside":  # a full file with a live unit between the first two
        beside = path.parent / f"{int(path.name) + 1:020d}"
        beside.write_bytes(b"\0" * (size - CQ_UNIT_SIZE) + _live_unit())
        restore()
    elif case == "queue directory renamed":  # queue 0 and queue 1 swap places
        other = path.parent.parent / sorted(os.listdir(path.parent.parent))[1]
        os.rename(path.parent, str(path.parent) + ".x")
        os.rename(other, path.parent)
        os.rename(str(path.parent) + ".x", other)
    else:
        raise AssertionError(case)


@pytest.mark.parametrize(
    "case", ["replaced", "truncated", "renamed", "new file beside", "queue directory renamed"]
)
def test_a_changed_directory_or_file_is_never_trusted(env, case):
    store, settings, _ = env
    before = _deleted(settings)[1]
    _mutate(case, store)
    truth = _deleted(settings, use_cache=False)[1]
    kind, cached = _deleted(settings)
    assert kind.cache_loaded_queues > 0
    assert cached == truth
    if case != "queue directory renamed":
        assert cached != before  # the change mattered: a trusted cache would have erred


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xffnot json",
        b'{"magic": "retentiond-rocketmq-scan-cache", "version": 2, "queues": [[1]]}',
        b"[]",
    ],
)
def test_a_corrupt_cache_is_ignored_with_a_warning(env, content):
    _, settings, cache = env
    cache.write_bytes(content)
    with capture_logs() as logs:
        kind, cached = _deleted(settings)
    assert kind.cache_loaded_queues == 0
    assert any("scan cache" in e["event"] and e["log_level"] == "warning" for e in logs)
    assert cached == _deleted(settings, use_cache=False)[1]


def test_a_foreign_cache_is_ignored_with_a_warning(env):
    _, settings, cache = env
    doc = json.loads(cache.read_text())
    doc["consumequeue"] = "/some/other/store/consumequeue"
    cache.write_text(json.dumps(doc))
    with capture_logs() as logs:
        kind, _ = _deleted(settings)
    assert kind.cache_loaded_queues == 0
    assert any("scan cache" in e["event"] and e["log_level"] == "warning" for e in logs)


def test_a_poisoned_value_in_the_cache_is_re_checked(env):
    """Someone edits the file so a live file's value reads as far below the minimum: the
    value is only used with the identity it was stored with, and the truncated-identity
    check makes the file be read again."""
    _, settings, cache = env
    doc = json.loads(cache.read_text())
    for q in doc["queues"]:
        for v in q[-1]:
            if v is not None:
                v[3] = 0  # "every unit below any minimum"
                v[1] += 1  # with an identity that no longer matches the file
    cache.write_text(json.dumps(doc))
    assert _deleted(settings)[1] == _deleted(settings, use_cache=False)[1]


def test_plan_does_not_write_the_cache(env):
    _, settings, cache = env
    cache.unlink()
    _deleted(settings)
    assert not cache.exists()
