"""What a deletion loses, on a real store: a RocketMQ store whose consumerOffset.json uses
unquoted integer keys, three groups (caught up, lagging into an expired file, disabled), a
delay level and a pending timer. A forced deletion on a real tmpfs records, in the journal and
in ``plan --json``, exactly the groups and counts the store's ConsumeQueue units imply."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from retentiond.kinds.rocketmq.formats import CQ_UNIT
from retentiond.reasons import SCHEMA_VERSION
from retentiond.storegen.rocketmq import GeneratedStore, StoreSpec, generate_store, write_config
from tests.conftest import Tmpfs, need, run_cli
from tests.helpers.cli import without_caps
from tests.helpers.stores import CLEAN_NOW, config_keys, records
from tests.kinds.rocketmq.progress_files import (
    consumer_offset_json,
    delay_offset_json,
    subscription_group_json,
    timercheck,
    timerlog_file,
    timerlog_unit,
    write_text,
)

SPEC = StoreSpec(
    commitlog_file_size=64 * 1024,
    cq_file_size=40 * 20,  # several ConsumeQueue files per queue: the search crosses files
    messages=512,
    message_size=1024,
    topics=1,
    queues_per_topic=2,
    topic_prefix="Orders",
    oldest_age_hours=100.0,
    newest_age_hours=0.0,
    index=False,
)
TOPIC = "Orders"
LAG = {0: 10, 1: 40}  # into the first (expired) files
OFF = {0: 5, 1: 5}  # a disabled group, further behind still
LEVEL = 3


def units(store: GeneratedStore, topic: str, qid: int) -> list[int]:
    """Every CommitLog offset of a queue, read straight from its files (not by retentiond)."""
    qdir = store.root / "consumequeue" / topic / str(qid)
    out: list[int] = []
    for name in sorted(os.listdir(qdir)):
        data = (qdir / name).read_bytes()
        for phy, size, _ in CQ_UNIT.iter_unpack(data[: len(data) - len(data) % 20]):
            if size <= 0:
                break
            out.append(phy)
    return out


def build(root: Path) -> tuple[GeneratedStore, dict[str, object]]:
    store = generate_store(root, SPEC)
    q = {qid: units(store, TOPIC, qid) for qid in (0, 1)}
    caught = {qid: len(q[qid]) for qid in (0, 1)}
    config = root / "config"
    write_text(
        config / "consumerOffset.json",
        consumer_offset_json({f"{TOPIC}@caught": caught, f"{TOPIC}@lag": LAG, f"{TOPIC}@off": OFF}),
    )
    write_text(
        config / "subscriptionGroup.json",
        subscription_group_json({"caught": True, "lag": True, "off": False}),
    )
    # Delay level 3 (queue 2 of the schedule topic): four messages in the first file, one
    # already delivered.
    sched = root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / str(LEVEL - 1)
    sched.mkdir(parents=True)
    delayed = q[0][:4]
    (sched / "00000000000000000000").write_bytes(
        b"".join(CQ_UNIT.pack(p, 1024, 0) for p in delayed) + bytes(800 - 80)
    )
    write_text(config / "delayOffset.json", delay_offset_json({LEVEL: 1}))
    # One pending timer unit pointing into the second file, one already fired into the first.
    now = int(time.time() * 1000)
    pending_phy = q[1][50]
    done_phy = q[0][2]
    (root / "timerlog").mkdir()
    (root / "timerlog" / "00000000000000000000").write_bytes(
        timerlog_file(
            [
                timerlog_unit(now - 60_000, 30_000, done_phy),
                timerlog_unit(now - 60_000, 3_600_000, pending_phy),
            ],
            52 * 64,
        )
    )
    (config / "timercheck").write_bytes(timercheck(now - 1000, 0))
    facts = {"q": q, "delayed": delayed, "pending_phy": pending_phy}
    return store, facts


def expected_loss(facts: dict[str, object], start: int, end: int) -> dict[str, object]:
    q = facts["q"]
    assert isinstance(q, dict)
    groups = []
    for group, offsets, state in (("lag", LAG, "active"), ("off", OFF, "disabled")):
        n = sum(
            1 for qid in (0, 1) for i, phy in enumerate(q[qid])
            if i >= offsets[qid] and start <= phy < end
        )  # fmt: skip
        if n:
            groups.append({"group": group, "topic": TOPIC, "messages": n, "state": state})
    delayed = facts["delayed"]
    assert isinstance(delayed, list)
    level_n = sum(1 for i, p in enumerate(delayed) if i >= 1 and start <= p < end)
    pending = facts["pending_phy"]
    assert isinstance(pending, int)
    return {
        "progress": "known",
        "messages": sum(g["messages"] for g in groups if g["state"] == "active"),
        "groups": groups,
        "timers": 1 if start <= pending < end else 0,
        "delay_levels": [{"level": LEVEL, "messages": level_n}] if level_n else [],
        "half_messages": 0,
    }


def config_for(root: Path, tmp: Path, **extra: object) -> Path:
    keys = config_keys(CLEAN_NOW, {"deleteFileBatchMax": 100, **extra}, tmp / "journal")
    return write_config(root, SPEC, tmp / "broker.yaml", **keys)


def test_forced_deletion_records_exactly_what_the_queues_imply(tmpfs: Tmpfs, tmp_path: Path):
    store, facts = build(tmpfs.path / "store")
    config = config_for(store.root, tmp_path)
    tmpfs.fill_to(0.90)  # above diskSpaceCleanForciblyRatio: unexpired files go too

    plan = run_cli("plan", "--config", str(config), "--json")
    assert plan.code == 0, plan.err
    doc = json.loads(plan.out)
    planned = [f for f in doc["commitlog"]["files"] if f["verdict"] == "delete"]
    assert any(f["reason"] == "forced_over_clean_forcibly_ratio" for f in planned)
    assert len(planned) >= 3
    for f in planned:
        assert f["loss"] == expected_loss(facts, f["start_offset"], f["end_offset"]), f["path"]
    for f in doc["commitlog"]["files"]:
        if f["verdict"] == "keep":
            assert "loss" not in f
    named = {g["group"] for f in planned for g in f["loss"]["groups"]}
    assert named == {"lag", "off"}  # the caught-up group is never named
    assert sum(f["loss"]["timers"] for f in planned) == 1
    assert sum(d["messages"] for f in planned for d in f["loss"]["delay_levels"]) == 3

    text = run_cli("plan", "--config", str(config))
    assert "lag@Orders" in text.out and "caught@" not in text.out

    once = run_cli("once", "--config", str(config))
    assert once.code == 0, once.err
    deletions = [r for r in records(tmp_path / "journal", "deletion") if r["kind"] == "commitlog"]
    assert [r["file"] for r in deletions] == [f["path"] for f in planned]
    for r in deletions:
        assert r["schema_version"] == SCHEMA_VERSION
        assert r["loss"] == expected_loss(facts, r["start_offset"], r["end_offset"]), r["file"]
    # the lagging group's whole backlog below the first kept file, and not one message more
    q = facts["q"]
    assert isinstance(q, dict)
    floor = deletions[-1]["end_offset"]
    backlog = sum(1 for qid in (0, 1) for i, p in enumerate(q[qid]) if i >= LAG[qid] and p < floor)
    assert sum(r["loss"]["messages"] for r in deletions) == backlog > 0


def _progress_case(root: Path, case: str) -> None:
    config = root / "config"
    main, bak = config / "consumerOffset.json", config / "consumerOffset.json.bak"
    good = main.read_text()
    if case == "torn_with_bak":
        bak.write_text(good)
        main.write_bytes(good.encode()[: len(good) // 3])
    elif case == "corrupt":
        main.write_bytes(good.encode()[: len(good) // 3])
    elif case == "missing":
        main.unlink()


@pytest.mark.parametrize(
    ("case", "progress", "says"),
    [
        ("torn_with_bak", "known", "read consumerOffset.json.bak instead"),
        ("corrupt", "corrupt", "consumerOffset.json.bak missing"),
        ("missing", "unknown", "consumerOffset.json missing"),
    ],
)
def test_bad_progress_files_are_problems_never_more_deletion(
    tmp_path: Path, case: str, progress: str, says: str
):
    store, facts = build(tmp_path / "store")
    config = config_for(store.root, tmp_path, fileReservedTime=72)
    before = json.loads(run_cli("plan", "--config", str(config), "--json").out)
    _progress_case(store.root, case)
    plan = run_cli("plan", "--config", str(config), "--json")
    assert plan.code == 0, plan.err
    doc = json.loads(plan.out)
    problems = [p["problem"] for p in doc["consumer_progress"]["problems"]]
    assert any(says in p for p in problems), problems

    def verdicts(d: dict) -> list[tuple[str, str]]:
        return [(f["path"], f["verdict"]) for f in d["commitlog"]["files"]]

    assert verdicts(doc) == verdicts(before)  # never a deletion that would not happen anyway
    planned = [f for f in doc["commitlog"]["files"] if f["verdict"] == "delete"]
    assert planned
    for f in planned:
        assert f["loss"]["progress"] == progress
        if progress == "known":
            assert f["loss"] == expected_loss(facts, f["start_offset"], f["end_offset"])
        else:
            assert f["loss"]["groups"] == [] and f["loss"]["messages"] == 0
    text = run_cli("plan", "--config", str(config))
    assert f"PROBLEM: {store.root}/config/consumerOffset.json: " in text.out


def test_keep_guards_the_lagging_groups_files_until_the_disk_passes_clean_forcibly(
    tmpfs: Tmpfs, tmp_path: Path
):
    store, facts = build(tmpfs.path / "store")
    config = config_for(store.root, tmp_path, retentiond={"guard": {"unconsumed": "keep"}})
    report = config_for(store.root, tmp_path / "r")
    # Expired files only (72 h): the first holds the lagging group's unread messages.
    plain = json.loads(run_cli("plan", "--config", str(report), "--json").out)
    would = [f for f in plain["commitlog"]["files"] if f["verdict"] == "delete"]
    assert would and would[0]["loss"]["messages"] > 0

    doc = json.loads(run_cli("plan", "--config", str(config), "--json").out)
    first = doc["commitlog"]["files"][0]
    assert first["verdict"] == "keep" and first["reason"] == "unconsumed"
    assert first["loss"] == expected_loss(facts, first["start_offset"], first["end_offset"])
    assert "lag@Orders" in first["detail"]
    assert [f for f in doc["commitlog"]["files"] if f["verdict"] == "delete"] == []
    assert doc["commitlog"]["min_offset_after"] == first["start_offset"]
    once = run_cli("once", "--config", str(config))
    assert once.code == 0, once.err
    assert os.path.exists(first["path"])
    assert records(tmp_path / "journal", "deletion") == []

    tmpfs.fill_to(0.90)  # past diskSpaceCleanForciblyRatio: disk safety wins
    once = run_cli("once", "--config", str(config))
    assert once.code == 0, once.err
    assert not os.path.exists(first["path"])
    gone = [r for r in records(tmp_path / "journal", "deletion") if r["kind"] == "commitlog"]
    assert gone[0]["file"] == first["path"] and gone[0]["loss"]["messages"] > 0
    assert gone[0]["loss"]["groups"][0]["group"] == "lag"


@pytest.mark.parametrize("unreadable", ["topic", "queues"])
def test_a_loss_that_cannot_be_counted_is_never_taken_for_none(
    tmp_path: Path, unreadable: str
) -> None:
    """An unreadable ConsumeQueue directory hides what its groups have not read: the loss is
    ``partial`` and names the topic, and a guard set to keep keeps the file (the prefix stops
    there), where counting nothing would have let the lagging group's messages go."""
    need(shutil.which("setpriv") is not None or os.geteuid() != 0, "setpriv (util-linux)")
    store, _ = build(tmp_path / "store")
    config = config_for(store.root, tmp_path, retentiond={"guard": {"unconsumed": "keep"}})
    topic = store.root / "consumequeue" / "Orders"
    hidden = [topic] if unreadable == "topic" else [topic / "0", topic / "1"]
    for d in hidden:
        os.chmod(d, 0)
    as_nobody = without_caps()  # root without capabilities: permission bits bind
    try:
        doc = json.loads(run_cli("plan", "--config", str(config), "--json", prefix=as_nobody).out)
        first = doc["commitlog"]["files"][0]
        assert first["loss"]["progress"] == "partial"
        assert first["loss"]["uncounted"] == ["Orders"]
        assert first["verdict"] == "keep" and first["reason"] == "unconsumed"
        assert [f for f in doc["commitlog"]["files"] if f["verdict"] == "delete"] == []
        once = run_cli("once", "--config", str(config), prefix=as_nobody)
        assert os.path.exists(first["path"]), once.err
        assert [
            r for r in records(tmp_path / "journal", "deletion") if r["kind"] == "commitlog"
        ] == []
    finally:
        for d in hidden:
            os.chmod(d, 0o755)
