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


def test_layout_names_and_content(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j", ORIGIN, max_segment_age_ms=10**13)  # times are in 2024
    j.append({"type": "deletion", "time_ms": T0 + 5, "kind": "commitlog"})
    j.append({"type": "round", "time_ms": T0 + 6})
    j.append({"type": "deletion", "time_ms": T0 + DAY + 7, "kind": "index"})
    j.rotate()
    (tmp_path / "t").mkdir()
    result = ship_now(tmp_path / "j", tmp_path / "t")
    assert (result.shipped_segments, result.shipped_records, result.files_written) == (1, 3, 3)
    jid = jr.journal_id(tmp_path / "j")
    name = f"host-1-{jid}-000000000001.jsonl.gz"
    got = shipped(tmp_path / "t")
    assert sorted(got) == [
        f"deletion/dt=2024-03-04/cluster=cluster-1/broker=broker-a/{name}",
        f"deletion/dt=2024-03-05/cluster=cluster-1/broker=broker-a/{name}",
        f"round/dt=2024-03-04/cluster=cluster-1/broker=broker-a/{name}",
    ]
    assert [r["time_ms"] for r in got[sorted(got)[0]]] == [T0 + 5]
    assert not (tmp_path / "j" / "journal-000000000001.jsonl").exists()
    assert (tmp_path / "j" / "journal-000000000002.jsonl").exists(), "the active one stays"


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


def test_a_repeated_copy_replaces_itself(tmp_path: Path) -> None:
    """A crash after the copies were renamed but before the segment was removed."""
    j = Journal(tmp_path / "j", ORIGIN)
    for i in range(50):
        j.append({"type": "deletion" if i % 2 else "round", "seq": i})
    j.rotate()
    seg = tmp_path / "j" / "journal-000000000001.jsonl"
    saved = seg.read_bytes()
    (tmp_path / "t").mkdir()
    ship_now(tmp_path / "j", tmp_path / "t")
    first = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "t").rglob("*.gz")}
    seg.write_bytes(saved)  # as if the removal never happened
    ship_now(tmp_path / "j", tmp_path / "t")
    again = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "t").rglob("*.gz")}
    assert again == first, "same names, same bytes: nothing duplicated"
    assert sorted(r["seq"] for v in shipped(tmp_path / "t").values() for r in v) == list(range(50))


def test_a_copy_that_does_not_verify_keeps_the_segment(tmp_path, monkeypatch) -> None:
    j = Journal(tmp_path / "j", ORIGIN)
    j.append({"type": "round"})
    j.rotate()
    (tmp_path / "t").mkdir()
    real = ship._gzip_bytes
    monkeypatch.setattr(ship, "_gzip_bytes", lambda lines: real(lines[:-1]))  # loses a line
    result = ship_now(tmp_path / "j", tmp_path / "t")
    assert result.error and "expected 1" in result.error
    assert (tmp_path / "j" / "journal-000000000001.jsonl").exists()
    monkeypatch.setattr(ship, "_gzip_bytes", real)
    assert ship_now(tmp_path / "j", tmp_path / "t").shipped_records == 1


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


@pytest.mark.parametrize("key", ["target", "interval", "maxLocalBytes"])
def test_ship_settings_are_validated(tmp_path: Path, key: str) -> None:
    bad = {"target": "relative/dir", "interval": 10, "maxLocalBytes": -1}[key]
    res = run_cli("check-config", str(_config(tmp_path, ship={key: bad})))
    assert res.code == 3
    assert f"retentiond.ship.{key}" in res.err


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
