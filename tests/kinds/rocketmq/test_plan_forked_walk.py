"""``retentiond plan`` without a scan cache file shares its walk with a forked child
(``scan.Prefetch``, ``halfwalk``): the child lists the later topic directories and reads their
queues' files, and the plan is the very plan one process makes, whatever the store holds, and
whether the child did its part or failed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from retentiond.engine import forked
from retentiond.engine.cleaner import Cleaner
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.rocketmq import halfwalk, scan
from retentiond.kinds.rocketmq.kind import RocketMQ
from retentiond.kinds.rocketmq.plan import Plan
from tests.helpers.stores import Store, expired_spec, make_store

# 60 topics x 3 queues, ConsumeQueue files of 2 units: several files a queue, and a plan that
# deletes CommitLog files so that the queues are examined and many of their files go.
SPEC = expired_spec(topics=60, queues_per_topic=3, cq_file_size=2 * 20)
NOW = 1_900_000_000_000  # one clock for every plan compared


def _plan(store: Store, *, shared: bool) -> tuple[dict[str, Any], RocketMQ]:
    kind = kind_for(load_settings(store.config))
    assert isinstance(kind, RocketMQ)
    cleaner = Cleaner(kind, clock_ms=lambda: NOW, announce_proc_view=False)
    if shared:
        with forked.one_off(at_least=0):  # as plan runs it, the split forced on a small store
            plan = cleaner.plan()
    else:
        plan = cleaner.plan()
    assert isinstance(plan, Plan)
    doc = plan.as_dict()
    triggers = doc["commitlog"]["triggers"]  # type: ignore[index]
    for ratio in ("physic_ratio", "logics_ratio"):  # the disk's, as measured at the time
        assert triggers[ratio] is not None
        triggers[ratio] = None
    return doc, kind


def _store(tmp_path: Path) -> Store:
    store = make_store(tmp_path, SPEC, fileReservedTime=72)
    (tmp_path / "journal").mkdir(exist_ok=True)
    return store


def _odd_topics(cq: Path, outside: Path) -> None:
    """Something unusual in some topics: each such topic is walked as always."""
    topics = sorted(p for p in cq.iterdir())
    (topics[5] / "stray.txt").write_text("x")  # a file beside the queue directories
    (topics[20] / "07x").mkdir()  # a directory no queue id names
    queue = next(p for p in sorted(topics[33].iterdir()))
    (queue / "notes").write_text("x")  # a foreign file in a queue directory
    queue = next(q for q in sorted(topics[41].iterdir()) if len(list(q.iterdir())) > 1)
    first = sorted(queue.iterdir())[0]  # (read: not the newest)
    first.write_bytes(bytes(first.stat().st_size))  # its last unit says nothing: unreadable
    (topics[47] / "9").mkdir()  # an empty queue directory
    outside.mkdir()
    (outside / f"{0:020d}").write_bytes(bytes(40))
    (topics[52] / "8").symlink_to(outside, target_is_directory=True)  # never followed
    last = sorted(topics[-1].iterdir())[0]
    (last / f"{10**19:020d}").write_bytes(bytes(40))  # a name above Long.MAX_VALUE


def test_the_plan_of_a_shared_walk_is_the_plan_of_one_process(tmp_path: Path) -> None:
    store = _store(tmp_path)
    alone, kind = _plan(store, shared=False)
    assert kind.last_prefetch is None
    shared, kind = _plan(store, shared=True)
    assert kind.last_prefetch is not None
    assert 0 < kind.last_prefetch.topics < SPEC.topics  # both processes walked some topics
    assert kind.last_prefetch.reads > 0 and not kind.last_prefetch.values  # all taken
    assert json.dumps(shared, indent=2) == json.dumps(alone, indent=2)
    queues = alone["consumequeue"]
    assert queues["examined"] and queues["queue_count"] == 180
    verdicts = {f["verdict"] for f in queues["files"]}
    assert verdicts == {"delete", "keep"}


def test_unusual_topics_are_walked_as_always(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _odd_topics(store.root / "consumequeue", tmp_path / "outside")
    alone, _ = _plan(store, shared=False)
    shared, kind = _plan(store, shared=True)
    assert json.dumps(shared, indent=2) == json.dumps(alone, indent=2)
    assert len(alone["foreign"]) == 5
    assert alone["consumequeue"]["problems"]  # the unreadable file
    assert kind.last_prefetch is not None and kind.last_prefetch.topics > 0


@pytest.mark.parametrize("how", ["exits", "killed", "raises", "a chunk missing"])
def test_a_child_that_fails_leaves_its_part_to_the_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The child ends other than as it should, or its result lacks a chunk: the walk does
    every topic the child had claimed, and the plan is the same."""
    store = _store(tmp_path)
    alone, _ = _plan(store, shared=False)
    walk = os.getpid()
    if how == "a chunk missing":
        child = halfwalk._child
        monkeypatch.setattr(halfwalk, "_child", lambda *args: child(*args)[1:])
    else:
        work = scan._chunk_walk

        def failing(*args: Any) -> bytes:
            if os.getpid() != walk:  # in the child, in its first chunk
                if how == "exits":
                    os._exit(3)
                if how == "killed":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError("the child fails")
            return work(*args)

        monkeypatch.setattr(scan, "_chunk_walk", failing)
    shared, kind = _plan(store, shared=True)
    assert kind.last_prefetch is not None and kind.last_prefetch.topics == 0
    assert json.dumps(shared, indent=2) == json.dumps(alone, indent=2)


def _timeless(doc: Any) -> Any:
    """A plan document without what depends on the clock or the disk's fill at the moment."""
    if isinstance(doc, dict):
        return {
            k: None if k.endswith("_ratio") else _timeless(v)
            for k, v in doc.items()
            if k not in ("now_ms", "now", "age_ms")
        }
    if isinstance(doc, list):
        return [_timeless(v) for v in doc]
    return doc


def test_plan_on_the_command_line_shares_its_walk(tmp_path: Path) -> None:
    """The CLI ``plan --json`` with its walk shared (the size threshold lowered for a small
    store) is the ``plan --json`` of one process (the threshold above the store's size)."""
    store = _store(tmp_path)
    _odd_topics(store.root / "consumequeue", tmp_path / "outside")

    def plan(at_least: str) -> tuple[Any, list[dict[str, Any]]]:
        argv = [sys.executable, "-m", "retentiond", "--log-level", "debug", "--log-format",
                "json", "plan", "--json", "--config", str(store.config)]  # fmt: skip
        env = {**os.environ, forked.AT_LEAST_ENV: at_least}
        done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
        assert done.returncode == 0, done.stderr
        logged = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
        shared = [r for r in logged if r.get("event") == "queue walk shared with a forked child"]
        return _timeless(json.loads(done.stdout)), shared

    alone, not_shared = plan("1000000")
    together, shared = plan("0")
    assert not not_shared
    assert len(shared) == 1 and shared[0]["child_topics"] > 0
    assert together == alone
    assert alone["consumequeue"]["queue_count"] == 180 and len(alone["foreign"]) == 5
    assert not list((tmp_path / "journal").glob("scan-cache-*"))  # plan writes no cache file
