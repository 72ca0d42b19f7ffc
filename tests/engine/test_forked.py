"""The forked child of a one-off command: a result comes back whole, or the caller is told to
do the work itself; no permission outlives the command that gave it."""

from __future__ import annotations

import os

import pytest

from retentiond.engine import forked


def test_result_comes_back_whole() -> None:
    big = bytes(range(256)) * 8192  # 2 MiB: more than a pipe holds at once
    child = forked.Forked(lambda: (os.getpid(), big))
    pid, data = child.result()
    assert pid != os.getpid()
    assert data == big


def test_failing_child_is_worker_failed() -> None:
    def boom() -> int:
        raise RuntimeError("no")

    with pytest.raises(forked.WorkerFailed):
        forked.Forked(boom).result()


def test_killed_child_is_worker_failed() -> None:
    def die() -> int:
        os.kill(os.getpid(), 9)
        return 1

    with pytest.raises(forked.WorkerFailed):
        forked.Forked(die).result()


def test_cancel_reaps_the_child() -> None:
    child = forked.Forked(lambda: 1)
    pid = child.pid
    child.cancel()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_allowed_only_within_one_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(forked.AT_LEAST_ENV, raising=False)
    assert not forked.allowed(10**9, 1)
    with forked.one_off():
        assert forked.allowed(5_000, 2_000) is ((os.cpu_count() or 1) >= 2)
        assert not forked.allowed(1_000, 2_000)
        with forked.one_off(at_least=0):
            assert forked.allowed(1, 2_000) is ((os.cpu_count() or 1) >= 2)
        assert not forked.allowed(1_000, 2_000)
    assert not forked.allowed(10**9, 1)


def test_environment_sets_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(forked.AT_LEAST_ENV, "0")
    with forked.one_off():
        assert forked.allowed(1, 2_000) is ((os.cpu_count() or 1) >= 2)
    monkeypatch.setenv(forked.AT_LEAST_ENV, "not a number")
    with forked.one_off():
        assert not forked.allowed(1_000, 2_000)


def test_ready_once_the_child_is_done() -> None:
    r, w = os.pipe()
    child = forked.Forked(lambda: os.read(r, 1))
    assert not child.ready()  # blocked until the parent writes
    os.write(w, b"x")
    assert child.result() == b"x"
    assert child.ready()
    os.close(r)
    os.close(w)


def test_whole_plan_is_said_by_the_command() -> None:
    assert forked.whole_plan()
    with forked.one_off(whole_plan=False):
        assert not forked.whole_plan()
        with forked.one_off():
            assert forked.whole_plan()
        assert not forked.whole_plan()
    assert forked.whole_plan()
