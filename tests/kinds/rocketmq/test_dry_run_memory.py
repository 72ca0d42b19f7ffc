"""A dry-run daemon remembers the CommitLog minimum its queue stage acted on, as a real one
does: its later rounds skip the queues while the minimum has not moved (issue 11, goal b)
instead of re-reading every queue every round. Reads are counted by the kind's own reader
(``BinaryReader.reads``: files actually opened), not by mocks."""

from __future__ import annotations

import dataclasses

from retentiond.engine.cleaner import Cleaner
from retentiond.journal.writer import Journal, Origin
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.rocketmq.triggers import hour_of_day
from retentiond.storegen.rocketmq import PRESETS, generate_store, write_config
from tests.engine.test_store_safety import tree

SPEC = dataclasses.replace(PRESETS["daemon-test"], now_ms=1_790_000_000_000)
CLOCK = SPEC.now_ms + 60_000


def _cleaner(tmp_path, *, journal: bool = True):
    store = generate_store(tmp_path / "store", SPEC)
    config = write_config(
        store.root, SPEC, tmp_path / "broker.yaml",
        fileReservedTime=24, deleteWhen=f"{hour_of_day(CLOCK, 'UTC'):02d}",
        diskMaxUsedSpaceRatio=95, deleteFileBatchMax=10,
        deleteCommitLogFilesInterval=0, deleteConsumeQueueFilesInterval=0,
        retentiond={"timezone": "UTC", "journal": {"dir": str(tmp_path / "journal")}},
    )  # fmt: skip
    settings = load_settings(config)
    j = Journal(tmp_path / "journal", Origin("c", "b", "h", str(store.root))) if journal else None
    return store, Cleaner(kind_for(settings), journal=j, clock_ms=lambda: CLOCK)


def test_a_dry_run_second_round_does_not_reread_the_queues(tmp_path):
    store, cleaner = _cleaner(tmp_path)
    kind = cleaner.kind
    before = tree(store.root)

    first = cleaner.run_round(dry_run=True)
    assert first.plan.commitlog.deletions(), "the store must have expired CommitLog files"
    assert first.plan.queues.examined
    assert not first.deleted
    reads_after_first = kind.reader.reads
    assert reads_after_first > 0

    second = cleaner.run_round(dry_run=True)
    assert not second.plan.queues.examined
    assert kind.reader.reads == reads_after_first  # not one queue file opened again
    assert second.plan.queues.min_offset == first.plan.queues.min_offset

    assert tree(store.root) == before  # a dry run changes nothing on disk
    assert not (tmp_path / "journal" / "journal-000000000001.jsonl").stat().st_size


def test_plan_remembers_nothing(tmp_path):
    _, cleaner = _cleaner(tmp_path, journal=False)
    kind = cleaner.kind
    assert cleaner.plan().queues.examined
    assert kind.last_physical_min_offset == 0 and kind.dry_run_min_offset == 0
    assert cleaner.plan().queues.examined  # the second plan examines the queues again


def test_a_real_round_after_dry_ones_still_examines_the_queues(tmp_path):
    """dryRun turned off by a reload: the dry-run memory is no gate for real deletions."""
    _, cleaner = _cleaner(tmp_path)
    cleaner.run_round(dry_run=True)
    real = cleaner.run_round()
    assert real.plan.queues.examined
    assert real.deleted
    assert cleaner.kind.last_physical_min_offset == real.plan.queues.min_offset
