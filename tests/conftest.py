"""Fixtures shared by the suites: real stores on real filesystems, a real small tmpfs."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(condition: bool, why: str) -> None:
    """Skip on a developer's machine, fail loudly in CI: CI must run every test."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"cannot run in CI: {why}")
    pytest.skip(why)


@dataclass
class Tmpfs:
    path: Path

    def usage(self) -> tuple[int, int]:
        st = os.statvfs(self.path)
        total = st.f_blocks * st.f_frsize
        return total - st.f_bfree * st.f_frsize, total

    def fill_to(self, ratio: float) -> Path:
        """Add (or grow) a filler file until used/total is ``ratio``; returns its path."""
        filler = self.path / "filler.bin"
        used, total = self.usage()
        missing = int(ratio * total) - used
        assert missing > 0, f"already at {used / total:.3f}, asked for {ratio}"
        with open(filler, "ab") as fh:
            chunk = b"\xa5" * (1 << 20)
            while missing > 0:
                n = min(missing, len(chunk))
                fh.write(chunk[:n])
                missing -= n
        return filler


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Tmpfs]:
    """A real 64 MiB tmpfs (needs root; CI runs as root)."""
    need(os.geteuid() == 0, "mounting a tmpfs needs root")
    mnt = tmp_path / f"tmpfs-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], check=True)
    try:
        yield Tmpfs(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


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
