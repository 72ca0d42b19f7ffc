"""``plan`` counts the CommitLog deletions' losses in a forked child while it plans the queues
(``engine.forked``): the plan is the same as one counted in a single process, and a child
that fails leaves the count to the parent, never a plan without it.

Real files: a generated store with groups caught up, a few messages behind, far behind and
from the start (one disabled), its progress written byte-exactly by the test-only writer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from retentiond.engine import forked
from retentiond.engine.cleaner import Cleaner
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.rocketmq import kind as rocketmq_kind
from retentiond.storegen.rocketmq import GeneratedStore, StoreSpec, generate_store, write_config
from tests.helpers.cli import run_cli
from tests.helpers.stores import CLEAN_NOW, config_keys
from tests.kinds.rocketmq.progress_files import (
    consumer_offset_json,
    subscription_group_json,
    write_text,
)
from tests.kinds.rocketmq.test_loss_acceptance import units

NOW_MS = int(time.time() * 1000)
SPEC = StoreSpec(
    commitlog_file_size=64 * 1024,
    cq_file_size=40 * 20,
    messages=600,
    message_size=1024,
    topics=3,
    queues_per_topic=4,
    topic_prefix="Orders",
    oldest_age_hours=100.0,
    newest_age_hours=0.0,
    index=False,
)


def build(
    root: Path, tmp: Path, spec: StoreSpec = SPEC, **extra: object
) -> tuple[GeneratedStore, Path]:
    store = generate_store(root, spec)
    table: dict[str, dict[int, int]] = {}
    for t, topic in enumerate(spec.topic_names()):
        n = {qid: len(units(store, topic, qid)) for qid in range(spec.queues_per_topic)}
        table[f"{topic}@caught"] = dict(n)
        table[f"{topic}@behind"] = {qid: max(0, c - 2) for qid, c in n.items()}
        table[f"{topic}@far"] = {qid: (c * (qid + t)) // 9 for qid, c in n.items()}
        table[f"{topic}@start"] = {qid: 0 for qid in n}
        table[f"{topic}@off"] = {qid: 1 for qid in n}
    config = root / "config"
    write_text(config / "consumerOffset.json", consumer_offset_json(table))
    (root.parent / "offsets.json").write_text(json.dumps(table))  # what the test expects
    write_text(
        config / "subscriptionGroup.json",
        subscription_group_json(
            {"caught": True, "behind": True, "far": True, "start": True, "off": False}
        ),
    )
    keys = config_keys(CLEAN_NOW, {"deleteFileBatchMax": 3, **extra}, tmp / "journal")
    return store, write_config(store.root, spec, tmp / "broker.yaml", **keys)


def plan_doc(config: Path, *, apart: bool) -> dict[str, object]:
    """A plan in process; ``apart``: as in ``plan``'s one-off process, the split forced on
    this small store."""
    kind = kind_for(load_settings(config))
    now = NOW_MS  # one clock for every plan compared: the files' ages are the same
    cleaner = Cleaner(kind, announce_proc_view=False, clock_ms=lambda: now)
    if not apart:
        return cleaner.plan().as_dict()
    with forked.one_off(at_least=0):
        return cleaner.plan().as_dict()


def deleted_losses(doc: dict[str, object]) -> list[object]:
    files = doc["commitlog"]["files"]  # type: ignore[index]
    return [f.get("loss") for f in files if f["verdict"] == "delete"]


def test_the_plan_counted_in_a_child_is_the_plan_counted_in_one_process(tmp_path: Path) -> None:
    _, config = build(tmp_path / "store", tmp_path)
    one = plan_doc(config, apart=False)
    two = plan_doc(config, apart=True)
    assert two == one
    losses = deleted_losses(one)
    assert len(losses) >= 2 and all(losses)
    named = {g["group"] for loss in losses for g in loss["groups"]}  # type: ignore[index]
    assert {"start", "off"} <= named and "caught" not in named


def test_a_failing_child_leaves_the_count_to_the_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, config = build(tmp_path / "store", tmp_path)
    want = plan_doc(config, apart=False)
    parent = os.getpid()
    counted_here: list[int] = []
    real = rocketmq_kind.commitlog_losses

    def count(*args: object, **kw: object) -> object:
        if os.getpid() != parent:
            os._exit(7)  # the child dies mid-count
        counted_here.append(1)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(rocketmq_kind, "commitlog_losses", count)
    assert plan_doc(config, apart=True) == want
    assert counted_here == [1]
    counted_here.clear()
    monkeypatch.setattr(rocketmq_kind, "commitlog_losses", real)


def _counts_here(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry each time this process (not a forked child) counts losses."""
    parent = os.getpid()
    counted_here: list[int] = []
    real = rocketmq_kind.commitlog_losses

    def count(*args: object, **kw: object) -> object:
        if os.getpid() == parent:
            counted_here.append(1)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(rocketmq_kind, "commitlog_losses", count)
    return counted_here


def test_the_child_counts_and_the_parent_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, config = build(tmp_path / "store", tmp_path)
    counted_here = _counts_here(monkeypatch)
    doc = plan_doc(config, apart=True)
    assert counted_here == []
    assert all(deleted_losses(doc))


def test_with_a_keeping_guard_the_count_stays_in_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``keep`` the losses decide verdicts, and the queue stage depends on those."""
    _, config = build(tmp_path / "store", tmp_path, retentiond={"guard": {"unconsumed": "keep"}})
    counted_here = _counts_here(monkeypatch)
    doc = plan_doc(config, apart=True)
    assert counted_here == [1]
    assert plan_doc(config, apart=False) == doc


def test_the_cli_plan_names_what_the_in_process_plan_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, config = build(tmp_path / "store", tmp_path)
    monkeypatch.setenv(forked.AT_LEAST_ENV, "0")  # the child counts, even on this store
    got = run_cli("plan", "--config", str(config), "--json")
    assert got.code == 0, got.err
    cli_doc = json.loads(got.out)
    assert deleted_losses(cli_doc) == deleted_losses(plan_doc(config, apart=False))


def test_the_counts_are_the_queue_units_with_many_units_per_queue_file(tmp_path: Path) -> None:
    """Every group's count per deleted file is what a full read of the queues finds, with
    queue files of 1,000 units (the bounds fall inside one read) and of 3 (across files)."""
    for cq_units in (1000, 3):
        spec = dataclasses.replace(SPEC, cq_file_size=cq_units * 20)
        base = tmp_path / str(cq_units)
        store, config = build(base / "store", base, spec=spec)
        table = json.loads((base / "offsets.json").read_text())
        doc = plan_doc(config, apart=True)
        files = [f for f in doc["commitlog"]["files"] if f["verdict"] == "delete"]  # type: ignore[index]
        assert files
        q = {
            (topic, qid): units(store, topic, qid)
            for topic in spec.topic_names()
            for qid in range(spec.queues_per_topic)
        }
        for f in files:
            want: dict[tuple[str, str], int] = {}
            for key, offsets in table.items():
                topic, group = key.split("@")
                n = sum(
                    1 for qid, o in offsets.items() for i, p in enumerate(q[topic, int(qid)])
                    if i >= o and f["start_offset"] <= p < f["end_offset"]
                )  # fmt: skip
                if n:
                    want[group, topic] = n
            got = {(g["group"], g["topic"]): g["messages"] for g in f["loss"]["groups"]}
            assert got == want, f["path"]
