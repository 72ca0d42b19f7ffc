"""The command line as an operator runs it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str, timeout: float = 120) -> CliResult:
    """Run ``python -m retentiond`` as an operator would, as a separate process."""
    proc = subprocess.run(
        [sys.executable, "-m", "retentiond", "--log-format", "json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)
