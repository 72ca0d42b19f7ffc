"""Shipping on real files: the layout Spark reads, copies that replace themselves when
repeated, local segments removed only after verification, an unreachable target that costs
nothing but a bounded backlog, and `retentiond ship` as an operator runs it."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import pytest

from retentiond.commands.common import EXIT_SHIP_FAILED
from retentiond.journal import ship
from retentiond.journal import writer as jr
from retentiond.journal.writer import Journal, Origin
from retentiond.storegen.rocketmq import StoreSpec
from tests.conftest import make_store, run_cli

DAY = 86_400_000
T0 = 1_709_510_400_000  # 2024-03-04T00:00:00Z
ORIGIN = Origin("cluster-1", "broker-a", "host-1", "/store")


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def shipped(target: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for p in sorted(target.rglob("*.jsonl.gz")):
        with gzip.open(p, "rt") as fh:
            out[str(p.relative_to(target))] = [json.loads(line) for line in fh]
    return out


def ship_now(directory: Path, target: Path, **kw) -> ship.ShipResult:
    kw.setdefault("max_local_bytes", 1 << 30)
    kw.setdefault("max_segment_age_ms", 3_600_000)
    return ship.ship_once(directory, target, **kw)


# Where each record of ``_segment`` goes in layouts 1 and 3 (layout 2: v2/, by day alone):
# (directory under the target, day).
D1, D2 = "dt=2024-03-04", "dt=2024-03-05"
EXPECTED = {
    1: {
        "intent": ("intent", D1),
        "deletion": ("deletion", D1),
        "deletion+1d": ("deletion", D2),
        "abort": ("abort", D1),
        "round": ("round", D1),
        "round_summary": ("round_summary", D1),
        "frobnicate": ("frobnicate", D1),
        "invalid": ("invalid", D1),
    },
    3: {
        "intent": ("v3/deletions", D1),
        "deletion": ("v3/deletions", D1),
        "deletion+1d": ("v3/deletions", D2),
        "abort": ("v3/deletions", D1),
        "round": ("v3/rounds", D1),
        "round_summary": ("v3/rounds", D1),
        "frobnicate": ("v3/other", D1),
        "invalid": ("v3/other", D1),
    },
}


def _segment(tmp_path: Path) -> tuple[Path, list[bytes]]:
    """One closed segment with every record type, a type the shipper does not know, a record
    whose type is not a name (``invalid``) and a deletion of the next day; its lines."""
    j = Journal(tmp_path / "j", ORIGIN, max_segment_age_ms=10**13)  # times are in 2024
    j.append({"type": "intent", "time_ms": T0 + 1, "tag": "intent"})
    j.append({"type": "deletion", "time_ms": T0 + 2, "kind": "commitlog", "tag": "deletion"})
    j.append({"type": "abort", "time_ms": T0 + 3, "tag": "abort"})
    j.append({"type": "round", "time_ms": T0 + 4, "tag": "round"})
    j.append({"type": "round_summary", "time_ms": T0 + 5, "tag": "round_summary"})
    j.append({"type": "frobnicate", "time_ms": T0 + 6, "tag": "frobnicate"})
    j.append({"type": "Not A Type", "time_ms": T0 + 7, "tag": "invalid"})
    j.append({"type": "deletion", "time_ms": T0 + DAY + 8, "tag": "deletion+1d"})
    j.rotate()
    seg = tmp_path / "j" / "journal-000000000001.jsonl"
    return seg, seg.read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("layout", [1, 2, 3, None], ids=lambda n: f"layout{n or '-default'}")
def test_layout_names_and_content(tmp_path: Path, layout: int | None) -> None:
    """Each record in the file its layout names (None: the default, layout 3), the segment's
    lines unchanged and in order, the same file name in every layout."""
    seg, lines = _segment(tmp_path)
    (tmp_path / "t").mkdir()
    kw = {} if layout is None else {"layout": layout}
    result = ship_now(tmp_path / "j", tmp_path / "t", **kw)
    jid = jr.journal_id(tmp_path / "j")
    name = f"host-1-{jid}-000000000001.jsonl.gz"
    leaf = "cluster=cluster-1/broker=broker-a"
    want: dict[str, list[bytes]] = {}
    for line in lines:
        tag = json.loads(line)["tag"]
        if layout == 2:
            where = ("v2", D2 if tag == "deletion+1d" else D1)
        else:
            where = EXPECTED[layout or 3][tag]
        want.setdefault(f"{where[0]}/{where[1]}/{leaf}/{name}", []).append(line)
    got = {
        str(p.relative_to(tmp_path / "t")): gzip.decompress(p.read_bytes()).splitlines(True)
        for p in (tmp_path / "t").rglob("*.jsonl.gz")
    }
    assert got == want
    assert (result.shipped_segments, result.shipped_records) == (1, len(lines))
    assert result.files_written == len(want)
    assert len(want) == {1: 8, 2: 2, 3: 4}[layout or 3]
    assert not seg.exists()
    assert (tmp_path / "j" / "journal-000000000002.jsonl").exists(), "the active one stays"


def test_the_families_of_layout_3() -> None:
    assert ship.LAYOUTS == (1, 2, 3) and ship.DEFAULT_LAYOUT == 3
    assert {t: ship.family_of(t) for t in ("intent", "deletion", "abort")} == dict.fromkeys(
        ("intent", "deletion", "abort"), "deletions"
    )
    assert ship.family_of("round") == ship.family_of("round_summary") == "rounds"
    assert ship.family_of("invalid") == ship.family_of("frobnicate") == "other"
    assert ship.layout_dir(3, "round_summary") == "v3/rounds"
    assert ship.layout_dir(2, "deletion") == "v2"
    # in layout 1, a type spelled like another layout's directory is filed as invalid
    assert [ship.layout_dir(1, t) for t in ("deletion", "v2", "v3")] == [
        "deletion",
        "invalid",
        "invalid",
    ]


def test_an_unknown_layout_is_refused(tmp_path: Path) -> None:
    seg, _ = _segment(tmp_path)
    with pytest.raises(ValueError, match="one of"):
        ship.ship_segment(seg, tmp_path, "00000000", layout=4)
    assert seg.exists()


def test_the_active_segment_is_never_shipped_until_it_closes(tmp_path: Path) -> None:
    clock = Clock()
    j = Journal(tmp_path / "j", ORIGIN, clock_ms=clock, max_segment_age_ms=60_000)
    j.append({"type": "round"})
    (tmp_path / "t").mkdir()
    assert ship_now(tmp_path / "j", tmp_path / "t", journal=j).shipped_segments == 0
    clock.now += 60_000
    assert ship_now(tmp_path / "j", tmp_path / "t", journal=j).shipped_segments == 1
    j.append({"type": "round"})
    # Without the writer's handle (the CLI), age is judged from the first record's time.
    r = ship_now(tmp_path / "j", tmp_path / "t", max_segment_age_ms=60_000, now_ms=clock)
    assert r.shipped_segments == 0
    r = ship_now(tmp_path / "j", tmp_path / "t", flush=True)
    assert r.shipped_segments == 1
    assert sum(len(v) for v in shipped(tmp_path / "t").values()) == 2


@pytest.mark.parametrize("layout", ship.LAYOUTS)
def test_a_repeated_copy_replaces_itself(tmp_path: Path, layout: int) -> None:
    """A crash after the copies were renamed but before the segment was removed."""
    j = Journal(tmp_path / "j", ORIGIN)
    for i in range(50):
        j.append({"type": ("deletion", "round", "intent", "round_summary")[i % 4], "seq": i})
    j.rotate()
    seg = tmp_path / "j" / "journal-000000000001.jsonl"
    saved = seg.read_bytes()
    (tmp_path / "t").mkdir()
    ship_now(tmp_path / "j", tmp_path / "t", layout=layout)
    first = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "t").rglob("*.gz")}
    assert len(first) == {1: 4, 2: 1, 3: 2}[layout]
    seg.write_bytes(saved)  # as if the removal never happened
    ship_now(tmp_path / "j", tmp_path / "t", layout=layout)
    again = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "t").rglob("*.gz")}
    assert again == first, "same names, same bytes: nothing duplicated"
    assert sorted(r["seq"] for v in shipped(tmp_path / "t").values() for r in v) == list(range(50))


@pytest.mark.parametrize("layout", ship.LAYOUTS)
def test_a_copy_that_does_not_verify_keeps_the_segment(tmp_path, monkeypatch, layout) -> None:
    j = Journal(tmp_path / "j", ORIGIN)
    j.append({"type": "round"})
    j.rotate()
    (tmp_path / "t").mkdir()
    real = ship._gzip_bytes
    monkeypatch.setattr(ship, "_gzip_bytes", lambda lines: real(lines[:-1]))  # loses a line
    result = ship_now(tmp_path / "j", tmp_path / "t", layout=layout)
    assert result.error and "expected 1" in result.error
    assert (tmp_path / "j" / "journal-000000000001.jsonl").exists()
    monkeypatch.setattr(ship, "_gzip_bytes", real)
    assert ship_now(tmp_path / "j", tmp_path / "t", layout=layout).shipped_records == 1


def test_torn_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j", ORIGIN)
    j.append({"type": "round", "seq": 1})
    j.close()
    with open(tmp_path / "j" / "journal-000000000001.jsonl", "ab") as fh:
        fh.write(b'{"type":"round","se')
    j = Journal(tmp_path / "j", ORIGIN)  # ends the torn line
    j.append({"type": "round", "seq": 2})
    j.rotate()
    (tmp_path / "t").mkdir()
    result = ship_now(tmp_path / "j", tmp_path / "t")
    assert (result.shipped_records, result.torn_lines) == (2, 1)


def test_unreachable_target_keeps_segments_within_budget_then_catches_up(tmp_path) -> None:
    j = Journal(tmp_path / "j", ORIGIN, max_segment_bytes=4096)
    for i in range(300):
        j.append({"type": "round", "seq": i, "pad": "p" * 100})
    target = tmp_path / "mnt" / "fleet"  # the mount is not there
    counters = ship.ShipCounters()
    r = ship_now(tmp_path / "j", target, max_local_bytes=1 << 30, counters=counters)
    assert r.error and "not a reachable directory" in r.error
    closed = jr.closed_segments(tmp_path / "j")
    assert r.backlog_segments == len(closed) > 5 and r.dropped_segments == 0
    assert not target.exists(), "never creates the target itself"
    j.append({"type": "round", "seq": 300})  # writing goes on
    budget = 3 * 4096
    dropped = ship_now(tmp_path / "j", target, max_local_bytes=budget, counters=counters)
    assert dropped.dropped_segments == len(closed) - dropped.backlog_segments > 0
    assert dropped.backlog_bytes <= budget
    assert counters.segments_dropped == dropped.dropped_segments
    assert counters.records_dropped == dropped.dropped_records > 0
    assert (counters.runs, counters.failures) == (2, 2)
    target.mkdir(parents=True)
    r = ship_now(tmp_path / "j", target, flush=True)
    assert r.error is None and r.backlog_segments == 0
    seqs = sorted(x["seq"] for v in shipped(target).values() for x in v)
    # The oldest were dropped, everything newer arrived once.
    assert seqs == list(range(dropped.dropped_records, 301))


def test_one_shipper_at_a_time(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j", ORIGIN)
    j.append({"type": "round"})
    j.rotate()
    (tmp_path / "t").mkdir()
    fd = ship._try_ship_lock(tmp_path / "j")
    assert fd is not None
    try:
        assert ship_now(tmp_path / "j", tmp_path / "t").busy
    finally:
        os.close(fd)
    assert ship_now(tmp_path / "j", tmp_path / "t").shipped_segments == 1


def _config(tmp_path: Path, **retentiond: object) -> Path:
    spec = StoreSpec(commitlog_file_size=4096, messages=20, message_size=500, now_ms=T0)
    return make_store(
        tmp_path,
        spec,
        journal=tmp_path / "j",
        defaults={},
        brokerClusterName="cluster-1",
        brokerName="broker-a",
        retentiond=retentiond,
    ).config


def test_cli_ship(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    config = _config(tmp_path, ship={"target": str(tmp_path / "t")})
    j = Journal(tmp_path / "j", ORIGIN)
    j.append({"type": "round", "seq": 1})
    res = run_cli("ship", "--config", str(config))
    assert res.code == 0, res.err
    assert "shipped 0 segments" in res.out, "the active segment is young"
    res = run_cli("ship", "--config", str(config), "--flush")
    assert res.code == 0, res.err
    assert "shipped 1 segments (1 records, 1 files)" in res.out
    j.append({"type": "round", "seq": 2})  # the writer follows to the new segment
    j.rotate()
    res = run_cli("ship", "--config", str(config), "--target", str(tmp_path / "nowhere"))
    assert res.code == EXIT_SHIP_FAILED
    assert "not a reachable directory" in res.err
    assert sorted(r["seq"] for v in shipped(tmp_path / "t").values() for r in v) == [1]


def test_cli_ship_without_target(tmp_path: Path) -> None:
    res = run_cli("ship", "--config", str(_config(tmp_path)))
    assert res.code == 2
    assert "retentiond.ship.target" in res.err


@pytest.mark.parametrize("layout", [1, 2, 3, None], ids=lambda n: f"layout{n or '-default'}")
def test_cli_ship_writes_the_configured_layout(tmp_path: Path, layout: int | None) -> None:
    (tmp_path / "t").mkdir()
    ship_keys: dict[str, object] = {"target": str(tmp_path / "t")}
    if layout is not None:
        ship_keys["layout"] = layout
    config = _config(tmp_path, ship=ship_keys)
    j = Journal(tmp_path / "j", ORIGIN, max_segment_age_ms=10**13)  # times are in 2024
    j.append({"type": "intent", "time_ms": T0, "seq": 1})
    j.append({"type": "deletion", "time_ms": T0, "seq": 2})
    j.append({"type": "round", "time_ms": T0, "seq": 3})
    res = run_cli("ship", "--config", str(config), "--flush")
    assert res.code == 0, res.err
    dirs = {1: ["deletion", "intent", "round"], 2: ["v2"], 3: ["v3/deletions", "v3/rounds"]}
    want = dirs[layout or 3]
    assert f"shipped 1 segments (3 records, {len(want)} files)" in res.out
    got = shipped(tmp_path / "t")
    assert sorted(p.split("/dt=")[0] for p in got) == want
    assert sorted(r["seq"] for v in got.values() for r in v) == [1, 2, 3]


def test_ship_with_settings_uses_the_layout_key(tmp_path: Path) -> None:
    """The daemon's shipping job goes through ``ship_with_settings``."""
    from retentiond.kinds import load_settings

    (tmp_path / "t").mkdir()
    settings = load_settings(
        _config(tmp_path, ship={"target": str(tmp_path / "t"), "layout": 2}), check_store=False
    )
    assert settings.daemon.ship_layout == 2
    j = Journal(tmp_path / "j", ORIGIN, max_segment_age_ms=10**13)
    j.append({"type": "deletion", "time_ms": T0})
    j.append({"type": "round", "time_ms": T0})
    j.rotate()
    result = ship.ship_with_settings(settings, tmp_path / "j")
    assert (result.shipped_records, result.files_written) == (2, 1)
    assert [p.split("/")[0] for p in shipped(tmp_path / "t")] == ["v2"]


