"""`retentiond run` as a subprocess, and waiting on things from outside it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retentiond.storegen.rocketmq import GeneratedStore
from tests.helpers.cli import run_cli
from tests.helpers.stores import records

RETENTIOND = (sys.executable, "-m", "retentiond", "--log-format", "json")


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(
    what: str,
    check: Callable[[], Any],
    timeout: float,
    log: Path | None = None,
    interval: float = 0.1,
) -> Any:
    """``check()``'s first true value within ``timeout`` seconds; else fail with the log's tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")


def spawn_run(
    config: Path, log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``retentiond run --config CONFIG`` with stdout and stderr to ``log``."""
    with open(log, "wb") as fh:
        return subprocess.Popen(
            [*RETENTIOND, "run", "--config", str(config)],
            stdout=fh,
            stderr=fh,
            env=None if env is None else dict(env),
        )


@dataclass
class Daemon:
    """A running `retentiond run`: its process, config, store, journal directory and log."""

    proc: subprocess.Popen[bytes]
    config: Path
    store: GeneratedStore
    journal: Path
    log: Path

    def records(self, *types: str) -> list[dict[str, Any]]:
        """The journal's records (of ``types``, if given); none before the daemon opened it."""
        return records(self.journal, *types)

    def wait_until(
        self, what: str, check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1
    ) -> Any:
        """Like ``wait_until``, and failing at once if the daemon exits meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            assert self.proc.poll() is None, f"daemon exited early:\n{self.log.read_text()}"
            time.sleep(interval)
        raise AssertionError(f"timed out waiting for {what}\n{self.log.read_text()[-4000:]}")

    def cli(self, *args: str) -> Any:
        return run_cli(*args, "--config", str(self.config), timeout=30)

    def status(self) -> dict[str, Any]:
        result = self.cli("status", "--json")
        assert result.code == 0, result.err
        return json.loads(result.out)

    def metrics_url(self) -> str | None:
        """The URL of the daemon's /metrics, once its log says it listens."""
        for line in self.log.read_text().splitlines():
            if '"metrics listening"' in line:
                return json.loads(line)["url"]
        return None

    def terminate(self, timeout: float = 10) -> tuple[int, float]:
        """SIGTERM; the exit code and how long the exit took."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        return code, time.monotonic() - started

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
