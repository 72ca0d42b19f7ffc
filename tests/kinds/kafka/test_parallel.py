"""``plan`` and ``rescue --dry-run`` on two processes (``kinds/kafka/parallel.py``): the text
and the rescue report of a real log dir split between this process and a forked child are
byte for byte those of one process, with a fixed clock; a child that fails, crashes or hands
back something unusable costs only time (its half is done here), never a different result.
The split is forced on a small store here (``forked.one_off(at_least=0)``), and a child
made to fail through ``parallel.child_hook``, which runs first in the child."""

from __future__ import annotations

import fcntl
import io
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from retentiond.engine import forked
from retentiond.engine.cleaner import Cleaner
from retentiond.engine.rescue import RescueRequest
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.kafka import kind as kafka_kind
from retentiond.kinds.kafka import parallel
from retentiond.kinds.kafka.kind import Kafka
from retentiond.kinds.kafka.plan import KafkaPlan
from retentiond.storegen.kafka import (
    KafkaStoreSpec,
    generate_kafka_store,
    write_server_properties,
)
from retentiond.text import jsonstream
from tests.conftest import Tmpfs

DELETE_DIR = "gone-0.0123456789abcdef0123456789abcdef-delete"


@pytest.fixture
def store(tmpfs: Tmpfs) -> tuple[Path, int]:
    """Five topics, 17 partitions (one with a record in the future), a ``-delete`` dir past
    its delay in the middle of the scan's order and files that are no Kafka file on both
    sides of it; on a tmpfs of its own, so that what the rescue needs stays put. The
    clock is two minutes ahead: the ``-delete`` dir, renamed now, is past its delay."""
    spec = KafkaStoreSpec(
        topics={"orders": 6, "clicks": 3, "audit-log": 2, "events": 5, "metrics": 1},
        now_ms=time.time_ns() // 1_000_000 + 120_000,
        records_per_partition=120,
        value_bytes=100,
        segment_bytes=4096,
    )
    log_dir = generate_kafka_store(tmpfs.path / "logs", spec).log_dir
    shutil.copytree(log_dir / "clicks-0", log_dir / DELETE_DIR)
    (log_dir / "audit-log-1" / "notes.txt").write_text("not Kafka's")
    (log_dir / "orders-4" / "00000000000000000000.log.bak").write_text("not Kafka's")
    props = write_server_properties(tmpfs.path / "server.properties", [log_dir])
    return props, spec.now_ms


def _kind(props: Path) -> Kafka:
    kind = kind_for(load_settings(str(props)))
    assert isinstance(kind, Kafka)
    return kind


def _plan(props: Path, now: int, every: bool, split: bool) -> str:
    """``plan``'s text (``every``: ``--all``), in one process or split."""
    parallel.way("")
    kind = _kind(props)
    cleaner = Cleaner(kind, clock_ms=lambda: now, announce_proc_view=False)
    # as `plan` says it: --all may use every part of the plan
    with forked.one_off(at_least=0 if split else 1 << 62, whole_plan=every):
        plan = cleaner.plan()
        assert isinstance(plan, KafkaPlan)
        return kind.render_plan(plan, all_queue_files=every)


def _document(props: Path, now: int, split: bool, whole: bool = True) -> str:
    """``plan --json``'s document (``whole``: as `plan --json` says it)."""
    parallel.way("")
    kind = _kind(props)
    cleaner = Cleaner(kind, clock_ms=lambda: now, announce_proc_view=False)
    with forked.one_off(at_least=0 if split else 1 << 62, whole_plan=whole):
        plan = cleaner.plan()
    assert isinstance(plan, KafkaPlan)
    out = io.StringIO()
    jsonstream.dump(plan.as_document(), out)
    return out.getvalue()


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], None]], None]:
    def set_hook(fn: Callable[[], None]) -> None:
        monkeypatch.setattr(parallel, "child_hook", fn)

    return set_hook


def _marker(path: Path) -> Callable[[], None]:
    """A child hook that leaves a file behind: the child ran."""

    def mark() -> None:
        path.write_text("forked")

    return mark


