"""``timerlog/`` upkeep as the broker's TimerMessageStore does it (spec §4.11, consumers.md
§A.4.3): a file goes when the unit where the last one of a full file starts points strictly
below the CommitLog minimum; oldest first, never the newest file, stopping at the first file
kept. Real stores, timer log files written byte-exactly by the test-only writer, the real CLI.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.rocketmq.formats import timerlog_last_unit_at
from retentiond.kinds.rocketmq.holds import HoldRules
from retentiond.kinds.rocketmq.kind import timerlog_run
from retentiond.kinds.rocketmq.scan import _scan_timerlog
from retentiond.kinds.rocketmq.timerlog import plan_timerlog
from retentiond.reasons import Kind, Reason
from tests.conftest import expired_spec, make_store, records, run_cli
from tests.helpers.safety_procs import Holder, ProcView
from tests.kinds.rocketmq.progress_files import (
    timerlog_file,
    timerlog_full_file,
    timerlog_unit,
)

SIZE = 1024  # TimerLogTest's file size: 19 units, the last at byte 936
UNITS = 19
NOW = 1_700_000_000_000
CL = 64 * 1024  # EXPIRED's CommitLog file size


def names(n: int) -> list[str]:
    return [f"{i * SIZE:020d}" for i in range(n)]


def full(first_py: int, last_py: int) -> bytes:
    """A full file whose units point from ``first_py`` up to ``last_py`` (its last unit)."""
    step = (last_py - first_py) // (UNITS - 1)
    offsets = [first_py + i * step for i in range(UNITS - 1)] + [last_py]
    return timerlog_full_file([timerlog_unit(NOW, 5_000, o) for o in offsets], SIZE)


def write_timerlog(root: Path, files: list[bytes]) -> list[Path]:
    d = root / "timerlog"
    d.mkdir()
    paths = []
    for name, data in zip(names(len(files)), files, strict=True):
        (d / name).write_bytes(data)
        paths.append(d / name)
    return paths


def plan_json(config: Path) -> dict:
    result = run_cli("plan", "--config", str(config), "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


def rows(doc: dict) -> list[tuple[str, str, str, int | None]]:
    return [
        (Path(f["path"]).name, f["verdict"], f["reason"], f.get("end_offset"))
        for f in doc["timerlog"]["files"]
    ]


def test_the_layout_matches_the_broker() -> None:
    # TimerLog.getOffsetForLastUnit: 104,857,532 for the default 100 MiB, 936 for 1024 bytes
    assert timerlog_last_unit_at(100 * 1024 * 1024) == 104_857_532
    assert timerlog_last_unit_at(SIZE) == 936 == (UNITS - 1) * 52
    assert timerlog_last_unit_at(67) < 0


def test_files_wholly_below_the_minimum_go_but_never_the_newest(tmp_path: Path) -> None:
    store = make_store(tmp_path, expired_spec())
    # all three are full and point into the first CommitLog files, which this round
    # deletes: the newest stays all the same
    paths = write_timerlog(
        store.root, [full(0, CL - 100), full(CL, 2 * CL - 100), full(2 * CL, 3 * CL - 100)]
    )
    doc = plan_json(store.config)
    minimum = doc["commitlog"]["min_offset_after"]
    assert minimum > 3 * CL  # (the spec's first ten files are expired and go)
    assert doc["timerlog"]["examined"] and doc["timerlog"]["min_offset"] == minimum
    assert rows(doc) == [
        (paths[0].name, "delete", "below_commitlog_min_offset", CL - 100),
        (paths[1].name, "delete", "below_commitlog_min_offset", 2 * CL - 100),
        (paths[2].name, "keep", "newest_file", None),
    ]
    others = [doc["commitlog"]["files"], doc["index"]["files"], doc["consumequeue"]["files"]]
    deleted = sum(1 for files in others for f in files if f["verdict"] == "delete")
    assert doc["totals"]["delete_files"] == deleted + 2

    text = run_cli("plan", "--config", str(store.config))
    assert text.code == 0, text.err
    assert f"TimerLog (min offset {minimum})" in text.out
    assert f"{paths[0]}" in text.out and "newest_file" in text.out

    result = run_cli("once", "--config", str(store.config), "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["deleted"]["timerlog"] == {"files": 2, "bytes": 2 * SIZE}
    assert not paths[0].exists() and not paths[1].exists() and paths[2].exists()
    gone = [r for r in records(store.journal, "deletion") if r["kind"] == "timerlog"]
    assert [(r["file"], r["reason"], r["start_offset"], r["end_offset"]) for r in gone] == [
        (str(paths[0]), "below_commitlog_min_offset", 0, CL - 100),
        (str(paths[1]), "below_commitlog_min_offset", SIZE, 2 * CL - 100),
    ]
    intents = {r["id"] for r in records(store.journal, "intent") if r["kind"] == "timerlog"}
    assert intents == {r["id"] for r in gone}  # journaled before each unlink


def test_a_file_still_pointing_above_stops_the_prefix(tmp_path: Path) -> None:
    store = make_store(tmp_path, expired_spec())
    high = 11 * CL + 10  # in the newest CommitLog file, which stays
    paths = write_timerlog(
        store.root,
        [full(0, CL), full(CL, high), full(0, 100), timerlog_file([], SIZE)],
    )
    doc = plan_json(store.config)
    assert rows(doc) == [
        (paths[0].name, "delete", "below_commitlog_min_offset", CL),
        (paths[1].name, "keep", "holds_live_offset", high),
        (paths[2].name, "keep", "after_first_kept", None),  # below, but behind a kept file
        (paths[3].name, "keep", "newest_file", None),
    ]
    assert run_cli("once", "--config", str(store.config)).code == 0
    assert [p.exists() for p in paths] == [False, True, True, True]


def test_a_unit_equal_to_the_minimum_keeps_its_file(tmp_path: Path) -> None:
    """Strictly below, as upstream's ``maxOffsetPy < offset``."""
    store = make_store(tmp_path, expired_spec())
    files = [full(0, 5), full(5, 10), timerlog_file([], SIZE)]
    write_timerlog(store.root, files)
    d = store.root / "timerlog"
    snapshot = _scan_timerlog(str(d), [], [])
    assert snapshot is not None
    tl = plan_timerlog(snapshot, str(d), 5)
    assert [x.reason for x in tl.decisions] == [
        Reason.HOLDS_LIVE_OFFSET,
        Reason.AFTER_FIRST_KEPT,
        Reason.NEWEST_FILE,
    ]
    tl = plan_timerlog(snapshot, str(d), 6)
    assert [x.reason for x in tl.decisions][:2] == [
        Reason.BELOW_COMMITLOG_MIN_OFFSET,
        Reason.HOLDS_LIVE_OFFSET,
    ]
    # the store could not be fully read: nothing is examined
    assert plan_timerlog(snapshot, str(d), -1).decisions == ()