@pytest.mark.parametrize("key", ["target", "interval", "maxLocalBytes", "layout"])
def test_ship_settings_are_validated(tmp_path: Path, key: str) -> None:
    bad = {"target": "relative/dir", "interval": 10, "maxLocalBytes": -1, "layout": 4}[key]
    res = run_cli("check-config", str(_config(tmp_path, ship={key: bad})))
    assert res.code == 3
    assert f"retentiond.ship.{key}" in res.err


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        ("broker.yaml", "retentiond:\n  ship:\n    layout: 4\n", "= 4: must be 1, 2 or 3"),
        ("broker.yaml", "retentiond:\n  ship:\n    layout: 0\n", "= 0: must be 1, 2 or 3"),
        (
            "broker.yaml",
            "retentiond:\n  ship:\n    layout: '3'\n",
            "= '3': must be 1, 2 or 3 (the shipped layout), not a string; remove the quotes",
        ),
        (
            "broker.yaml",
            "retentiond:\n  ship:\n    layout: v3\n",
            "= 'v3': must be 1, 2 or 3 (the shipped layout), not a string",
        ),
        ("broker.conf", "retentiond.ship.layout=v3\n", "= 'v3': must be 1, 2 or 3"),
        ("server.properties", "log.dirs=/srv/kafka\nretentiond.ship.layout=2.0\n", "= '2.0'"),
    ],
)
def test_the_layout_key_refuses_anything_but_1_2_3(
    tmp_path: Path, name: str, text: str, why: str
) -> None:
    """The refusal names the file, the key and the value (check-config's exit 3)."""
    config = tmp_path / name
    config.write_text(text)
    res = run_cli("check-config", str(config))
    assert res.code == 3, res.err
    assert f"error: {config}: key 'retentiond.ship.layout' {why}" in res.err


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("broker.yaml", "retentiond:\n  ship:\n    layout: {}\n"),
        ("broker.conf", "retentiond.ship.layout={}\n"),
        ("server.properties", "log.dirs=/srv/kafka\nretentiond.ship.layout={}\n"),
    ],
)
def test_the_layout_key_in_every_format(tmp_path: Path, name: str, text: str) -> None:
    from retentiond.kinds import load_settings

    config = tmp_path / name
    config.write_text("")
    default = load_settings(config, check_store=False) if name != "server.properties" else None
    for layout in (1, 2, 3):
        config.write_text(text.format(layout))
        settings = load_settings(config, check_store=False)
        assert settings.daemon.ship_layout == layout
        if default is not None:  # set at its default, the key leaves the hash as it was
            assert (settings.config_hash == default.config_hash) == (layout == 3)
    if default is not None:
        assert default.daemon.ship_layout == 3


