"""The StoreKind sketch in a ``plan`` round on a generated log dir: it plans, explains, and
changes nothing, and the log dir's lock is free again afterwards."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from retentiond.config.settings import DaemonSettings
from retentiond.engine.cleaner import Cleaner
from retentiond.engine.round import Mode, Round
from retentiond.kinds.kafka.config import load_server_properties
from retentiond.kinds.kafka.kind import Kafka
from retentiond.kinds.kafka.offline import LogDirLock
from retentiond.reasons import Reason
from retentiond.storegen.kafka import KafkaStoreSpec, generate_kafka_store, write_server_properties


def plan_round_of(kind: Kafka, now_ms: int) -> Round:
    """The engine's round in plan mode, made by the Cleaner as ``retentiond plan`` makes it
    (here handed a scan of the test's choosing)."""
    return Cleaner(kind, clock_ms=lambda: now_ms)._round(Mode.PLAN, False, now_ms)  # type: ignore[arg-type]


def test_plan_round_changes_nothing(tmp_path: Path) -> None:
    spec = KafkaStoreSpec(topics={"orders": 2}, records_per_partition=600)
    store = generate_kafka_store(tmp_path / "logs", spec)
    server = load_server_properties(
        str(write_server_properties(tmp_path / "server.properties", [store.log_dir]))
    )
    # Settings for a Kafka config is the lead's wiring; the kind reads only config_hash
    kind = Kafka(
        SimpleNamespace(config_hash="h", daemon=DaemonSettings()),
        server,
    )  # type: ignore[arg-type]
    before = sorted(str(p) for p in store.log_dir.rglob("*"))
    plan = kind.plan_round(kind.scan(spec.now_ms), plan_round_of(kind, spec.now_ms))
    assert sorted(str(p) for p in store.log_dir.rglob("*")) == before
    assert plan.dry_run and not plan.errors and plan.plan_only_dirs() == []
    assert any(d.reason is Reason.RETENTION_MS_BREACH for d in plan.decisions()), kind.render_plan(
        plan
    )
    doc = plan.as_dict()
    assert doc["kind"] == "kafka" and doc["log_dirs"][0]["plan_only"] is False  # type: ignore[index]
    assert "retention_ms_breach" in kind.render_plan(plan)
    with LogDirLock(str(store.log_dir)) as lock:
        assert lock.acquire()  # released at the end of the round


def _another_process_can_lock(lock: Path) -> bool:
    """POSIX record locks are per process: only another process can tell whether we hold it
    (as a starting broker would)."""
    probe = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "try:\n"
        "    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except OSError:\n"
        "    sys.exit(1)\n"
    )
    return subprocess.run([sys.executable, "-c", probe, str(lock)]).returncode == 0


def test_only_a_round_that_may_delete_holds_the_lock_while_it_scans(tmp_path: Path) -> None:
    """A plan or a dry run takes ``.lock`` only to see that it is free and lets go at once: a
    broker starting during a long scan must not fail on it. A real round keeps it from the
    scan to the end of the round, so the broker cannot start mid-deletion."""
    spec = KafkaStoreSpec(topics={"orders": 1}, records_per_partition=100)
    store = generate_kafka_store(tmp_path / "logs", spec)
    server = load_server_properties(
        str(write_server_properties(tmp_path / "server.properties", [store.log_dir]))
    )
    kind = Kafka(
        SimpleNamespace(config_hash="h", daemon=DaemonSettings()),
        server,
    )  # type: ignore[arg-type]
    lock = store.log_dir / ".lock"

    looked = kind.scan(spec.now_ms, executes=False)
    assert [locked for _, locked in looked.log_dirs] == [True]  # free: not plan-only
    assert _another_process_can_lock(lock)

    kind.scan(spec.now_ms)  # a real round's scan
    assert not _another_process_can_lock(lock)
    kind.plan_round(kind.scan(spec.now_ms), plan_round_of(kind, spec.now_ms))
    assert _another_process_can_lock(lock)  # let go at the end of the round
