"""The stand-in kind (``tests/standin/kind.py``) in real rounds: the engine plans, holds,
executes and journals a kind it has never heard of, the metrics count its deletions under its
own file kind and reason, the status document shows what it says, and its newest file stays."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from retentiond.config.settings import Settings, StoreSection
from retentiond.daemon.state import DaemonState
from retentiond.daemon.statustext import render, summary_line
from retentiond.engine.cleaner import Cleaner
from retentiond.journal.writer import Journal, Origin, read_records
from retentiond.observe.metrics import RetentionMetrics
from retentiond.reasons import (
    ExtraKind,
    Kind,
    Reason,
    file_kind,
    reason,
    register_kind,
    register_reason,
)
from retentiond.text.jsonstream import encode_decision
from tests.standin.kind import (
    NUMBERED,
    TOO_OLD,
    StandInConfig,
    StandInPlan,
    StandInSection,
    stand_in,
)

NOW_MS = 1_709_510_400_000  # 2024-03-04T00:00:00Z
HOUR_MS = 3_600_000
CLUSTER, BROKER = "standin-cluster", "standin-broker"


def _store(tmp_path: Path, ages_h: list[int]) -> Path:
    """Numbered files, oldest first, ``ages_h`` hours old; plus a foreign file."""
    directory = tmp_path / "files"
    directory.mkdir()
    for i, age in enumerate(ages_h):
        path = directory / f"{i * 1000:020d}"
        path.write_bytes(b"x" * (100 + i))
        t = (NOW_MS - age * HOUR_MS) / 1000
        os.utime(path, (t, t))
    (directory / "README").write_text("not a numbered file\n")
    return directory


def _settings(tmp_path: Path) -> Settings[StoreSection]:
    section = StandInSection(str(tmp_path), broker_name=BROKER, broker_cluster_name=CLUSTER)
    return Settings(store=section)


def test_a_real_round_of_the_stand_in_kind(tmp_path: Path) -> None:
    directory = _store(tmp_path, [50, 40, 30, 20])  # all older than the 10 h limit
    settings = _settings(tmp_path)
    kind = stand_in(settings, StandInConfig(str(directory), 10 * HOUR_MS))
    journal = Journal(tmp_path / "journal", Origin(CLUSTER, BROKER, "host", str(directory)))
    cleaner = Cleaner(kind, journal=journal, clock_ms=lambda: NOW_MS)
    metrics = RetentionMetrics(settings, kind=kind)
    metrics.watch(cleaner)
    state = DaemonState(tmp_path / "standin.yaml", settings, kind)
    cleaner.add_listener(state)

    plan = cleaner.plan()  # what the round will do: changes nothing
    assert [(d.kind, d.reason) for d in plan.decisions()] == [
        (NUMBERED, TOO_OLD),
        (NUMBERED, TOO_OLD),
        (NUMBERED, TOO_OLD),
        (NUMBERED, Reason.NEWEST_FILE),
    ]
    assert len(os.listdir(directory)) == 5

    result = cleaner.run_round()
    metrics.round_done(result)
    state.round_done(result, kind)
    journal.close()

    # Its newest file stays, old as it is; the foreign file is never touched.
    newest = directory / f"{3000:020d}"
    assert sorted(os.listdir(directory)) == [newest.name, "README"]
    assert [o.decision.path for o in result.deleted] == [
        str(directory / f"{n:020d}") for n in (0, 1000, 2000)
    ]

    # The journal: an intent then a deletion per file, with its own file kind and reason.
    records = list(read_records(tmp_path / "journal"))
    deletions = [r for r in records if r["type"] == "deletion"]
    assert [(r["kind"], r["reason"], r["file"]) for r in deletions] == [
        ("standin_file", "standin_too_old", str(directory / f"{n:020d}")) for n in (0, 1000, 2000)
    ]
    assert all(r["max_age_ms"] == 10 * HOUR_MS and r["forced"] is False for r in deletions)
    intents = [r for r in records if r["type"] == "intent"]
    assert [r["id"] for r in intents] == [r["id"] for r in deletions]
    (round_record,) = [r for r in records if r["type"] == "round"]
    assert round_record["files_left"] == 1
    deleted = round_record["deleted"]
    assert isinstance(deleted, dict) and deleted["standin_file"]["files"] == 3

    # The metrics: its deletions counted under its own labels, started at 0 with the rest.
    labels = {"cluster": CLUSTER, "broker": BROKER, "kind": "standin_file"}
    sample = metrics.registry.get_sample_value
    assert sample("retentiond_deleted_files_total", {**labels, "reason": "standin_too_old"}) == 3
    assert sample("retentiond_deleted_bytes_total", {**labels, "reason": "standin_too_old"}) == (
        100 + 101 + 102
    )
    assert sample("retentiond_delete_failures_total", {**labels, "cause": "changed"}) == 0

    # The status document and its text: what the kind says of the round, in its own words.
    doc = {**state.snapshot(), **kind.status()}
    assert doc["store_kind"] == "standin"
    assert doc["scan"] == {"files_left": 1, "newest": newest.name}
    assert doc["standin_rounds_planned"] == 1  # a plan remembers nothing
    rounds = doc["rounds"]
    assert isinstance(rounds, dict)
    last = rounds["last"]
    assert isinstance(last, dict)
    assert last["deleted"]["standin_file"]["files"] == 3
    text = render(doc, kind).splitlines()
    assert f"numbered  1 files left, newest {newest.name}; 1 rounds planned" in text
    assert "manual    none requested" in text
    assert "          last deleted: standin_file 3 (303 B)" in text
    assert "1 numbered files left" in summary_line(doc, kind)


def test_a_file_that_is_not_old_enough_stops_the_run(tmp_path: Path) -> None:
    directory = _store(tmp_path, [50, 5, 30, 20])
    settings = _settings(tmp_path)
    kind = stand_in(settings, StandInConfig(str(directory), 10 * HOUR_MS))
    journal = Journal(tmp_path / "journal", Origin(CLUSTER, BROKER, "host", str(directory)))
    result = Cleaner(kind, journal=journal, clock_ms=lambda: NOW_MS).run_round()
    journal.close()
    assert [os.path.basename(o.decision.path) for o in result.deleted] == [f"{0:020d}"]
    assert [d.reason for d in result.plan.decisions()] == [
        TOO_OLD,
        Reason.NOT_EXPIRED,
        Reason.AFTER_FIRST_KEPT,
        Reason.NEWEST_FILE,
    ]


def test_its_plan_document_carries_its_vocabulary(tmp_path: Path) -> None:
    directory = _store(tmp_path, [50, 20])
    kind = stand_in(_settings(tmp_path), StandInConfig(str(directory), 10 * HOUR_MS))
    plan = Cleaner(kind, clock_ms=lambda: NOW_MS).plan()
    assert isinstance(plan, StandInPlan)
    first = next(iter(plan.decisions()))
    # The streaming encoder of large plans writes it as json.dumps would.
    assert json.loads(encode_decision(first, NOW_MS, "")) == first.as_dict(NOW_MS)
    assert first.as_dict(NOW_MS)["kind"] == "standin_file"
    assert kind.render_plan(plan) == (
        f"{0:020d} delete standin_too_old\n{1000:020d} keep newest_file\n"
    )


def test_the_registration_api() -> None:
    assert register_kind("standin_file") is NUMBERED  # the same object every time
    assert register_reason("standin_too_old") is TOO_OLD
    assert isinstance(NUMBERED, ExtraKind) and isinstance(NUMBERED, str)
    assert NUMBERED.value == str(NUMBERED) == "standin_file"
    assert file_kind("standin_file") is NUMBERED and file_kind("commitlog") is Kind.COMMITLOG
    assert reason("standin_too_old") is TOO_OLD and reason("expired") is Reason.EXPIRED
    with pytest.raises(ValueError, match="already retentiond's own"):
        register_kind("commitlog")
    with pytest.raises(ValueError, match="already retentiond's own"):
        register_reason("newest_file")
    for bad in ("", "Upper", "9lives", "has space", "x" * 65):
        with pytest.raises(ValueError, match="lower-case"):
            register_reason(bad)
    with pytest.raises(ValueError, match="not a file kind"):
        file_kind("never_registered")


def test_the_stand_in_imports_nothing_of_the_kinds() -> None:
    import ast

    import tests.standin.kind as module

    tree = ast.parse(Path(module.__file__ or "").read_text())
    imported = {
        name
        for node in ast.walk(tree)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }
    assert "retentiond.reasons" in imported
    assert not [m for m in imported if m == "retentiond.kinds" or m.startswith("retentiond.kinds.")]
