"""The daemon's own bookkeeping: missed runs, files that would not go, status text."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

import pytest

from retentiond.config.settings import Settings
from retentiond.daemon.service import Daemon
from retentiond.daemon.state import DaemonState
from retentiond.daemon.statustext import render, summary_line
from retentiond.engine.decision import Decision
from retentiond.engine.execute import Outcome
from retentiond.kinds import kind_for
from retentiond.reasons import Kind, Reason, Verdict
from retentiond.storegen.rocketmq import PRESETS
from tests.conftest import Store


@pytest.fixture
def settings(store: Callable[..., Store], tmp_path: Path) -> Settings:
    return store(
        PRESETS["upstream-test"],
        defaults={},
        cleanResourceInterval=1000,
        retentiond={"controlSocket": str(tmp_path / "c.sock")},
    ).settings


def test_coalesced_runs_are_counted_from_the_gaps(settings: Settings) -> None:
    state = DaemonState(Path("x.yaml"), settings, kind_for(settings))
    for t in (100.0, 101.0, 104.0, 105.0):  # 102 and 103 were folded into 104
        state.run_scheduled(t)
    state.run_skipped(106.0, overlap=True)
    missed = state.snapshot()["rounds"]["missed"]  # type: ignore[index]
    assert missed == {"total": 3, "coalesced": 2, "overlap": 1, "misfire": 0}


def test_a_new_interval_restarts_the_gap_count(settings: Settings) -> None:
    state = DaemonState(Path("x.yaml"), settings, kind_for(settings))
    state.run_scheduled(100.0)
    state.rescheduled(5000)
    state.run_scheduled(200.0)
    state.run_scheduled(205.0)
    assert state.missed_coalesced == 0


def _outcome(path: Path, deleted: bool, cause: str | None) -> Outcome:
    decision = Decision(Kind.COMMITLOG, str(path), Verdict.DELETE, Reason.EXPIRED)
    return Outcome(decision, deleted, None if deleted else "unlink: EBUSY", cause)


def test_hung_files_keep_their_first_attempt_until_they_go(
    settings: Settings, tmp_path: Path
) -> None:
    state = DaemonState(Path("x.yaml"), settings, kind_for(settings))
    victim = tmp_path / "00000000000000000000"
    victim.write_bytes(b"x")
    state.file_done(_outcome(victim, False, "unlink_failed"))
    first = state.hung[str(victim)].first_attempt_ms
    state.file_done(_outcome(victim, False, "unlink_failed"))
    assert state.hung[str(victim)].first_attempt_ms == first
    assert list(state.prune_hung()) == [str(victim)]
    victim.unlink()
    assert state.prune_hung() == {}
    state.file_done(_outcome(victim, False, "unlink_failed"))
    state.file_done(_outcome(victim, True, None))
    assert state.hung == {}


def test_redelete_gate_is_strictly_greater_than_the_interval(settings: Settings) -> None:
    state = DaemonState(Path("x.yaml"), settings, kind_for(settings))
    assert state.redelete_due(1_000_000, 120_000)  # lastRedeleteTimestamp starts at 0
    assert not state.redelete_due(1_120_000, 120_000)
    assert state.redelete_due(1_120_001, 120_000)


def test_status_of_a_daemon_that_has_not_started(settings: Settings) -> None:
    daemon = Daemon(Path("/etc/retentiond/broker-a.yaml"), settings, journal=None)
    doc = daemon.status()
    assert doc["ready"] is False
    assert doc["manual_rounds_left"] == 0
    text = render(doc)
    assert "NOT READY" in text
    assert "rounds    0 done" in text
    assert "next not scheduled" in text
    assert summary_line(doc).startswith("0 rounds")


def test_a_new_clean_resource_interval_reschedules_the_round(settings: Settings) -> None:
    daemon = Daemon(Path("/etc/retentiond/broker-a.yaml"), settings, journal=None)
    daemon._start_scheduler()
    try:
        faster = dataclasses.replace(
            settings, store=dataclasses.replace(settings.store, clean_resource_interval_ms=250)
        )
        daemon._apply(faster, settings)
        job = daemon.scheduler.get_job("round")
        assert job.trigger.interval.total_seconds() == 0.25
        assert daemon.status()["rounds"]["interval_ms"] == 250
    finally:
        daemon.scheduler.shutdown(wait=False)


class _Numbered:
    """A voice of a kind no registry knows: the daemon passes its own kind's to the text."""

    name: ClassVar[str] = "numbered"
    product: ClassVar[str] = "Numbered"
    info_label_names: ClassVar[tuple[str, ...]] = ()

    @staticmethod
    def status_lines(doc: Mapping[str, object], manual_line: str) -> list[str]:
        return [f"numbered  {doc.get('store')}", manual_line]

    @staticmethod
    def summary_parts(doc: Mapping[str, object]) -> list[str]:
        return ["numbered files"]

    @staticmethod
    def manual_request_text(rounds: object) -> str:
        return f"{rounds} numbered rounds"


def test_the_kinds_lines_come_from_its_voice(settings: Settings) -> None:
    daemon = Daemon(Path("/etc/retentiond/broker-a.yaml"), settings, journal=None)
    doc = daemon.status()
    assert doc["store_kind"] == "rocketmq"
    own = render(doc)
    assert "triggers  not evaluated yet" in own and "manual    none requested" in own
    other = render(doc, _Numbered)
    assert f"numbered  {settings.store_label}\nmanual    none requested" in other
    assert "triggers" not in other and "pending" not in other
    assert summary_line(doc, _Numbered).startswith("0 rounds; numbered files")
