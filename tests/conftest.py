"""Fixtures shared by the suites: real stores on real filesystems, a real small tmpfs, journals,
daemons as subprocesses. The helpers behind them are in ``tests/helpers/``."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from retentiond.journal.writer import Journal, Origin
from retentiond.storegen.rocketmq import StoreSpec
from tests.helpers.cli import CliResult, run_cli
from tests.helpers.daemons import Daemon, free_port, spawn_run, wait_until
from tests.helpers.stores import (
    ALL_HOURS,
    CLEAN_NOW,
    EXPIRED,
    ORIGIN,
    Store,
    by_type,
    expired_spec,
    make_store,
    records,
    rocketmq_ratio,
)

# Re-exported: the suites import these from here.
__all__ = [
    "ALL_HOURS",
    "CLEAN_NOW",
    "EXPIRED",
    "ORIGIN",
    "CliResult",
    "Daemon",
    "Store",
    "Tmpfs",
    "by_type",
    "expired_spec",
    "free_port",
    "make_store",
    "need",
    "records",
    "rocketmq_ratio",
    "run_cli",
    "spawn_run",
    "wait_until",
]

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

    def fill_up(self, chunk: int = 4096) -> Path:
        """Fill the filesystem to its last byte with a file ``filler``; returns its path."""
        filler = self.path / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * chunk):
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)
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


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory for Unix sockets: their paths are limited to 107 bytes, and pytest's
    tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix="rd-test-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def store(tmp_path: Path) -> Callable[..., Store]:
    """``store(spec=EXPIRED, *, tmp=tmp_path, **keys)``: a generated store, its config written
    with ``CLEAN_NOW`` overridden by ``keys``, its settings (loaded when used), its journal in
    ``tmp/journal`` (see ``tests.helpers.stores.make_store`` for the other keywords)."""

    def make(spec: StoreSpec = EXPIRED, *, tmp: Path | None = None, **keys: Any) -> Store:
        return make_store(tmp or tmp_path, spec, **keys)

    return make


@pytest.fixture
def open_journal() -> Iterator[Callable[..., Journal]]:
    """``open_journal(directory, origin=ORIGIN, **kwargs)``: a Journal, closed after the test."""
    opened: list[Journal] = []

    def open_(directory: Path, origin: Origin = ORIGIN, **kwargs: Any) -> Journal:
        journal = Journal(directory, origin, **kwargs)
        opened.append(journal)
        return journal

    yield open_
    for journal in opened:
        journal.close()


@pytest.fixture
def spawn_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """``spawn_daemon(store, *, log=None, env=None, cls=Daemon)``: `retentiond run` on a
    ``Store``'s config, logging to ``log`` (default ``tmp_path/daemon<n>.log``); killed after
    the test if it still runs."""
    started: list[Daemon] = []

    def spawn(
        store: Store,
        *,
        log: Path | None = None,
        env: dict[str, str] | None = None,
        cls: type[Daemon] = Daemon,
        **extra: Any,
    ) -> Daemon:
        log = log or tmp_path / f"daemon{len(started)}.log"
        proc = spawn_run(store.config, log, env)
        daemon = cls(proc, store.config, store.generated, store.journal, log, **extra)
        started.append(daemon)
        return daemon

    yield spawn
    for daemon in started:
        daemon.kill()


def chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True)


def _chattr_works(directory: Path) -> bool:
    probe = directory / "probe"
    probe.write_bytes(b"x")
    ok = subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    if ok:
        chattr("-i", probe)
    probe.unlink()
    return ok


@pytest.fixture
def immutable_dir(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A directory whose filesystem supports ``chattr +i``: tmp_path, else a tmpfs (root,
    kernel >= 6.0). In CI a missing chattr or an unsupported filesystem fails the test."""
    need(shutil.which("chattr") is not None, "chattr (e2fsprogs) is needed")
    if _chattr_works(tmp_path):
        return tmp_path
    tmpfs = request.getfixturevalue("tmpfs")
    need(_chattr_works(tmpfs.path), "neither tmp_path nor a tmpfs supports chattr +i")
    return Path(tmpfs.path)
