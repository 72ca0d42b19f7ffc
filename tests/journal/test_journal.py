"""The journal's promises: whole records, fsynced, in segments that rotate by size and age
without splitting a record, closed segments that never change again (whoever writes), and torn
lines that are skipped and counted, never fatal."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from retentiond.journal import writer as jr
from retentiond.journal.writer import Journal, Origin, ReadStats, read_records
from retentiond.reasons import SCHEMA_VERSION

ORIGIN = Origin("cluster-1", "broker-a", "host-1", "/store")


class Clock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def segments(d: Path) -> list[Path]:
    return [p for _, p in jr.list_segments(d)]


def digest(paths: list[Path]) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_records_are_stamped_with_origin_schema_and_time(tmp_path: Path) -> None:
    clock = Clock()
    j = Journal(tmp_path, ORIGIN, clock_ms=clock)
    j.append({"type": "abort", "id": "x"})
    j.append({"type": "round", "time_ms": 5})
    got = list(read_records(tmp_path))
    assert got == [
        {"type": "abort", "id": "x", "time_ms": clock.now, "schema_version": SCHEMA_VERSION,
         "cluster": "cluster-1", "broker": "broker-a", "host": "host-1", "store": "/store"},
        {"type": "round", "time_ms": 5, "schema_version": SCHEMA_VERSION,
         "cluster": "cluster-1", "broker": "broker-a", "host": "host-1", "store": "/store"},
    ]  # fmt: skip


def test_a_new_directory_gets_segment_one_and_an_id(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j", ORIGIN)
    assert segments(tmp_path / "j") == [tmp_path / "j" / "journal-000000000001.jsonl"]
    assert j.journal_id == jr.journal_id(tmp_path / "j")
    assert len(j.journal_id) == 8


def test_size_rotation_never_splits_a_record(tmp_path: Path) -> None:
    j = Journal(tmp_path, ORIGIN, max_segment_bytes=1000)
    for i in range(200):
        j.append({"type": "t", "seq": i, "pad": "x" * (i % 37)})
    segs = segments(tmp_path)
    assert len(segs) > 10
    for p in segs:
        data = p.read_bytes()
        assert len(data) <= 1000
        assert data.endswith(b"\n")
        assert all(json.loads(line) for line in data.splitlines())
    assert [r["seq"] for r in read_records(tmp_path)] == list(range(200))


def test_a_record_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    j = Journal(tmp_path, ORIGIN, max_segment_bytes=100)
    j.append({"type": "t", "seq": 1})
    j.append({"type": "t", "seq": 2, "pad": "y" * 500})
    j.append({"type": "t", "seq": 3})
    assert [len(list(jr.read_segment(p))) for p in segments(tmp_path)] == [1, 1, 1]


def test_age_rotation_on_append_and_when_idle(tmp_path: Path) -> None:
    clock = Clock()
    j = Journal(tmp_path, ORIGIN, max_segment_age_ms=60_000, clock_ms=clock)
    assert not j.rotate_if_due()  # empty: nothing to close
    j.append({"type": "t", "seq": 1})
    clock.now += 59_999
    j.append({"type": "t", "seq": 2})
    assert not j.rotate_if_due()
    clock.now += 1
    assert j.rotate_if_due()  # idle, but its first record is a minute old
    assert j.active_seq == 2
    j.append({"type": "t", "seq": 3})
    clock.now += 60_000
    j.append({"type": "t", "seq": 4})  # rotates first: 3 closes alone
    assert [[r["seq"] for r in jr.read_segment(p)] for p in segments(tmp_path)] == [
        [1, 2],
        [3],
        [4],
    ]


def test_closed_segments_are_every_segment_but_the_highest(tmp_path: Path) -> None:
    j = Journal(tmp_path, ORIGIN)
    j.append({"type": "t"})
    assert jr.closed_segments(tmp_path) == []
    j.rotate()
    assert [s for s, _ in jr.closed_segments(tmp_path)] == [1]
    assert not j.rotate(), "an empty active segment is not closed"


def test_a_torn_last_line_is_skipped_counted_and_ended(tmp_path: Path) -> None:
    j = Journal(tmp_path, ORIGIN)
    j.append({"type": "t", "seq": 1})
    j.close()
    seg = segments(tmp_path)[-1]
    with open(seg, "ab") as fh:
        fh.write(b'{"type":"t","seq":2,"pa')  # the crash
    stats = ReadStats()
    assert [r["seq"] for r in read_records(tmp_path, stats)] == [1]
    assert (stats.records, stats.torn) == (1, 1)
    j2 = Journal(tmp_path, ORIGIN)  # the next writer ends the torn line
    j2.append({"type": "t", "seq": 3})
    stats = ReadStats()
    assert [r["seq"] for r in read_records(tmp_path, stats)] == [1, 3]
    assert (stats.records, stats.torn) == (2, 1)


def test_garbage_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "journal-000000000001.jsonl").write_bytes(
        b'{"seq":1}\n[1,2]\nnot json\n\n\xff\xfe\n{"seq":2}\n{"seq":3'
    )
    stats = ReadStats()
    assert [r["seq"] for r in read_records(tmp_path, stats)] == [1, 2]
    assert (stats.records, stats.torn) == (2, 4)


def test_a_second_writer_follows_rotation_and_closed_segments_never_change(
    tmp_path: Path,
) -> None:
    """A `retentiond once` beside the daemon: both append, only ever to the highest segment."""
    a = Journal(tmp_path, ORIGIN, max_segment_bytes=600)
    b = Journal(tmp_path, Origin("c", "b", "other-writer", "/s"), max_segment_bytes=600)
    frozen: dict[str, str] = {}
    for i in range(120):
        (a if i % 3 else b).append({"type": "t", "seq": i})
        closed = [p for _, p in jr.closed_segments(tmp_path)]
        now = digest(closed)
        assert {k: now[k] for k in frozen} == frozen, "a closed segment changed"
        frozen = now
    assert sorted(r["seq"] for r in read_records(tmp_path)) == list(range(120))


def test_another_process_closing_the_idle_segment_is_followed(tmp_path: Path) -> None:
    clock = Clock()
    j = Journal(tmp_path, ORIGIN, clock_ms=clock)
    j.append({"type": "t", "seq": 1})
    assert not jr.close_idle_segment(tmp_path, 60_000, clock.now + 59_999)
    assert jr.close_idle_segment(tmp_path, 60_000, clock.now + 60_000)
    j.append({"type": "t", "seq": 2})
    assert j.active_seq == 2
    assert [[r["seq"] for r in jr.read_segment(p)] for p in segments(tmp_path)] == [[1], [2]]
    assert jr.close_idle_segment(tmp_path, 0, clock.now), "age 0: close whatever its age"
    assert not jr.close_idle_segment(tmp_path, 0, clock.now), "an empty segment stays open"


def test_a_writer_whose_segment_was_shipped_away_moves_on(tmp_path: Path) -> None:
    j = Journal(tmp_path, ORIGIN)
    j.append({"type": "t", "seq": 1})
    assert jr.close_idle_segment(tmp_path, 0, 0)
    (tmp_path / "journal-000000000001.jsonl").unlink()  # shipped
    j.append({"type": "t", "seq": 2})
    assert [r["seq"] for r in read_records(tmp_path)] == [2]
    assert j.active_seq == 2


def test_rotation_limits_can_change_while_open(tmp_path: Path) -> None:
    j = Journal(tmp_path, ORIGIN)
    j.append({"type": "t", "pad": "z" * 200})
    j.set_limits(100, 10**9)
    j.append({"type": "t"})
    assert len(segments(tmp_path)) == 2


def test_closed_journal_refuses_writes(tmp_path: Path) -> None:
    j = Journal(tmp_path, ORIGIN)
    j.close()
    with pytest.raises(OSError):
        j.append({"type": "t"})
