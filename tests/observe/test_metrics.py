"""Metric values after known rounds on generated stores, each test with a fresh registry.

The expected numbers come from outside the metrics code: the journal's deletion records, the
files left on disk, ``statvfs`` with RocketMQ's arithmetic written out again here.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from retentiond.config.settings import Settings
from retentiond.daemon.state import DaemonState
from retentiond.engine.cleaner import Cleaner, RoundListener
from retentiond.engine.decision import Decision
from retentiond.engine.execute import Outcome
from retentiond.journal.writer import Journal, Origin
from retentiond.kinds import kind_for
from retentiond.observe.metrics import RetentionMetrics
from retentiond.reasons import Kind, Reason, Verdict
from retentiond.storegen.rocketmq import PRESETS
from tests.conftest import ALL_HOURS, make_store, records, rocketmq_ratio

CLUSTER, BROKER = "c1", "b1"
# 40 CommitLog files of 64 KiB spread over 130 h (about 17 older than 72 h), 4 queues.
SPEC = PRESETS["daemon-test"]


class Rig:
    """A generated store, its settings, a journal, a Cleaner and metrics on a fresh registry."""

    def __init__(self, tmp_path: Path, **overrides: Any) -> None:
        keys = {
            "brokerName": BROKER,
            "brokerClusterName": CLUSTER,
            "deleteWhen": ALL_HOURS,
            "deleteCommitLogFilesInterval": 0,
            "deleteConsumeQueueFilesInterval": 0,
        }
        made = make_store(tmp_path, SPEC, defaults=keys, **overrides)
        self.store, config = made.generated, made.config
        self.settings: Settings = made.settings
        self.journal_dir = made.journal
        origin = Origin(CLUSTER, BROKER, "host", str(self.store.root))
        self.journal = Journal(self.journal_dir, origin)
        kind = kind_for(self.settings)
        self.state = DaemonState(config, self.settings, kind)
        self.cleaner = Cleaner(kind, journal=self.journal)
        self.cleaner.add_listener(self.state)
        self.registry = CollectorRegistry()
        self.metrics = RetentionMetrics(self.settings, registry=self.registry, status=self.status)
        self.metrics.watch(self.cleaner)

    def status(self) -> dict[str, object]:
        doc = self.state.snapshot()
        doc["manual_rounds_left"] = self.cleaner.state.manual_rounds_remaining
        return doc

    def round(self, **kwargs: Any):
        result = self.cleaner.run_round(**kwargs)
        self.state.round_done(result, self.cleaner.kind)
        self.metrics.round_done(result)
        return result

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(
            name, {"cluster": CLUSTER, "broker": BROKER, **labels}
        )

    def deletions(self) -> list[dict[str, Any]]:
        return records(self.journal_dir, "deletion")


@pytest.fixture
def rig(tmp_path: Path) -> Callable[..., Rig]:
    made: list[Rig] = []

    def make(**overrides: Any) -> Rig:
        r = Rig(tmp_path / f"rig{len(made)}", **overrides)
        made.append(r)
        return r

    yield make
    for r in made:
        r.journal.close()


# --- deletions -----------------------------------------------------------------------------


def test_deletion_counters_equal_the_journal_after_rounds(rig) -> None:
    r = rig(fileReservedTime=72, deleteFileBatchMax=4)
    for _ in range(3):
        r.round()

    records = r.deletions()
    assert len([d for d in records if d["kind"] == "commitlog"]) == 12
    assert any(d["kind"] == "consumequeue" for d in records)
    files = Counter((d["kind"], d["reason"]) for d in records)
    size: Counter[tuple[str, str]] = Counter()
    for d in records:
        size[(d["kind"], d["reason"])] += d["bytes"]
    for (kind, reason), count in files.items():
        assert r.value("retentiond_deleted_files_total", kind=kind, reason=reason) == count
        assert (
            r.value("retentiond_deleted_bytes_total", kind=kind, reason=reason)
            == size[(kind, reason)]
        )
    total = sum(
        s.value
        for m in r.registry.collect()
        if m.name == "retentiond_deleted_files"
        for s in m.samples
        if s.name.endswith("_total")
    )
    assert total == len(records)
    assert r.value("retentiond_forced_deletions_total") == 0
    assert r.value("retentiond_delete_failures_total", kind="commitlog", cause="changed") == 0


def test_series_exist_at_zero_before_anything_happens(rig) -> None:
    """increase() needs a first sample at 0 to see the first deletion or failure."""
    r = rig()
    assert r.value("retentiond_forced_deletions_total") == 0
    assert r.value("retentiond_deleted_files_total", kind="commitlog", reason="expired") == 0
    assert (
        r.value("retentiond_deleted_bytes_total", kind="index", reason="below_commitlog_min_offset")
        == 0
    )
    for cause in ("changed", "unlink_failed", "containment", "journal"):
        assert r.value("retentiond_delete_failures_total", kind="commitlog", cause=cause) == 0
    assert r.value("retentiond_deleted_files_total", kind="index", reason="expired") is None


def test_a_dry_run_counts_nothing(rig) -> None:
    r = rig(fileReservedTime=72)
    result = r.round(dry_run=True)
    assert result.plan.commitlog.deletions()
    assert r.value("retentiond_deleted_files_total", kind="commitlog", reason="expired") == 0
    assert r.value("retentiond_files", kind="commitlog") == len(r.store.commitlog_files)


def test_failures_are_counted_by_kind_and_cause_and_gone_is_not_a_failure(rig) -> None:
    r = rig()
    d = Decision(Kind.CONSUMEQUEUE, "/x/0", Verdict.DELETE, Reason.BELOW_COMMITLOG_MIN_OFFSET)
    r.metrics.on_outcome(Outcome(d, False, "unlink: EPERM", "unlink_failed"))
    r.metrics.on_outcome(Outcome(d, False, "unlink: EPERM", "unlink_failed"))
    r.metrics.on_outcome(Outcome(d, False, "gone", "gone"))
    r.metrics.on_outcome(Outcome(d, False, "held", "held_by_broker"))
    failures = "retentiond_delete_failures_total"
    assert r.value(failures, kind="consumequeue", cause="unlink_failed") == 2
    assert r.value(failures, kind="consumequeue", cause="gone") is None
    assert r.value(failures, kind="consumequeue", cause="held_by_broker") == 1


def test_metrics_follow_the_journal_not_the_plan(rig, monkeypatch) -> None:
    """The counter moves in on_outcome, which the executor calls after the journal append:
    at the moment a deletion is counted, its record is already in the journal."""
    r = rig(fileReservedTime=72, deleteFileBatchMax=2)
    seen: list[tuple[float, int]] = []
    inner = r.metrics.on_outcome

    def checking(outcome: Outcome) -> None:
        inner(outcome)
        if outcome.deleted:
            journaled = [d for d in r.deletions() if d["file"] == outcome.decision.path]
            counted = r.value(
                "retentiond_deleted_files_total",
                kind=str(outcome.decision.kind),
                reason=str(outcome.decision.reason),
            )
            seen.append((counted or 0, len(journaled)))

    monkeypatch.setattr(r.metrics, "on_outcome", checking)
    r.round()
    assert seen and all(journaled == 1 for _, journaled in seen)


# --- store figures -------------------------------------------------------------------------


def _cq_files_on_disk(root: Path) -> list[Path]:
    return [p for p in (root / "consumequeue").rglob("*") if p.is_file()]


def test_store_figures_after_a_round_match_the_disk(rig) -> None:
    r = rig(fileReservedTime=72, deleteFileBatchMax=10)
    r.round()
    now = time.time()
    commitlog = sorted(p for d in r.settings.store.store_path_commitlog for p in d.iterdir())
    index = list(r.settings.store.index_dir.iterdir())
    queues = _cq_files_on_disk(r.store.root)

    assert r.value("retentiond_files", kind="commitlog") == len(commitlog)
    assert r.value("retentiond_store_bytes", kind="commitlog") == sum(
        p.stat().st_size for p in commitlog
    )
    assert r.value("retentiond_commitlog_min_offset") == int(commitlog[0].name)
    oldest = min(p.stat().st_mtime for p in commitlog)
    age = r.value("retentiond_oldest_file_age_seconds", kind="commitlog")
    assert age == pytest.approx(now - oldest, abs=2)

    assert r.value("retentiond_files", kind="index") == len(index)
    assert r.value("retentiond_store_bytes", kind="index") == sum(p.stat().st_size for p in index)

    assert r.value("retentiond_files", kind="consumequeue") == len(queues)
    assert r.value("retentiond_store_bytes", kind="consumequeue") == sum(
        p.stat().st_size for p in queues
    )
    # The oldest first-remaining file of a queue with more than one file.
    firsts = [
        min(q.iterdir(), key=lambda p: int(p.name))
        for topic in (r.store.root / "consumequeue").iterdir()
        for q in topic.iterdir()
        if len(list(q.iterdir())) > 1
    ]
    cq_age = r.value("retentiond_oldest_file_age_seconds", kind="consumequeue")
    assert cq_age == pytest.approx(now - min(p.stat().st_mtime for p in firsts), abs=2)


def test_queue_figures_are_kept_when_the_minimum_does_not_move(rig) -> None:
    r = rig(fileReservedTime=72, deleteFileBatchMax=40)
    r.round()  # deletes every expired file; the queues are walked
    walked = r.value("retentiond_store_scan_timestamp_seconds", kind="consumequeue")
    files = r.value("retentiond_files", kind="consumequeue")
    result = r.round()  # nothing more to delete: the minimum stays, the queues are not walked
    assert not result.plan.queues.examined
    assert r.value("retentiond_files", kind="consumequeue") == files
    assert r.value("retentiond_store_scan_timestamp_seconds", kind="consumequeue") == walked
    assert r.value("retentiond_store_scan_timestamp_seconds", kind="commitlog") > walked


def test_expired_pending_equals_status_and_falls_with_deletions(rig) -> None:
    r = rig(fileReservedTime=72, deleteFileBatchMax=5)
    r.metrics.observe_plan(r.cleaner.plan())
    r.state.observe_plan(r.cleaner.plan(), r.cleaner.kind, frozenset())
    before = r.value("retentiond_expired_files_pending")
    assert before == r.state.pending_expired and before > 5
    r.round()
    assert r.value("retentiond_expired_files_pending") == before - 5


# --- disk ----------------------------------------------------------------------------------


def test_disk_ratio_is_rocketmq_arithmetic_at_scrape_time(rig) -> None:
    r = rig()
    paths = [str(p) for p in r.settings.store.store_path_commitlog]
    cq = str(r.settings.store.consumequeue_dir)
    before = {p: rocketmq_ratio(p) for p in [*paths, cq]}
    got = {p: r.value("retentiond_disk_used_ratio", kind="commitlog", path=p) for p in paths} | {
        cq: r.value("retentiond_disk_used_ratio", kind="consumequeue", path=cq)
    }
    after = {p: rocketmq_ratio(p) for p in [*paths, cq]}
    for p, value in got.items():
        assert value in (before[p], after[p])
    worst = max(got.values())
    expected = "ok" if worst <= 0.75 else "over_max_ratio" if worst <= 0.85 else None
    if expected is not None:
        assert r.value("retentiond_disk_state", state=expected) == 1
    states = ["ok", "over_max_ratio", "clean_forcibly", "warning_level", "unknown"]
    assert sum(r.value("retentiond_disk_state", state=s) for s in states) == 1
    assert r.value("retentiond_disk_threshold_ratio", state="over_max_ratio") == 0.75
    assert r.value("retentiond_disk_threshold_ratio", state="clean_forcibly") == 0.85
    assert r.value("retentiond_disk_threshold_ratio", state="warning_level") == 0.90


def test_a_path_that_cannot_be_measured_has_no_ratio_and_state_unknown(rig) -> None:
    r = rig()
    cl = r.settings.store.store_path_commitlog[0]
    cl.rename(cl.with_name("moved"))
    assert r.value("retentiond_disk_used_ratio", kind="commitlog", path=str(cl)) is None
    assert r.value("retentiond_disk_state", state="unknown") == 1
    assert r.value("retentiond_disk_state", state="ok") == 0


# --- rounds --------------------------------------------------------------------------------


def test_round_duration_is_split_between_the_two_cleaners(rig) -> None:
    r = rig(fileReservedTime=72, deleteFileBatchMax=3, deleteCommitLogFilesInterval=50)
    result = r.round()
    cl = r.value("retentiond_round_duration_seconds_sum", cleaner="commitlog")
    cq = r.value("retentiond_round_duration_seconds_sum", cleaner="consumequeue")
    assert r.value("retentiond_round_duration_seconds_count", cleaner="commitlog") == 1
    assert r.value("retentiond_round_duration_seconds_count", cleaner="consumequeue") == 1
    assert cl >= 0.1  # two 50 ms pauses between three CommitLog deletions
    assert 0 < cq < cl
    assert cl + cq == pytest.approx(result.duration_s, abs=0.05)


def test_last_success_is_the_start_time_then_each_good_round(rig) -> None:
    started = time.time()
    r = rig()
    first = r.value("retentiond_last_round_success_timestamp_seconds", cleaner="commitlog")
    assert first == pytest.approx(started, abs=5)
    r.round()
    after = r.value("retentiond_last_round_success_timestamp_seconds", cleaner="commitlog")
    assert after >= first
    assert (
        r.value("retentiond_last_round_success_timestamp_seconds", cleaner="consumequeue") == after
    )


def test_a_round_that_cannot_read_the_store_is_no_success(rig, monkeypatch) -> None:
    r = rig()
    clock = [1000.0]
    monkeypatch.setattr(r.metrics, "clock_s", lambda: clock[0])
    r.round()
    assert r.value("retentiond_last_round_success_timestamp_seconds", cleaner="commitlog") == 1000
    cl = r.settings.store.store_path_commitlog[0]
    cl.rename(cl.with_name("moved"))
    clock[0] = 2000.0
    result = r.round()
    assert result.plan.errors or result.plan.commitlog.triggers.error
    for cleaner in ("commitlog", "consumequeue"):
        stamp = r.value("retentiond_last_round_success_timestamp_seconds", cleaner=cleaner)
        assert stamp == 1000
    assert r.value("retentiond_round_duration_seconds_count", cleaner="commitlog") == 2


# --- daemon state --------------------------------------------------------------------------


def test_reloads_hung_files_and_manual_rounds_come_from_the_status(rig) -> None:
    r = rig()
    assert r.value("retentiond_config_last_reload_successful") == 1
    r.state.reload_unchanged("SIGHUP")
    r.state.reload_refused("file changed", ["bad"])
    r.state.reload_refused("file changed", ["bad"])
    assert r.value("retentiond_config_reloads_total", result="refused") == 2
    assert r.value("retentiond_config_reloads_total", result="unchanged") == 1
    assert r.value("retentiond_config_reloads_total", result="applied") == 0
    assert r.value("retentiond_config_last_reload_successful") == 0
    r.state.reload_applied(r.settings, "SIGHUP", [])
    assert r.value("retentiond_config_last_reload_successful") == 1

    held = r.store.commitlog_files[0].path
    d = Decision(Kind.COMMITLOG, str(held), Verdict.DELETE, Reason.EXPIRED)
    r.state.file_done(Outcome(d, False, "unlink: EBUSY", "unlink_failed"))
    assert r.value("retentiond_hung_files") == 1

    assert r.value("retentiond_manual_rounds_remaining") == 0
    r.cleaner.request_manual()
    assert r.value("retentiond_manual_rounds_remaining") == 20


def test_config_and_build_info(rig) -> None:
    from retentiond import __version__

    r = rig(fileReservedTime=48, deleteFileBatchMax=7)
    info = next(m for m in r.registry.collect() if m.name == "retentiond_config_info")
    (sample,) = info.samples
    assert sample.value == 1
    assert sample.labels["config_hash"] == r.settings.config_hash
    assert sample.labels["file_reserved_time_hours"] == "48"
    assert sample.labels["delete_file_batch_max"] == "7"
    assert sample.labels["disk_space_clean_forcibly_ratio"] == "0.85"
    assert sample.labels["dry_run"] == "false"
    assert r.value("retentiond_file_reserved_time_seconds") == 48 * 3600
    assert r.value("retentiond_round_interval_seconds") == 10
    build = next(m for m in r.registry.collect() if m.name == "retentiond_build_info")
    assert build.samples[0].labels["version"] == __version__


def test_each_instance_has_its_own_registry_and_the_default_one_stays_clean(rig) -> None:
    a, b = rig(), rig()
    assert a.registry is not b.registry
    names = {m.name for m in REGISTRY.collect()}
    assert not any(n.startswith("retentiond_") for n in names)
    text = generate_latest(a.registry).decode()
    assert "retentiond_build_info" in text
    assert 'cluster="c1"' in text and 'broker="b1"' in text


# --- scrapes stay cheap --------------------------------------------------------------------


def test_a_scrape_does_not_wait_for_a_running_round(rig) -> None:
    r = rig(fileReservedTime=72, deleteFileBatchMax=3)
    inside, release = threading.Event(), threading.Event()

    class Blocking(RoundListener):
        def file_done(self, outcome: Outcome) -> None:
            inside.set()
            release.wait(10)

    r.cleaner.add_listener(Blocking())
    worker = threading.Thread(target=r.round)
    worker.start()
    try:
        assert inside.wait(10)
        started = time.monotonic()
        text = generate_latest(r.registry).decode()
        assert time.monotonic() - started < 1.0
        assert "retentiond_disk_used_ratio" in text
    finally:
        release.set()
        worker.join(10)


def test_a_scrape_never_lists_a_store_directory(rig, monkeypatch) -> None:
    """The queue tree (100,000 directories on a big broker) is walked by rounds only; the
    only directory a scrape lists is /proc/self/fd (the process collector's open fds)."""
    r = rig(fileReservedTime=72)
    r.round()
    listed: list[str] = []
    for name in ("scandir", "listdir"):
        original = getattr(os, name)

        def spy(path: object = ".", *, _original=original) -> object:
            listed.append(str(path))
            return _original(path)

        monkeypatch.setattr(os, name, spy)
    text = generate_latest(r.registry).decode()
    assert 'retentiond_files{broker="b1",cluster="c1",kind="consumequeue"}' in text
    assert all(path.startswith("/proc/") for path in listed), listed


def test_a_failing_source_leaves_the_others_in_the_scrape(rig) -> None:
    r = rig()

    def broken() -> dict[str, object]:
        raise RuntimeError("status unavailable")

    r.metrics.status = broken
    text = generate_latest(r.registry).decode()
    assert "retentiond_disk_used_ratio" in text
    assert "retentiond_hung_files" not in text
