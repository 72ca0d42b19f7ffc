"""Forced deletions under real disk pressure: a store on a small tmpfs filled past
diskSpaceCleanForciblyRatio (needs root; CI runs as root)."""

from __future__ import annotations

import math
import os
from pathlib import Path

from prometheus_client import CollectorRegistry

from retentiond.config.loader import load_settings
from retentiond.engine.cleaner import Cleaner
from retentiond.journal.writer import Journal, Origin, read_records
from retentiond.kinds import kind_for
from retentiond.observe.metrics import RetentionMetrics
from retentiond.storegen.rocketmq import StoreSpec, generate_store, write_config
from tests.conftest import Tmpfs

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
    store = generate_store(tmpfs.path / "store", SPEC)
    config = write_config(
        store.root,
        SPEC,
        tmp_path / "broker.yaml",
        brokerName="b",
        brokerClusterName="c",
        fileReservedTime=1000,  # nothing is expired: every deletion is forced
        deleteWhen="04",
        deleteFileBatchMax=3,
        deleteCommitLogFilesInterval=0,
        deleteConsumeQueueFilesInterval=0,
    )
    settings = load_settings(config)
    tmpfs.fill_to(0.88)
    registry = CollectorRegistry()
    metrics = RetentionMetrics(settings, registry=registry)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"cluster": "c", "broker": "b", **labels})

    st = os.statvfs(tmpfs.path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    expected = math.ceil(100 * used / (used + st.f_bavail * st.f_frsize)) / 100
    path = str(settings.store_path_commitlog[0])
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
        for r in read_records(tmp_path / "journal")
        if r.get("type") == "deletion" and r["reason"] == "forced_over_clean_forcibly_ratio"
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
