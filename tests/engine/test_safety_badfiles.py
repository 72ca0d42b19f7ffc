"""Bad files on disk: truncated, empty or garbage ConsumeQueue and index files, zero-length
CommitLog files, names that overflow. Each is reported once (not every round) and skipped; no
round crashes and nothing is deleted on a value that could not be read."""

from __future__ import annotations

import os
from pathlib import Path

from structlog.testing import capture_logs

from retentiond.reasons import Kind, Reason
from tests.conftest import expired_spec, make_store

SPEC = expired_spec(queues_per_topic=3)


def cleaner_for(tmp: Path, **keys):
    made = make_store(tmp, SPEC, **keys)
    return made.generated, made.cleaner()


def reported(logs: list[dict]) -> list[str]:
    return [e["file"] for e in logs if e["event"].startswith("skipped: bad or foreign file")]


def test_bad_queue_and_index_files_are_skipped_and_reported_once(tmp_path: Path) -> None:
    store, cleaner = cleaner_for(tmp_path, deleteFileBatchMax=1)
    queues = sorted(store.queues.items())
    empty = queues[0][1][0].path
    empty.write_bytes(b"")  # truncated to nothing
    garbage = queues[1][1][0].path
    garbage.write_bytes(os.urandom(100))  # wrong size and garbage
    zero_tail = queues[2][1][0].path
    data = bytearray(zero_tail.read_bytes())
    data[-20:] = bytes(20)  # full size, but its last unit was never written
    zero_tail.write_bytes(bytes(data))
    index = store.index_files[0].path
    index.write_bytes(b"\x01" * 10)  # a truncated header
    bad = {empty, garbage, zero_tail, index}

    with capture_logs() as logs:
        results = [cleaner.run_round() for _ in range(4)]
    for r in results:
        assert not {Path(o.decision.path) for o in r.outcomes} & bad
    assert sorted(reported(logs)) == sorted(map(str, bad)), "each reported exactly once"
    assert all(p.exists() for p in bad)
    # The CommitLog moved on and the other files of the store were cleaned as usual.
    assert sum(1 for r in results for o in r.deleted if o.decision.kind is Kind.COMMITLOG) == 4
    stops = {
        Path(q.stop.path): q.stop.reason
        for r in results
        for q in r.plan.queues.queues
        if q.stop is not None
    }
    assert {stops[p] for p in (empty, garbage, zero_tail)} == {Reason.UNREADABLE}
    assert cleaner.fault_counts()["bad_files"] == 4


def test_zero_length_and_overflowing_commitlog_names(tmp_path: Path) -> None:
    store, cleaner = cleaner_for(tmp_path, deleteFileBatchMax=10)
    data = [f.path for f in store.data_files]
    data[3].write_bytes(b"")  # a zero-length CommitLog file in the middle
    os.utime(data[3], (0, 0))
    cl = store.commitlog_dirs[0]
    overflow = cl / "99999999999999999999"  # > Long.MAX_VALUE: not a store name
    overflow.write_bytes(b"x")
    odd = cl / "0000000000000000000x"
    odd.write_bytes(b"x")
    for p in (overflow, odd):
        os.utime(p, (0, 0))

    with capture_logs() as logs:
        results = [cleaner.run_round() for _ in range(3)]
    gone = [Path(o.decision.path) for r in results for o in r.deleted]
    gone_cl = [p for p in gone if p.parent == cl]
    assert gone_cl == data[:3], "the pass stops at the bad file and never deletes past it"
    decision = next(d for d in results[-1].plan.commitlog.decisions if Path(d.path) == data[3])
    assert decision.reason is Reason.BAD_SIZE and not decision.delete
    assert sorted(reported(logs)) == sorted(map(str, [data[3], overflow, odd]))
    assert data[3].exists() and overflow.exists() and odd.exists()
