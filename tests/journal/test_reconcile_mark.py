"""Reconciliation reads only what was appended since the previous pass (``reconcile.mark``),
and still gives every orphaned intent exactly the outcome a pass over the whole journal would.

Writers are real processes, as in ``test_reconcile_rules``: a dead writer is a child that has
exited, a live one a child that is still running (and is killed when the test says so).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from retentiond.journal import ship
from retentiond.journal.reconcile import MARK_NAME, reconcile
from retentiond.journal.spool import SpoolingJournal
from retentiond.journal.writer import (
    Journal,
    Origin,
    directory_lock,
    list_segments,
    read_records,
)
from tests.conftest import Tmpfs, make_store
from tests.journal.test_reconcile_rules import (
    assert_aborted_as_deleted_by_another,
    dead_writer,
    intent,
    outcomes,
    shipped,
)

ORIGIN = Origin("c1", "b1", "h1", "/store")


@pytest.fixture
def live_writer() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A running writer's identity and its process (kill it to make the writer dead)."""
    code = (
        "import sys; from retentiond.journal.reconcile import writer_identity; "
        "print(writer_identity(), flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    identity = proc.stdout.readline().strip()
    yield identity, proc
    proc.kill()
    proc.wait()


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()


def _file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / f"{n * 4096:020d}"
    path.write_bytes(b"x" * 4096)
    return path


def _settled_pair(journal: Journal, op_id: str, path: Path) -> None:
    """An intent and its deletion by a writer that finished its work."""
    journal.append(intent(op_id, path, dead_writer()))
    journal.append({"type": "deletion", "id": op_id, "file": str(path)})


def _pass(journal: Journal):
    return reconcile(journal.directory, journal.append, now_ms=1)


def _outcome_counts(journal: Journal | SpoolingJournal) -> Counter[str]:
    return Counter(
        str(r["id"]) for r in read_records(journal.directory) if r["type"] in ("deletion", "abort")
    )


def test_a_pass_reads_only_what_was_appended_since_the_last(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal", ORIGIN)
    for n in range(3):
        _settled_pair(journal, f"{n:032x}", _file(tmp_path, n))
    first = _pass(journal)
    assert first.intents == 3 and (first.deleted, first.aborted) == (0, 0)
    assert (journal.directory / MARK_NAME).exists()

    assert _pass(journal).intents == 0  # nothing new: nothing parsed again
    _settled_pair(journal, f"{9:032x}", _file(tmp_path, 9))
    third = _pass(journal)
    assert third.intents == 1 and (third.deleted, third.aborted) == (0, 0)


def test_an_orphan_written_after_the_mark_is_reconciled_once(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal", ORIGIN)
    _settled_pair(journal, "a" * 32, _file(tmp_path, 0))
    _pass(journal)
    kept, gone = _file(tmp_path, 1), _file(tmp_path, 2)
    dead = dead_writer()
    journal.append(intent("b" * 32, kept, dead))  # killed before its unlink
    journal.append(intent("c" * 32, gone, dead))  # killed after its unlink
    gone.unlink()
    result = _pass(journal)
    assert (result.deleted, result.aborted) == (1, 1)
    done = outcomes(list(read_records(journal.directory)))
    assert done["b" * 32]["type"] == "abort" and done["c" * 32]["type"] == "deletion"
    # The outcomes just appended are read back by the next pass: nothing is given a second.
    again = _pass(journal)
    assert (again.deleted, again.aborted, again.open_intents) == (0, 0, 0)
    assert set(_outcome_counts(journal).values()) == {1}


def test_a_live_writers_intent_is_carried_until_that_writer_dies(
    tmp_path: Path, live_writer: tuple[str, subprocess.Popen[str]]
) -> None:
    identity, proc = live_writer
    journal = Journal(tmp_path / "journal", ORIGIN)
    held = _file(tmp_path, 0)
    journal.append(intent("a" * 32, held, identity))
    first = _pass(journal)
    assert (first.live, first.deleted, first.aborted) == (1, 0, 0)
    _settled_pair(journal, "b" * 32, _file(tmp_path, 1))  # later work moves the mark on
    assert _pass(journal).live == 1  # still open, though its line is before the mark

    _kill(proc)  # dies between its intent and its unlink: the file is still there
    third = _pass(journal)
    assert (third.live, third.deleted, third.aborted) == (0, 0, 1)
    assert outcomes(list(read_records(journal.directory)))["a" * 32]["type"] == "abort"
    assert _pass(journal).open_intents == 0


def test_a_deletion_by_another_writer_before_the_mark_still_makes_an_abort(
    tmp_path: Path, live_writer: tuple[str, subprocess.Popen[str]]
) -> None:
    """The one answer only older lines hold: the orphan's file went, but by another writer's
    unlink (recorded before the mark), so the orphan gets an abort, not a second deletion."""
    identity, proc = live_writer
    journal = Journal(tmp_path / "journal", ORIGIN)
    victim = _file(tmp_path, 0)
    journal.append(intent("a" * 32, victim, identity))  # a `once`, about to be killed
    journal.append(intent("b" * 32, victim, dead_writer()))  # the daemon went on
    victim.unlink()
    journal.append({"type": "deletion", "id": "b" * 32, "file": str(victim)})
    assert _pass(journal).live == 1  # the deletion is behind the mark now
    _settled_pair(journal, "c" * 32, _file(tmp_path, 1))

    _kill(proc)
    result = _pass(journal)
    assert (result.deleted, result.aborted) == (0, 1)
    assert_aborted_as_deleted_by_another(journal, "a" * 32, victim)


def test_a_line_still_being_written_is_read_again_whole(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal", ORIGIN)
    _settled_pair(journal, "a" * 32, _file(tmp_path, 0))
    kept = _file(tmp_path, 1)
    line = journal.encode([intent("b" * 32, kept, dead_writer())])
    segment = list_segments(journal.directory)[-1][1]
    with open(segment, "ab") as fh:  # a writer's line, half written when the pass reads
        fh.write(line[:40])
    first = _pass(journal)
    assert (first.intents, first.torn) == (1, 0)
    with open(segment, "ab") as fh:
        fh.write(line[40:])
    second = _pass(journal)
    assert (second.intents, second.aborted) == (1, 1)
    assert outcomes(list(read_records(journal.directory)))["b" * 32]["type"] == "abort"


def _mark(journal: Journal) -> dict[str, Any]:
    return json.loads((journal.directory / MARK_NAME).read_text())


@pytest.mark.parametrize(
    "spoil",
    [
        lambda doc: b"\x00not json",
        lambda doc: json.dumps({**doc, "journal_id": "0badc0de"}).encode(),
        lambda doc: json.dumps({**doc, "offset": doc["offset"] + 10**6}).encode(),
        lambda doc: json.dumps({**doc, "version": 99}).encode(),
        lambda doc: json.dumps({**doc, "open": [["x", "y"]]}).encode(),
    ],
    ids=["garbage", "another-journal", "past-the-end", "another-version", "bad-open-list"],
)
def test_a_mark_that_does_not_fit_means_reading_everything(tmp_path: Path, spoil) -> None:
    journal = Journal(tmp_path / "journal", ORIGIN)
    _settled_pair(journal, "a" * 32, _file(tmp_path, 0))
    _pass(journal)
    kept = _file(tmp_path, 1)
    journal.append(intent("b" * 32, kept, dead_writer()))
    (journal.directory / MARK_NAME).write_bytes(spoil(_mark(journal)))
    result = _pass(journal)
    assert result.intents == 2  # everything read again
    assert (result.deleted, result.aborted) == (0, 1)
    assert set(_outcome_counts(journal).values()) == {1}
    assert _mark(journal)["offset"] > 0  # and a good mark written for the next pass


def test_a_reused_name_is_still_an_abort_when_the_deletion_is_behind_the_mark(
    tmp_path: Path, live_writer: tuple[str, subprocess.Popen[str]]
) -> None:
    """The orphan's name holds another file by now (the queue was made again): not the file
    it named, so the journal before the mark is read for another writer's deletion of it."""
    identity, proc = live_writer
    journal = Journal(tmp_path / "journal", ORIGIN)
    victim = _file(tmp_path, 0)
    journal.append(intent("a" * 32, victim, identity))
    journal.append(intent("b" * 32, victim, dead_writer()))
    victim.unlink()
    journal.append({"type": "deletion", "id": "b" * 32, "file": str(victim)})
    assert _pass(journal).live == 1
    victim.write_bytes(b"z" * 4096)  # a new file under the old name

    _kill(proc)
    result = _pass(journal)
    assert (result.deleted, result.aborted) == (0, 1)
    assert_aborted_as_deleted_by_another(journal, "a" * 32, victim)


def test_a_mark_that_cannot_be_written_is_removed_not_left_stale(tmp_path: Path) -> None:
    """A pass that cannot write its mark removes the old one: that one carries intents whose
    outcomes this pass read, and once their segment is shipped a pass starting there would
    give them a second outcome."""
    journal = Journal(tmp_path / "journal", ORIGIN)
    kept = _file(tmp_path, 0)
    journal.append(intent("a" * 32, kept, dead_writer()))
    assert _pass(journal).aborted == 1  # its mark carries "a" until the abort is read back
    journal.rotate()  # the abort's segment is closed now
    blocker = journal.directory / f".{MARK_NAME}.tmp"
    blocker.mkdir()  # the next mark cannot be written (as on a full disk)
    assert _pass(journal).aborted == 0  # reads the abort back: settled
    assert not (journal.directory / MARK_NAME).exists()
    blocker.rmdir()
    for _, path in list_segments(journal.directory)[:-1]:
        path.unlink()  # shipped: closed and fully read
    third = _pass(journal)
    assert (third.aborted, third.deleted) == (0, 0)


def test_a_journal_started_again_below_the_mark_is_read_whole(tmp_path: Path) -> None:
    """Segments removed by hand with journal.id kept: the writer starts again at segment 1,
    below the mark, and the mark must not hide them."""
    journal = Journal(tmp_path / "journal", ORIGIN)
    for n in range(3):
        _settled_pair(journal, f"{n:032x}", _file(tmp_path, n))
        journal.rotate()
    _pass(journal)
    assert _mark(journal)["seq"] >= 3
    journal.close()
    for _, path in list_segments(tmp_path / "journal"):
        path.unlink()
    journal = Journal(tmp_path / "journal", ORIGIN)
    kept = _file(tmp_path, 9)
    journal.append(intent("e" * 32, kept, dead_writer()))
    assert [seq for seq, _ in list_segments(journal.directory)] == [1]
    result = _pass(journal)
    assert (result.intents, result.aborted) == (1, 1)


def test_a_segment_of_the_marks_number_that_is_another_file_is_read_whole(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "journal", ORIGIN)
    _settled_pair(journal, "a" * 32, _file(tmp_path, 0))
    _pass(journal)
    journal.close()
    (segment,) = (path for _, path in list_segments(tmp_path / "journal"))
    segment.unlink()  # the journal started again: segment 1 is a new file
    journal = Journal(tmp_path / "journal", ORIGIN)
    for n in range(1, 4):  # longer than the old one, so only its inode tells them apart
        _settled_pair(journal, f"{n:032x}", _file(tmp_path, n))
    kept = _file(tmp_path, 9)
    journal.append(intent("e" * 32, kept, dead_writer()))
    result = _pass(journal)
    assert (result.intents, result.aborted) == (4, 1)


def test_a_carried_intent_keeps_its_segment_from_the_shipper_across_rotations(
    tmp_path: Path, live_writer: tuple[str, subprocess.Popen[str]]
) -> None:
    identity, proc = live_writer
    journal = Journal(tmp_path / "journal", ORIGIN)
    held = _file(tmp_path, 0)
    journal.append(intent("a" * 32, held, identity))
    first_segment = list_segments(journal.directory)[-1][0]
    _pass(journal)
    for n in range(1, 4):  # later segments come and go past the mark
        journal.rotate()
        _settled_pair(journal, f"{n:032x}", _file(tmp_path, n))
        result = _pass(journal)
        assert result.live == 1 and result.live_segments == {first_segment}
        for seq, path in list_segments(journal.directory)[:-1]:
            if seq not in result.live_segments:
                path.unlink()  # what the shipper ships and removes
    _kill(proc)
    last = _pass(journal)
    assert (last.live, last.aborted) == (0, 1)
    assert _pass(journal).open_intents == 0


def test_a_mark_that_does_not_fit_still_keeps_live_writers_intents(
    tmp_path: Path, live_writer: tuple[str, subprocess.Popen[str]]
) -> None:
    identity, _ = live_writer
    journal = Journal(tmp_path / "journal", ORIGIN)
    journal.append(intent("a" * 32, _file(tmp_path, 0), identity))
    _pass(journal)
    doc = _mark(journal)
    (journal.directory / MARK_NAME).write_text(json.dumps({**doc, "offset": 10**9}))
    result = _pass(journal)
    assert (result.live, result.aborted, result.deleted) == (1, 0, 0)
    assert result.live_segments == {list_segments(journal.directory)[-1][0]}


def test_a_batch_being_written_under_the_journal_lock_is_not_read_into(tmp_path: Path) -> None:
    """A writer holds journal.lock through a batch's write, fsync and, when the write fails
    part-way, its cut back to the last whole line. A pass reads the highest segment only up
    to its size under that lock, so its mark never lands inside a line that was cut back."""
    journal = Journal(tmp_path / "journal", ORIGIN)
    _settled_pair(journal, "a" * 32, _file(tmp_path, 0))
    segment = list_segments(journal.directory)[-1][1]
    before = segment.stat().st_size
    written, started = threading.Event(), threading.Event()

    def failing_batch() -> None:  # what append_many does when ENOSPC cuts a batch short
        with directory_lock(journal.directory):
            with open(segment, "ab") as fh:
                fh.write(journal.encode([{"type": "round", "n": n} for n in range(3)]))
            written.set()
            started.wait(10)
            time.sleep(0.3)  # the pass is waiting for the lock meanwhile
            os.truncate(segment, before)

    writer = threading.Thread(target=failing_batch)
    writer.start()
    assert written.wait(10)
    passing = threading.Thread(target=_pass, args=(journal,))
    passing.start()
    started.set()
    writer.join()
    passing.join()
    assert _mark(journal)["offset"] == before
    kept = _file(tmp_path, 1)
    journal.append(intent("b" * 32, kept, dead_writer()) | {"pad": "p" * 300})
    result = _pass(journal)
    assert (result.intents, result.aborted, result.torn) == (1, 1, 0)


def _pad_to_a_page(journal: Journal, segment: Path) -> None:
    """End the segment at a page boundary: on a full tmpfs its next byte then needs a page."""
    need = -segment.stat().st_size % 4096 or 4096
    if need < 300:
        need += 4096
    bare = len(journal.encode([{"type": "round", "pad": ""}]))
    journal.append({"type": "round", "pad": "p" * (need - bare)})
    assert segment.stat().st_size % 4096 == 0


def test_an_outcome_held_in_memory_on_a_full_disk_is_not_given_twice(
    tmp_path: Path, tmpfs: Tmpfs
) -> None:
    """On a full disk a reconciled outcome waits in memory (the spool) and its intent still
    looks open on disk: the next pass of the same process (the shipper runs one before every
    pass) must not give it a second outcome, written too once space returns."""
    spool = SpoolingJournal(Journal(tmpfs.path / "journal", ORIGIN))
    kept = _file(tmp_path, 0)
    spool.append(intent("a" * 32, kept, dead_writer()))
    _pad_to_a_page(spool.journal, list_segments(spool.directory)[-1][1])  # type: ignore[arg-type]
    filler = tmpfs.fill_up()

    def pass_(now: int, when: str = "start-up"):
        return reconcile(
            spool.directory, spool.append, now_ms=now, when=when, held=spool.holds_outcome
        )

    first = pass_(1)
    assert first.aborted == 1 and spool.held == 1  # the abort is in memory only
    second = pass_(2, "shipping")
    assert (second.aborted, second.deleted, second.unwritten) == (0, 0, 1)
    assert spool.held == 1
    filler.unlink()
    assert spool.flush()
    assert _outcome_counts(spool) == Counter({"a" * 32: 1})
    third = pass_(3)
    assert (third.aborted, third.unwritten, third.open_intents) == (0, 0, 0)


def test_an_outcome_the_full_spool_lost_is_given_again(tmp_path: Path, tmpfs: Tmpfs) -> None:
    """Held in memory only while it is held: if the spool overflows and loses the outcome,
    the next pass gives the intent one again (it must have one)."""
    spool = SpoolingJournal(Journal(tmpfs.path / "journal", ORIGIN), limit=1)
    kept = _file(tmp_path, 0)
    spool.append(intent("a" * 32, kept, dead_writer()))
    _pad_to_a_page(spool.journal, list_segments(spool.directory)[-1][1])  # type: ignore[arg-type]
    filler = tmpfs.fill_up()

    def pass_():
        return reconcile(spool.directory, spool.append, now_ms=1, held=spool.holds_outcome)

    assert pass_().aborted == 1 and spool.holds_outcome("a" * 32)
    spool.append({"type": "deletion", "id": "f" * 32, "file": "/elsewhere"})  # pushes it out
    assert spool.dropped == 1 and not spool.holds_outcome("a" * 32)
    filler.unlink()
    assert pass_().aborted == 1  # given again, and written this time
    assert _outcome_counts(spool)["a" * 32] == 1


def test_a_round_that_deleted_files_moves_the_mark_past_its_records(tmp_path: Path) -> None:
    """A daemon that never ships would otherwise move the mark only at start-up, and a restart
    after months of rounds would read those months once."""
    store = make_store(tmp_path, deleteFileBatchMax=3)
    cleaner = store.cleaner()
    first = cleaner.run_round()
    assert first.deleted
    journal = Journal(store.journal, ORIGIN)
    segment = list_segments(store.journal)[-1][1]
    tail = segment.read_bytes()[_mark(journal)["offset"] :]
    assert b'"type":"intent"' not in tail and b'"type":"deletion"' not in tail
    assert store.cleaner().reconcile().intents == 0  # a restart reads nothing of that round


def test_the_shipper_keeps_a_segment_whose_outcome_waits_in_the_rounds_memory(
    tmp_path: Path, tmpfs: Tmpfs
) -> None:
    """The daemon's wiring: the rounds write through a spooling journal, the shipper through
    the raw one, asking the rounds' spool what it holds. An outcome held in memory gets no
    second one from the shipper, and the segment with its intent stays local until the
    outcome is on disk; then both ship, one outcome for the intent."""
    raw = Journal(tmpfs.path / "journal", ORIGIN)
    spool = SpoolingJournal(raw)  # the cleaner's
    kept = _file(tmp_path, 0)
    raw.append(intent("a" * 32, kept, dead_writer()))
    _pad_to_a_page(raw, list_segments(raw.directory)[-1][1])
    filler = tmpfs.fill_up()
    start_up = reconcile(raw.directory, spool.append, now_ms=1, held=spool.holds_outcome)
    assert start_up.aborted == 1 and spool.holds_outcome("a" * 32)
    target = tmp_path / "target"
    target.mkdir()

    def ship_pass() -> ship.ShipResult:
        return ship.ship_once(
            raw.directory, target, max_local_bytes=1 << 40, max_segment_age_ms=10**13,
            journal=raw, flush=True, held=spool.holds_outcome,
        )  # fmt: skip

    first = ship_pass()
    assert first.reconciled == 0 and first.shipped_segments == 0
    assert first.waiting_segments == 1  # the intent's segment stays local
    filler.unlink()
    assert spool.flush()
    second = ship_pass()
    assert second.error is None and second.reconciled == 0
    records = shipped(target)
    assert sorted(r["type"] for r in records if r.get("id") == "a" * 32) == ["abort", "intent"]


def test_a_pass_that_does_not_wait_leaves_a_busy_lock_alone(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal", ORIGIN)
    journal.append(intent("a" * 32, _file(tmp_path, 0), dead_writer()))
    fd = os.open(journal.directory / "reconcile.lock", os.O_RDWR | os.O_CREAT, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another pass (a `once` starting, say)
        result = reconcile(journal.directory, journal.append, now_ms=1, blocking=False)
        assert result.busy and (result.intents, result.aborted) == (0, 0)
    finally:
        os.close(fd)
    assert _pass(journal).aborted == 1


def test_an_intent_with_fields_of_the_wrong_type_is_counted_not_fatal(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal", ORIGIN)
    journal.append(intent("a" * 32, _file(tmp_path, 0), dead_writer()) | {"ino": [1]})
    journal.append(intent("b" * 32, _file(tmp_path, 1), dead_writer()))
    result = _pass(journal)
    assert (result.torn, result.intents, result.aborted) == (1, 1, 1)
