"""Forced deletions under real disk pressure: a store on a small tmpfs filled past
diskSpaceCleanForciblyRatio (needs root; CI runs as root)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from retentiond.engine.cleaner import Cleaner
from retentiond.journal.writer import Journal, Origin
from retentiond.kinds import kind_for
from retentiond.observe.metrics import RetentionMetrics
from retentiond.storegen.rocketmq import StoreSpec
from tests.conftest import Tmpfs, make_store, records, rocketmq_ratio

SPEC = StoreSpec(
    commitlog_file_size=64 * 1024,
    cq_file_size=30 * 20,
    max_hash_slot_num=100,
    max_index_num=256,
    messages=20 * 63 - 30,
    message_size=1024,
    topics=1,
    queues_per_topic=2,
    oldest_age_hours=10.0,
    newest_age_hours=0.0,
)


def test_forced_deletions_and_the_disk_state_under_pressure(tmpfs: Tmpfs, tmp_path: Path) -> None:
    made = make_store(
        tmp_path,
        SPEC,
        store_dir=tmpfs.path / "store",
        brokerName="b",
        brokerClusterName="c",
        fileReservedTime=1000,  # nothing is expired: every deletion is forced
        deleteWhen="04",
        deleteFileBatchMax=3,
    )
    store, settings = made.generated, made.settings
    tmpfs.fill_to(0.88)
    registry = CollectorRegistry()
    metrics = RetentionMetrics(settings, registry=registry)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"cluster": "c", "broker": "b", **labels})

    expected = rocketmq_ratio(tmpfs.path)
    path = str(settings.store.store_path_commitlog[0])
    assert value("retentiond_disk_used_ratio", kind="commitlog", path=path) == expected
    assert value("retentiond_disk_state", state="clean_forcibly") == 1

    journal = Journal(tmp_path / "journal", Origin("c", "b", "h", str(store.root)))
    cleaner = Cleaner(kind_for(settings), journal=journal)
    metrics.watch(cleaner)
    result = cleaner.run_round()
    metrics.round_done(result)
    journal.close()

    forced = [
        r
        for r in records(tmp_path / "journal", "deletion")
        if r["reason"] == "forced_over_clean_forcibly_ratio"
    ]
    assert len(forced) == 3
    assert all(r["forced"] for r in forced)
    assert value("retentiond_forced_deletions_total") == 3
    reason = "forced_over_clean_forcibly_ratio"
    assert value("retentiond_deleted_files_total", kind="commitlog", reason=reason) == 3
    assert value("retentiond_deleted_bytes_total", kind="commitlog", reason=reason) == sum(
        r["bytes"] for r in forced
    )
    assert value("retentiond_deleted_files_total", kind="commitlog", reason="expired") == 0
