"""Crash consistency and a full disk, on real files: start-up reconciliation gives every
orphaned intent exactly one outcome; a journal on a full filesystem holds its records in memory
while deletions go on, and writes them first once space returns; any other journal error stops
the deletions; the default journal directory avoids the store's filesystem."""

from __future__ import annotations

import dataclasses
import errno
import os
from pathlib import Path

import pytest

from retentiond.engine.cleaner import Cleaner
from retentiond.journal.place import candidates, choose, default_journal_dir
from retentiond.journal.reconcile import reconcile, writer_alive, writer_identity
from retentiond.journal.spool import SpoolingJournal
from retentiond.journal.writer import Journal, ReadStats, read_records
from retentiond.kinds import kind_for
from retentiond.reasons import Kind
from tests.conftest import EXPIRED, ORIGIN, Tmpfs, by_type, make_store

SPEC = EXPIRED


def check_one_outcome_each(directory: Path) -> None:
    """Every intent has exactly one outcome; every deletion names a file that is gone."""
    recs = by_type(directory)
    outcomes = [*recs.get("deletion", []), *recs.get("abort", [])]
    ids = [r["id"] for r in outcomes]
    assert len(ids) == len(set(ids))
    assert {r["id"] for r in recs.get("intent", [])} == set(ids)
    for r in recs.get("deletion", []):
        assert not os.path.lexists(r["file"]), r
    files = [r["file"] for r in recs.get("deletion", [])]
    assert len(files) == len(set(files))


# ---- reconciliation ---------------------------------------------------------------------------


def _intent(op_id: str, path: Path, writer: str = "dead0000:1:1") -> dict:
    st = os.stat(path)
    return {
        "type": "intent", "id": op_id, "file": str(path), "kind": "commitlog",
        "reason": "expired", "bytes": st.st_size, "mtime_ms": st.st_mtime_ns // 1_000_000,
        "ino": st.st_ino, "writer": writer, "time_ms": 1,
    }  # fmt: skip


def test_reconcile_gives_each_orphan_one_outcome(tmp_path: Path) -> None:
    store = make_store(tmp_path, journal=tmp_path / "journal").generated
    gone, present, live, done = (f.path for f in store.data_files[:4])
    journal = Journal(tmp_path / "journal", ORIGIN)
    journal.append_many(
        [
            _intent("a", gone),
            _intent("b", present),
            _intent("c", live, writer=writer_identity()),  # this very process: alive
            _intent("d", done),
            {"type": "deletion", "id": "d", "file": str(done)},
        ]
    )
    gone.unlink()
    done.unlink()
    with open(journal.active_segment, "ab") as fh:
        fh.write(b'{"type":"intent","id":"torn","fi')  # a kill in the middle of a write
    journal.close()
    journal = Journal(tmp_path / "journal", ORIGIN)  # ends the torn line

    result = reconcile(journal.directory, journal.append, now_ms=5)
    assert (result.deleted, result.aborted, result.live, result.torn) == (1, 1, 1, 1)
    recs = by_type(journal.directory)
    deletion = next(r for r in recs["deletion"] if r["id"] == "a")
    assert deletion["reconciled"] is True and deletion["reason"] == "expired"
    assert "writer" not in deletion and "ino" not in deletion
    abort = next(r for r in recs["abort"] if r["id"] == "b")
    assert abort["reconciled"] is True and present.exists()
    # A second start-up finds nothing more to do.
    again = reconcile(journal.directory, journal.append, now_ms=6)
    assert (again.deleted, again.aborted) == (0, 0)
    stats = ReadStats()
    list(read_records(journal.directory, stats))
    assert stats.torn == 1


def test_writer_identity_is_alive_only_for_a_running_process() -> None:
    me = writer_identity()
    assert writer_alive(me)
    boot, pid, start = me.split(":")
    assert not writer_alive(f"{boot}:{pid}:{int(start) + 1}")  # same pid, another process
    assert not writer_alive(f"ffffffff:{pid}:{start}")  # another boot
    assert not writer_alive(None) and not writer_alive("garbage")


def test_cleaner_reconciles_before_its_first_round(tmp_path: Path) -> None:
    made = make_store(tmp_path, journal=tmp_path / "journal", deleteFileBatchMax=1)
    store, settings = made.generated, made.settings
    journal = Journal(tmp_path / "journal", ORIGIN)
    victim = store.data_files[0].path
    journal.append(_intent("x", victim))
    victim.unlink()  # the kill came between the unlink and the deletion record
    cleaner = Cleaner(kind_for(settings), journal=journal)
    cleaner.run_round()
    recs = by_type(tmp_path / "journal")
    assert [r["reconciled"] for r in recs["deletion"] if r["id"] == "x"] == [True]
    assert cleaner.fault_counts()["reconciled"] == 1
    check_one_outcome_each(tmp_path / "journal")


