"""A progress line on stderr when -- and only when -- stderr is a terminal: ``plan``, ``once``
and ``gen-store`` run as separate processes with their stderr on a pseudo-terminal (``pty``),
then on a pipe. ``analyze`` turns Spark's own progress bar on for a terminal."""

from __future__ import annotations

import importlib.util
import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from retentiond.commands.progress import Progress
from tests.conftest import expired_spec, make_store, need, run_cli

ERASE = "\r\x1b[K"


def on_a_terminal(*args: str, tmp: Path) -> tuple[int, str, str]:
    """``python -m retentiond ARGS`` with stderr on a pseudo-terminal and stdout in a file:
    (exit code, stdout, what the terminal received)."""
    master, slave = pty.openpty()
    out_path = tmp / "stdout.txt"
    with open(out_path, "w") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-m", "retentiond", *args],
            stdout=stdout, stderr=slave, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    os.close(slave)
    received = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        received += chunk
    os.close(master)
    code = proc.wait(timeout=120)
    return code, out_path.read_text(), received.decode(errors="replace")


@pytest.mark.parametrize(
    ("command", "label"),
    [(("plan",), "retentiond plan:"), (("plan", "--json"), "retentiond plan:"),
     (("once", "--dry-run"), "retentiond once:"), (("once",), "retentiond once:")],
    ids=["plan", "plan-json", "once-dry-run", "once"],
)  # fmt: skip
def test_plan_and_once_draw_a_progress_line_on_a_terminal_only(
    tmp_path: Path, command: tuple[str, ...], label: str
) -> None:
    store = make_store(tmp_path / "a", expired_spec())
    code, out, terminal = on_a_terminal(*command, "--config", str(store.config), tmp=tmp_path)
    assert code == 0, terminal
    assert label in terminal and ERASE in terminal
    assert ERASE in terminal[terminal.rindex(label) :]  # erased when the command is done
    assert "\x1b" not in out and "\r" not in out  # stdout carries the output alone

    other = make_store(tmp_path / "b", expired_spec())
    piped = run_cli(*command, "--config", str(other.config))
    assert piped.code == 0, piped.err
    assert label not in piped.err and "\x1b[K" not in piped.err
    assert ("plan: delete" in out) == ("plan: delete" in piped.out)


def test_once_reports_its_phases_and_deletions(tmp_path: Path) -> None:
    store = make_store(tmp_path, expired_spec())
    code, out, terminal = on_a_terminal("once", "--config", str(store.config), tmp=tmp_path)
    assert code == 0, terminal
    assert "retentiond once: planning commitlog" in terminal
    assert "1 files deleted" in terminal  # drawn at the first deletion
    assert "deleted: " in out


@pytest.mark.parametrize("kind", ["rocketmq", "kafka"])
def test_gen_store_draws_a_progress_line_on_a_terminal_only(tmp_path: Path, kind: str) -> None:
    code, out, terminal = on_a_terminal(
        "gen-store", "--kind", kind, str(tmp_path / "tty"), tmp=tmp_path
    )
    assert code == 0, terminal
    assert "retentiond gen-store:" in terminal and ERASE in terminal
    assert ("message " if kind == "rocketmq" else "partition ") in terminal
    assert out.startswith("generated ")
    piped = run_cli("gen-store", "--kind", kind, str(tmp_path / "pipe"))
    assert piped.code == 0, piped.err
    assert "retentiond gen-store:" not in piped.err and "\x1b[K" not in piped.err


def test_progress_writes_nothing_when_not_a_terminal() -> None:
    stream = io.StringIO()
    with Progress("x", stream=stream) as progress:
        progress.update("working")
    assert not progress.enabled and stream.getvalue() == ""


def test_analyze_turns_sparks_progress_bar_on_for_a_terminal_only() -> None:
    need(importlib.util.find_spec("pyspark") is not None, "pyspark is not installed")
    from retentiond.analytics.job import local_conf

    assert local_conf(True)["spark.ui.showConsoleProgress"] == "true"
    assert local_conf(False)["spark.ui.showConsoleProgress"] == "false"
