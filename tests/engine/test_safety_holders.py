"""Files in use, with real processes: a reader's hold defers a deletion until the forcible
interval has passed; the owner broker's hold does not, but keeps the deleted bytes allocated
(pending release) until it lets go, and the pressure triggers wait for that instead of
forcing out the whole CommitLog. Plus the /proc parsing on a fixture tree, and doubt (an
incomplete view of /proc) treated as held."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from retentiond.engine.cleaner import Cleaner
from retentiond.engine.proc.files import (
    build_holder_map,
    find_owner,
    parse_lock_line,
    parse_maps_line,
    proc_hides_pids,
)
from retentiond.journal.writer import Journal, Origin
from retentiond.kinds import kind_for
from retentiond.kinds.rocketmq.holds import HoldRules
from retentiond.reasons import Kind, Reason
from retentiond.storegen.rocketmq import StoreSpec
from tests.conftest import EXPIRED, ORIGIN, Tmpfs, make_store, need, records
from tests.helpers.safety_procs import Holder, ProcView

MiB = 1 << 20
# 12 CommitLog files of 64 KiB, all older than 72 h: everything but the newest may go.
OLD = EXPIRED


def make(
    tmp: Path,
    spec: StoreSpec = OLD,
    *,
    proc: ProcView | str | None = None,
    journal: Path | None = None,
    rules: HoldRules | None = None,
    **keys,
):
    """A generated store, its settings and a Cleaner looking at ``proc``."""
    made = make_store(tmp, spec, journal=journal, **keys)
    cleaner = made.cleaner(
        Journal(made.journal, Origin("c", "b", "h", str(made.root))),
        proc_root=str(proc or "/proc"),
        hold_rules=rules,
    )
    return made.generated, cleaner


def cl_deleted(result) -> list:
    return [o for o in result.deleted if o.decision.kind is Kind.COMMITLOG]


def reasons(result) -> dict[str, str]:
    return {Path(d.path).name: str(d.reason) for d in result.plan.commitlog.decisions}


# ---- a reader's hold ------------------------------------------------------------------------


def test_a_reader_delays_deletion_until_the_forcible_interval(tmp_path: Path) -> None:
    proc = ProcView(tmp_path / "proc")
    store, cleaner = make(
        tmp_path, deleteFileBatchMax=3, destroyMapedFileIntervalForcibly=1500, proc=proc
    )
    first = store.data_files[0].path
    with Holder([first]) as reader:
        proc.refresh()
        r1 = cleaner.run_round()
        assert not r1.deleted, "the held first file stops the pass"
        d0 = r1.plan.commitlog.decisions[0]
        assert d0.reason is Reason.HELD_BY_OTHER_PROCESS and str(reader.pid) in d0.detail
        assert r1.plan.commitlog.decisions[1].reason is Reason.AFTER_FIRST_KEPT
        assert first.exists()
        assert cleaner.held_count() == 1
        status = cleaner.safety_status()
        assert status["held_files"][0]["holders"] == [reader.pid]

        time.sleep(0.5)
        r2 = cleaner.run_round()
        assert not r2.deleted and first.exists()  # still inside the interval

        time.sleep(1.1)
        r3 = cleaner.run_round()
        cl = [o for o in r3.deleted if o.decision.kind is Kind.COMMITLOG]
        assert [Path(o.decision.path) for o in cl][:1] == [first]
        assert cl[0].decision.reason is Reason.FORCED_AFTER_HOLD
        assert len(cl) == 3  # the batch goes on behind it
    deletion = next(r for r in records(tmp_path / "journal", "deletion") if r["file"] == str(first))
    assert deletion["reason"] == "forced_after_hold" and deletion["forced"] is False
    assert cleaner.held_count() == 0


def test_a_released_file_goes_with_its_own_reason(tmp_path: Path) -> None:
    proc = ProcView(tmp_path / "proc")
    store, cleaner = make(tmp_path, deleteFileBatchMax=2, proc=proc)
    first = store.data_files[0].path
    with Holder([first], mode="map"):
        proc.refresh()
        assert not cleaner.run_round().deleted
    proc.refresh()
    r = cleaner.run_round()
    cl = [o.decision.reason for o in r.deleted if o.decision.kind is Kind.COMMITLOG]
    assert cl == [Reason.EXPIRED, Reason.EXPIRED]
    assert not first.exists() and cleaner.held_count() == 0


def test_a_dry_run_shows_the_hold_without_remembering_it(tmp_path: Path) -> None:
    proc = ProcView(tmp_path / "proc")
    store, cleaner = make(tmp_path, proc=proc)
    with Holder([store.data_files[0].path]):
        proc.refresh()
        plan = cleaner.plan()
        assert plan.commitlog.decisions[0].reason is Reason.HELD_BY_OTHER_PROCESS
        assert cleaner.run_round(dry_run=True).plan.commitlog.decisions[0].reason is (
            Reason.HELD_BY_OTHER_PROCESS
        )
    assert cleaner.held_count() == 0


def test_a_held_consume_queue_file_stops_its_queue_only(tmp_path: Path) -> None:
    proc = ProcView(tmp_path / "proc")
    rules = HoldRules(commitlog_ms=120_000, consumequeue_ms=400, index_ms=400)
    store, cleaner = make(tmp_path, deleteFileBatchMax=4, proc=proc, rules=rules)
    (q0, files0), (_, files1) = sorted(store.queues.items())
    with Holder([files0[0].path]):
        proc.refresh()
        r = cleaner.run_round()
        gone = {Path(o.decision.path) for o in r.deleted}
        assert files0[0].path.exists() and files0[0].path not in gone
        assert files1[0].path in gone, "the other queue is not held up"
        stop = next(q.stop for q in r.plan.queues.queues if q.queue_id == q0[1])
        assert stop.reason is Reason.HELD_BY_OTHER_PROCESS
        time.sleep(0.5)
        r = cleaner.run_round()  # the CommitLog minimum moves again: the queue is revisited
        forced = [o for o in r.deleted if Path(o.decision.path) == files0[0].path]
        assert forced and forced[0].decision.reason is Reason.FORCED_AFTER_HOLD


def test_the_hung_file_job_retries_the_first_commitlog_file(tmp_path: Path) -> None:
    proc = ProcView(tmp_path / "proc")
    store, cleaner = make(tmp_path, deleteFileBatchMax=2, proc=proc)
    first = store.data_files[0].path
    with Holder([first]):
        proc.refresh()
        cleaner.run_round()
        assert cleaner.held_count() == 1
        assert cleaner.redelete_hanged() is None  # still held, interval not over
    # The delete hour is over, but the file was already committed to deletion (upstream:
    # shut down, unavailable): once released the retry deletes it.
    not_now = f"{(time.gmtime().tm_hour + 12) % 24:02d}"
    cleaner.reconfigure(
        replace(
            cleaner.settings,
            store=replace(
                cleaner.settings.store, delete_when=not_now, delete_hours=(int(not_now),)
            ),
        )
    )
    proc.refresh()
    outcome = cleaner.redelete_hanged()
    assert outcome is not None and outcome.deleted
    assert outcome.decision.reason is Reason.EXPIRED and not first.exists()
    assert cleaner.redelete_hanged() is None  # nothing left to retry
    assert store.data_files[1].path.exists()  # only the first file is retried


def test_the_hung_file_job_forces_after_the_interval(tmp_path: Path) -> None:
    proc = ProcView(tmp_path / "proc")
    store, cleaner = make(tmp_path, destroyMapedFileIntervalForcibly=300, proc=proc)
    first = store.data_files[0].path
    with Holder([first]):
        proc.refresh()
        cleaner.run_round()
        time.sleep(0.35)
        outcome = cleaner.redelete_hanged()
        assert outcome is not None and outcome.deleted
        assert outcome.decision.reason is Reason.FORCED_AFTER_HOLD


# ---- the owner's hold: pending release --------------------------------------------------------

# 30 CommitLog files of 1 MiB, young (not expired): only pressure can delete them.
YOUNG = StoreSpec(
    commitlog_file_size=MiB,
    cq_file_size=64 * 20,
    max_hash_slot_num=16,
    max_index_num=64,
    messages=30 * 15,
    message_size=65536,
    topics=1,
    queues_per_topic=1,
    oldest_age_hours=10.0,
    newest_age_hours=0.0,
)


def test_owner_hold_keeps_deleted_bytes_pending_until_it_exits(tmp_path: Path, tmpfs: Tmpfs):
    proc = ProcView(tmp_path / "proc")
    store, cleaner = make(
        tmpfs.path, YOUNG, proc=proc, journal=tmp_path / "journal", deleteFileBatchMax=10
    )
    files = [f.path for f in store.commitlog_files]
    tmpfs.fill_to(0.90)
    with Holder(files, lock=store.root / "lock", mode="map") as broker:
        proc.refresh()
        used_before, _ = tmpfs.usage()
        r1 = cleaner.run_round()
        assert cleaner.owner_running() is True
        deleted = cl_deleted(r1)
        assert len(deleted) == 10, "one batch, forced by pressure"
        assert {o.decision.reason for o in deleted} == {Reason.FORCED_OVER_CLEAN_FORCIBLY_RATIO}
        files_pending, bytes_pending = cleaner.pending_release()
        assert files_pending == 10 and bytes_pending >= 10 * MiB
        assert tmpfs.usage()[0] >= used_before - MiB // 4, "the broker still maps them"

        # The disk is still as full as before, but it will not be once the broker lets go:
        # the next rounds wait instead of forcing out the rest of the CommitLog.
        for _ in range(3):
            r = cleaner.run_round()
            assert not cl_deleted(r)
            t = r.plan.commitlog.triggers
            assert t.clean_at_once is False and t.unadjusted_physic_ratio >= 0.89
            assert t.pending_release_bytes == bytes_pending
        status = cleaner.safety_status()
        assert status["owner"]["pids"] == [broker.pid]
        assert status["pending_release"]["files"] == 10
        used_held, _ = tmpfs.usage()
    proc.refresh()
    r = cleaner.run_round()
    assert cleaner.pending_release() == (0, 0)
    assert cleaner.owner_running() is False
    assert tmpfs.usage()[0] <= used_held - 10 * MiB + MiB // 4, "released: statvfs shows it free"
    assert not cl_deleted(r), "and with the space back, nothing else needs to go"
    rounds = records(tmp_path / "journal", "round")
    assert rounds[0]["pending_release"] == {"files": 10, "bytes": bytes_pending}
    assert rounds[0]["owner_running"] is True
    assert rounds[-1]["pending_release"] == {"files": 0, "bytes": 0}


def test_a_restarted_cleaner_finds_deleted_files_the_owner_still_holds(
    tmp_path: Path, tmpfs: Tmpfs
) -> None:
    proc = ProcView(tmp_path / "proc")
    journal = tmp_path / "journal"
    store, cleaner = make(tmpfs.path, YOUNG, proc=proc, journal=journal, deleteFileBatchMax=10)
    tmpfs.fill_to(0.90)
    with Holder([f.path for f in store.commitlog_files], lock=store.root / "lock", mode="map"):
        proc.refresh()
        assert len(cl_deleted(cleaner.run_round())) == 10
        # A new process (a restart) knows nothing of what the old one deleted ...
        fresh = Cleaner(
            kind_for(cleaner.settings),
            journal=Journal(journal, ORIGIN),
            proc_root=str(proc),
        )
        r = fresh.run_round()
        # ... but finds the broker's deleted-but-mapped files under the store in /proc.
        assert not cl_deleted(r)
        assert fresh.pending_release().files == 10


# ---- doubt --------------------------------------------------------------------------------------


def test_an_unreadable_process_makes_held_files_wait(tmp_path: Path) -> None:
    """Without the capabilities to look into other processes (as a non-root daemon is), every
    process with capabilities is unreadable: a file that anyone holds is treated as held
    (deferred, and said once); a file that a lease proves nobody holds still goes."""
    need(os.geteuid() == 0, "dropping capabilities needs root to start with")
    need(shutil.which("setpriv") is not None, "setpriv (util-linux) is needed")
    made = make_store(tmp_path, OLD, deleteFileBatchMax=5)
    store, config = made.generated, made.config
    held = store.data_files[2].path
    script = (
        "import json, sys\n"
        "from retentiond.observe.logging import configure\n"
        "from retentiond.engine.cleaner import Cleaner\n"
        "from retentiond.kinds import load_settings\n"
        "from retentiond.journal.writer import Journal, Origin\n"
        "from retentiond.kinds import kind_for\n"
        "configure(json=True)\n"
        "s = load_settings(sys.argv[1])\n"
        "c = Cleaner(kind_for(s), journal=Journal(s.daemon.journal_dir, Origin('c','b','h','s')))\n"
        "for _ in range(2):\n"
        "    r = c.run_round()\n"
        "    print(json.dumps([[d.path, str(d.reason)] for d in r.plan.commitlog.decisions]))\n"
        "print(json.dumps(c.safety_status()))\n"
    )
    drop = ["setpriv", "--securebits", "+noroot,+noroot_locked", "--bounding-set", "-all",
            "--inh-caps", "-all"]  # fmt: skip
    with Holder([held]):  # a process with capabilities: we may not look into it
        out = subprocess.run(
            [*drop, sys.executable, "-c", script, str(config)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    first, second, status = (json.loads(x) for x in out.stdout.splitlines())
    ordered = [why for _, why in first]
    # Two files nobody holds go (a lease proves it), the held one waits and the pass stops.
    assert ordered[:4] == ["expired", "expired", "held_by_other_process", "after_first_kept"]
    assert dict((Path(p).name, w) for p, w in first)[held.name] == "held_by_other_process"
    assert second[0][1] == "held_by_other_process"
    assert status["proc_view_complete"] is False
    assert status["held_files"][0]["holders"] == []  # unseen
    assert out.stderr.count("cannot see every process's open files") == 1  # said once
    assert held.exists()


# ---- /proc parsing on a fixture tree ---------------------------------------------------------


def test_proc_lines_parse_and_garbage_does_not() -> None:
    assert parse_lock_line("1: POSIX  ADVISORY  WRITE 14475 fe:00:2146365 0 0") == (
        14475, 0xFE, 0, 2146365
    )  # fmt: skip
    assert parse_lock_line("1: -> POSIX  ADVISORY  WRITE 99 fe:00:2146365 0 0") is None
    assert parse_lock_line("2: OFDLCK ADVISORY WRITE -1 00:1f:12 0 EOF") == (-1, 0, 0x1F, 12)
    assert parse_lock_line("garbage") is None
    line = "7f2b3eba8000-7f2b3eba9000 rw-s 00000000 fe:00 2146365    /tmp/lk (deleted)\n"
    assert parse_maps_line(line) == (os.makedev(0xFE, 0), 2146365, "/tmp/lk (deleted)")
    assert parse_maps_line("7f0-7f1 r-xp 00000000 00:00 0 [vdso]") is None
    assert parse_maps_line("zz") is None


def _maps_line(path: Path, deleted: bool = False) -> str:
    st = os.stat(path)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    return f"7f00-7f10 r--s 00000000 {dev} {st.st_ino}   {path}{' (deleted)' * deleted}\n"


def test_fixture_proc_tree(tmp_path: Path) -> None:
    """pid 100 owns the store (lock) and maps a and b, as a broker does; pid 200 maps c;
    pid 300 has d open."""
    proc = tmp_path / "proc"
    store, cleaner = make(tmp_path, proc=str(proc), deleteFileBatchMax=10)
    a, b, c, d = (f.path for f in store.data_files[:4])
    lock = os.stat(store.root / "lock")
    for pid in (100, 200, 300):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "maps").write_text("")
    (proc / "locks").write_text(
        f"1: POSIX  ADVISORY  WRITE 100 {os.major(lock.st_dev):02x}:{os.minor(lock.st_dev):02x}"
        f":{lock.st_ino} 0 0\n"
    )
    (proc / "100" / "maps").write_text(_maps_line(a) + _maps_line(b))
    (proc / "200" / "maps").write_text(_maps_line(c))
    os.symlink(d, proc / "300" / "fd" / "7")
    owner = find_owner(str(store.root / "lock"), str(proc))
    assert owner.running is True and owner.pids == {100}
    hm = build_holder_map(str(proc), self_pid=1, owners=owner.pids)
    assert hm.complete
    ident = {p: os.stat(p) for p in (a, b, c, d)}
    assert hm.others(ident[a].st_dev, ident[a].st_ino, owner.pids) == frozenset()
    assert hm.others(ident[c].st_dev, ident[c].st_ino, owner.pids) == {200}
    assert hm.others(ident[d].st_dev, ident[d].st_ino, owner.pids) == {300}
    assert hm.referenced(ident[a].st_dev, ident[a].st_ino)

    # Through the Cleaner: a and b go (the owner's hold is not a reader's), c is held by 200.
    r = cleaner.run_round()
    assert [Path(o.decision.path) for o in r.deleted if o.decision.kind is Kind.COMMITLOG] == [a, b]
    assert reasons(r)[c.name] == "held_by_other_process"
    assert cleaner.pending_release().files == 2  # the owner still maps a and b
    (proc / "100" / "maps").write_text("")  # the broker lets go
    cleaner.run_round()
    assert cleaner.pending_release() == (0, 0)


def test_no_lock_file_means_no_owner_and_hidepid_is_doubt(tmp_path: Path) -> None:
    assert find_owner(str(tmp_path / "nope"), "/proc").running is False
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(
        f"22 27 0:21 / {proc} rw,relatime - proc proc rw,hidepid=invisible\n"
    )
    assert proc_hides_pids(str(proc))
    assert not build_holder_map(str(proc)).complete
    (proc / "self" / "mountinfo").write_text(f"22 27 0:21 / {proc} rw - proc proc rw\n")
    assert not proc_hides_pids(str(proc))


@pytest.mark.parametrize("broken", ["locks", "maps"])
def test_unreadable_proc_files_never_crash(tmp_path: Path, broken: str) -> None:
    proc = tmp_path / "proc"
    (proc / "5").mkdir(parents=True)
    (proc / "locks").mkdir()  # a directory where a file should be
    (proc / "5" / "maps").write_bytes(b"\xff\xfe garbage\n" * 3)
    owner = find_owner(str(tmp_path / "proc" / "5" / "maps"), str(proc))
    assert owner.running is None and owner.error
    assert build_holder_map(str(proc)).refs == {}
