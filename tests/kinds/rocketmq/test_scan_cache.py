"""The scan cache carried across restarts (``kinds/rocketmq/scancache``) is never trusted for
a directory or file that changed since it was written: each case below changes the store after
a first process wrote its cache, and a second process (a fresh kind that loads the file) must
plan exactly what a kind without any cache plans. A corrupt or foreign file is ignored with a
warning."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import struct
from array import array

import pytest
from structlog.testing import capture_logs

from retentiond.engine.cleaner import Cleaner
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.rocketmq import scancache
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


def _rewrite_last_unit(path, unit: bytes) -> None:
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(st.st_size - CQ_UNIT_SIZE)
        f.write(unit)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size


def _mutate(case: str, store, before=()) -> None:
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
    elif case == "rewritten in place":  # same size, mtime put back: only its ctime moves
        _rewrite_last_unit(path, _live_unit())
    elif case == "first kept rewritten in place":  # the file the queue stopped at now goes
        kept = next(f.path for f in files if str(f.path) not in before)
        _rewrite_last_unit(kept, struct.pack(">qiq", 1, 100, 0))
    elif case == "new queue directory beside":  # a copy of the queue; topic mtime put back
        restore_topic = _keep_dir_times(str(path.parent.parent))
        shutil.copytree(path.parent, path.parent.parent / "7")
        restore_topic()
    elif case == "queue directory renamed":  # queue 0 and queue 1 swap places
        other = path.parent.parent / sorted(os.listdir(path.parent.parent))[1]
        os.rename(path.parent, str(path.parent) + ".x")
        os.rename(other, path.parent)
        os.rename(str(path.parent) + ".x", other)
    else:
        raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    [
        "replaced",
        "truncated",
        "renamed",
        "new file beside",
        "rewritten in place",
        "first kept rewritten in place",
        "new queue directory beside",
        "queue directory renamed",
    ],
)
def test_a_changed_directory_or_file_is_never_trusted(env, case):
    """Each change is to a file the queue's decision rests on (one that goes, or the first
    one kept): those are re-checked with an lstat against the cached inode, size, mtime and
    ctime; the files behind the first kept one are not looked at, as without a cache."""
    store, settings, _ = env
    before = _deleted(settings)[1]
    _mutate(case, store, before)
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


def _edit(cache, *, header=None, cq=None, values=None) -> None:
    """Rewrite a cache file with fields changed and a valid checksum (so that only the check
    under test can refuse it): ``header`` maps a field index of ``_HEADER`` to a new value,
    ``cq`` replaces the consumequeue path, ``values`` edits the per-file value array."""
    raw = cache.read_bytes()[:-32]
    pos = len(scancache.MAGIC)
    fields = list(scancache._HEADER.unpack_from(raw, pos))
    pos += scancache._HEADER.size
    old_cq = raw[pos : pos + fields[5]]
    rest = raw[pos + fields[5] :]
    new_cq = old_cq if cq is None else cq.encode()
    fields[5] = len(new_cq)
    for i, v in (header or {}).items():
        fields[i] = v
    if values is not None:  # the value array sits before the two parent arrays
        n_v, tail = fields[9] * scancache._V, 8 * (fields[10] * scancache._P + fields[11])
        end = len(rest) - tail
        va = array("q")
        va.frombytes(rest[end - 8 * n_v : end])
        values(va)
        rest = rest[: end - 8 * n_v] + va.tobytes() + rest[end:]
    body = scancache.MAGIC + scancache._HEADER.pack(*fields) + new_cq + rest
    cache.write_bytes(body + hashlib.sha256(body).digest())


@pytest.mark.parametrize(
    "edit",
    [
        {"cq": "/some/other/store/consumequeue"},
        {"header": {2: 1234}},  # another mappedFileSizeConsumeQueue
        {"header": {0: 2}},  # another version
        {"header": {1: 0}},  # another byte order
    ],
    ids=["another store", "another file size", "another version", "another byte order"],
)
def test_a_foreign_cache_is_ignored_with_a_warning(env, edit):
    _, settings, cache = env
    _edit(cache, **edit)
    with capture_logs() as logs:
        kind, cached = _deleted(settings)
    assert kind.cache_loaded_queues == 0
    assert any("scan cache" in e["event"] and e["log_level"] == "warning" for e in logs)
    assert cached == _deleted(settings, use_cache=False)[1]


def test_a_torn_or_edited_cache_fails_its_checksum(env):
    _, settings, cache = env
    raw = bytearray(cache.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    cache.write_bytes(bytes(raw))
    with capture_logs() as logs:
        kind, _ = _deleted(settings)
    assert kind.cache_loaded_queues == 0
    assert any("checksum" in e.get("error", "") for e in logs)
    cache.write_bytes(bytes(raw[: len(raw) // 3]))  # torn
    kind, cached = _deleted(settings)
    assert kind.cache_loaded_queues == 0
    assert cached == _deleted(settings, use_cache=False)[1]


def test_a_poisoned_value_in_the_cache_is_re_checked(env):
    """Someone edits the file so a live file's value reads as far below the minimum: the
    value is only used with the identity it was stored with, and the changed size makes the
    file be read again."""
    _, settings, cache = env

    def poison(va):
        for i in range(0, len(va), scancache._V):
            if va[i + 4] >= 0:
                va[i + 4] = 0  # "every unit below any minimum"
                va[i + 1] += 1  # with an identity that no longer matches the file

    _edit(cache, values=poison)
    kind, cached = _deleted(settings)
    assert kind.cache_loaded_queues > 0
    assert cached == _deleted(settings, use_cache=False)[1]


def test_plan_does_not_write_the_cache(env):
    _, settings, cache = env
    cache.unlink()
    _deleted(settings)
    assert not cache.exists()


def test_the_json_cache_of_format_2_is_removed_when_the_new_one_is_written(env):
    _, settings, cache = env
    old = cache.with_suffix(".json")
    old.write_text('{"magic": "retentiond-rocketmq-scan-cache", "version": 2}')
    cache.unlink()
    kind = kind_for(settings)
    assert Cleaner(kind, clock_ms=lambda: CLOCK).run_round(dry_run=True).plan.queues.examined
    assert cache.exists() and not old.exists()


def test_a_cache_in_another_order_than_the_walk_is_used_by_path(env):
    """The first round looks a queue up at the next position in the file and by its path
    only when that misses: a cache written in another order (queues listed anew since, a
    directory order that changed) and with one-file queues among the rest plans alike, and
    still reads no file."""
    store, settings, cache = env
    topic, qid = sorted(store.queues)[0]
    lone = store.root / "consumequeue" / topic / "9"  # a queue of one (newest) file
    lone.mkdir()
    first_file = store.queues[(topic, qid)][0].path
    shutil.copy(first_file, lone / first_file.name)
    old = os.stat(store.root).st_mtime - 3600
    for path in (lone, lone.parent):
        os.utime(path, (old, old))
    writer = kind_for(settings)
    Cleaner(writer, clock_ms=lambda: CLOCK).run_round(dry_run=True)  # lists and caches "9"
    lister = writer.lister
    lister._queues = dict(reversed(list(lister._queues.items())))
    assert scancache.save(
        cache, str(settings.store.consumequeue_dir), lister, writer.queue_memo, None,
        writer.reader.cq_file_size,
    )  # fmt: skip
    kind, cached = _deleted(settings)
    assert kind.cache_loaded_queues == len(store.queues) + 1
    assert kind.reader.reads == 0
    assert cached == _deleted(settings, use_cache=False)[1]