@pytest.mark.parametrize("every", [False, True])
def test_plan_text_of_two_processes_is_that_of_one(
    store: tuple[Path, int], tmp_path: Path, every: bool, hook: Callable[..., None]
) -> None:
    props, now = store
    one = _plan(props, now, every, split=False)
    assert parallel.last_way == ""
    marker = tmp_path / "child-ran"
    hook(_marker(marker))
    two = _plan(props, now, every, split=True)
    if every:  # --all is made from the whole plan: one process makes it
        assert not marker.exists() and parallel.last_way == ""
    else:
        assert marker.read_text() == "forked"
        assert parallel.last_way == "two processes"
    assert two == one
    assert "topic orders total:" in one and DELETE_DIR in one


def test_plan_json_is_made_by_one_process(store: tuple[Path, int]) -> None:
    """`plan --json` reads every partition: no child's work to throw away."""
    props, now = store
    one = _document(props, now, split=False)
    assert _document(props, now, split=True) == one
    assert parallel.last_way == ""


def test_the_whole_plan_of_a_split_is_that_of_one(store: tuple[Path, int]) -> None:
    """Split for the text, then asked for every partition: the child's half is planned here."""
    props, now = store
    one = _document(props, now, split=False)
    assert _document(props, now, split=True, whole=False) == one
    assert parallel.last_way == "two processes"


def _crash() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _raise() -> None:
    raise RuntimeError("the child failed")


def _disagree() -> None:
    """The child sees an error the parent does not: the halves are of different plans."""
    real = kafka_kind._errors

    def errors(snapshot: Any, planned: Any) -> list[str]:
        return [*real(snapshot, planned), "only the child sees this"]

    kafka_kind._errors = errors  # in the child only


@pytest.mark.parametrize("fail", [_crash, _raise, _disagree])
def test_a_failing_child_leaves_the_same_plan_text(
    store: tuple[Path, int], fail: Callable[[], None], hook: Callable[..., None]
) -> None:
    props, now = store
    one = _plan(props, now, False, split=False)
    hook(fail)
    assert _plan(props, now, False, split=True) == one
    assert parallel.last_way == "the child's half here"


def test_below_the_threshold_one_process_plans(
    store: tuple[Path, int], tmp_path: Path, hook: Callable[..., None]
) -> None:
    props, now = store
    marker = tmp_path / "child-ran"
    hook(_marker(marker))
    parallel.way("")
    kind = _kind(props)
    cleaner = Cleaner(kind, clock_ms=lambda: now, announce_proc_view=False)
    with forked.one_off():  # 17 partitions: far below MIN_PARTITIONS
        text = kind.render_plan(cleaner.plan())  # type: ignore[arg-type]
    assert not marker.exists() and parallel.last_way == ""
    assert text == _plan(props, now, False, split=False)
    # and never outside a one-off command (the daemon)
    kind.render_plan(cleaner.plan())  # type: ignore[arg-type]
    assert not marker.exists() and parallel.last_way == ""


def _rescue(
    props: Path, now: int, request: RescueRequest, split: bool
) -> tuple[list[str], dict[str, object], list[tuple[str, str]], tuple[str, ...]]:
    """The report's lines, its document, the problems the round reports and its errors."""
    parallel.way("")
    kind = _kind(props)
    kind.begin_rescue(request)
    cleaner = Cleaner(kind, clock_ms=lambda: now, announce_proc_view=False)
    with forked.one_off(at_least=0 if split else 1 << 62):
        result = cleaner.run_round(dry_run=True)
    report = kind.rescue_report()
    return list(report.lines), report.document, result.plan.problems(), result.plan.errors