def test_dropped_segments_are_a_metric(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from retentiond.observe.ship_metrics import ShipCollector

    registry = CollectorRegistry()
    counters = ship.ShipCounters()
    registry.register(ShipCollector(counters, lambda: ("cluster-1", "broker-a")))
    j = Journal(tmp_path / "j", ORIGIN, max_segment_bytes=4096)
    for i in range(100):
        j.append({"type": "round", "seq": i, "pad": "p" * 100})
    labels = {"cluster": "cluster-1", "broker": "broker-a"}
    before = registry.get_sample_value("retentiond_ship_segments_dropped_total", labels)
    assert before == 0
    r = ship_now(tmp_path / "j", tmp_path / "absent", max_local_bytes=0, counters=counters)
    assert r.dropped_segments > 0
    text = generate_latest(registry).decode()
    assert "retentiond_ship_records_dropped_total" in text
    got = registry.get_sample_value("retentiond_ship_segments_dropped_total", labels)
    assert got == before + r.dropped_segments
    assert registry.get_sample_value("retentiond_ship_backlog_segments", labels) == 0


def test_the_journal_query_reads_every_layout(tmp_path: Path) -> None:
    """A target holding this broker's segments in the three layouts (its layout was changed
    twice), and one segment shipped twice in two layouts: every record once."""
    from retentiond.journal.query import Query, Shipped, query_journal

    j = Journal(tmp_path / "j", ORIGIN, max_segment_age_ms=10**13)
    (tmp_path / "t").mkdir()
    for layout in (1, 2, 3):
        j.append({"type": "intent", "time_ms": T0 + layout, "id": f"d{layout}"})
        j.append({"type": "deletion", "time_ms": T0 + layout, "id": f"d{layout}"})
        j.append({"type": "round", "time_ms": T0 + layout, "id": f"r{layout}"})
        j.rotate()
        seg = jr.closed_segments(tmp_path / "j")[0][1]
        saved = seg.read_bytes()
        assert ship_now(tmp_path / "j", tmp_path / "t", layout=layout).shipped_segments == 1
    seg.write_bytes(saved)  # the last one again, in layout 1: a crash, then a layout change
    assert ship_now(tmp_path / "j", tmp_path / "t", layout=1).shipped_segments == 1
    source = Shipped(tmp_path / "t", "cluster-1", "broker-a", "host-1")
    got = query_journal(None, source, Query(types=frozenset({"deletion", "round"})))
    assert [r["id"] for r in got.records] == ["d1", "r1", "d2", "r2", "d3", "r3"]
    assert got.duplicates == 2 and got.problems == []
    # layout 1 reads only the asked type's directory, layout 3 only its family's
    assert got.shipped_files == 2 + 1 + 2 + 2
