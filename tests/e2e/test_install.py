"""The README's "Install on a broker host", followed in a temporary root: a wheel built from
the sources, installed into a fresh venv without the ``spark`` extra, the configuration in
``etc/retentiond/``, and the daemon started from that venv on a generated store until it logs
its first round and answers `status`. ``pip show pyspark`` in that venv finds nothing.

Dependencies come from PyPI, pinned to the versions of the environment running the tests so
that pip's cache usually serves them.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.daemons import wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PIP = ("-m", "pip", "--disable-pip-version-check", "--no-input")


def _readme_install_section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Install on a broker host")
    return text[start : text.index("\n## ", start + 1)]


def _run(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run from / (a cwd of the sources would put them on ``python -c``'s path)."""
    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, env=env, timeout=timeout, cwd="/"
    )
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _constraints(path: Path) -> Path:
    """``name==version`` of every distribution here but retentiond: the venv gets the same."""
    pins = sorted(
        {
            f"{d.metadata['Name']}=={d.version}"
            for d in importlib.metadata.distributions()
            if d.metadata["Name"] and d.metadata["Name"].lower() != "retentiond"
        }
    )
    path.write_text("\n".join(pins) + "\n")
    return path


def test_the_readme_install_steps_give_a_daemon_without_spark(
    tmp_path: Path, short_dir: Path
) -> None:
    section = _readme_install_section()
    # What this test does is what the section says.
    for step in (
        "python3 -m pip wheel --no-deps -w dist .",
        "python3 -m venv /opt/retentiond",
        "/opt/retentiond/bin/pip install dist/retentiond-*.whl",
        "/opt/retentiond/bin/pip show pyspark",
        "/etc/retentiond/broker-a.yaml",
        "systemctl enable --now retentiond@broker-a",
    ):
        assert step in section, step
    unit = (REPO / "systemd" / "retentiond@.service").read_text()
    [exec_start] = re.findall(r"^ExecStart=(\S+)", unit, re.M)
    assert f"ln -sf /opt/retentiond/bin/retentiond {exec_start}" in section

    # Build the wheel from a copy of the sources (a build writes into its tree).
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "retentiond", src / "retentiond", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run(sys.executable, *PIP, "wheel", "-q", "--no-deps", "-w", src / "dist", src, env=env)
    [wheel] = (src / "dist").glob("retentiond-*.whl")

    # A venv of its own, the wheel without extras.
    venv = tmp_path / "opt" / "retentiond"
    _run(sys.executable, "-m", "venv", venv, env=env)
    python, pip, exe = venv / "bin" / "python", venv / "bin" / "pip", venv / "bin" / "retentiond"
    constraints = _constraints(tmp_path / "constraints.txt")
    _run(pip, *PIP[2:], "install", "-q", "-c", constraints, wheel, env=env)
    shown = subprocess.run(
        [pip, "show", "pyspark"], capture_output=True, text=True, env=env, timeout=60, cwd="/"
    )
    assert shown.returncode != 0 and "not found" in shown.stderr.lower()
    for module in ("pyspark", "duckdb", "matplotlib", "pytest"):
        probe = subprocess.run(
            [python, "-c", f"import {module}"], env=env, capture_output=True, cwd="/"
        )
        assert probe.returncode != 0, f"{module} is importable in the daemon's venv"
    where = _run(python, "-c", "import retentiond; print(retentiond.__file__)", env=env)
    assert Path(where.strip()).is_relative_to(venv), where  # the installed copy, not the tree

    # The configuration under etc/retentiond/, on a store the installed command generates.
    etc = tmp_path / "etc" / "retentiond"
    config = etc / "broker-a.yaml"
    _run(exe, "gen-store", tmp_path / "store", "--preset", "demo", "--config-out", config, env=env)
    with open(config, "a") as fh:
        fh.write(
            "deleteWhen: '"
            + ";".join(f"{h:02d}" for h in range(24))
            + "'\n"
            + "cleanResourceInterval: 1000\n"
            + "retentiond:\n"
            + "  initialDelay: 100\n"
            + f"  controlSocket: {short_dir / 'control.sock'}\n"
            + f"  journal: {{dir: {tmp_path / 'journal'}}}\n"
            + "  metrics: {listen: '127.0.0.1:0'}\n"
        )
    _run(exe, "check-config", config, env=env)

    # The daemon, as the unit starts it, until its first round and a `status` answer.
    log = tmp_path / "daemon.log"
    with open(log, "wb") as fh:
        daemon = subprocess.Popen(
            [exe, "--log-format", "json", "run", "--config", config],
            stdout=fh,
            stderr=fh,
            env=env,
            cwd="/",
        )
    try:
        wait_until("the first round", lambda: '"round done"' in log.read_text(), 60, log)
        status = json.loads(_run(exe, "status", "--config", config, "--json", env=env))
        assert status["rounds"]["count"] >= 1
        assert status["store"] == str(tmp_path / "store")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=15) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