# ---- the spool --------------------------------------------------------------------------------


class FlakyJournal:
    """A Journal stand-in whose writes fail with a chosen errno until told otherwise."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.errno: int | None = None
        self.written: list[dict] = []

    def append_many(self, records: list[dict]) -> None:
        if self.errno is not None:
            raise OSError(self.errno, os.strerror(self.errno))
        self.written.extend(records)

    def close(self) -> None:
        pass


def test_spool_holds_on_enospc_and_writes_in_order_later(tmp_path: Path) -> None:
    sink = FlakyJournal(tmp_path)
    spool = SpoolingJournal(sink, limit=5)
    sink.errno = errno.ENOSPC
    for i in range(3):
        spool.append({"type": "intent", "id": str(i)})  # does not raise
    spool.append({"type": "round", "n": 1})
    assert spool.held == 4 and not sink.written
    sink.errno = errno.EDQUOT
    spool.append({"type": "deletion", "id": "0"})
    sink.errno = None
    spool.append({"type": "deletion", "id": "1"})
    assert [r.get("id", r.get("n")) for r in sink.written] == ["0", "1", "2", 1, "0", "1"]
    assert spool.held == 0 and spool.flushed == 5 and spool.space_errors == 5


def test_spool_refuses_other_errors_and_drops_round_records_first(tmp_path: Path) -> None:
    sink = FlakyJournal(tmp_path)
    spool = SpoolingJournal(sink, limit=3)
    sink.errno = errno.EIO
    with pytest.raises(OSError):
        spool.append({"type": "intent", "id": "x"})
    assert spool.held == 0
    sink.errno = errno.ENOSPC
    spool.append({"type": "round", "n": 1})
    spool.append({"type": "intent", "id": "a"})
    spool.append({"type": "deletion", "id": "a"})
    spool.append({"type": "intent", "id": "b"})  # over the limit: the round record goes
    assert spool.dropped == 1
    spool.append({"type": "deletion", "id": "b"})  # then the oldest record
    assert spool.dropped == 2
    sink.errno = None
    assert spool.flush()
    assert [(r["type"], r["id"]) for r in sink.written] == [
        ("deletion", "a"), ("intent", "b"), ("deletion", "b")
    ]  # fmt: skip


def test_an_eio_journal_stops_deletions(tmp_path: Path) -> None:
    made = make_store(tmp_path, journal=tmp_path / "journal", deleteFileBatchMax=5)
    store, settings = made.generated, made.settings
    sink = FlakyJournal(tmp_path / "journal")
    sink.errno = errno.EIO
    cleaner = Cleaner(kind_for(settings), journal=SpoolingJournal(sink))  # type: ignore[arg-type]
    cleaner._reconciled = True  # the stand-in has no segments to read
    r = cleaner.run_round()
    assert not r.deleted and r.journal_error and "intent" in r.journal_error
    assert all(f.path.exists() for f in store.commitlog_files)
    assert cleaner.fault_counts()["journal_failures"] == 1
    assert [o.cause for o in r.outcomes] == ["journal"]


def test_an_outcome_that_cannot_be_written_ends_the_round_but_is_kept(tmp_path: Path) -> None:
    settings = make_store(tmp_path, journal=tmp_path / "journal", deleteFileBatchMax=5).settings

    class FailAfterIntent(FlakyJournal):
        failed = False

        def append_many(self, records: list[dict]) -> None:
            if records[-1]["type"] == "deletion" and not self.failed:
                self.failed = True  # the first deletion record fails, with EIO
                raise OSError(errno.EIO, "Input/output error")
            super().append_many(records)

    sink = FailAfterIntent(tmp_path / "journal")
    spool = SpoolingJournal(sink)
    cleaner = Cleaner(kind_for(settings), journal=spool)  # type: ignore[arg-type]
    cleaner._reconciled = True
    r = cleaner.run_round()
    assert len(r.deleted) == 1 and r.journal_error  # the unlink happened, then it stopped
    # The deletion record was held in memory and went out, first, with the round record.
    assert spool.flushed == 1 and spool.held == 0
    assert [x["type"] for x in sink.written] == ["intent", "deletion", "round"]


# ---- a real full filesystem -----------------------------------------------------------------


def test_journal_on_a_full_tmpfs_still_frees_space(tmp_path: Path, tmpfs: Tmpfs) -> None:
    journal_dir = tmpfs.path / "journal"
    settings = make_store(tmp_path, journal=journal_dir, deleteFileBatchMax=3).settings
    journal = Journal(journal_dir, ORIGIN)
    cleaner = Cleaner(kind_for(settings), journal=journal)
    cleaner.reconcile()
    filler = tmpfs.fill_up()  # fill to the last byte
    r1 = cleaner.run_round()
    deleted = [o for o in r1.deleted if o.decision.kind is Kind.COMMITLOG]
    assert len(deleted) == 3, "the cleaner deletes although its journal cannot be written"
    held = cleaner.fault_counts()["journal_held"]
    assert held >= 7  # 3 intents, 3 deletions, the round record (and queue records)
    assert cleaner.fault_counts()["journal_space_errors"] >= 1
    filler.unlink()
    r2 = cleaner.run_round()  # writes what was held first, then its own records
    assert cleaner.fault_counts()["journal_held"] == 0
    check_one_outcome_each(journal_dir)
    recs = by_type(journal_dir)
    gone = {o.decision.path for o in [*r1.deleted, *r2.deleted]}
    assert {r["file"] for r in recs["deletion"]} == gone
    stats = ReadStats()
    list(read_records(journal_dir, stats))
    assert stats.torn == 0, "a write cut short by ENOSPC left no partial line behind"


def test_a_write_cut_short_leaves_no_partial_line(tmpfs: Tmpfs) -> None:
    journal = Journal(tmpfs.path / "journal", ORIGIN)
    journal.append({"type": "round", "n": 0})
    tmpfs.fill_to(1 - 8192 / (64 << 20))  # a little space left
    big = {"type": "round", "pad": "x" * (1 << 20)}  # more than that: cut short by ENOSPC
    with pytest.raises(OSError) as err:
        journal.append(big)
    assert err.value.errno == errno.ENOSPC
    (tmpfs.path / "filler.bin").unlink()
    journal.append({"type": "round", "n": 1})
    stats = ReadStats()
    assert [r["n"] for r in read_records(journal.directory, stats)] == [0, 1]
    assert stats.torn == 0


# ---- where the journal goes by default --------------------------------------------------------


def test_default_journal_dir_avoids_the_store_filesystem(tmp_path: Path, tmpfs: Tmpfs) -> None:
    on_store = tmpfs.path / "state" / "journal"
    elsewhere = tmp_path / "logs" / "journal"
    devs = {os.stat(tmpfs.path).st_dev}
    assert choose([on_store, elsewhere], devs) == elsewhere
    assert choose([elsewhere, on_store], devs) == elsewhere
    assert choose([on_store, tmpfs.path / "other"], devs) == on_store  # none off it: the first
    env = {"STATE_DIRECTORY": str(tmp_path / "s"), "LOGS_DIRECTORY": str(tmp_path / "l")}
    assert candidates(env) == [tmp_path / "s" / "journal", tmp_path / "l" / "journal"]
    settings = make_store(tmpfs.path, journal=tmp_path / "unused").settings
    env = {"STATE_DIRECTORY": str(tmpfs.path / "state"), "LOGS_DIRECTORY": str(tmp_path)}
    assert default_journal_dir(kind_for(settings).directories(), env) == tmp_path / "journal"


def test_store_and_journal_on_one_full_disk(tmp_path: Path, tmpfs: Tmpfs) -> None:
    """The worst day: the store's own disk is 100 % full and the journal lives there too. The
    cleaner deletes (forcibly: the disk is over the clean-forcibly ratio), which frees the
    space its journal needed; the records held meanwhile are written, in order."""
    journal_dir = tmpfs.path / "journal"
    young = dataclasses.replace(SPEC, oldest_age_hours=5.0, newest_age_hours=0.0)
    root = tmpfs.path / "store"
    young = make_store(tmp_path, young, store_dir=root, journal=journal_dir, deleteFileBatchMax=4)
    young_store, settings = young.generated, young.settings
    cleaner = Cleaner(kind_for(settings), journal=Journal(journal_dir, ORIGIN))
    cleaner.reconcile()
    tmpfs.fill_up()
    r = cleaner.run_round()
    forced = [o for o in r.deleted if o.decision.kind is Kind.COMMITLOG]
    assert len(forced) == 4 and all(o.decision.reason == "forced_over_clean_forcibly_ratio"
                                    for o in forced)  # fmt: skip
    assert cleaner.fault_counts()["journal_space_errors"] >= 1
    # The deletions freed the space: the round record's write carried everything held.
    assert cleaner.fault_counts()["journal_held"] == 0
    check_one_outcome_each(journal_dir)
    assert {r["file"] for r in by_type(journal_dir)["deletion"]} == {
        o.decision.path for o in r.deleted
    }
    assert young_store.data_files[4].path.exists()
