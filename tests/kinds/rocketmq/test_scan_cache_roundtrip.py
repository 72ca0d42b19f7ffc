"""Every scan cache the writer can produce, the reader loads, and a kind that loads it plans
exactly what a kind without any cache plans.

The stores are generated (empty ones, one queue, the small store of 2 topics x 2 queues with
200-byte ConsumeQueue files and 4 KiB CommitLog files, and random shapes with empty queue
directories, stray files, and directories named like queues but not as the broker names
them), then a real, manual or dry round runs and writes the cache as the daemon does, and the
lister's listings are written once more after the directories have aged (so that every
listing is remembered). Each file must load without a warning, and the plan made from it must
equal the cold plan."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from retentiond.engine.cleaner import Cleaner
from retentiond.kinds import kind_for
from retentiond.kinds.rocketmq import scancache
from retentiond.storegen.rocketmq import StoreSpec
from tests.helpers.cli import run_cli
from tests.helpers.stores import make_store

NOW_MS = 1_790_000_000_000
CLOCK = NOW_MS + 60_000

# Changes made to the generated store before the first round (the first topic and queue).
EXTRAS = (
    "empty queue directory",
    "stray file in a queue directory",
    "empty topic directory",
    "file in consumequeue",
    "00",
    "01",
    "+1",
    "-0",
    " 1",
    "1_",
    "no consumequeue directory",
)


@dataclasses.dataclass(frozen=True)
class Shape:
    topics: int = 2
    queues_per_topic: int = 2
    cq_units: int = 10  # mappedFileSizeConsumeQueue in 20-byte units
    commitlog_file_size: int = 4096
    messages: int = 60
    message_size: int = 200
    newest_age_hours: float = 0.0
    extras: tuple[str, ...] = ()
    aged: bool = True  # directories old enough that their listings are remembered
    mode: str = "manual"  # the first round: "real", "manual" or "dry"


shapes = st.builds(
    Shape,
    topics=st.integers(1, 3),
    queues_per_topic=st.integers(1, 3),
    cq_units=st.integers(1, 8),
    commitlog_file_size=st.sampled_from([4096, 8192]),
    messages=st.integers(0, 160),
    message_size=st.sampled_from([200, 450, 1000]),
    newest_age_hours=st.sampled_from([0.0, 80.0]),
    extras=st.lists(st.sampled_from(EXTRAS), max_size=3, unique=True).map(tuple),
    aged=st.booleans(),
    mode=st.sampled_from(["real", "manual", "dry"]),
)


def _spec(shape: Shape) -> StoreSpec:
    return StoreSpec(
        commitlog_file_size=shape.commitlog_file_size,
        cq_file_size=shape.cq_units * 20,
        max_hash_slot_num=16,
        max_index_num=16,
        messages=shape.messages,
        message_size=shape.message_size,
        topics=shape.topics,
        queues_per_topic=shape.queues_per_topic,
        oldest_age_hours=100.0,
        newest_age_hours=shape.newest_age_hours,
        now_ms=NOW_MS,
    )


def _age(root: Path) -> None:
    """Put every directory under consumequeue/ an hour back: listings taken now are not
    'racy' (changed within a second of the listing), so the lister remembers them."""
    old = NOW_MS / 1000 - 3600
    for dirpath, _, _ in os.walk(root / "consumequeue"):
        os.utime(dirpath, (old, old))


def _apply(extras: tuple[str, ...], root: Path) -> None:
    cq = root / "consumequeue"
    topics = sorted(p for p in cq.iterdir()) if cq.is_dir() else []
    queue = min(topics[0].iterdir()) if topics else None
    for extra in extras:
        if extra == "empty topic directory":
            (cq / "EmptyTopic").mkdir(exist_ok=True)
        elif extra == "file in consumequeue":
            (cq / "notes.txt").write_text("x")
        elif extra == "no consumequeue directory":
            continue  # below, once the others are made
        elif queue is None:
            continue
        elif extra == "empty queue directory":
            (queue.parent / "7").mkdir()
        elif extra == "stray file in a queue directory":
            (queue / "x.tmp").write_bytes(b"x")
        else:  # a copy of the queue under a name the broker never opens
            shutil.copytree(queue, queue.parent / extra, copy_function=shutil.copy2)
    if "no consumequeue directory" in extras:
        shutil.rmtree(cq)


def _cold_and_cached(settings_) -> tuple[dict, dict, int]:
    """The plan of a kind that never looks at the cache file, and of one that loads it (with
    how many queues it loaded); the triggers (disk ratios of a shared disk) are left out."""
    docs = []
    loaded = 0
    for use_cache in (False, True):
        kind = kind_for(settings_)
        kind._cache_loaded = not use_cache
        doc = Cleaner(kind, clock_ms=lambda: CLOCK).plan().as_dict()
        doc["commitlog"].pop("triggers")  # type: ignore[union-attr]
        docs.append(doc)
        loaded = kind.cache_loaded_queues
    return docs[0], docs[1], loaded


def _loads(path: Path, settings_) -> scancache.Loaded:
    with capture_logs() as logs:
        got = scancache.load(
            path,
            str(settings_.store.consumequeue_dir),
            settings_.store.mapped_file_size_consumequeue,
        )
    assert not logs, logs
    assert got is not None
    return got


def _check(shape: Shape, tmp: Path) -> None:
    store = make_store(tmp, _spec(shape))
    store.journal.mkdir()
    _apply(shape.extras, store.root)
    if shape.aged:
        _age(store.root)
    cleaner = store.cleaner(clock_ms=lambda: CLOCK)
    cleaner.run_round(manual=shape.mode == "manual", dry_run=shape.mode == "dry")
    kind = cleaner.kind
    path = kind._scan_cache_path()
    assert path is not None
    cq = str(store.settings.store.consumequeue_dir)
    if path.exists():  # the round listed or read something, and wrote what it remembers
        _loads(path, store.settings)
        cold, cached, _ = _cold_and_cached(store.settings)
        assert cached == cold
    # Everything remembered once the directories have aged (the round's unlinks left the
    # queue directories it touched too new to remember).
    if not os.path.isdir(cq):
        assert not scancache.save(path, cq, kind.lister, kind.queue_memo, None, 0)
        return
    _age(store.root)
    for _ in kind.lister.iter_queues(cq, []):
        pass
    assert scancache.save(
        path, cq, kind.lister, kind.queue_memo, kind.loaded_values or None,
        kind.reader.cq_file_size,
    )  # fmt: skip
    queues, _, parents = _loads(path, store.settings)
    if "file in consumequeue" not in shape.extras:  # (a parent with strays is not carried)
        assert cq in parents
    cold, cached, loaded = _cold_and_cached(store.settings)
    assert loaded == len(queues)
    assert cached == cold


SMALL = Shape()  # the small store: 2 topics x 2 queues, 200-byte queue files, 4 KiB CommitLog


@pytest.mark.slow
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(shape=shapes)
@example(shape=SMALL)
@example(shape=dataclasses.replace(SMALL, aged=False))
@example(shape=dataclasses.replace(SMALL, mode="dry"))
@example(shape=dataclasses.replace(SMALL, messages=0))  # an empty store
@example(shape=dataclasses.replace(SMALL, topics=1, queues_per_topic=1))  # one queue
@example(shape=dataclasses.replace(SMALL, topics=1, queues_per_topic=1, messages=3, mode="real"))
@example(shape=dataclasses.replace(SMALL, extras=("00", "-0", "empty queue directory")))
@example(shape=dataclasses.replace(SMALL, extras=("no consumequeue directory",)))
def test_what_the_writer_writes_the_reader_loads_and_plans_alike(
    shape: Shape, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("roundtrip")
    try:
        _check(shape, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_after_a_manual_round_on_the_small_store_plan_loads_the_cache(tmp_path: Path) -> None:
    """The operator's view: ``once --manual`` deletes expired files and writes the cache;
    the ``plan`` after it loads that file without a warning and plans as without it."""
    store = make_store(tmp_path, _spec(SMALL))
    store.journal.mkdir()
    once = run_cli("once", "--manual", "--config", str(store.config))
    assert once.code == 0, once.err
    (cache,) = store.journal.glob("scan-cache-*.bin")
    plan = run_cli("plan", "--json", "--config", str(store.config))
    assert plan.code == 0, plan.err
    assert "scan cache" not in plan.err
    _loads(cache, store.settings)
    cold, cached, _ = _cold_and_cached(store.settings)
    assert cached == cold
