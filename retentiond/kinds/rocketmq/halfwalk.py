"""A walk over numbered items (the topic directories of ``consumequeue/``) shared with a forked
child (``engine.forked``), so that a one-off ``retentiond plan`` uses a second core.

The items are cut into chunks. The walk claims chunks from the front and does them itself, in
order; the child claims chunks from the back and does each with ``work``. Claims go through
two counters in shared memory under a POSIX record lock, so each chunk is claimed by exactly one
side and the two meet wherever their speeds make them meet (each starts with a chunk of its
own: the walk the first, the child the last). When the walk finds no chunk left to claim, it
takes the child's result: what ``work`` returned for each of its chunks. So the walk's chunks
come first and the child's after: the order is the items' order.

Anything wrong with the child (``forked.WorkerFailed``: no fork, an exception, a kill, a short
result) or a chunk missing from its result, and ``results`` returns None: the caller does the
child's chunks itself, exactly as it would have without one.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
from collections.abc import Callable
from functools import partial

from retentiond.engine.forked import Forked, WorkerFailed

_COUNTERS = struct.Struct("=qq")  # front (the walk's next chunk), back (the child's last)

Work = Callable[[int, int], bytes]  # (lo, hi) -> what the walk makes of items lo..hi-1


class _Claims:
    """The two counters, in memory shared with the child, and the lock around them."""

    def __init__(self, n_chunks: int) -> None:
        self.fd = os.memfd_create("retentiond-walk-claims", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, _COUNTERS.size)
            self.shared = mmap.mmap(self.fd, _COUNTERS.size)
        except (OSError, ValueError):
            os.close(self.fd)
            raise
        _COUNTERS.pack_into(self.shared, 0, 1, n_chunks - 1)

    def front(self) -> int | None:
        """The walk's next chunk, or None when the child has claimed every other one."""
        fcntl.lockf(self.fd, fcntl.LOCK_EX)  # (per process: the child's lock excludes ours)
        try:
            front, back = _COUNTERS.unpack_from(self.shared, 0)
            if front >= back:
                return None
            _COUNTERS.pack_into(self.shared, 0, front + 1, back)
            return front
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN)

    def back(self) -> int | None:
        """The child's next chunk, from the back; None when the two have met."""
        fcntl.lockf(self.fd, fcntl.LOCK_EX)
        try:
            front, back = _COUNTERS.unpack_from(self.shared, 0)
            if back - 1 < front:
                return None
            _COUNTERS.pack_into(self.shared, 0, front, back - 1)
            return back - 1
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN)

    def met(self) -> int:
        """Where the two met: the child's first chunk (once ``front`` has returned None)."""
        return int(_COUNTERS.unpack_from(self.shared, 0)[1])

    def close(self) -> None:
        self.shared.close()
        os.close(self.fd)


def _child(claims: _Claims, n: int, chunk: int, work: Work) -> list[tuple[int, bytes]]:
    """In the child: its own last chunk, then one claimed chunk after the other."""
    last = (n + chunk - 1) // chunk - 1
    done = [(last, work(last * chunk, n))]
    while (j := claims.back()) is not None:
        done.append((j, work(j * chunk, min((j + 1) * chunk, n))))
    return done


class HalfWalk:
    """A running child and the claims shared with it (see the module)."""

    def __init__(self, claims: _Claims, child: Forked[list[tuple[int, bytes]]], n: int,
                 chunk: int) -> None:  # fmt: skip
        self._claims = claims
        self._child: Forked[list[tuple[int, bytes]]] | None = child
        self.n_items = n
        self.chunk = chunk
        self.n_chunks = (n + chunk - 1) // chunk
        self.first_of_child = self.n_chunks  # the child's first chunk, once the two have met
        self._own_first = True  # the first chunk is the walk's without a claim

    @classmethod
    def start(cls, n: int, chunk: int, work: Work) -> HalfWalk | None:
        """Fork a child over items ``0..n-1`` in chunks of ``chunk`` (at least two); None
        when it cannot be started (the caller then does every chunk itself). ``work(lo,
        hi)`` runs in the child (see ``results``)."""
        n_chunks = (n + chunk - 1) // chunk
        if n_chunks < 2 or not hasattr(os, "memfd_create"):
            return None
        try:
            claims = _Claims(n_chunks)
        except (OSError, ValueError):
            return None
        try:
            child = Forked(partial(_child, claims, n, chunk, work))
        except WorkerFailed:
            claims.close()
            return None
        return cls(claims, child, n, chunk)

    def claim(self) -> tuple[int, int] | None:
        """The walk's next chunk (its items ``lo, hi``), or None: the rest is the child's."""
        if self._own_first:
            self._own_first = False
            j: int | None = 0
        else:
            j = self._claims.front()
        if j is None:
            self.first_of_child = self._claims.met()
            return None
        return j * self.chunk, min((j + 1) * self.chunk, self.n_items)

    def results(self) -> list[tuple[int, int, bytes]] | None:
        """After ``claim`` returned None: the child's chunks in order, each as (lo, hi, what
        ``work`` returned); None when the child did not do them all (then the caller does
        items ``first_of_child * chunk`` onwards itself)."""
        child, self._child = self._child, None
        if child is None:
            return None
        try:
            found = dict(child.result())
        except WorkerFailed:
            return None
        got = []
        for j in range(self.first_of_child, self.n_chunks):
            data = found.get(j)
            if data is None:
                return None
            got.append((j * self.chunk, min((j + 1) * self.chunk, self.n_items), data))
        return got

    def close(self) -> None:
        """Stop the child if it still runs (a walk given up early) and free the claims."""
        if self._child is not None:
            self._child.cancel()
            self._child = None
        self._claims.close()
