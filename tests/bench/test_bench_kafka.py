"""``make bench-kafka`` on a tiny log dir: every code path of ``bench/bench_kafka.py`` (the
store generated, the in-process plan, ``Kafka.plan_round`` through the engine's ``Cleaner``,
the I/O floor beside the CLI ``plan`` and ``rescue --dry-run``) runs to its end. Nothing here
is timed: the figures are the bench's, on a quiet machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_bench_kafka_runs_every_path_on_a_small_log_dir(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    args = ["--dir", str(bench), "--partitions", "8", "--repeat", "1"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_kafka.py"), *args, "--plan-round",
         "--io-floor"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "8 partitions x 20 segments" in out
    assert "delete:retention_ms_breach" in out and "delete:retention_bytes_breach" in out
    for line in (
        "retentiond plan, CLI:",
        "plan, in-process:",
        "Kafka.plan_round + render:",
        "I/O floor (",
        "--dry-run, CLI:",
        "load after:",
    ):
        assert line in out, out
    assert (bench / "logs").is_dir() and (bench / "server.properties").is_file()
