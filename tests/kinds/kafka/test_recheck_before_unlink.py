"""A real round through the engine (``Kafka.plan_round`` with an executor): a segment whose
``.log`` changed between the plan and the unlink is not deleted, and neither is anything
behind it. The compact plan takes a deleted segment's identity from the read (or one
``lstat``) that judged it; the executor's re-check against a fresh ``stat`` must still see
every change. Real log dirs (``KafkaLog``), a real journal sink, the change made on disk
between planning and carrying out (a writer racing the round)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

import retentiond.kinds.kafka.kind as kind_module
from retentiond.config.settings import DaemonSettings
from retentiond.engine.execute import Executor, RoundContext
from retentiond.engine.guard import Guard
from retentiond.engine.identity import identity_of
from retentiond.engine.refused import RefusedFile
from retentiond.engine.round import Mode, Round
from retentiond.kinds.kafka.config import load_server_properties
from retentiond.kinds.kafka.kind import Kafka
from retentiond.kinds.kafka.plan import KafkaPlan
from retentiond.kinds.kafka.policy import PartitionPlan, TopicConfig
from retentiond.reasons import Kind
from tests.kinds.kafka.kafkalog import KafkaLog, R, read_checkpoint, segment_bases

NOW = 1_700_000_000_000


class ListJournal:
    def __init__(self) -> None:
        self.records: list[dict[str, object]] = []

    def append(self, record: dict[str, object]) -> None:
        self.records.append(record)


def six_expired_segments(log_dir: Path) -> KafkaLog:
    log = KafkaLog(log_dir, "orders", 0, segment_bytes=5 * R)
    log.append_records(25, NOW - 100_000)
    log.append_records(5, NOW)
    log.write(hw=30)
    assert segment_bases(log.dir) == [0, 5, 10, 15, 20, 25]
    return log


def real_round(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    config: TopicConfig,
    change: Callable[[Path], None],
    build: Callable[[Path], KafkaLog] = six_expired_segments,
    refused: Callable[[KafkaLog], dict[str, RefusedFile]] | None = None,
) -> tuple[KafkaLog, ListJournal, list[PartitionPlan], KafkaPlan]:
    """Plan and carry out one round; ``change`` runs on the partition dir after the plan was
    made and before anything is unlinked."""
    log_dir = tmp_path / "logs"
    log = build(log_dir)
    props = tmp_path / "server.properties"
    props.write_text(f"node.id=1\nlog.dirs={log_dir}\n")
    kind = Kafka(
        SimpleNamespace(config_hash="h", daemon=DaemonSettings()),
        load_server_properties(str(props)),
    )  # type: ignore[arg-type]
    kind._config_for = lambda _snap, _topic: config  # type: ignore[method-assign]
    planned: list[PartitionPlan] = []
    real_plan_partition = kind_module.plan_partition

    def plan_then_change(*args, **kwargs):  # type: ignore[no-untyped-def]
        p = real_plan_partition(*args, **kwargs)
        planned.append(p)
        change(log.dir)
        return p

    monkeypatch.setattr(kind_module, "plan_partition", plan_then_change)
    journal = ListJournal()
    rnd = Round(
        kind,  # type: ignore[arg-type]
        Guard(),
        now_ms=NOW,
        manual=False,
        mode=Mode.REAL,
        held=dict,
        remember_held=lambda _h: None,
        executor=Executor(kind, journal),  # type: ignore[arg-type]
        context=RoundContext("h", False, None, lambda: NOW),
        refused=None if refused is None else (lambda: refused(log)),
    )
    plan = kind.plan_round(kind.scan(NOW), rnd)
    return log, journal, planned, plan


def deleted_files(journal: ListJournal) -> list[str]:
    return [str(r["file"]) for r in journal.records if r.get("type") == "deletion"]


def seg(log: KafkaLog, base: int, suffix: str = ".log") -> Path:
    return log.dir / f"{base:020d}{suffix}"


def append_a_byte(base: int) -> Callable[[Path], None]:
    def change(d: Path) -> None:
        with open(d / f"{base:020d}.log", "ab") as f:
            f.write(b"\0")

    return change


def replace_same_size(base: int) -> Callable[[Path], None]:
    """A new inode under the old name, same bytes and mtime (only the inode tells)."""

    def change(d: Path) -> None:
        p = d / f"{base:020d}.log"
        st = p.stat()
        tmp = d / "replacement.tmp"
        tmp.write_bytes(p.read_bytes())
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, p)

    return change


@pytest.mark.parametrize(
    "config",
    [
        TopicConfig(retention_ms=10_000),  # time pass: identity from the read's fstat
        TopicConfig(retention_ms=-1, retention_bytes=R),  # size pass: from an lstat
    ],
    ids=["time", "size"],
)
@pytest.mark.parametrize("how", [append_a_byte, replace_same_size], ids=["grown", "replaced"])
def test_segment_changed_after_the_plan_is_not_deleted_nor_anything_behind_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    config: TopicConfig,
    how: Callable[[int], Callable[[Path], None]],
) -> None:
    log, journal, planned, _ = real_round(tmp_path, monkeypatch, config, how(10))
    (p,) = planned
    assert [d.start_offset for d in p.deletions][:3] == [0, 5, 10]  # 10 was planned to go
    # 0 and 5 went; 10 changed, so it and everything behind it stayed
    assert deleted_files(journal) == [str(seg(log, 0)), str(seg(log, 5))]
    assert segment_bases(log.dir) == [10, 15, 20, 25]
    for suffix in (".index", ".timeindex"):
        assert seg(log, 10, suffix).exists()
        assert not seg(log, 5, suffix).exists()
    # the checkpoint and the epochs follow what really went, not the plan
    assert read_checkpoint(log.log_dir / "log-start-offset-checkpoint").get(("orders", 0)) in (
        None,
        10,
    )


def test_first_segment_changed_nothing_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, journal, planned, _ = real_round(
        tmp_path, monkeypatch, TopicConfig(retention_ms=10_000), append_a_byte(0)
    )
    assert planned[0].deletions
    assert deleted_files(journal) == []
    assert segment_bases(log.dir) == [0, 5, 10, 15, 20, 25]
    assert all(seg(log, b, ".index").exists() for b in (0, 5, 10, 15, 20, 25))


def test_a_roll_that_cannot_be_made_keeps_its_partition_and_ends_no_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every segment of ``orders-0`` expired, so the round must first create the empty
    segment at the log end (30); an index without its ``.log`` sits there already (a broker
    that died mid-roll leaves one; its loader deletes it). The roll fails: that partition
    keeps every segment and the plan says why; the round goes on with the next partition
    instead of ending with the exception (which also skipped the log dir's checkpoint)."""

    def build(log_dir: Path) -> KafkaLog:
        log = KafkaLog(log_dir, "orders", 0, segment_bytes=5 * R)
        log.append_records(30, NOW - 100_000)
        log.write(hw=30)
        (log.dir / f"{30:020d}.index").write_bytes(b"")
        other = KafkaLog(log_dir, "orders", 1, segment_bytes=5 * R)
        other.append_records(25, NOW - 100_000)
        other.append_records(5, NOW)
        other.write(hw=30)
        return log

    log, journal, planned, plan = real_round(
        tmp_path, monkeypatch, TopicConfig(retention_ms=10_000), lambda _d: None, build
    )
    assert planned[0].roll_offset == 30
    # the empty .log at 30 was made before the index failed: an empty active segment, as
    # after a roll, which the next round needs no roll for
    assert segment_bases(log.dir) == [0, 5, 10, 15, 20, 25, 30]
    assert seg(log, 30).stat().st_size == 0
    assert not any("orders-0" in f for f in deleted_files(journal))
    assert any(f"{30:020d}.index" in e for e in plan.errors), plan.errors
    assert segment_bases(log.log_dir / "orders-1") == [25]