def test_bad_data_and_another_size_stop_the_prefix(tmp_path: Path) -> None:
    store = make_store(tmp_path, expired_spec())
    torn = bytearray(full(0, 10))
    torn[936:940] = b"\x00\x00\x00\x00"  # the last unit's size field: not a unit
    paths = write_timerlog(store.root, [bytes(torn), full(0, 10), timerlog_file([], SIZE)])
    doc = plan_json(store.config)
    assert [r[:3] for r in rows(doc)] == [
        (paths[0].name, "keep", "unreadable"),
        (paths[1].name, "keep", "after_first_kept"),
        (paths[2].name, "keep", "newest_file"),
    ]
    assert any(p["path"] == str(paths[0]) for p in doc["problems"])

    paths[0].write_bytes(full(0, 10))
    paths[1].write_bytes(full(0, 10)[:-52])  # a length the broker would refuse to load
    doc = plan_json(store.config)
    assert [r[:3] for r in rows(doc)] == [
        (paths[0].name, "delete", "below_commitlog_min_offset"),
        (paths[1].name, "keep", "bad_size"),
        (paths[2].name, "keep", "newest_file"),
    ]
    assert run_cli("once", "--config", str(store.config)).code == 0
    assert [p.exists() for p in paths] == [False, True, True]


def test_an_empty_newest_file_does_not_set_the_size(tmp_path: Path) -> None:
    """The broker creates a timerlog file empty and then maps it to its full size; caught
    in between (or left so by a crash) the newest file has 0 bytes. It stays, and the
    others are read with the size of the newest file that has any: nothing is bad_size."""
    store = make_store(tmp_path, expired_spec())
    paths = write_timerlog(store.root, [full(0, 10), full(10, 20), b""])
    doc = plan_json(store.config)
    assert [r[:3] for r in rows(doc)] == [
        (paths[0].name, "delete", "below_commitlog_min_offset"),
        (paths[1].name, "delete", "below_commitlog_min_offset"),
        (paths[2].name, "keep", "newest_file"),
    ]
    assert not any(p["path"].startswith(str(store.root / "timerlog")) for p in doc["problems"])

    paths[1].write_bytes(full(10, 20)[:-52])  # another length than the files before it
    doc = plan_json(store.config)
    files = doc["timerlog"]["files"]
    assert [r[:3] for r in rows(doc)] == [
        (paths[0].name, "keep", "bad_size"),
        (paths[1].name, "keep", "after_first_kept"),
        (paths[2].name, "keep", "newest_file"),
    ]
    assert files[0]["detail"] == f"size {SIZE} != {SIZE - 52} (the newest non-empty file's)"


