"""One computation run on the machine's second core, in a forked child, while the parent
goes on: for a one-off command only (``plan``), never in the daemon (a daemon has threads,
and a fork of a threaded process may inherit a lock held by another thread forever).

The child runs the function, writes its pickled result to a pipe and ends with ``os._exit``
(no ``atexit`` handler, no buffered output flushed twice). Anything that goes wrong -- no fork,
an exception in the child, a child killed, a short or undecodable result -- is
``WorkerFailed``, and the caller computes the same thing itself: the child only ever saves
time, never changes a result.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class WorkerFailed(Exception):
    pass


class Forked(Generic[T]):
    """``fn()`` started in a child process; ``result()`` waits for it."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self.pid = 0
        self.fd = -1
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(r)
            os.close(w)
            raise WorkerFailed(f"fork: {exc}") from None
        if pid == 0:  # the child: nothing of the parent's runs after this
            code = 1
            try:
                os.close(r)
                view = memoryview(pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL))
                while view:
                    view = view[os.write(w, view) :]
                code = 0
            except BaseException:
                pass
            finally:
                os._exit(code)
        os.close(w)
        self.pid, self.fd = pid, r

    def result(self) -> T:
        """The child's result; WorkerFailed when it has none."""
        chunks = []
        try:
            while chunk := os.read(self.fd, 1 << 20):
                chunks.append(chunk)
        except OSError as exc:
            self.cancel()
            raise WorkerFailed(f"read: {exc}") from None
        os.close(self.fd)
        self.fd = -1
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            raise WorkerFailed(f"the worker ended with status {status:#x}")
        try:
            return pickle.loads(b"".join(chunks))  # type: ignore[no-any-return,unused-ignore]
        except Exception as exc:
            raise WorkerFailed(f"unreadable result: {exc!r}") from None

    def cancel(self) -> None:
        """Stop the child (if still running) and reap it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0
