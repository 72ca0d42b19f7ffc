"""Kafka log dirs through the real command line, as separate processes (issue 10's acceptance):

* the live broker: while another process holds ``<logdir>/.lock`` the way Kafka does
  (``FileChannel.tryLock``: a POSIX lock on the whole file), ``once`` deletes nothing, exits 0
  and prints the plan, and ``plan`` shows every segment it would delete with
  ``broker_running`` as what stopped it; with two log dirs only the held one is plan-only;
* an offline ``once`` with the broker stopped leaves a log dir Kafka would load: the segments
  contiguous (read back with kafka-python's decoder, not ours), the checkpoint files parse and
  give the new log start offset, no orphan index or snapshot file, nothing half-written;
* the journal's Kafka records carry topic, partition, base offset and reason.

The ``.log`` batches are written by kafka-python's record-batch builder (``tests/kinds/kafka/
kafkalog.py``); the clock is the real one, since the CLI reads it.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kafka.record import MemoryRecords

from tests.conftest import records, run_cli
from tests.kinds.kafka.kafkalog import KafkaLog, leader_epochs, read_checkpoint, segment_bases

DAY = 86_400_000
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
# The stand-in broker: Kafka's FileLock is FileChannel.tryLock(), an fcntl lock on the whole
# file, held for the broker's life.
HOLDER = (
    "import fcntl, os, sys\n"
    "fds = []\n"
    "how = fcntl.flock if sys.argv[1] == 'flock' else fcntl.lockf\n"
    "for path in sys.argv[2:]:\n"
    "    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)\n"
    "    how(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "    fds.append(fd)\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)


@contextmanager
def broker_holding(*log_dirs: Path, how: str = "lockf") -> Iterator[subprocess.Popen[str]]:
    """A process holding ``.lock`` in each of ``log_dirs`` until the block ends: with a POSIX
    lock as Kafka does (``lockf``), or a BSD ``flock`` as another tool might."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, how, *(str(d / ".lock") for d in log_dirs)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def build_log_dir(log_dir: Path, now: int) -> dict[tuple[str, int], KafkaLog]:
    """Three topics as a broker leaves them after a clean shutdown: ``orders`` (two partitions,
    ten days of data, 7-day retention), ``fresh`` (today only) and ``mystery`` (no config
    anywhere: never deleted from)."""
    logs: dict[tuple[str, int], KafkaLog] = {}
    for topic, partition, days in (("orders", 0, 10), ("orders", 1, 10), ("fresh", 0, 0)):
        log = KafkaLog(
            log_dir,
            topic,
            partition,
            segment_bytes=5 * 72,
            epochs=[(0, 0), (2, 12)],
        )
        for i in range(30):
            ts = now - days * DAY + i * 1000 if days else now - 60_000 + i
            log.append_records(1, ts)
        log.write(hw=log.leo)
        logs[(topic, partition)] = log
    mystery = KafkaLog(log_dir, "mystery", 0, segment_bytes=5 * 72)
    mystery.append_records(30, now - 30 * DAY)
    mystery.write(hw=mystery.leo)
    logs[("mystery", 0)] = mystery
    (log_dir / "meta.properties").write_text("version=1\nnode.id=3\ncluster.id=kafkawire-test\n")
    return logs


def write_config(tmp_path: Path, log_dirs: list[Path], **extra: str) -> Path:
    overrides = tmp_path / "topics.yaml"
    overrides.write_text("orders: {retention.ms: 604800000}\nfresh: {}\n")
    lines = [
        "process.roles=broker",
        "node.id=3",
        f"log.dirs={','.join(str(d) for d in log_dirs)}",
        "log.retention.hours=168",
        "log.retention.check.interval.ms=1000",
        f"retentiond.kafka.topicOverrides={overrides}",
        f"retentiond.journal.dir={tmp_path / 'journal'}",
        f"retentiond.controlSocket={tmp_path / 'control.sock'}",
        "retentiond.metrics.listen=127.0.0.1:0",
        "retentiond.initialDelay=0",
        *(f"{k.replace('_', '.')}={v}" for k, v in extra.items()),
    ]
    path = tmp_path / "server.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


def tree(root: Path) -> dict[str, tuple[int, int, bytes | None]]:
    """Every file under ``root`` with its size, mtime and (small files) its bytes."""
    out: dict[str, tuple[int, int, bytes | None]] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != ".lock":
            st = p.stat()
            small = p.read_bytes() if st.st_size < 4096 else None
            out[str(p)] = (st.st_size, st.st_mtime_ns, small)
    return out


def plan_json(config: Path) -> dict[str, Any]:
    result = run_cli("plan", "--json", "--config", str(config))
    assert result.code == 0, result.err
    return json.loads(result.out)


