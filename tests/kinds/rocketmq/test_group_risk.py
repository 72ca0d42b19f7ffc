"""The RocketMQ leading indicator: per active group, its unread messages in the CommitLog files
the current configuration will delete -- this round's and those that expire later -- and when
the first of them goes (by age and delete hour, or now under disk pressure).

Real store files (a generated store, its mtimes set), the consumer progress written
byte-exactly by the test-only writer, the queue units read back by the test itself; rounds
in process (a dry run: the daemon's memory, nothing unlinked), and one real daemon for
``status`` and ``/metrics``.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from retentiond.engine.cleaner import Cleaner
from retentiond.engine.loss import GroupRisk, risk_status
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.rocketmq.loss import commitlog_losses
from retentiond.kinds.rocketmq.progress import read_progress
from retentiond.storegen.rocketmq import GeneratedStore, StoreSpec, generate_store, write_config
from tests.conftest import Tmpfs
from tests.e2e.test_kafka_daemon import metric_lines, status
from tests.helpers.daemons import Daemon, spawn_run
from tests.helpers.stores import CLEAN_NOW, config_keys
from tests.kinds.rocketmq.progress_files import (
    consumer_offset_json,
    subscription_group_json,
    write_text,
)
from tests.kinds.rocketmq.test_loss_acceptance import units

HOUR_MS = 3_600_000
RESERVED_H = 72
SPEC = StoreSpec(
    commitlog_file_size=64 * 1024,
    cq_file_size=40 * 20,
    messages=300,  # 63 a file: four full files and the newest
    message_size=1024,
    topics=1,
    queues_per_topic=2,
    topic_prefix="Orders",
    oldest_age_hours=20.0,
    newest_age_hours=0.0,
    index=False,
)
TOPIC = "Orders"
LAG = {0: 10, 1: 40}  # from the first file on
TAIL = {0: 140, 1: 140}  # only in the newest file, which is never deleted
OFF = {0: 0, 1: 0}  # a disabled group: reported in losses, never at risk


def build(root: Path, now_ms: int) -> tuple[GeneratedStore, int, int]:
    """The store, with the first CommitLog file expiring two hours from ``now_ms`` and the
    others in 62 h; returns the store, that expiry and the lagging group's unread messages
    in every file but the newest."""
    store = generate_store(root, SPEC)
    q = {qid: units(store, TOPIC, qid) for qid in (0, 1)}
    caught = {qid: len(q[qid]) for qid in (0, 1)}
    write_text(
        root / "config" / "consumerOffset.json",
        consumer_offset_json(
            {
                f"{TOPIC}@lag": LAG,
                f"{TOPIC}@caught": caught,
                f"{TOPIC}@tail": TAIL,
                f"{TOPIC}@off": OFF,
            }
        ),
    )
    write_text(
        root / "config" / "subscriptionGroup.json",
        subscription_group_json({"lag": True, "caught": True, "tail": True, "off": False}),
    )
    files = [f for f in store.commitlog_files if not f.preallocated]
    assert len(files) == 5
    first_mtime = now_ms - (RESERVED_H - 2) * HOUR_MS
    mtimes = [first_mtime] + [now_ms - 10 * HOUR_MS] * 3 + [now_ms]
    for f, m in zip(files, mtimes, strict=True):
        os.utime(f.path, ns=(m * 1_000_000, m * 1_000_000))
    newest = files[-1].start_offset
    # the group's tail in the newest file stays; the rest of its backlog goes
    assert any(p >= newest for qid in (0, 1) for p in q[qid][LAG[qid] :])
    at_risk = sum(1 for qid in (0, 1) for p in q[qid][LAG[qid] :] if p < newest)
    assert q[0][LAG[0]] < files[0].start_offset + SPEC.commitlog_file_size  # in the first file
    return store, first_mtime + RESERVED_H * HOUR_MS, at_risk


def config(store: GeneratedStore, tmp: Path, **keys: Any) -> Path:
    merged = config_keys(
        CLEAN_NOW, {"fileReservedTime": RESERVED_H, "deleteFileBatchMax": 100, **keys}, tmp / "j"
    )
    return write_config(store.root, SPEC, tmp / "broker.yaml", **merged)


def risk_after_a_round(path: Path) -> tuple[tuple[GroupRisk, ...] | None, int, Any]:
    """A dry-run round in process, as a daemon's: the indicator, the round's time, the plan."""
    cleaner = Cleaner(kind_for(load_settings(path)))
    result = cleaner.run_round(dry_run=True)
    stats = cleaner.kind.store_stats(result.plan, frozenset(), None)
    assert cleaner.kind.status()["groups_at_risk"] == risk_status(stats.group_risk)
    return stats.group_risk, result.plan.now_ms, result.plan


def _hour_from(now_ms: int, hours: int) -> int:
    return (datetime.fromtimestamp(now_ms / 1000, UTC).hour + hours) % 24


def _first_hour_start(at_ms: int, hour: int) -> int:
    """The start of the first hour ``hour`` (UTC) whose end is after ``at_ms``."""
    t = datetime.fromtimestamp(at_ms / 1000, UTC).replace(minute=0, second=0, microsecond=0)
    while t.hour != hour:
        t += timedelta(hours=1)
    return int(t.timestamp() * 1000)


def test_a_group_lagging_into_a_file_that_expires_in_two_hours_is_at_risk_from_then(
    tmp_path: Path,
) -> None:
    """Every hour a delete hour: the first file goes the moment it expires, two hours from
    now. The lagging group's whole backlog outside the newest file is at risk from then; the
    caught-up group, the group whose backlog is all in the newest file and the disabled one
    are not named. Nothing goes this round."""
    now = int(time.time() * 1000)
    store, expires, at_risk = build(tmp_path / "store", now)
    risk, _, plan = risk_after_a_round(config(store, tmp_path))
    assert [d for d in plan.commitlog.decisions if d.delete] == []
    assert risk == (GroupRisk("lag", at_risk, expires),)


def test_outside_the_delete_hour_the_first_loss_waits_for_it(tmp_path: Path) -> None:
    """deleteWhen twelve hours away (UTC): the first file goes at the first delete hour after
    it expires, not when it expires."""
    now = int(time.time() * 1000)
    store, expires, at_risk = build(tmp_path / "store", now)
    hour = _hour_from(now, 12)
    path = config(store, tmp_path, deleteWhen=f"{hour:02d}", retentiond={"timezone": "UTC"})
    risk, _, _ = risk_after_a_round(path)
    assert risk == (GroupRisk("lag", at_risk, _first_hour_start(expires, hour)),)


def test_under_disk_pressure_the_first_loss_is_now(tmpfs: Tmpfs, tmp_path: Path) -> None:
    """Above diskSpaceCleanForciblyRatio (cleanFileForciblyEnable): every file but the newest
    goes now, whatever its age."""
    now = int(time.time() * 1000)
    store, _, at_risk = build(tmpfs.path / "store", now)
    path = config(store, tmp_path)
    tmpfs.fill_to(0.90)
    risk, round_ms, plan = risk_after_a_round(path)
    assert plan.commitlog.triggers.clean_at_once
    assert risk == (GroupRisk("lag", at_risk, round_ms),)


def test_above_the_max_ratio_a_file_goes_when_it_expires(tmpfs: Tmpfs, tmp_path: Path) -> None:
    """Above diskMaxUsedSpaceRatio but below the clean-forcibly ratio: a pass runs every
    round, so the first file goes at its expiry without waiting for the delete hour."""
    now = int(time.time() * 1000)
    store, expires, at_risk = build(tmpfs.path / "store", now)
    path = config(
        store, tmp_path, deleteWhen=f"{_hour_from(now, 12):02d}", retentiond={"timezone": "UTC"}
    )
    tmpfs.fill_to(0.80)
    risk, _, plan = risk_after_a_round(path)
    assert plan.commitlog.triggers.usage_exceeds and not plan.commitlog.triggers.clean_at_once
    assert risk == (GroupRisk("lag", at_risk, expires),)


def test_a_guard_that_keeps_unconsumed_files_leaves_nothing_at_risk(tmp_path: Path) -> None:
    """With ``guard.unconsumed: keep`` the first file, holding the lagging group's messages,
    will be kept when it expires: the pass stops there, so nothing of the group goes."""
    now = int(time.time() * 1000)
    store, _, _ = build(tmp_path / "store", now)
    path = config(store, tmp_path, retentiond={"guard": {"unconsumed": "keep"}})
    risk, _, _ = risk_after_a_round(path)
    assert risk == ()


def test_without_consumer_progress_nothing_can_be_said(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    store, _, _ = build(tmp_path / "store", now)
    (store.root / "config" / "consumerOffset.json").unlink()
    risk, _, _ = risk_after_a_round(config(store, tmp_path))
    assert risk is None


def test_the_daemon_exports_the_lagging_group_and_when(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    store, expires, at_risk = build(tmp_path / "store", now)
    path = config(store, tmp_path, retentiond={"initialDelay": 0, "dryRun": True})
    log = tmp_path / "daemon.log"
    daemon = Daemon(spawn_run(path, log), path, store, tmp_path / "j", log)
    try:
        doc = daemon.wait_until(
            "a round",
            lambda: (s := status(daemon)) is not None and s["rounds"]["count"] >= 1 and s,
        )
        assert doc["groups_at_risk"] == [
            {"group": "lag", "messages": at_risk, "first_loss_ms": expires}
        ]
        [line] = metric_lines(daemon, "retentiond_group_unread_at_risk_messages")
        assert 'group="lag"' in line and line.endswith(f" {float(at_risk)}")
        [first] = metric_lines(daemon, "retentiond_group_first_loss_timestamp_seconds")
        assert float(first.rsplit(" ", 1)[1]) == expires / 1000
        text = daemon.cli("status")
        assert f"at risk   lag {at_risk} unread, the first goes in" in text.out, text.out
    finally:
        daemon.kill()


def test_counts_per_file_are_the_queue_units_for_any_offsets_and_files(tmp_path: Path) -> None:
    """The frontier search gives, for groups anywhere (before the queue's first file, inside
    it, at its end, past it) and any ascending set of files (adjacent or not), exactly the
    units a full read of the queues finds."""
    spec = dataclasses.replace(SPEC, cq_file_size=7 * 20, messages=280)  # many queue files
    store = generate_store(tmp_path / "store", spec)
    q = {qid: units(store, TOPIC, qid) for qid in (0, 1)}
    # the queue's first ConsumeQueue file gone, as after the queue pass
    first = store.root / "consumequeue" / TOPIC / "0" / f"{0:020d}"
    first.unlink()
    q0_min = 7
    rng = random.Random(7)
    n = len(q[0])
    offsets = {
        f"g{k}": {0: rng.choice([0, 3, q0_min, rng.randrange(n), n - 1, n, n + 5]),
                  1: rng.choice([0, rng.randrange(n), n])}
        for k in range(12)
    }  # fmt: skip
    table = {f"{TOPIC}@{g}": o for g, o in offsets.items()}
    write_text(store.root / "config" / "consumerOffset.json", consumer_offset_json(table))
    files = [
        (f.start_offset, f.start_offset + f.size)
        for f in store.commitlog_files
        if not f.preallocated
    ]
    progress = read_progress(store.root)
    for chosen in (files, files[:1], files[1:3], [files[0], files[2], files[4]], files[-1:]):
        got = commitlog_losses(progress, store.root / "consumequeue", spec.cq_file_size, chosen)
        for (start, end), loss in zip(chosen, got, strict=True):
            want = {}
            for g, o in offsets.items():
                m = sum(
                    1 for qid in (0, 1) for i, p in enumerate(q[qid])
                    if i >= max(o[qid], q0_min if qid == 0 else 0) and start <= p < end
                )  # fmt: skip
                if m:
                    want[g] = m
            assert {x.group: x.messages for x in loss.groups} == want, (start, end)


def test_a_later_round_keeps_the_indicator_and_counts_again_when_the_triggers_change(
    tmpfs: Tmpfs, tmp_path: Path
) -> None:
    """The later files are recounted at most once a minute while the same files would go
    under the same triggers: the next round reports the same groups and times; a disk
    that passes the clean-forcibly ratio makes it count again (everything goes now)."""
    now = int(time.time() * 1000)
    store, expires, at_risk = build(tmpfs.path / "store", now)
    cleaner = Cleaner(kind_for(load_settings(config(store, tmp_path))))
    for _ in range(2):
        plan = cleaner.run_round(dry_run=True).plan
        risk = cleaner.kind.store_stats(plan, frozenset(), None).group_risk
        assert risk == (GroupRisk("lag", at_risk, expires),)
    tmpfs.fill_to(0.90)
    plan = cleaner.run_round(dry_run=True).plan
    risk = cleaner.kind.store_stats(plan, frozenset(), None).group_risk
    assert risk == (GroupRisk("lag", at_risk, plan.now_ms),)


def test_a_file_dated_past_year_9999_ends_the_walk_and_the_round_runs(
    tmpfs: Tmpfs, tmp_path: Path
) -> None:
    """A CommitLog file whose mtime is far past any date a clock can show (a tmpfs keeps it):
    it and the files after it never expire by age, so the indicator counts the first file
    only. The round runs as ``plan`` does; nothing of the indicator can stop it."""
    now = int(time.time() * 1000)
    store, expires, _ = build(tmpfs.path / "store", now)
    files = [f for f in store.commitlog_files if not f.preallocated]
    far = 4 * 10**20  # ns: about the year 14645
    os.utime(files[1].path, ns=(far, far))
    assert os.stat(files[1].path).st_mtime_ns == far
    q = {qid: units(store, TOPIC, qid) for qid in (0, 1)}
    in_first = sum(1 for qid in (0, 1) for p in q[qid][LAG[qid] :] if p < files[1].start_offset)
    path = config(store, tmp_path)
    plan = Cleaner(kind_for(load_settings(path))).plan()
    risk, _, round_plan = risk_after_a_round(path)
    assert [d.verdict for d in round_plan.commitlog.decisions] == [
        d.verdict for d in plan.commitlog.decisions
    ]
    assert risk == (GroupRisk("lag", in_first, expires),)


def test_a_progress_entry_whose_topic_cannot_be_a_directory_is_a_problem_not_a_crash(
    tmp_path: Path,
) -> None:
    """A consumerOffset.json key with a NUL or a "/" in its topic: a problem line, the entry
    skipped; the round runs and the indicator is what it is without the entry."""
    now = int(time.time() * 1000)
    store, expires, at_risk = build(tmp_path / "store", now)
    offsets = store.root / "config" / "consumerOffset.json"
    q = {qid: units(store, TOPIC, qid) for qid in (0, 1)}
    caught = {qid: len(q[qid]) for qid in (0, 1)}
    table = {f"{TOPIC}@lag": LAG, f"{TOPIC}@caught": caught}
    write_text(
        offsets, consumer_offset_json({**table, "bad\u0000topic@g": {0: 0}, f"{TOPIC}/0@g": {0: 0}})
    )
    risk, _, plan = risk_after_a_round(config(store, tmp_path))
    assert risk == (GroupRisk("lag", at_risk, expires),)
    assert [d for d in plan.commitlog.decisions if d.delete] == []
    assert any(
        p == str(offsets) and "cannot be a directory name" in text
        for p, text in plan.progress_problems
    ), plan.progress_problems


def test_a_bad_queue_file_the_later_files_reach_changes_no_verdict(tmp_path: Path) -> None:
    """Under ``guard.unconsumed: keep``, a group caught up past the expired first file, and
    a ConsumeQueue file further on replaced by a symlink: counting what this round deletes
    never reads it, counting the files that go later does. The round deletes what ``plan``
    deletes, with the same losses; only the indicator is left without the later files."""
    now = int(time.time() * 1000)
    store, _, _ = build(tmp_path / "store", now)
    files = [f for f in store.commitlog_files if not f.preallocated]
    old = now - (RESERVED_H + 1) * HOUR_MS  # the first file expired an hour ago
    os.utime(files[0].path, ns=(old * 1_000_000, old * 1_000_000))
    q = {qid: units(store, TOPIC, qid) for qid in (0, 1)}
    second = {qid: next(i for i, p in enumerate(q[qid]) if p >= files[1].start_offset)
              for qid in (0, 1)}  # fmt: skip
    write_text(
        store.root / "config" / "consumerOffset.json",
        consumer_offset_json({f"{TOPIC}@g": second}),
    )
    qdir = store.root / "consumequeue" / TOPIC / "0"
    per = SPEC.cq_file_size // 20
    assert second[0] // per == 0  # the group's unit is in the queue's first file...
    victim = qdir / f"{SPEC.cq_file_size:020d}"  # ...the next one becomes a symlink
    moved = tmp_path / "moved"
    os.rename(victim, moved)
    os.symlink(moved, victim)
    path = config(store, tmp_path, retentiond={"guard": {"unconsumed": "keep"}})

    def verdicts(p: Any) -> list[tuple[str, str, str, Any]]:
        return [
            (d.path, str(d.verdict), str(d.reason), d.loss)
            for d in p.commitlog.decisions
            if d.start_offset is not None
        ]

    plan = Cleaner(kind_for(load_settings(path))).plan()
    risk, _, round_plan = risk_after_a_round(path)
    assert verdicts(round_plan) == verdicts(plan)
    first = plan.commitlog.decisions[0]
    assert first.delete and first.loss is not None
    assert first.loss.messages == 0 and first.loss.uncounted == ()
    assert risk == ()  # the later files' count is partial: the walk stops at the first
    assert any(p == str(qdir) for p, _ in round_plan.progress_problems)  # said, once