def test_symlinks_and_foreign_names_are_never_touched(tmp_path: Path) -> None:
    store = make_store(tmp_path, expired_spec())
    d = store.root / "timerlog"
    d.mkdir()
    outside = tmp_path / "outside"
    outside.write_bytes(full(0, 10))
    link = d / names(1)[0]
    os.symlink(outside, link)  # a 20-digit name, the oldest one: but a symlink
    real = [d / n for n in names(4)[1:]]
    for path, data in zip(real, [full(0, 10), full(10, 20), timerlog_file([], SIZE)], strict=True):
        path.write_bytes(data)
    foreign = [d / "0000000000000000000", d / "00000000000000000000.bak", d / "notes"]
    for f in foreign:
        f.write_bytes(full(0, 10))
    doc = plan_json(store.config)
    assert [r[:3] for r in rows(doc)] == [
        (real[0].name, "delete", "below_commitlog_min_offset"),
        (real[1].name, "delete", "below_commitlog_min_offset"),
        (real[2].name, "keep", "newest_file"),
    ]
    listed = {f["path"]: f["why"] for f in doc["foreign"]}
    assert listed[str(link)] == "symlink"
    assert all(listed[str(f)] == "name_not_in_naming_scheme" for f in foreign)
    assert run_cli("once", "--config", str(store.config)).code == 0
    assert link.is_symlink() and outside.exists() and all(f.exists() for f in foreign)
    assert [p.exists() for p in real] == [False, False, True]


def test_the_recheck_reads_the_last_unit_again(tmp_path: Path) -> None:
    """A file rewritten between plan and unlink so that its last unit points at or above the
    minimum is refused by the kind's re-check."""
    store = make_store(tmp_path, expired_spec())
    paths = write_timerlog(store.root, [full(0, 10), timerlog_file([], SIZE)])
    kind = kind_for(load_settings(store.config))
    files = _scan_timerlog(str(store.root / "timerlog"), [], [])
    assert files is not None
    (d, _) = plan_timerlog(files, str(store.root / "timerlog"), 100).decisions
    assert d.kind is Kind.TIMERLOG and d.delete
    st = os.stat(paths[0])
    assert kind.recheck(d, st, NOW, 100) is None
    with open(paths[0], "r+b") as fh:
        fh.seek(936)
        fh.write(timerlog_unit(NOW, 1, 100))
    assert "last unit re-read as 100" in (kind.recheck(d, st, NOW, 100) or "")


def test_a_store_without_a_timerlog_has_no_such_section(tmp_path: Path) -> None:
    store = make_store(tmp_path, expired_spec())
    doc = plan_json(store.config)
    assert "timerlog" not in doc
    text = run_cli("plan", "--config", str(store.config))
    assert "TimerLog" not in text.out


def test_a_held_file_waits_and_stops_the_prefix(tmp_path: Path) -> None:
    """Another process holding the oldest file defers it (and the files behind it) until the
    forcible interval has passed, as for a ConsumeQueue file; then it goes."""
    proc = ProcView(tmp_path / "proc")
    store = make_store(tmp_path, expired_spec())
    paths = write_timerlog(store.root, [full(0, 10), full(10, 20), timerlog_file([], SIZE)])
    rules = HoldRules(commitlog_ms=120_000, consumequeue_ms=60_000, index_ms=3_000)
    assert rules.interval(Kind.TIMERLOG) == 60_000  # upstream's destroy(1000 * 60)
    cleaner = store.cleaner(proc_root=str(proc), hold_rules=replace(rules, consumequeue_ms=0))
    with Holder([paths[0]]) as reader:
        proc.refresh()
        r = cleaner.run_round()
        assert r.plan.timerlog is not None
        first, second, _ = r.plan.timerlog.decisions
        assert first.reason is Reason.HELD_BY_OTHER_PROCESS and str(reader.pid) in first.detail
        assert second.reason is Reason.AFTER_FIRST_KEPT
        assert all(p.exists() for p in paths)
        r = cleaner.run_round()  # the interval (0 here) has passed
        gone = [o.decision for o in r.deleted if o.decision.kind is Kind.TIMERLOG]
        assert [(Path(d.path), d.reason) for d in gone] == [
            (paths[0], Reason.FORCED_AFTER_HOLD),
            (paths[1], Reason.BELOW_COMMITLOG_MIN_OFFSET),
        ]
    assert paths[2].exists()


def test_the_prefix_is_one_run_paced_like_a_queue(tmp_path: Path) -> None:
    store = make_store(tmp_path, expired_spec(), deleteConsumeQueueFilesInterval=250)
    write_timerlog(store.root, [full(0, 10), full(10, 20), full(0, 5), timerlog_file([], SIZE)])
    files = _scan_timerlog(str(store.root / "timerlog"), [], [])
    assert files is not None
    tl = plan_timerlog(files, str(store.root / "timerlog"), 15)
    run = timerlog_run(tl, load_settings(store.config))
    assert run is not None
    assert [Path(d.path).name for d in run.decisions] == names(1)  # the prefix only
    assert run.pause_after_ms == 250 and run.floor == 15 and run.batch_max is None
    assert (
        timerlog_run(plan_timerlog(files, str(store.root / "timerlog"), 5), store.settings) is None
    )
