"""`retentiond rescue` on a real small tmpfs (64 MiB) filled to 97 % by real segments
(kafka-python's record builder), as issue 25's acceptance asks:

* with a ``-delete`` dir, a ``-stray`` dir, an orphan partition, a protected topic, a
  compacted one, an internal one and a floor (``rescue.minRetentionMs``):
  ``--target-ratio 0.80 --dry-run`` prints the plan and deletes nothing; the real run reaches
  the target, frees exactly what the dry run said, keeps every partition's active segment,
  the floor and the protected, compacted and internal topics whole, journals every deletion
  with ``"rescue": true``, and leaves a log dir that passes the loadability check of the
  Kafka tests;
* without ``--beyond-retention`` it stops after the configured retention and says how far
  from the target it is (exit 9);
* while another process holds ``.lock`` it deletes nothing and says why (exit 8);
* neither or both of ``--target-ratio``/``--free``, or a RocketMQ config: exit 2.
"""

from __future__ import annotations

import json
import os
import struct
import time
import uuid
from pathlib import Path
from typing import Any

from tests.conftest import Tmpfs, records, run_cli
from tests.e2e.test_kafka_cli import assert_loadable, broker_holding, tree
from tests.kinds.kafka.kafkalog import KafkaLog, segment_bases, v2_batch
from tests.kinds.kafka.leftover_dirs import write_partition_metadata
from tests.kinds.kafka.test_partition_dirs import write_config as _write_config

DAY = 86_400_000
HOUR = 3_600_000
VALUE = b"v" * 32_600  # one record's batch just under 32 KiB: eight pages of tmpfs
SEGMENT_BYTES = 8 * 32_768  # eight records a segment


def write_config(tmp_path: Path, log_dir: Path, **extra: str) -> Path:
    return _write_config(
        tmp_path,
        log_dir,
        **{
            "log.retention.hours": "96",
            "log.segment.delete.delay.ms": "0",
            "retentiond.kafka.removeOrphans": "true",
            "retentiond.kafka.removeStray": "true",
            "retentiond.kafka.rescue.minRetentionMs": str(DAY),
            "retentiond.kafka.rescue.protectTopics": "pay*",
            **extra,
        },
    )


_BATCHES: dict[int, bytes] = {}


def batch(offset: int, ts: int) -> bytes:
    """One record of ``VALUE`` at ``offset``: kafka-python's batch, built once per timestamp
    (its pure-Python CRC is slow) and re-based (the base offset lies outside the CRC)."""
    data = _BATCHES.get(ts)
    if data is None:
        data = _BATCHES[ts] = v2_batch(0, [ts], value=VALUE)
    out = bytearray(data)
    struct.pack_into(">q", out, 0, offset)
    return bytes(out)


def _partition(
    log_dir: Path, topic: str, p: int, now: int, days: float, per_day: int, tid: bytes
) -> KafkaLog:
    log = KafkaLog(log_dir, topic, p, segment_bytes=SEGMENT_BYTES)
    n = max(1, int(days * per_day))
    for i in range(n):
        ts = now - int(days * DAY) + (i * int(days * DAY)) // n
        log.append(batch(log.next_offset, ts - ts % (2 * HOUR)))
    log.write(hw=log.leo)
    write_partition_metadata(log.dir, tid)
    return log


def _leftover(log_dir: Path, name: str, now: int, records_n: int) -> Path:
    log = KafkaLog(log_dir, f"tmp{uuid.uuid4().hex[:8]}", 0, segment_bytes=SEGMENT_BYTES)
    for _ in range(records_n):
        log.append(batch(log.next_offset, now - 10 * DAY - now % HOUR))
    log.write()
    target = log_dir / name
    log.dir.rename(target)
    return target


