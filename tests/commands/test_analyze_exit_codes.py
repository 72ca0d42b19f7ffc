"""`retentiond analyze` never fails silently: no input or no records is exit 12 with no report
written, no Java is exit 11, both said in one line before Spark starts; a fleet that never
shipped a record type (layout 1's ``round_summary/``) is analysed without a Java stack trace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_store, need, run_cli


def analyze(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retentiond", "analyze", *args],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip


def need_spark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        need(False, "pyspark is not installed (pip install -e '.[spark]')")


def test_a_missing_or_empty_input_is_exit_12_before_spark_starts(tmp_path: Path) -> None:
    need_spark()
    out = tmp_path / "out"
    r = analyze("--input", str(tmp_path / "no-such-dir"), "--output", str(out))
    assert r.returncode == 12, r.stderr
    assert r.stderr.strip() == f"error: --input {tmp_path / 'no-such-dir'}: no such directory; " \
        "no report written"  # fmt: skip
    assert r.stdout == "" and not out.exists()

    empty = tmp_path / "empty"
    (empty / "deletion" / "dt=2024-05-01").mkdir(parents=True)  # directories, no file
    r = analyze("--input", str(empty), "--output", str(out))
    assert r.returncode == 12, r.stderr
    assert "no shipped records" in r.stderr and "no report written" in r.stderr
    assert "java" not in r.stderr.lower() and not out.exists()


def test_no_java_is_exit_11(tmp_path: Path) -> None:
    need_spark()
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYSPARK_GATEWAY_PORT")}
    env["PATH"] = str(tmp_path)  # no java there
    r = analyze("--input", str(tmp_path), "--output", str(tmp_path / "out"), env=env)
    assert r.returncode == 11, r.stderr
    assert "needs Java 17+" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_a_fleet_without_round_summaries_is_analysed_without_a_java_trace(
    tmp_path: Path,
) -> None:
    """One Spark run: deletions and rounds shipped in layout 1 (a directory per record type),
    no round_summary/ at all."""
    need_spark()
    need(shutil.which("java") is not None, "java is not installed")
    made = make_store(tmp_path, retentiond={"ship": {"layout": 1}})
    assert run_cli("once", "--config", str(made.config)).code == 0
    target, out = tmp_path / "target", tmp_path / "out"
    target.mkdir()
    shipped = run_cli("ship", "--config", str(made.config), "--target", str(target), "--flush")
    assert shipped.code == 0, shipped.err
    shutil.rmtree(target / "round_summary", ignore_errors=True)
    assert (target / "deletion").is_dir() and not (target / "round_summary").exists()

    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    r = analyze("--master", "local[1]", "--input", str(target), "--output", str(out), env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "FileNotFoundException" not in r.stderr and "\tat " not in r.stderr, r.stderr
    assert "analysed up to" in r.stdout
    assert (out / "report" / "report.md").exists()


@pytest.mark.parametrize(
    ("where", "holds_records"),
    [
        ("v3/deletions/dt=2024-05-01/cluster=c/broker=b", True),
        ("v3/rounds/dt=2024-05-01/cluster=c/broker=b", True),
        ("v3/other/dt=2024-05-01/cluster=c/broker=b", False),  # no type the job reads
        ("v2/dt=2024-05-01/cluster=c/broker=b", True),
        ("round_summary/dt=2024-05-01/cluster=c/broker=b", True),
        ("intent/dt=2024-05-01/cluster=c/broker=b", False),
    ],
)
def test_the_input_check_knows_every_layout(tmp_path: Path, where: str, holds_records) -> None:
    """What decides exit 12 before Spark starts (no Spark needed to check it)."""
    from retentiond.commands.analyze import local_input_problem

    (tmp_path / where).mkdir(parents=True)
    (tmp_path / where / "h-0000abcd-000000000001.jsonl.gz").write_bytes(b"")
    problem = local_input_problem(str(tmp_path))
    if holds_records:
        assert problem is None
    else:
        assert problem == (
            f"{tmp_path}: no shipped records (nothing under deletion, round, round_summary, "
            "v2, v3/deletions, v3/rounds)"
        )