def test_no_roll_when_a_refused_unlink_shortens_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every segment is expired, so the plan rolls (an empty segment at the log end) before
    deleting them all. When the run is cut short (segment 15's unlink was refused and is
    still in its backoff), the last segment stays: no empty segment is made, as Kafka makes
    none for a log it does not empty."""

    def all_expired(log_dir: Path) -> KafkaLog:
        log = KafkaLog(log_dir, "orders", 0, segment_bytes=5 * R)
        log.append_records(30, NOW - 100_000)
        log.write(hw=30)
        return log

    def refused_15(log: KafkaLog) -> dict[str, RefusedFile]:
        path = seg(log, 15)
        ident = identity_of(os.stat(path))
        return {
            str(path): RefusedFile(Kind.KAFKA_SEGMENT, ident, "EPERM", 1, 1, NOW, NOW, NOW + 8000)
        }

    config = TopicConfig(retention_ms=10_000)
    log, journal, planned, _ = real_round(
        tmp_path, monkeypatch, config, lambda _d: None, all_expired, refused_15
    )
    (p,) = planned
    assert p.roll_offset == 30 and len(p.deletions) == 6  # the plan would empty the log
    assert deleted_files(journal) == [str(seg(log, b)) for b in (0, 5, 10)]
    assert segment_bases(log.dir) == [15, 20, 25]  # no empty segment at 30
    assert not seg(log, 30).exists()