def segments(doc: dict[str, Any], log_dir: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    """(topic, partition, base offset) → the plan's entry for that segment, in one log dir."""
    [ld] = [d for d in doc["log_dirs"] if d["path"] == str(log_dir)]
    return {
        (p["topic"], p["partition"], s["start_offset"]): s
        for p in ld["partitions"]
        for s in p["segments"]
    }


def test_live_broker_plan_only(tmp_path: Path) -> None:
    log_dir = tmp_path / "kafka-logs"
    build_log_dir(log_dir, int(time.time() * 1000))
    config = write_config(tmp_path, [log_dir])
    free = segments(plan_json(config), log_dir)
    would_go = {k: s for k, s in free.items() if s["verdict"] == "delete"}
    assert {k[:2] for k in would_go} == {("orders", 0), ("orders", 1)}, would_go
    assert all(s["reason"] == "retention_ms_breach" for s in would_go.values())
    assert {s["reason"] for k, s in free.items() if k[0] == "mystery"} == {"unknown_topic_config"}

    before = tree(log_dir)
    with broker_holding(log_dir):
        # plan: every segment it would delete, kept with broker_running as the reason
        doc = plan_json(config)
        [ld] = doc["log_dirs"]
        assert ld["plan_only"] is True
        held = segments(doc, log_dir)
        for key in would_go:
            assert held[key]["verdict"] == "keep", key
            assert held[key]["reason"] == "broker_running", key
            assert held[key]["detail"] == "would go: retention_ms_breach", key
        assert not [s for s in held.values() if s["verdict"] == "delete"]
        text = run_cli("plan", "--config", str(config))
        assert text.code == 0, text.err
        assert "plan-only" in text.out and "broker_running" in text.out

        # once: deletes nothing, exits 0, prints the plan
        once = run_cli("once", "--config", str(config))
        assert once.code == 0, once.err
        assert "broker_running (would go: retention_ms_breach)" in once.out
        assert f"plan-only: {log_dir}" in once.out
        assert "deleted:" not in once.out
        assert tree(log_dir) == before

    journal = tmp_path / "journal"
    assert not records(journal, "intent", "deletion")
    [rnd] = records(journal, "round")
    assert rnd["plan_only_log_dirs"] == [str(log_dir)]
    assert rnd["owner_running"] is True  # the holder, not our own hold of the lock
    assert rnd["reasons"]["keep:broker_running"] == len(would_go)


@pytest.mark.parametrize("how", ["lockf", "flock"])
def test_two_log_dirs_only_the_held_one_is_plan_only(tmp_path: Path, how: str) -> None:
    now = int(time.time() * 1000)
    a, b = tmp_path / "a", tmp_path / "b"
    build_log_dir(a, now)
    build_log_dir(b, now)
    config = write_config(tmp_path, [a, b])
    before_a = tree(a)
    with broker_holding(a, how=how):
        once = run_cli("once", "--json", "--config", str(config))
    assert once.code == 0, once.err
    doc = json.loads(once.out)
    assert [d["plan_only"] for d in doc["log_dirs"]] == [True, False]
    assert tree(a) == before_a
    assert segment_bases(b / "orders-0") == [30] and segment_bases(b / "orders-1") == [30]
    deleted = records(tmp_path / "journal", "deletion")
    assert deleted and all(r["file"].startswith(f"{b}/") for r in deleted)


def _batches(path: Path) -> Iterator[tuple[int, int]]:
    """(base offset, last offset) of each batch, decoded by kafka-python."""
    recs = MemoryRecords(path.read_bytes())
    while (batch := recs.next_batch()) is not None:
        assert batch.validate_crc()
        yield batch.base_offset, batch.base_offset + batch.last_offset_delta


def assert_loadable(log_dir: Path, plan: dict[str, Any]) -> None:
    """What Kafka's LogLoader needs of the dir, checked with code that is not ours."""
    lso_file = read_checkpoint(log_dir / "log-start-offset-checkpoint")
    hws = read_checkpoint(log_dir / "replication-offset-checkpoint")
    read_checkpoint(log_dir / "recovery-point-offset-checkpoint")
    [ld] = plan["log_dirs"]
    for part in ld["partitions"]:
        tp = (part["topic"], part["partition"])
        pdir = log_dir / f"{tp[0]}-{tp[1]}"
        if tp[0] == "__cluster_metadata" or not pdir.is_dir():
            continue
        bases = segment_bases(pdir)
        assert bases, pdir
        # contiguous: each segment starts where the previous one's last batch ended
        ranges = []
        for base in bases:
            batches = list(_batches(pdir / f"{base:020d}.log"))
            if batches:
                assert batches[0][0] == base, (pdir, base)
                for (_, last), (nxt, _) in itertools.pairwise(batches):
                    assert nxt == last + 1, (pdir, base)
            ranges.append((base, batches[-1][1] + 1 if batches else base))
        for (_, end), (nxt, _) in itertools.pairwise(ranges):
            assert end == nxt, (pdir, ranges)
        # the log start offset Kafka will compute is the plan's new one
        lso = max(lso_file.get(tp, 0), bases[0])
        assert lso == part["new_log_start_offset"], (tp, lso, part)
        assert hws[tp] >= lso
        # no orphan index, no snapshot below the log start, nothing half-written
        for f in pdir.iterdir():
            stem, _, suffix = f.name.partition(".")
            if f.name == "partition.metadata":
                continue  # the topic id Kafka writes beside the segments
            if f.name == "leader-epoch-checkpoint":
                epochs = leader_epochs(pdir)  # truncated from the start: none below the LSO
                assert epochs and epochs[0][1] >= lso, (pdir, epochs)
                continue
            assert f".{suffix}" in (*SEGMENT_SUFFIXES, ".snapshot"), f
            if f".{suffix}" == ".snapshot":
                assert int(stem) >= lso, f
            else:
                assert int(stem) in bases, f
    for leftover in ("*.tmp", "*.deleted", "*.cleaned", "*.swap"):
        assert not list(log_dir.rglob(leftover)), leftover


def test_offline_once_leaves_a_dir_kafka_would_load(tmp_path: Path) -> None:
    log_dir = tmp_path / "kafka-logs"
    logs = build_log_dir(log_dir, int(time.time() * 1000))
    config = write_config(tmp_path, [log_dir])
    planned = plan_json(config)
    once = run_cli("once", "--config", str(config))
    assert once.code == 0, once.err
    assert "deleted:" in once.out and "plan-only" not in once.out

    assert_loadable(log_dir, planned)
    # orders lost everything but its trailing segment; the others are untouched
    assert segment_bases(log_dir / "orders-0") == [30]
    assert segment_bases(log_dir / "fresh-0") == [0, 5, 10, 15, 20, 25]
    assert segment_bases(log_dir / "mystery-0") == [0, 5, 10, 15, 20, 25]
    assert leader_epochs(log_dir / "orders-0") == [(2, 30)]

    # the journal: each segment's intent before its deletion, with what Kafka calls it
    journal = tmp_path / "journal"
    deletions = records(journal, "deletion")
    intents = {r["id"] for r in records(journal, "intent")}
    assert {r["id"] for r in deletions} <= intents
    gone = {(r["topic"], r["partition"], r["base_offset"]) for r in deletions}
    expected = {(t, p, b) for (t, p) in (("orders", 0), ("orders", 1)) for b in range(0, 30, 5)}
    assert gone == expected
    for r in deletions:
        assert r["kind"] == "kafka_segment" and r["reason"] == "retention_ms_breach"
        assert r["cluster"] == "kafkawire-test" and r["broker"] == "kafka-3"
    assert logs  # the builder's view is not needed further: the files speak for themselves
    [rnd] = records(journal, "round")
    assert rnd["owner_running"] is False  # the round held .lock itself: no broker
    assert rnd["plan_only_log_dirs"] == [] and rnd["interval_ms"] == 1000

    # a second round finds nothing more to do, and the dir is still one Kafka loads
    again = run_cli("once", "--json", "--config", str(config))
    assert again.code == 0, again.err
    assert json.loads(again.out)["deleted"]["kafka_segment"]["files"] == 0
    assert_loadable(log_dir, plan_json(config))


def test_corrupt_metadata_log_keeps_every_topic(tmp_path: Path) -> None:
    """A truncated KRaft metadata log: `once` says so, exits 4 (store error) and deletes
    nothing from the topics it could not establish (here: all of them)."""
    from retentiond.storegen.kafka import (
        KafkaStoreSpec,
        generate_kafka_store,
        write_server_properties,
    )

    spec = KafkaStoreSpec(now_ms=int(time.time() * 1000), span_ms=30 * DAY)
    store = generate_kafka_store(tmp_path / "kafka-logs", spec)
    config = write_server_properties(
        tmp_path / "server.properties",
        [store.log_dir],
        retentiond_journal_dir=str(tmp_path / "journal"),
    )
    assert '"delete"' in run_cli("plan", "--json", "--config", str(config)).out
    meta = store.log_dir / "__cluster_metadata-0" / f"{0:020d}.log"
    meta.write_bytes(meta.read_bytes()[:-7])  # the last record batch torn
    before = tree(store.log_dir)
    once = run_cli("once", "--config", str(config))
    assert once.code == 4, (once.out, once.err)
    assert "error:" in once.err and "nothing was deleted from this store" in once.err
    assert tree(store.log_dir) == before
    doc = plan_json_any(config)
    assert doc["metadata"]["error"]
    kept = {s["reason"] for p in doc["log_dirs"][0]["partitions"] for s in p["segments"]}
    assert "unknown_topic_config" in kept and not any(
        s["verdict"] == "delete" for p in doc["log_dirs"][0]["partitions"] for s in p["segments"]
    )


def plan_json_any(config: Path) -> dict[str, Any]:
    """``plan --json`` whatever its exit code (4 when the store has an error)."""
    result = run_cli("plan", "--json", "--config", str(config))
    assert result.code in (0, 4), result.err
    return json.loads(result.out)
