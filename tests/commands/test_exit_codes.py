"""Never a silent failure, never a traceback: the command line as an operator runs it.

Each test runs the real CLI (``python -m retentiond``) or the real daemon and reads its exit
code, its stdout and its stderr: usage errors exit 2 with a message, a closed output pipe
exits 141, a failed ship says what stayed local, a refused unlink is said once per attempt, and
an incomplete view of /proc is said in words, once, and by ``plan`` only where it changed
the plan. The exit codes are the README's table (``retentiond.commands.common``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from retentiond.commands import _GROUP_OF
from tests.conftest import chattr, make_store, need, run_cli
from tests.helpers.daemons import RETENTIOND, wait_until
from tests.helpers.safety_procs import Holder
from tests.helpers.stores import records

DROP_CAPS = [
    "setpriv",
    "--securebits",
    "+noroot,+noroot_locked",
    "--bounding-set",
    "-all",
    "--inh-caps",
    "-all",
]  # fmt: skip  (root without any capability: it may not look into processes that have some)


def to_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with its stdout a pipe nobody reads any more (``| head -0``), every time: the
    read end is closed before the process starts."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [*RETENTIOND, *args], stdout=write, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(write)


# ---- usage (2) --------------------------------------------------------------------------------


def test_an_unknown_log_level_is_a_usage_error_before_or_after_the_command(tmp_path: Path) -> None:
    made = make_store(tmp_path)
    for args in (
        ("--log-level", "foo", "plan", "--config", str(made.config)),
        ("plan", "--config", str(made.config), "--log-level", "foo"),
    ):
        r = run_cli(*args)
        assert r.code == 2, r
        assert "'foo' is not a log level" in r.err and "Traceback" not in r.err
        assert r.out == ""


def test_global_options_work_after_the_command_and_usage_names_every_command(
    tmp_path: Path,
) -> None:
    made = make_store(tmp_path)
    # After the command, and it takes effect: at warning level the round's "deleted" info
    # lines are not logged, though the round deleted (its stdout says so).
    r = run_cli("once", "--config", str(made.config), "--log-level", "warning")
    assert r.code == 0, r.err
    assert "deleted: " in r.out
    assert '"deleted"' not in r.err
    r = run_cli("plan", "--config", str(made.config), "--log-format", "console", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["type"] == "plan"
    # A usage error of a named command (only its group is loaded) lists every command.
    r = run_cli("plan", "--config", str(made.config), "--no-such-flag")
    assert r.code == 2
    assert "unrecognized arguments: --no-such-flag" in r.err
    assert "{" + ",".join(_GROUP_OF) + "}" in r.err.replace("\n", "").replace(" ", "")


def test_gen_store_into_a_non_empty_directory_is_a_usage_error(tmp_path: Path) -> None:
    target = tmp_path / "store"
    target.mkdir()
    (target / "something").write_text("kept")
    for kind in ("rocketmq", "kafka"):
        r = run_cli("gen-store", "--kind", kind, str(target))
        assert r.code == 2, r
        assert "not empty" in r.err and "nothing was written" in r.err
        assert "Traceback" not in r.err
        assert [p.name for p in target.iterdir()] == ["something"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = run_cli("gen-store", str(afile))
    assert r.code == 2 and "not a directory" in r.err and "Traceback" not in r.err


# ---- a closed output pipe (141) ---------------------------------------------------------------


def test_a_closed_output_pipe_exits_141_without_a_traceback(
    tmp_path: Path, short_dir: Path
) -> None:
    made = make_store(
        tmp_path,
        cleanResourceInterval=3_600_000,
        retentiond={"initialDelay": 3_600_000, "controlSocket": str(short_dir / "c.sock")},
    )
    log = tmp_path / "daemon.log"
    with open(log, "wb") as fh:
        daemon = subprocess.Popen(
            [*RETENTIOND, "run", "--config", str(made.config)], stdout=fh, stderr=fh
        )
    try:
        wait_until("the daemon's socket", (short_dir / "c.sock").exists, 60, log)
        for args in (("status",), ("status", "--json"), ("plan",), ("plan", "--json")):
            r = to_closed_pipe(*args, "--config", str(made.config))
            assert r.returncode == 141, (args, r.stderr)
            assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
        # The daemon keeps SIGPIPE ignored: it is still there and answers.
        assert daemon.poll() is None
        assert run_cli("status", "--config", str(made.config)).code == 0
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    assert daemon.returncode == 0, log.read_text()[-3000:]


# ---- ship -------------------------------------------------------------------------------------


def test_ship_refuses_a_relative_target_and_says_what_stayed_when_it_fails(tmp_path: Path) -> None:
    made = make_store(tmp_path)
    assert run_cli("once", "--config", str(made.config)).code == 0  # a journal to ship
    config = str(made.config)

    r = run_cli("ship", "--config", config, "--target", "relative/dir")
    assert r.code == 2, r
    assert "must be an absolute path" in r.err and "shipped" not in r.out

    r = run_cli("ship", "--config", config, "--target", str(tmp_path / "no-such-target"))
    assert r.code == 10, r
    assert "shipped 0" not in r.out, r.out
    (line,) = [x for x in r.err.splitlines() if x.startswith("error:")]
    assert "not a reachable directory" in line and "nothing was shipped" in line
    assert "the active segment" in line and str(made.journal) in line

    target = tmp_path / "target"
    target.mkdir()
    r = run_cli("ship", "--config", config, "--target", str(target))
    assert r.code == 0, r.err
    assert "shipped 0 segments" in r.out and "pass --flush" in r.out
    r = run_cli("ship", "--config", config, "--target", str(target), "--flush")
    assert r.code == 0, r.err
    assert "shipped 1 segments" in r.out and "--flush" not in r.out
    assert list(target.glob("v3/deletions/dt=*/*/*/*.jsonl.gz"))


# ---- a refused unlink: one line per attempt ---------------------------------------------------


def test_a_refused_unlink_is_said_once(immutable_dir: Path) -> None:
    made = make_store(immutable_dir)
    first = made.generated.commitlog_files[0].path
    chattr("+i", first)
    try:
        r = run_cli("once", "--config", str(made.config))
    finally:
        chattr("-i", first)
    assert r.code == 5, r.err  # the round ran; a planned deletion did not happen
    logged = [json.loads(x) for x in r.err.splitlines() if x.startswith("{")]
    about = [e for e in logged if e.get("file") == str(first)]
    assert [e["event"] for e in about] == [
        "unlink refused: the file is kept and retried with backoff"
    ], about
    assert about[0]["errno"] == "EPERM" and about[0]["attempts"] == 1
    assert "NOT deleted (unlink: [Errno 1] Operation not permitted" in r.out
    (abort,) = records(made.journal, "abort")
    assert abort["file"] == str(first)


# ---- an incomplete view of /proc --------------------------------------------------------------


def _need_setpriv() -> None:
    need(os.geteuid() == 0, "dropping capabilities needs root to start with")
    need(shutil.which("setpriv") is not None, "setpriv (util-linux) is needed")


def test_plan_says_an_incomplete_proc_view_only_where_it_changed_the_plan(tmp_path: Path) -> None:
    """Root without CAP_SYS_PTRACE cannot look into processes that have capabilities (this
    test's own runner, at least; a VM's init). A plan whose files nobody holds is the same
    as with a full view (a lease proves each free): not a word about it. A file that some
    such process holds counts as held: then, and only then, one note saying why."""
    _need_setpriv()
    made = make_store(tmp_path)
    plan = [*DROP_CAPS, *RETENTIOND, "plan", "--config", str(made.config)]
    r = subprocess.run(plan, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "cannot see every process" not in r.stderr, r.stderr
    assert "held_by_other_process" not in r.stdout

    first = made.generated.commitlog_files[0].path
    with Holder([first]):  # a process with capabilities: this plan may not look into it
        r = subprocess.run(plan, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "held_by_other_process" in r.stdout
    notes = [x for x in r.stderr.splitlines() if "cannot see every process" in x]
    assert len(notes) == 1, r.stderr
    (note,) = notes
    assert note.startswith("note: 1 file is kept as held by another process because retentiond")
    assert "without CAP_SYS_PTRACE" in note and "Run retentiond as root" not in note
    assert not note.startswith("{")  # words, not a log record


def test_check_config_says_nothing_about_the_proc_view(tmp_path: Path) -> None:
    _need_setpriv()
    made = make_store(tmp_path)
    r = subprocess.run(
        [*DROP_CAPS, *RETENTIOND, "check-config", str(made.config)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


@pytest.mark.slow
def test_the_daemon_says_an_incomplete_proc_view_once_in_words(
    tmp_path: Path, short_dir: Path
) -> None:
    """Three rounds without CAP_SYS_PTRACE, a held file each: one warning at start, whose
    text names what it cannot see and the remedy that fits a root without the capability."""
    _need_setpriv()
    made = make_store(
        tmp_path,
        cleanResourceInterval=200,
        deleteFileBatchMax=1,
        retentiond={"initialDelay": 0, "controlSocket": str(short_dir / "c.sock")},
    )
    first = made.generated.commitlog_files[0].path
    log = tmp_path / "daemon.log"
    with Holder([first]), open(log, "wb") as fh:
        daemon = subprocess.Popen(
            [*DROP_CAPS, *RETENTIOND, "run", "--config", str(made.config)], stdout=fh, stderr=fh
        )
        try:
            wait_until("three rounds", lambda: len(records(made.journal, "round")) >= 3, 120, log)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
    assert daemon.returncode == 0, log.read_text()[-3000:]
    logged = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    said = [e for e in logged if "cannot see every process" in e["event"]]
    assert len(said) == 1, said
    (warning,) = said
    assert warning["level"] == "warning" and warning["unreadable_count"] >= 1
    assert "cannot be looked into (pid " in warning["event"]
    assert "without CAP_SYS_PTRACE" in warning["event"]
    assert "Run retentiond as root" not in warning["event"]
    assert first.exists()  # held, and its forcible interval has not passed


def test_an_internal_error_is_one_line_naming_the_traceback_file(tmp_path: Path) -> None:
    """A bug (here a command that raises) exits 1 with one line on stderr; the traceback is
    in the file that line names."""
    script = (
        "import sys\n"
        "import retentiond.commands.store as store\n"
        "def boom(args):\n"
        "    raise RuntimeError('a bug')\n"
        "store.cmd_check_config = boom\n"
        "from retentiond.cli import main\n"
        "sys.argv[0] = 'retentiond'\n"
        "raise SystemExit(main())\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("STATE_DIRECTORY", None)
    r = subprocess.run(
        [sys.executable, "-c", script, "check-config", "x.yaml"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith("retentiond check-config: internal error (RuntimeError: a bug); ")
    (kept,) = tmp_path.glob("retentiond-check-config-*.traceback")
    assert line.endswith(f"the traceback is in {kept}")
    assert "Traceback (most recent call last)" in kept.read_text()
    assert "RuntimeError: a bug" in kept.read_text()
