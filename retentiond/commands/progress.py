"""A progress line on stderr, for people at a terminal: ``plan``, ``once``, ``gen-store``.

Only when stderr is a terminal (``isatty``): piped or redirected, stderr carries nothing but
what it always did. The line is redrawn in place (carriage return, erase to end of line)
twice a second by a daemon thread with what the command last reported and the time so far,
and erased when the command is done, before its output.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import IO

from retentiond.engine.cleaner import RoundListener
from retentiond.engine.execute import Outcome

_ERASE = "\r\x1b[K"


class Progress:
    def __init__(self, label: str, stream: IO[str] | None = None, interval: float = 0.5) -> None:
        self.stream = stream if stream is not None else sys.stderr
        try:
            self.enabled = self.stream.isatty()
        except (AttributeError, ValueError):
            self.enabled = False
        self.label = label
        self.interval = interval
        self.status = ""
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._shown_at: float | None = None  # when an update was last drawn at once

    def __enter__(self) -> Progress:
        if self.enabled:
            self._started = time.monotonic()
            self._draw()
            self._thread = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def update(self, status: str, *, now: bool = False) -> None:
        """What the command is doing now: shown at the next redraw, or at once (``now``)."""
        self.status = status
        if now and self._thread is not None:
            self._draw()

    def report(self, status: str) -> None:
        """A callback for long loops (``storegen``): ``update``, drawn at once the first time
        and then at most ten times a second."""
        shown = self._shown_at
        if shown is None or time.monotonic() - shown >= 0.1:
            self._shown_at = time.monotonic()
            self.update(status, now=True)
        else:
            self.status = status

    def close(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        with self._lock:
            self._write(_ERASE)

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self._draw()

    def _draw(self) -> None:
        elapsed = time.monotonic() - self._started
        status = f" {self.status}" if self.status else ""
        with self._lock:
            self._write(f"{_ERASE}{self.label}:{status} ({elapsed:.0f}s)")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: stop drawing, go on
            self._stop.set()


class RoundProgress(RoundListener):
    """A round's phases and deletions as they happen, on a ``Progress`` line."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.phase = "scanning"
        self.deleted = 0
        self.failed = 0

    def round_started(self) -> None:
        self._show(now=True)

    def phase_started(self, phase: str) -> None:
        self.phase = f"planning {phase}"
        self._show(now=True)

    def file_done(self, outcome: Outcome) -> None:
        if outcome.deleted:
            self.deleted += 1
        else:
            self.failed += 1
        self._show(now=self.deleted + self.failed == 1)  # the first at once, then each tick

    def _show(self, *, now: bool = False) -> None:
        done = f", {self.deleted} files deleted" if self.deleted else ""
        failed = f", {self.failed} not deleted" if self.failed else ""
        self.progress.update(f"{self.phase}{done}{failed}", now=now)
