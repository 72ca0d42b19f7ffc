"""Work handed to the machine's second core in a forked child while the parent goes on.

Only within a one-off command that has said so (``one_off``: ``plan``, ``rescue``), never in the
daemon: a daemon has threads, and a fork of a threaded process may inherit a lock another
thread holds, forever. A store kind asks ``allowed(items, at_least)`` before it splits work.

The child runs the function, writes its pickled result to a pipe and ends with ``os._exit``
(no ``atexit`` handler, no buffered output flushed twice). Anything that goes wrong -- no fork,
an exception in the child, a child killed, a short or undecodable result -- is
``WorkerFailed``, and the caller computes the same thing itself: the child only ever saves
time, never changes a result.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Generic, TypeVar

T = TypeVar("T")


# The size from which a kind splits its work, for every kind (0: always; a number larger than
# any store: never). For tests and for an operator who wants one core only.
AT_LEAST_ENV = "RETENTIOND_FORK_AT_LEAST"

_allowed = False
_at_least: int | None = None
_whole = True


@contextmanager
def one_off(*, at_least: int | None = None, whole_plan: bool = True) -> Iterator[None]:
    """Within: this process is a one-off command with no other thread that matters, and work
    may be split with a forked child. ``at_least`` overrides every kind's size threshold
    (tests: 0 forces the split on a small store), as ``RETENTIOND_FORK_AT_LEAST`` does.
    ``whole_plan`` False: the command shows only the plan's default text (a kind whose
    split hands back text, not the plan itself, splits only then).
    The previous state comes back on leaving (a test calling a command in-process leaves
    no permission behind for a daemon it starts later)."""
    global _allowed, _at_least, _whole
    before = _allowed, _at_least, _whole
    if at_least is None and (env := os.environ.get(AT_LEAST_ENV, "").strip()):
        try:
            at_least = max(0, int(env))
        except ValueError:
            at_least = None  # not a number: the kinds' own thresholds
    _allowed, _at_least, _whole = True, at_least, whole_plan
    try:
        yield
    finally:
        _allowed, _at_least, _whole = before


def whole_plan() -> bool:
    """Whether the command may use every part of the plan (``plan --json``, ``--all``, a
    rescue), not only the default text."""
    return _whole


def allowed(items: int, at_least: int) -> bool:
    """Whether ``items`` units of work are worth a child: allowed, two cores or more, and at
    least ``at_least`` of them (or the threshold ``one_off`` set)."""
    if not _allowed or (os.cpu_count() or 1) < 2:
        return False
    return items >= (at_least if _at_least is None else _at_least)


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
            except BaseException:  # the parent computes it again
                pass
            finally:
                os._exit(code)
        os.close(w)
        self.pid, self.fd = pid, r

    def ready(self) -> bool:
        """Whether the child's result (or its end) is there to read: ``result()`` waits no
        longer for its work. The parent can use the time until then for something else."""
        if self.fd < 0:
            return True
        readable, _, _ = select.select([self.fd], [], [], 0)
        return bool(readable)

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
            return pickle.loads(b"".join(chunks))
        except Exception as exc:
            raise WorkerFailed(f"unreadable result: {exc!r}") from None

    def cancel(self) -> None:
        """Stop the child (if still running) and reap it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.pid:
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0
