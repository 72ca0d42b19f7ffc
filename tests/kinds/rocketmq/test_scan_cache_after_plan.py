"""A daemon's first start lists every queue directory in its start-up scan (a ``plan``, which
writes no scan cache file); its first round then lists nothing and, on a store whose queues
hold one file each (light message queues: ``%LMQ%<name>/0/``), reads nothing either. That
round still writes the file, with every queue, so that a restart finds them."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from retentiond.engine.cleaner import Cleaner
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.rocketmq import scancache
from retentiond.storegen.rocketmq import PRESETS, generate_store, write_config

SPEC = dataclasses.replace(
    PRESETS["bench-lmq"], topics=40, messages=60, commitlog_file_size=64 * 1024,
    message_size=4000, max_hash_slot_num=64, max_index_num=64, sparse=False,
)  # fmt: skip


def _age(root: Path) -> None:
    """Directories last changed long ago: their listings are remembered (never a racy one)."""
    old = time.time() - 3600
    for d, _, _ in os.walk(root):
        os.utime(d, (old, old))


def test_the_first_round_after_a_plan_writes_every_listing(tmp_path: Path) -> None:
    store = generate_store(tmp_path / "store", SPEC)
    assert all(name.startswith("%LMQ%") for name, _ in store.queues)
    assert all(len(files) == 1 for files in store.queues.values())
    _age(store.root / "consumequeue")
    config = write_config(
        store.root, SPEC, tmp_path / "broker.yaml", fileReservedTime=1,
        deleteWhen=";".join(f"{h:02d}" for h in range(24)),
        retentiond={"journal": {"dir": str(tmp_path / "journal")}},
    )  # fmt: skip
    (tmp_path / "journal").mkdir()
    settings = load_settings(config)
    cleaner = Cleaner(kind_for(settings))
    assert cleaner.plan().queues.examined  # the start-up scan: lists every queue directory
    path = cleaner.kind._scan_cache_path()
    assert path is not None and not path.exists()  # a plan writes no cache file
    listed = cleaner.kind.lister.listed
    first = cleaner.run_round(dry_run=True)
    assert first.plan.queues.examined
    assert cleaner.kind.lister.listed == 0 < listed  # nothing listed again
    assert cleaner.kind.reader.reads == 0  # one file per queue: nothing to read
    assert path.exists()
    got = scancache.load(
        path, str(settings.store.consumequeue_dir), settings.store.mapped_file_size_consumequeue
    )
    assert got is not None
    queues, _, parents = got
    assert len(queues) == len(store.queues)
    assert len(parents) == 1 + SPEC.topics  # consumequeue/ and every topic directory

    restarted = Cleaner(kind_for(settings))
    again = restarted.run_round(dry_run=True)
    assert restarted.kind.cache_loaded_queues == len(store.queues)
    assert restarted.kind.lister.listed == 0
    assert again.plan.queues.queue_count == first.plan.queues.queue_count
