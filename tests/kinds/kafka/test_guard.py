"""``retentiond.guard.unconsumed: keep`` in Kafka's offline passes and in ``rescue``.

The log dir of ``test_consumer_offsets``: ``orders-0`` and ``orders-1``, six segments of five
records each, every one past retention.ms; ``__consumer_offsets-0`` written with
kafka-python's record builder (G1 committed 12 and G2 3 on orders-0, G2 20 on orders-1).
With keep, a segment holding records at or above an active group's committed offset stays
(reason ``unconsumed``) and its partition's prefix stops there, until the log dir's disk is
above ``retentiond.kafka.diskWarningRatio``; ignored and stale groups are not protected.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from retentiond.engine.cleaner import Cleaner
from retentiond.engine.disk import measure_path
from retentiond.engine.rescue import RescueRequest
from retentiond.journal.writer import Journal
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.kafka.kind import Kafka
from retentiond.kinds.kafka.plan import KafkaPlan
from retentiond.kinds.kafka.rescue import Guard, needed_bytes, select
from tests.conftest import ORIGIN, Tmpfs, need, records, run_cli
from tests.e2e.test_kafka_cli import broker_holding
from tests.kinds.kafka.kafkalog import KafkaLog
from tests.kinds.kafka.test_consumer_offsets import (
    EXPECTED,
    _log_dir,
    batch,
    commit_key,
    commit_v3,
    write_offsets,
)

DAY = 86_400_000
KEEP = "retentiond.guard.unconsumed=keep"


def _segments(doc: dict[str, Any]) -> dict[tuple[str, int, int], dict[str, Any]]:
    return {
        (p["topic"], p["partition"], s["start_offset"]): s
        for ld in doc["log_dirs"]
        for p in ld["partitions"]
        if p["topic"] == "orders"
        for s in p["segments"]
    }


def _plan(config: Path) -> dict[str, Any]:
    result = run_cli("plan", "--json", "--config", str(config))
    assert result.code == 0, result.err
    doc: dict[str, Any] = json.loads(result.out)
    return doc


def _verdicts(doc: dict[str, Any]) -> dict[tuple[str, int, int], str]:
    return {k: f"{s['verdict']}:{s['reason']}" for k, s in _segments(doc).items()}


def _journaled(journal: Path) -> dict[tuple[str, int, int], list[tuple[str, int, str]]]:
    return {
        (r["topic"], r["partition"], r["base_offset"]): [
            (g["group"], g["messages"], g["state"]) for g in r["loss"]["groups"]
        ]
        for r in records(journal, "deletion")
    }


GONE = "delete:retention_ms_breach"
BEHIND = "keep:after_first_kept"


def test_keep_stops_the_prefix_at_the_lagging_groups_records(tmp_path: Path) -> None:
    log_dir, config = _log_dir(tmp_path, None, KEEP)
    doc = _plan(config)
    assert _verdicts(doc) == {
        # G2 (committed 3) has not read records 3 and 4 of the first segment
        ("orders", 0, 0): "keep:unconsumed",
        **{("orders", 0, b): BEHIND for b in (5, 10, 15, 20, 25)},
        # orders-1: G2 committed 20, so 0..19 are consumed by every group here
        **{("orders", 1, b): GONE for b in (0, 5, 10, 15)},
        ("orders", 1, 20): "keep:unconsumed",
        ("orders", 1, 25): BEHIND,
    }
    seg = _segments(doc)
    first = seg[("orders", 0, 0)]
    assert first["detail"] == "loses 2 unread: G2@orders 2 (partial coverage)"
    assert first["loss"]["groups"] == [
        {"group": "G2", "topic": "orders", "messages": 2, "state": "active"}
    ]
    assert "would go: retention_ms_breach" in seg[("orders", 0, 5)]["detail"]
    parts = {(p["topic"], p["partition"]): p for p in doc["log_dirs"][0]["partitions"]}
    # the prefix stops at the kept segment: no roll, the log start offset moves only to it
    assert parts[("orders", 0)]["new_log_start_offset"] == 0
    assert parts[("orders", 1)]["new_log_start_offset"] == 20
    assert parts[("orders", 1)]["roll_offset"] is None
    assert doc["totals"]["delete_files"] == 4

    text = run_cli("plan", "--config", str(config))
    assert "0  360 B     keep  unconsumed (loses 2 unread: G2@orders 2 (partial coverage))" in (
        text.out
    ), text.out
    assert "... 5 more kept behind 0 (unconsumed)" in text.out
    assert (
        "consumer progress partial: 1 of 3 __consumer_offsets partitions here (groups whose "
        "offsets are elsewhere are not known)\n  guard: retentiond.guard.unconsumed=keep "
        "protects only the groups whose offsets were read here\n"
    ) in text.out

    once = run_cli("once", "--config", str(config))
    assert once.code == 0, once.err
    assert sorted(_journaled(tmp_path / "journal")) == [("orders", 1, b) for b in (0, 5, 10, 15)]
    assert all(loss == [] for loss in _journaled(tmp_path / "journal").values())
    [round_record] = records(tmp_path / "journal", "round")
    assert round_record["reasons"]["keep:unconsumed"] == 2  # one a partition
    assert round_record["reasons"]["keep:after_first_kept"] == 6
    assert (log_dir / "orders-0" / f"{0:020d}.log").exists()
    assert (log_dir / "orders-1" / f"{20:020d}.log").exists()
    assert not (log_dir / "orders-1" / f"{15:020d}.log").exists()

    # report (the default) deletes them all, as Kafka would
    _, plain = _log_dir(tmp_path / "report")
    assert set(_verdicts(_plan(plain)).values()) == {GONE}


def test_disk_above_the_warning_ratio_wins_and_the_loss_is_recorded(tmpfs: Tmpfs) -> None:
    """The same log dir on a real 64 MiB tmpfs: below diskWarningRatio (0.90) the guard
    keeps; filled to 0.95 the kept segments go, each journaled with what it loses."""
    log_dir, config = _log_dir(tmpfs.path, None, KEEP)
    journal = tmpfs.path / "journal"
    assert run_cli("once", "--config", str(config)).code == 0
    assert sorted(_journaled(journal)) == [("orders", 1, b) for b in (0, 5, 10, 15)]

    tmpfs.fill_to(0.95)
    doc = _plan(config)
    seg = _segments(doc)
    assert {f"{s['verdict']}:{s['reason']}" for s in seg.values()} == {GONE}
    detail = seg[("orders", 0, 0)]["detail"]
    yielded = re.search(r"; guard yielded: log dir used ratio (\S+) above (\S+) (\S+)$", detail)
    assert yielded is not None, detail
    assert float(yielded[1]) >= 0.95 and yielded.groups()[1:] == (
        "retentiond.kafka.diskWarningRatio",
        "0.9",
    )
    assert seg[("orders", 0, 0)]["loss"]["messages"] == 2

    once = run_cli("once", "--config", str(config))
    assert once.code == 0, once.err
    got = {k: [(g, n) for g, n, _state in v] for k, v in _journaled(journal).items()}
    assert got == EXPECTED  # every segment gone, each with the records it took from whom
    assert not (log_dir / "orders-0" / f"{0:020d}.log").exists()


def test_ignored_groups_are_not_protected(tmp_path: Path) -> None:
    _, config = _log_dir(tmp_path, None, KEEP, "retentiond.guard.ignoreGroups=tools-*,G2")
    doc = _plan(config)
    assert _verdicts(doc) == {
        # G2's unread records go; G1 (committed 12) still protects from segment 10 on
        ("orders", 0, 0): GONE,
        ("orders", 0, 5): GONE,
        ("orders", 0, 10): "keep:unconsumed",
        **{("orders", 0, b): BEHIND for b in (15, 20, 25)},
        **{("orders", 1, b): GONE for b in (0, 5, 10, 15, 20, 25)},
    }
    seg = _segments(doc)
    assert seg[("orders", 0, 0)]["loss"]["groups"] == [
        {"group": "G2", "topic": "orders", "messages": 2, "state": "ignored"}
    ]
    assert seg[("orders", 0, 10)]["detail"] == (
        "loses 3 unread: G1@orders 3, G2@orders 5 (ignored) (partial coverage)"
    )


def test_a_group_whose_offsets_do_not_move_goes_stale(tmp_path: Path) -> None:
    """The kind remembers, round after round, when each group's committed offsets last
    moved: G2's never do, so after staleAfter (1 h here) it is stale and protects nothing;
    G1 commits again between the rounds and still protects what it has not read."""
    log_dir, config = _log_dir(tmp_path, None, KEEP, "retentiond.guard.staleAfter=1h")
    settings = load_settings(config)
    t0 = int(time.time() * 1000)
    clock = [t0]
    journal = Journal(tmp_path / "journal", ORIGIN)
    cleaner = Cleaner(kind_for(settings), journal=journal, clock_ms=lambda: clock[0])
    try:
        cleaner.run_round()  # orders-1 0..15 go; G2 keeps the rest
        clock[0] = t0 + 3_600_000 - 1  # not yet stale
        assert not cleaner.run_round().deleted
        # G1 reads on: it commits 20 on orders-0 (a batch appended to its offsets partition)
        shutil.rmtree(log_dir / "__consumer_offsets-0")
        offsets = write_offsets(log_dir, 0)
        offsets.append(batch(offsets.leo, [(commit_key("G1", "orders", 0), commit_v3(20))]))
        offsets.write(hw=offsets.leo)
        clock[0] = t0 + 3_600_000  # G2's offsets unmoved for staleAfter; G1's just moved
        third = cleaner.run_round()
        plan = cleaner.plan()  # the same object: it has watched G2 go stale
    finally:
        journal.close()
    went = {(o.decision.topic, o.decision.queue_id, o.decision.start_offset) for o in third.deleted}
    assert went == {
        *(("orders", 0, b) for b in (0, 5, 10, 15)),  # G1 read up to 20, G2 is stale
        *(("orders", 1, b) for b in (20, 25)),
    }
    stop = next(d for d in plan.decisions() if d.topic == "orders" and d.queue_id == 0)
    assert (stop.start_offset, str(stop.reason)) == (20, "unconsumed")
    assert stop.detail == "loses 5 unread: G1@orders 5, G2@orders 5 (stale) (partial coverage)"
    journaled = _journaled(tmp_path / "journal")
    assert journaled[("orders", 0, 0)] == [("G2", 2, "stale")]
    assert journaled[("orders", 1, 25)] == [("G2", 5, "stale")]
    # nothing an active group has not read goes while the guard holds: no group at risk
    cleaner.kind.store_stats(plan, frozenset(), None)
    assert cleaner.kind.status()["groups_at_risk"] == []

    # a fresh process (plan) has watched nothing: G2 is active for it, and protects
    fresh = _verdicts(_plan(config))
    assert fresh[("orders", 0, 20)] == "keep:unconsumed"


def _rescue(config: Path) -> tuple[int, dict[str, Any], str]:
    args = ("rescue", "--config", str(config), "--free", str(1 << 60), "--beyond-retention")
    text = run_cli(*args, "--dry-run")
    result = run_cli(*args, "--dry-run", "--json")
    assert result.code == text.code, result.err
    return result.code, json.loads(result.out)["filesystems"][0], text.out


def test_rescue_under_keep_takes_no_unconsumed_segment_below_the_warning_ratio(
    tmpfs: Tmpfs,
) -> None:
    """Three days old, within retention: only rescue's beyond-retention step could take
    them. Below diskWarningRatio the guard keeps what a group has not read (both orders-0's
    first segment and orders-1's from 20 on): only the consumed segments are taken, and the
    unreached target says why."""
    log_dir, config = _log_dir(tmpfs.path, int(time.time() * 1000) - 3 * DAY, KEEP)
    config.write_text(config.read_text().replace("num.partitions=3", "num.partitions=1"))
    code, fs, text = _rescue(config)
    assert code == 9
    went = [i["path"] for s in fs["steps"] for i in s["items"]]
    assert went == [str(log_dir / "orders-1" / f"{b:020d}.log") for b in (0, 5, 10, 15)]
    assert fs["guard_kept_partitions"] == 2
    assert "retentiond.guard.unconsumed=keep kept the unconsumed records of 2 partitions" in text

    # above the warning ratio the guard yields: consumed first, then the unconsumed ones
    tmpfs.fill_to(0.95)
    code, fs, _ = _rescue(config)
    assert code == 9  # 2**60 bytes stays out of reach
    went = [i["path"] for s in fs["steps"] for i in s["items"]]
    assert went[:4] == [str(log_dir / "orders-1" / f"{b:020d}.log") for b in (0, 5, 10, 15)]
    assert str(log_dir / "orders-0" / f"{0:020d}.log") in went[4:]
    assert fs["guard_kept_partitions"] == 0
    assert os.path.exists(log_dir / "orders-0" / f"{0:020d}.log")  # a dry run


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Tmpfs]:
    """A real 1 MiB tmpfs: one percent of it is about one segment's blocks."""
    need(os.geteuid() == 0, "mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        yield Tmpfs(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_rescue_takes_unconsumed_segments_only_down_to_the_warning_ratio(
    small_tmpfs: Tmpfs,
) -> None:
    """Above diskWarningRatio (0.50 here) the guard yields only as far as disk safety needs:
    rescue takes the consumed segments first, then unconsumed ones while what it has freed
    leaves the disk above the ratio, and none once it no longer does."""
    log_dir, config = _log_dir(
        small_tmpfs.path,
        int(time.time() * 1000) - 3 * DAY,
        KEEP,
        "retentiond.kafka.diskWarningRatio=0.5",
    )
    config.write_text(config.read_text().replace("num.partitions=3", "num.partitions=1"))
    small_tmpfs.fill_to(0.555)
    usage = measure_path(str(log_dir))
    assert usage.ratio is not None and usage.ratio > 0.5
    room = needed_bytes(usage, RescueRequest(target_ratio=0.5))  # freed before it is not
    code, fs, _ = _rescue(config)
    assert code == 9
    items = [i for s in fs["steps"] for i in s["items"]]
    consumed = [str(log_dir / "orders-1" / f"{b:020d}.log") for b in (0, 5, 10, 15)]
    assert [i["path"] for i in items[:4]] == consumed
    assert sum(i["allocated_bytes"] for i in items[:4]) < room  # some unconsumed must go
    freed = sum(i["allocated_bytes"] for i in items[:4])
    for item in items[4:]:  # unconsumed: each taken while the disk was still above 0.50
        assert freed < room, (freed, room, items)
        freed += item["allocated_bytes"]
    assert freed >= room
    assert len(items) < 4 + 6  # orders-0's five candidates and orders-1's one: not all
    assert fs["guard_kept_partitions"] >= 1


def _items(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(step, path) of every item of a rescue's one filesystem, in the order taken."""
    [fs] = doc["filesystems"]
    return [(s["step"], i["path"]) for s in fs["steps"] for i in s["items"]]


@pytest.mark.parametrize("guard", [KEEP, "retentiond.guard.unconsumed=report"])
def test_the_configured_retention_takes_the_consumed_segments_first(
    small_tmpfs: Tmpfs, tmp_path: Path, guard: str
) -> None:
    """Every segment past retention.ms, the disk just above diskWarningRatio (so the guard
    yields) and the target the warning ratio: orders-1's fully consumed segments free
    enough, so the configured retention takes them (oldest first) and none of orders-0's,
    each of which holds records G2 has not read; under keep and report alike. The real run
    deletes exactly what the dry run said, and loses nothing."""
    log_dir, config = _log_dir(
        small_tmpfs.path, None, guard, "retentiond.kafka.diskWarningRatio=0.5"
    )
    journal = tmp_path / "journal"  # off the small disk: its records take no room there
    config.write_text(
        config.read_text()
        .replace("num.partitions=3", "num.partitions=1")
        .replace(str(small_tmpfs.path / "journal"), str(journal))
    )
    small_tmpfs.fill_to(0.53)
    usage = measure_path(str(log_dir))
    assert usage.ratio is not None and usage.ratio > 0.5
    assert needed_bytes(usage, RescueRequest(target_ratio=0.5)) > 0
    args = ("rescue", "--config", str(config), "--target-ratio", "0.5", "--json")
    dry = run_cli(*args, "--dry-run")
    assert dry.code == 0, dry.out + dry.err
    planned = _items(json.loads(dry.out))
    consumed = [str(log_dir / "orders-1" / f"{b:020d}.log") for b in (0, 5, 10, 15)]
    assert planned, dry.out
    assert planned == [("configured retention", path) for path in consumed[: len(planned)]]

    real = run_cli(*args)
    assert real.code == 0, real.out + real.err
    doc = json.loads(real.out)
    assert _items(doc) == planned
    [fs] = doc["filesystems"]
    assert all(i["deleted"] for s in fs["steps"] for i in s["items"])
    assert fs["freed_bytes"] == json.loads(dry.out)["filesystems"][0]["freed_bytes"]
    journaled = _journaled(journal)
    assert sorted(journaled) == [("orders", 1, b) for b in (0, 5, 10, 15)][: len(planned)]
    assert all(loss == [] for loss in journaled.values())
    for b in (0, 5, 10, 15, 20, 25):
        assert (log_dir / "orders-0" / f"{b:020d}.log").exists()


def _two_ages(tmp_path: Path) -> tuple[Path, Path]:
    """``_log_dir`` with orders-0 and orders-1 rewritten: records 0..14 ten days old (past
    retention.ms), 15..29 three days old (within it)."""
    log_dir, config = _log_dir(tmp_path)
    now = int(time.time() * 1000)
    for p in (0, 1):
        shutil.rmtree(log_dir / f"orders-{p}")
        log = KafkaLog(log_dir, "orders", p, segment_bytes=5 * 72)
        for i in range(30):
            log.append_records(1, now - (10 if i < 15 else 3) * DAY + i)
        log.write(hw=log.leo)
    return log_dir, config


@pytest.mark.parametrize("progress", ["known", "unknown"])
def test_a_prefix_the_guard_stops_within_the_retention_takes_nothing_beyond(
    tmp_path: Path, progress: str
) -> None:
    """The guard stops orders-0's retention prefix at segment 5 (what it reads says a group
    has not consumed it) while the disk is at its warning ratio; the segments past the
    retention that the beyond-retention step would take next, consumed, are not taken from
    orders-0: every partition loses a prefix, and the guard's partition is counted once."""
    _, config = _two_ages(tmp_path)
    kind = kind_for(load_settings(config))
    assert isinstance(kind, Kafka)
    plan = Cleaner(kind).plan()
    assert isinstance(plan, KafkaPlan)
    unread = ("orders", 0, 5)

    def protects(topic: str, partition: int, base: int, upper: int) -> bool:
        return (topic, partition, base) == unread

    def loss_of(topic: str, partition: int, base: int, upper: int) -> int:
        return 1 if protects(topic, partition, base, upper) else 0

    selection = select(
        plan.log_dirs,
        RescueRequest(free_bytes=1 << 60, beyond_retention=True),
        kind.server,
        kind.server.config_for,
        plan.now_ms,
        loss_of if progress == "known" else None,
        Guard(protects, warning_ratio=1.0),  # the disk is not above it: the guard holds
    )
    [group] = selection.groups
    assert group.guard_kept == 1
    [path] = selection.partitions
    taken = {(p.partition.topic, p.partition.partition): p for p in selection.partitions[path]}
    for p in taken.values():
        bases = [d.start_offset for d in p.deletions]
        assert bases == list(p.partition.bases[: len(bases)])  # a prefix, no gap
        assert p.new_log_start_offset == p.partition.bases[len(bases)]
    assert [d.start_offset for d in taken[("orders", 0)].deletions] == [0]
    assert [
        (i.step, i.decision.start_offset)
        for i in group.items
        if (i.decision.topic, i.decision.queue_id) == ("orders", 0)
    ] == [("configured retention", 0)]
    assert [d.start_offset for d in taken[("orders", 1)].deletions][:4] == [0, 5, 10, 15]


def test_a_running_brokers_log_dir_is_not_guarded(tmp_path: Path) -> None:
    """With the broker running its own retention deletes whatever the lag: the plan-only
    dir's would-be deletions stay broker_running, and its groups' unread records in
    segments that expire later count as at risk."""
    log_dir, config = _log_dir(tmp_path, None, KEEP)
    cleaner = Cleaner(kind_for(load_settings(config)))
    with broker_holding(log_dir):
        plan = cleaner.plan()
    reasons = {str(d.reason) for d in plan.decisions() if d.topic == "orders"}
    assert reasons == {"broker_running"}

    # nothing expired yet (the first segments pass retention.ms in two hours)
    soon = int(time.time() * 1000) - 7 * DAY + 2 * 3_600_000
    log_dir, config = _log_dir(tmp_path / "soon", soon, KEEP)
    cleaner = Cleaner(kind_for(load_settings(config)))
    with broker_holding(log_dir):
        plan = cleaner.plan()
    assert not [d for d in plan.decisions() if str(d.reason) == "broker_running"]
    cleaner.kind.store_stats(plan, frozenset(), None)
    risk = cleaner.kind.status()["groups_at_risk"]
    assert isinstance(risk, list) and {r["group"] for r in risk} == {"G1", "G2"}
    # the broker stopped: the guard holds there, so no group is at risk
    cleaner.kind.store_stats(cleaner.plan(), frozenset(), None)
    assert cleaner.kind.status()["groups_at_risk"] == []
