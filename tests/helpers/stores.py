"""Generated stores, their configs, settings and journals: the set-up most tests share.

``make_store`` generates a store from a storegen spec and writes its broker config with the
keys that make a round clean at once (every hour is a delete hour, no pause between files, the
journal in a directory of the test's own), overridden by the test's keys. The ``retentiond``
section is merged one level deep, so a test can add ``initialDelay`` and keep the journal.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from retentiond.config.settings import Settings
from retentiond.engine.cleaner import Cleaner
from retentiond.journal.writer import Journal, Origin, read_records
from retentiond.kinds import kind_for, load_settings
from retentiond.storegen.rocketmq import GeneratedStore, StoreSpec, generate_store, write_config

ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))
HOUR_MS = 3_600_000
ORIGIN = Origin("c", "b", "h", "s")

# 12 CommitLog files of 64 KiB (63 messages of 1 KiB each) aged 100 h .. 90 h: all older than
# fileReservedTime=72, so everything but the newest data file may go. Small queues and index.
EXPIRED = StoreSpec(
    commitlog_file_size=64 * 1024,
    cq_file_size=8 * 20,
    max_hash_slot_num=16,
    max_index_num=16,
    messages=12 * 63 - 20,
    message_size=1024,
    topics=1,
    queues_per_topic=2,
    oldest_age_hours=100.0,
    newest_age_hours=90.0,
)


def expired_spec(files: int = 12, **changes: Any) -> StoreSpec:
    """``EXPIRED`` with ``files`` CommitLog files (and any other field changed)."""
    return replace(EXPIRED, messages=files * 63 - 20, **changes)


# What makes a round clean now: every hour a delete hour, 72 h reserved, no pause between files.
CLEAN_NOW: dict[str, Any] = {
    "deleteWhen": ALL_HOURS,
    "fileReservedTime": 72,
    "deleteCommitLogFilesInterval": 0,
    "deleteConsumeQueueFilesInterval": 0,
    # A test daemon binds a free port (the log names it; Daemon.metrics_url reads it back),
    # never the default 9465: two runs on one machine must not meet there.
    # Every round in full: the tests count round records (docs/journal.md, round_summary).
    "retentiond": {"metrics": {"listen": "127.0.0.1:0"}, "journal": {"roundSummaryInterval": 0}},
}


def config_keys(
    defaults: Mapping[str, Any], keys: Mapping[str, Any], journal: Path | None = None
) -> dict[str, Any]:
    """``defaults`` overridden by ``keys``; the ``retentiond`` sections merged one level deep,
    with the journal directory (if given) under the test's own ``retentiond`` keys."""
    daemon = {**defaults.get("retentiond", {})}
    if journal is not None:
        daemon["journal"] = {**daemon.get("journal", {}), "dir": str(journal)}
    daemon.update(keys.get("retentiond", {}))
    merged = {**defaults, **keys}
    merged.pop("retentiond", None)
    if daemon:
        merged["retentiond"] = daemon
    return merged


@dataclass
class Store:
    """A generated store, its config file, its journal directory, and its settings (loaded
    when first asked for, so a test can write a config the loader refuses)."""

    generated: GeneratedStore
    spec: StoreSpec
    config: Path
    journal: Path

    @cached_property
    def settings(self) -> Settings:
        return load_settings(self.config)

    @property
    def root(self) -> Path:
        return self.generated.root

    def rewrite(self, path: Path | None = None, **keys: Any) -> Path:
        """Write the config again (to ``path``, or over the old one) with exactly ``keys``."""
        return write_config(self.root, self.spec, path or self.config, **keys)

    def cleaner(self, journal: Journal | None = None, **kwargs: Any) -> Cleaner:
        """A Cleaner on these settings, writing to ``journal`` (default: this store's, with
        ``ORIGIN``)."""
        return Cleaner(
            kind_for(self.settings),
            journal=journal if journal is not None else Journal(self.journal, ORIGIN),
            **kwargs,
        )


def make_store(
    tmp: Path,
    spec: StoreSpec = EXPIRED,
    *,
    store_dir: Path | None = None,
    config: Path | None = None,
    journal: Path | None = None,
    defaults: Mapping[str, Any] = CLEAN_NOW,
    **keys: Any,
) -> Store:
    """Generate ``spec`` at ``store_dir`` (default ``tmp/store``), write its config at
    ``config`` (default ``tmp/broker.yaml``) from ``defaults`` and ``keys``, with its journal
    at ``journal`` (default ``tmp/journal``), the settings loaded when first used."""
    generated = generate_store(store_dir or tmp / "store", spec)
    journal = journal or tmp / "journal"
    path = write_config(
        generated.root,
        spec,
        config or tmp / "broker.yaml",
        **config_keys(defaults, keys, journal),
    )
    return Store(generated, spec, path, journal)


def records(journal: Path, *types: str) -> list[dict[str, Any]]:
    """The journal's records (of ``types``, if any are given); none if it does not exist yet."""
    if not journal.exists():
        return []
    return [r for r in read_records(journal) if not types or r.get("type") in types]


def by_type(journal: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in read_records(journal):
        out.setdefault(r["type"], []).append(r)
    return out


def rocketmq_ratio(path: str | Path) -> float:
    """UtilAll.getDiskPartitionSpaceUsedPercent, written out independently of the engine's
    disk module: what the disk ratios must equal."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    used = total - st.f_bfree * st.f_frsize
    avail = st.f_bavail * st.f_frsize
    return math.ceil(100 * used / (used + avail)) / 100
