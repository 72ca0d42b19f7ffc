"""Keeping a listener up: the control socket and ``/metrics`` share one supervisor.

A listener's accept loop dying (a descriptor limit, a bug in the standard library, a socket
file removed under us) must not leave the daemon deaf for the rest of its life, nor spin
re-binding in a tight loop. So each endpoint's loop runs under ``keep_serving``: should
``serve_forever`` raise, the failure is recorded where ``status`` and the metrics read it, the
listener is closed and re-created after a growing pause, and the pause stops at once when the
daemon stops.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

log = structlog.get_logger(__name__)

BACKOFF_S = (0.1, 0.5, 1.0, 5.0)  # pauses before re-creating a failed listener; the last repeats


class ErrorCounts:
    """Connection failures by kind, counted from many handler threads at once: a counter for
    ``status`` and the metrics, and one log line the first time a kind is seen (a client
    retrying a bad request every second must not fill the log)."""

    def __init__(
        self, message: str, *, level: str = "warning", quiet: frozenset[str] = frozenset()
    ) -> None:
        self._lock = threading.Lock()
        self._message = message
        self._level = level
        self._quiet = quiet  # kinds counted but never logged (``busy``: shown by its counter)
        self.counts: dict[str, int] = {}

    def add(self, kind: str, exc: BaseException | None = None) -> None:
        with self._lock:
            first = kind not in self.counts
            self.counts[kind] = self.counts.get(kind, 0) + 1
        if first and kind not in self._quiet:
            error = str(exc) if exc is not None else None
            getattr(log, self._level)(self._message, kind=kind, error=error)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


class Serving(Protocol):
    def serve_forever(self, poll_interval: float = ...) -> None: ...
    def server_close(self) -> None: ...


class Health(Protocol):
    """What an endpoint reports of its listener (``status``, ``retentiond_endpoint_*``)."""

    up: bool
    restarts: int
    last_error: str | None


def keep_serving(
    stop: threading.Event,
    health: Health,
    *,
    what: str,
    current: Callable[[], Serving | None],
    rebind: Callable[[], Serving],
    forget: Callable[[], None],
    count_failure: Callable[[Exception], None],
    where: Callable[[], Mapping[str, Any]],
    poll_interval_s: float,
) -> None:
    """Serve until ``stop`` is set (``shutdown`` ends ``serve_forever``); after a failure,
    wait (``BACKOFF_S``) and serve on a listener ``rebind`` creates afresh."""
    failures = 0
    while not stop.is_set():
        server = current()
        try:
            if server is None:
                server = rebind()
                health.restarts += 1
                log.warning(f"{what} re-created", **where())
            health.up = True
            server.serve_forever(poll_interval=poll_interval_s)
            return  # stop() called shutdown
        except Exception as exc:
            health.up = False
            health.last_error = f"{type(exc).__name__}: {exc}"
            count_failure(exc)
            log.error(f"{what} failed; re-creating it", error=health.last_error)
            if server is not None:
                with contextlib.suppress(Exception):
                    server.server_close()
            forget()
            stop.wait(BACKOFF_S[min(failures, len(BACKOFF_S) - 1)])
            failures += 1
