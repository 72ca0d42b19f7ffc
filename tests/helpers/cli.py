"""The command line as an operator runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class CliResult:
    code: int
    out: str
    err: str


# Root without its capabilities (util-linux setpriv): permission bits apply to it as to any
# other user, so a test can make a directory unreadable although CI runs as root.
DROP_CAPS = (
    "setpriv", "--securebits", "+noroot,+noroot_locked", "--bounding-set", "-all",
    "--inh-caps", "-all",
)  # fmt: skip


def without_caps() -> tuple[str, ...]:
    """The command prefix that makes a child honour permission bits: ``DROP_CAPS`` as root,
    nothing for any other user (the caller checks that setpriv exists when root)."""
    return DROP_CAPS if os.geteuid() == 0 else ()


def run_cli(*args: str, timeout: float = 120, prefix: Sequence[str] = ()) -> CliResult:
    """Run ``python -m retentiond`` as an operator would, as a separate process (under
    ``prefix``: ``without_caps()`` for a user whom permission bits stop)."""
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "retentiond", "--log-format", "json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)