def build(tmpfs: Tmpfs, now: int) -> tuple[Path, dict[tuple[str, int], KafkaLog], list[Path]]:
    """About 16 % of the disk is leftovers and expired data, the rest within retention:
    0.80 is reached only beyond it."""
    from retentiond.storegen.kafka import KafkaStoreSpec, write_metadata_log

    log_dir = tmpfs.path / "kafka-logs"
    log_dir.mkdir()
    ids = {t: uuid.uuid4().bytes for t in ("orders", "payments", "audit-log", "bulk")}
    ids["__consumer_offsets"] = uuid.uuid4().bytes
    logs: dict[tuple[str, int], KafkaLog] = {}
    for p in range(2):  # 5 days, 32 records a day: the oldest day past retention (96 h)
        logs[("orders", p)] = _partition(log_dir, "orders", p, now, 5, 32, ids["orders"])
    logs[("payments", 0)] = _partition(log_dir, "payments", 0, now, 3.5, 32, ids["payments"])
    logs[("audit-log", 0)] = _partition(log_dir, "audit-log", 0, now, 3.5, 16, ids["audit-log"])
    logs[("__consumer_offsets", 0)] = _partition(
        log_dir, "__consumer_offsets", 0, now, 3.5, 16, ids["__consumer_offsets"]
    )
    leftovers = [
        _leftover(log_dir, f"gone-0.{uuid.uuid4().hex}-delete", now, 24),
        _leftover(log_dir, f"moved-1.{uuid.uuid4().hex}-stray", now, 24),
        _leftover(log_dir, "forgotten-0", now, 24),
    ]
    write_partition_metadata(leftovers[2], uuid.uuid4().bytes)
    write_metadata_log(log_dir / "__cluster_metadata-0", KafkaStoreSpec(), ids)
    (log_dir / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=rescue\n")
    # the rest, to 97 %: two days of a busy topic
    used, total = tmpfs.usage()
    per_record = 8 * 4096 + 512  # the batch's pages, its share of the segment's other files
    n = int((0.97 * total - used) / per_record)
    logs[("bulk", 0)] = _partition(log_dir, "bulk", 0, now, 2, n // 2, ids["bulk"])
    return log_dir, logs, leftovers


def rescue(config: Path, *args: str) -> Any:
    return run_cli("rescue", "--config", str(config), *args)


def ratio(tmpfs: Tmpfs) -> float:
    used, total = tmpfs.usage()
    return used / total


def test_rescue_reaches_the_target_and_frees_what_the_dry_run_said(
    tmpfs: Tmpfs, tmp_path: Path
) -> None:
    now = int(time.time() * 1000)
    log_dir, logs, leftovers = build(tmpfs, now)
    assert ratio(tmpfs) > 0.95, ratio(tmpfs)
    config = write_config(tmp_path, log_dir)
    before = tree(log_dir)

    # the dry run: the plan, nothing deleted
    dry = rescue(config, "--target-ratio", "0.80", "--beyond-retention", "--dry-run")
    assert dry.code == 0, dry.out + dry.err
    assert "would delete" in dry.out and "dry run: nothing was deleted" in dry.out
    for step in ("leftovers:", "configured retention:", "beyond retention:"):
        assert step in dry.out, dry.out
    assert "the followers will advance their log start offset" in dry.out
    assert tree(log_dir) == before
    dry_doc = json.loads(
        rescue(config, "--target-ratio", "0.80", "--beyond-retention", "--dry-run", "--json").out
    )
    [fs] = dry_doc["filesystems"]
    planned = {i["path"] for s in fs["steps"] for i in s["items"]}
    assert planned >= {str(p) for p in leftovers}

    # the real run
    used_before = tmpfs.usage()[0]
    real = rescue(config, "--target-ratio", "0.80", "--beyond-retention", "--json")
    assert real.code == 0, real.out + real.err
    doc = json.loads(real.out)
    [got] = doc["filesystems"]
    done = {i["path"] for s in got["steps"] for i in s["items"] if i["deleted"]}
    assert done == planned
    assert got["freed_bytes"] == fs["freed_bytes"]
    assert ratio(tmpfs) <= 0.80 and got["ratio_after"] <= 0.80
    # the space really went: what was counted, less the pages of rewritten checkpoints
    assert used_before - tmpfs.usage()[0] >= got["freed_bytes"] - 16 * 4096

    for p in leftovers:
        assert not p.exists(), p
    for (topic, p), log in logs.items():
        bases = segment_bases(log.dir)
        assert bases[-1] == log.segments[-1].base, (topic, p)  # the active segment stays
        if topic in ("payments", "audit-log", "__consumer_offsets"):
            assert bases == [s.base for s in log.segments], topic  # never beyond retention
        # the floor: no segment holding a record of the last day went
        for seg in log.segments:
            if seg.max_ts >= now - DAY:
                assert seg.base in bases, (topic, p, seg.base)

    journal = tmp_path / "journal"
    deletions = records(journal, "deletion")
    assert deletions and all(r["rescue"] is True for r in deletions)
    reasons = {r["reason"] for r in deletions}
    assert {"rescue_beyond_retention", "retention_ms_breach"} <= reasons
    assert {"delete_dir_leftover", "stray_partition", "orphan_partition"} <= reasons
    assert assert_loadable(log_dir, plan_json(config)) is None


def plan_json(config: Path) -> dict[str, Any]:
    result = run_cli("plan", "--json", "--config", str(config))
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_without_beyond_retention_it_stops_and_says_how_far(tmpfs: Tmpfs, tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    log_dir, logs, _ = build(tmpfs, now)
    config = write_config(tmp_path, log_dir)
    out = rescue(config, "--target-ratio", "0.80")
    assert out.code == 9, out.out + out.err
    assert "target NOT reached" in out.out and "short" in out.out
    assert "--beyond-retention" in out.out and "beyond retention:" not in out.out
    assert ratio(tmpfs) > 0.80
    # the configured retention did run: the oldest day of orders is gone
    assert segment_bases(logs[("orders", 0)].dir)[0] > 0
    deletions = records(tmp_path / "journal", "deletion")
    assert deletions and all(r["reason"] != "rescue_beyond_retention" for r in deletions)


def test_retentiond_dry_run_in_the_file_makes_a_rescue_a_dry_run(
    tmpfs: Tmpfs, tmp_path: Path
) -> None:
    now = int(time.time() * 1000)
    log_dir, _, _ = build(tmpfs, now)
    config = write_config(tmp_path, log_dir, **{"retentiond.dryRun": "true"})
    before = tree(log_dir)
    out = rescue(config, "--target-ratio", "0.80", "--beyond-retention")
    assert out.code == 0, out.out + out.err
    assert tree(log_dir) == before
    assert not records(tmp_path / "journal", "intent")


def test_a_held_lock_means_nothing_is_deleted(tmpfs: Tmpfs, tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    log_dir, _, _ = build(tmpfs, now)
    config = write_config(tmp_path, log_dir)
    before = tree(log_dir)
    with broker_holding(log_dir):
        for args in (("--beyond-retention",), ("--dry-run",)):
            out = rescue(config, "--target-ratio", "0.80", *args)
            assert out.code == 8, out.out + out.err
            assert "holds its .lock" in out.err and "nothing was deleted" in out.err
    assert tree(log_dir) == before
    assert not records(tmp_path / "journal", "intent")


def test_usage_errors(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "meta.properties").write_text("version=1\nnode.id=1\n")
    config = write_config(tmp_path, log_dir)
    assert rescue(config).code == 2
    assert rescue(config, "--target-ratio", "0.8", "--free", "1GiB").code == 2
    assert rescue(config, "--target-ratio", "80").code == 2
    assert rescue(config, "--free", "lots").code == 2
    rocketmq = tmp_path / "broker.conf"
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    (store / "consumequeue").mkdir()
    rocketmq.write_text(
        f"brokerName=b\nstorePathRootDir={store}\nretentiond.journal.dir={tmp_path / 'j'}\n"
    )
    out = rescue(rocketmq, "--free", "1GiB")
    assert out.code == 2, out.out + out.err
    assert "not available" in out.err
    assert not os.path.exists(tmp_path / "j" / "journal-000000000001.jsonl")
