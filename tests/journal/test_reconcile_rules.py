"""Reconciliation's rules on real files and a real journal, and the shipper applying them.

Writers are real processes: a dead writer is a child that printed its identity and exited, a
live one is this test process.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from retentiond.journal import ship
from retentiond.journal.reconcile import reconcile, writer_identity
from retentiond.journal.writer import Journal, Origin, closed_segments, read_records

ORIGIN = Origin("c1", "b1", "h1", "/store")


def dead_writer() -> str:
    """The identity of a process that has exited."""
    code = "from retentiond.journal.reconcile import writer_identity; print(writer_identity())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def intent(op_id: str, path: Path, writer: str) -> dict[str, object]:
    st = path.stat()
    return {
        "type": "intent", "id": op_id, "kind": "commitlog", "file": str(path),
        "reason": "expired", "bytes": st.st_size, "mtime_ms": st.st_mtime_ns // 1_000_000,
        "writer": writer, "ino": st.st_ino,
    }  # fmt: skip


def outcomes(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(r["id"]): r for r in records if r["type"] in ("deletion", "abort")}


def test_a_file_another_writer_deleted_is_an_abort_not_a_second_deletion(tmp_path: Path) -> None:
    victim = tmp_path / "00000000000000000000"
    victim.write_bytes(b"x" * 4096)
    journal = Journal(tmp_path / "journal", ORIGIN)
    journal.append(intent("a" * 32, victim, dead_writer()))  # killed before its unlink
    journal.append(intent("b" * 32, victim, writer_identity()))  # the daemon went on
    victim.unlink()
    journal.append({"type": "deletion", "id": "b" * 32, "file": str(victim)})

    result = reconcile(journal.directory, journal.append, now_ms=1)
    assert (result.deleted, result.aborted) == (0, 1)
    assert_aborted_as_deleted_by_another(journal, "a" * 32, victim)


def assert_aborted_as_deleted_by_another(journal: Journal, op_id: str, victim: Path) -> None:
    """The orphan ``op_id`` got an abort naming the other writer, and ``victim`` has exactly
    one deletion record: one file, one deletion."""
    done = outcomes(list(read_records(journal.directory)))
    assert done[op_id]["type"] == "abort"
    assert "deleted by another writer" in done[op_id]["error"]
    deletions = Counter(
        r["file"] for r in read_records(journal.directory) if r["type"] == "deletion"
    )
    assert deletions[str(victim)] == 1


def test_two_dead_writers_on_one_gone_file_get_one_deletion(tmp_path: Path) -> None:
    victim = tmp_path / "00000000000000000000"
    victim.write_bytes(b"x" * 4096)
    journal = Journal(tmp_path / "journal", ORIGIN)
    journal.append(intent("a" * 32, victim, dead_writer()))
    journal.append(intent("b" * 32, victim, dead_writer()))
    victim.unlink()
    result = reconcile(journal.directory, journal.append, now_ms=1)
    assert (result.deleted, result.aborted) == (1, 1)
    kinds = Counter(r["type"] for r in outcomes(list(read_records(journal.directory))).values())
    assert kinds == Counter({"deletion": 1, "abort": 1})


def shipped(target: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted(target.rglob("*.jsonl.gz")):
        with gzip.open(path, "rt") as fh:
            records += [json.loads(line) for line in fh]
    return records


def ship_all(jdir: Path, target: Path, *, flush: bool = True) -> ship.ShipResult:
    return ship.ship_once(
        jdir, target, max_local_bytes=1 << 40, max_segment_age_ms=10**13, flush=flush
    )


def test_the_shipper_reconciles_dead_writers_and_waits_for_live_ones(tmp_path: Path) -> None:
    gone, kept, live = (tmp_path / f"{n:020d}" for n in (0, 4096, 8192))
    for f in (gone, kept, live):
        f.write_bytes(b"x" * 4096)
    target = tmp_path / "target"
    target.mkdir()
    journal = Journal(tmp_path / "journal", ORIGIN)
    dead = dead_writer()
    journal.append(intent("a" * 32, gone, dead))  # killed between unlink and outcome
    gone.unlink()
    journal.append(intent("b" * 32, kept, dead))  # killed between intent and unlink
    journal.append(intent("c" * 32, live, writer_identity()))  # still running (us)
    journal.rotate()

    # The CLI's way (no journal handle of its own): reconcile, keep the live writer's segment.
    first = ship_all(journal.directory, target, flush=False)
    assert first.error is None and first.reconciled == 2 and first.waiting_segments == 1
    assert not shipped(target), "the segment with a live writer's open intent left"
    assert len(closed_segments(journal.directory)) == 1

    # The live writer writes its outcome: everything ships, every intent with one outcome.
    live.unlink()
    journal.append({"type": "deletion", "id": "c" * 32, "file": str(live)})
    second = ship_all(journal.directory, target)
    assert second.error is None and second.waiting_segments == 0
    assert closed_segments(journal.directory) == []
    records = shipped(target)
    done = outcomes(records)
    assert sorted(r["id"] for r in records if r["type"] == "intent") == sorted(done)
    assert Counter(r["id"] for r in records if r["type"] != "intent") == Counter(
        {k: 1 for k in done}
    )
    assert done["a" * 32]["type"] == "deletion" and done["a" * 32]["reconciled"] is True
    assert done["b" * 32]["type"] == "abort" and "reconciled at shipping" in done["b" * 32]["error"]
    assert done["c" * 32]["type"] == "deletion" and "reconciled" not in done["c" * 32]
    # A reconciled abort is filed beside its intent, whoever reconciled it.
    assert done["b" * 32]["cluster"] == "c1" and done["b" * 32]["broker"] == "b1"