def _targets(props: Path) -> list[RescueRequest]:
    """Far beyond what the log dir holds (everything goes), and two that are met on the
    way: in the first half of the scan and in the second."""
    avail = os.statvfs(props.parent).f_bavail * os.statvfs(props.parent).f_frsize
    held = sum(f.stat().st_blocks * 512 for f in (props.parent / "logs").rglob("*.log"))
    return [
        RescueRequest(free_bytes=avail + (1 << 40)),
        RescueRequest(free_bytes=avail + held // 5),
        RescueRequest(free_bytes=avail + held * 3 // 5),
    ]


def test_rescue_dry_run_of_two_processes_is_that_of_one(
    store: tuple[Path, int], tmp_path: Path, hook: Callable[..., None]
) -> None:
    props, now = store
    for request in _targets(props):
        one = _rescue(props, now, request, split=False)
        marker = tmp_path / "child-ran"
        marker.unlink(missing_ok=True)
        hook(_marker(marker))
        two = _rescue(props, now, request, split=True)
        assert marker.read_text() == "forked"
        assert parallel.last_way == "two processes"
        assert two == one
    lines, _doc, problems, _errors = one
    assert any(DELETE_DIR in ln and "[delete_dir_leftover]" in ln for ln in lines)
    assert {p.rsplit("/", 2)[-2] for p, _why in problems} == {"audit-log-1", "orders-4"}


@pytest.mark.parametrize("fail", [_crash, _raise, _disagree])
def test_a_failing_child_leaves_the_same_rescue(
    store: tuple[Path, int], fail: Callable[[], None], hook: Callable[..., None]
) -> None:
    props, now = store
    request = _targets(props)[0]
    one = _rescue(props, now, request, split=False)
    hook(fail)
    assert _rescue(props, now, request, split=True) == one
    assert parallel.last_way == "one process, after two did not fit"


def test_beyond_retention_stays_in_one_process(
    store: tuple[Path, int], tmp_path: Path, hook: Callable[..., None]
) -> None:
    props, now = store
    request = replace(_targets(props)[0], beyond_retention=True)
    marker = tmp_path / "child-ran"
    one = _rescue(props, now, request, split=False)
    hook(_marker(marker))
    parallel.way("")
    assert _rescue(props, now, request, split=True) == one
    assert not marker.exists() and parallel.last_way == ""


def test_a_log_dir_another_process_holds_is_plan_only_in_both_halves(
    store: tuple[Path, int], tmp_path: Path
) -> None:
    """The ``.lock`` is probed once, before the fork: two probes at once would each take
    the other for a broker. Held by another holder, both halves say plan-only, and the
    rescue deletes nothing and says why, as one process does."""
    props, now = store
    lock = props.parent / "logs" / ".lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another open file: a holder to us
        one = _plan(props, now, False, split=False)
        assert "(plan-only: another process holds .lock)" in one
        assert _plan(props, now, False, split=True) == one
        assert parallel.last_way == "two processes"
        request = _targets(props)[0]
        held = _rescue(props, now, request, split=False)
        assert any("holds its .lock" in line for line in held[0])
        assert _rescue(props, now, request, split=True) == held
        assert parallel.last_way == "one process, after two did not fit"
    finally:
        os.close(fd)


def test_two_log_dirs_each_split(tmpfs: Tmpfs) -> None:
    spec = KafkaStoreSpec(
        topics={"orders": 5, "clicks": 2, "events": 4},
        now_ms=time.time_ns() // 1_000_000 + 120_000,
        records_per_partition=60,
        value_bytes=100,
        segment_bytes=2048,
    )
    dirs = [generate_kafka_store(tmpfs.path / name, spec).log_dir for name in ("a", "b")]
    (dirs[1] / "events-3" / "stray.txt").write_text("not Kafka's")
    props = write_server_properties(tmpfs.path / "server.properties", dirs)
    now = spec.now_ms
    for every in (False, True):
        two = _plan(props, now, every, split=True)
        assert parallel.last_way == ("" if every else "two processes")
        assert two == _plan(props, now, every, split=False)
    for request in _targets(props):
        one = _rescue(props, now, request, split=False)
        assert _rescue(props, now, request, split=True) == one
        assert parallel.last_way == "two processes"


def test_a_rescue_child_takes_partitions_spread_over_the_scan() -> None:
    """The child's share of a rescue is taken evenly along the partition dirs' names, so
    that each half holds a like share of every topic (of its reads and deletions)."""
    names = [f"t-{i:02d}" for i in range(12)]
    assert sorted(parallel._spread(names, 0.5)) == names[1::2]
    assert len(parallel._spread(names, 0.25)) == 3
    assert len(parallel._spread(names, 0.75)) == 9
    assert not parallel._spread(names[:1], 0.5)
