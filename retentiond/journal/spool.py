"""A journal that survives a full disk: records wait in memory until they can be written.

The journal is write-ahead, but the cleaner exists to free space, so a journal on a full
filesystem must not stop it: when a write fails with ENOSPC or EDQUOT the records are kept in
memory (bounded), the deletion proceeds, and the held records are written first, in order, by
the next write that succeeds. Every such event is logged loudly. Any *other* journal error is
raised: the executor then refuses to delete (it never deletes without a working journal).

Bounded: at most ``limit`` records are held. Beyond that the oldest ``round`` record is dropped
first (they are summaries, one per round), then the oldest record of any type; every drop is
counted and logged with what it lost.
"""

from __future__ import annotations

import errno
import threading
from collections import deque
from pathlib import Path
from typing import Protocol

import structlog

log = structlog.get_logger(__name__)

SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
DEFAULT_SPOOL_LIMIT = 10_000


class RecordSink(Protocol):
    directory: Path

    def append_many(self, records: list[dict[str, object]]) -> None: ...

    def close(self) -> None: ...


def is_space_error(exc: OSError) -> bool:
    return exc.errno in SPACE_ERRNOS


class SpoolingJournal:
    """Wraps a ``Journal``: same ``append``; ENOSPC/EDQUOT hold records in memory."""

    def __init__(self, journal: RecordSink, *, limit: int = DEFAULT_SPOOL_LIMIT) -> None:
        self.journal = journal
        self.limit = limit
        self._lock = threading.Lock()
        self._held: deque[dict[str, object]] = deque()
        self.space_errors = 0  # writes that failed for lack of space
        self.dropped = 0  # records lost because the spool was full
        self.flushed = 0  # records written late, after being held
        self.last_error: str | None = None

    @property
    def directory(self) -> Path:
        return self.journal.directory

    @property
    def held(self) -> int:
        with self._lock:
            return len(self._held)

    def holds_outcome(self, op_id: str) -> bool:
        """Whether a ``deletion`` or ``abort`` of ``op_id`` waits here for disk space (its
        intent looks open on disk meanwhile: reconciliation must not give it another)."""
        with self._lock:
            return any(
                r.get("id") == op_id and r.get("type") in ("deletion", "abort") for r in self._held
            )

    def append(self, record: dict[str, object]) -> None:
        """Write ``record`` (after any held ones). Raises OSError unless it is a space error."""
        with self._lock:
            batch = [*self._held, record]
            try:
                self.journal.append_many(batch)
            except OSError as exc:
                if not is_space_error(exc):
                    raise
                self._hold(record, exc)
                return
            if self._held:
                log.warning("journal writable again: held records written", records=len(batch) - 1)
                self.flushed += len(batch) - 1
                self._held.clear()
                self.last_error = None

    def keep(self, record: dict[str, object], exc: OSError) -> None:
        """Hold a record that must not be lost (an outcome after an unlink) after any error."""
        with self._lock:
            self._hold(record, exc)

    def flush(self) -> bool:
        """Try to write what is held; True when nothing is held any more."""
        with self._lock:
            if not self._held:
                return True
            try:
                self.journal.append_many(list(self._held))
            except OSError as exc:
                self.last_error = str(exc)
                return False
            log.warning("journal writable again: held records written", records=len(self._held))
            self.flushed += len(self._held)
            self._held.clear()
            self.last_error = None
            return True

    def close(self) -> None:
        if not self.flush():
            log.error(
                "journal records still held in memory are lost at exit",
                records=self.held,
                error=self.last_error,
            )
        self.journal.close()

    def _hold(self, record: dict[str, object], exc: OSError) -> None:
        self.space_errors += is_space_error(exc)
        self.last_error = str(exc)
        self._held.append(record)
        while len(self._held) > self.limit:
            self._drop_one()
        log.error(
            "JOURNAL WRITE FAILED: record held in memory, deletions continue",
            error=str(exc),
            record_type=record.get("type"),
            file=record.get("file"),
            held=len(self._held),
            limit=self.limit,
            dropped=self.dropped,
        )

    def _drop_one(self) -> None:
        victim_at = next((i for i, r in enumerate(self._held) if r.get("type") == "round"), 0)
        victim = self._held[victim_at]
        del self._held[victim_at]
        self.dropped += 1
        log.error(
            "JOURNAL RECORD LOST: the in-memory spool is full",
            record_type=victim.get("type"),
            file=victim.get("file"),
            dropped=self.dropped,
        )
