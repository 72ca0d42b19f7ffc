"""Property test over random real stores and clocks: the safety invariants always hold, and a
dry run changes nothing on disk. Expectations come from the generator's own summary of what it
wrote, not from reading the store back with the code under test."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from retentiond.journal.writer import Journal, Origin
from retentiond.kinds.rocketmq.triggers import hour_of_day
from retentiond.storegen.rocketmq import StoreSpec
from tests.conftest import make_store, records
from tests.engine.test_store_safety import tree

HOUR_MS = 3_600_000


@st.composite
def scenarios(draw):
    cl_size = draw(st.sampled_from([512, 1024, 2048]))
    spec = StoreSpec(
        commitlog_file_size=cl_size,
        cq_file_size=draw(st.sampled_from([40, 60, 100, 140])),
        max_hash_slot_num=16,
        max_index_num=draw(st.integers(3, 9)),
        messages=draw(st.integers(1, 60)),
        message_size=draw(st.integers(100, 300)),
        topics=draw(st.integers(1, 2)),
        queues_per_topic=draw(st.integers(1, 3)),
        oldest_age_hours=draw(st.floats(0, 12)),
        newest_age_hours=0.0,
        preallocate=draw(st.booleans()),
        commitlog_paths=draw(st.sampled_from([(), ("a", "b")])),
        now_ms=1_790_000_000_000,
    )
    return dict(
        spec=spec,
        reserved=draw(st.integers(0, 8)),
        batch=draw(st.integers(1, 12)),
        clock_ms=spec.now_ms + draw(st.integers(0, 10 * HOUR_MS)),
        in_hour=draw(st.booleans()),
        manual=draw(st.booleans()),
        dry_run=draw(st.booleans()),
        rounds=draw(st.integers(1, 3)),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold_on_random_stores(sc):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        spec = sc["spec"]
        hour = hour_of_day(sc["clock_ms"], "UTC")
        delete_when = f"{hour:02d}" if sc["in_hour"] else f"{(hour + 12) % 24:02d}"
        made = make_store(
            tmp, spec,
            fileReservedTime=sc["reserved"], deleteFileBatchMax=sc["batch"],
            deleteWhen=delete_when, diskMaxUsedSpaceRatio=95,
            retentiond={"timezone": "UTC"},
        )  # fmt: skip
        store = made.generated
        journal = Journal(made.journal, Origin("c", "b", "h", str(store.root)))
        cleaner = made.cleaner(journal, clock_ms=lambda: sc["clock_ms"])
        before = tree(store.root)
        for _ in range(sc["rounds"]):
            result = cleaner.run_round(manual=sc["manual"], dry_run=sc["dry_run"])
            assert not result.failed
        if sc["dry_run"]:
            assert tree(store.root) == before
            assert not (tmp / "journal" / "journal-000000000001.jsonl").stat().st_size
            return
        check_invariants(store, sc)
        deleted_records = records(tmp / "journal", "deletion")
        existing = {str(p) for p in _all_files(store)}
        gone = {r["file"] for r in deleted_records}
        assert not gone & existing
        assert len(gone) == len(deleted_records)  # exactly one record per deleted file


def _all_files(store):
    for f in store.commitlog_files:
        if f.path.exists():
            yield f.path
    for f in store.iter_cq_files():
        if f.path.exists():
            yield f.path
    for f in store.index_files:
        if f.path.exists():
            yield f.path


def check_invariants(store, sc):
    spec = store.spec
    data = list(store.data_files)
    present = [f.path.exists() for f in data]
    # CommitLog: a suffix survives, including the newest data file and the pre-allocated one
    assert present == sorted(present)
    assert present[-1]
    for f in store.commitlog_files:
        if f.preallocated:
            assert f.path.exists()
    deleted = [f for f, p in zip(data, present, strict=True) if not p]
    event(f"commitlog files deleted: {'some' if deleted else 'none'}")
    rounds = sc["rounds"]
    assert len(deleted) <= sc["batch"] * rounds
    fired = sc["in_hour"] or sc["manual"]
    if not fired:
        assert not deleted
    for f in deleted:
        assert sc["clock_ms"] >= f.mtime_ms + sc["reserved"] * HOUR_MS
    min_offset = next(f.start_offset for f, p in zip(data, present, strict=True) if p)
    # ConsumeQueue: per queue a suffix survives; the newest file always; deleted ones lay
    # wholly below the CommitLog minimum, and the first survivor (unless newest) does not
    for files in store.queues.values():
        alive = [f.path.exists() for f in files]
        assert alive == sorted(alive) and alive[-1]
        for f, a in zip(files, alive, strict=True):
            if not a:
                event("a consume-queue file was deleted")
                assert f.last_commitlog_offset < min_offset
        first = alive.index(True)
        if first < len(files) - 1 and deleted:
            assert files[first].last_commitlog_offset >= min_offset
    if spec.index and store.index_files:
        alive = [f.path.exists() for f in store.index_files]
        assert alive == sorted(alive) and alive[-1]
        for f, a in zip(store.index_files, alive, strict=True):
            if not a:
                assert f.header.end_phy_offset < min_offset
        first = alive.index(True)
        if first < len(alive) - 1 and deleted:
            assert store.index_files[first].header.end_phy_offset >= min_offset
    for root, _, names in os.walk(store.root):
        for n in names:
            assert not os.path.islink(os.path.join(root, n))
