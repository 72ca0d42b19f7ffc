"""Carry out a plan: re-check, journal, unlink, pace. The only module that deletes.

For each file, just before the unlink: the parent directory is opened without following a
symlink, the file is looked up relative to it and must still be a regular file with the inode,
size and mtime the plan saw, and must still qualify; only then is an intent journaled, the file
unlinked relative to the same directory handle, and the outcome journaled. A stop request is
honoured between files (never inside one) and interrupts the sleeps.

The journal is the precondition of every unlink: an intent that cannot be written (for any
reason but a full disk, which ``spool.SpoolingJournal`` absorbs) means no unlink, and an
outcome that cannot be written after one stops the round (``JournalFailed``); the outcome is
kept in memory when the journal allows it, and start-up reconciliation covers a crash.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Protocol

import structlog

from retentiond.engine.decision import Decision
from retentiond.engine.identity import identity_of
from retentiond.engine.kind import AnyKind, RemovesDirectories
from retentiond.engine.runs import Outcome as Outcome
from retentiond.engine.runs import Run as Run
from retentiond.journal.reconcile import writer_identity
from retentiond.reasons import Cause, Reason

log = structlog.get_logger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_dir_below(anchor: str, *components: str) -> int:
    """A handle on ``anchor/components...``: the anchor (a configured store directory) is
    opened as configured, every component below it with O_NOFOLLOW, so a directory swapped
    for a symlink after the scan fails here instead of leading out of the store."""
    fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    for name in components:
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


@dataclass
class RoundContext:
    """Facts about the round that every deletion record carries."""

    config_hash: str
    dry_run: bool
    disk_ratio_before: float | None
    now_ms: Callable[[], int]


class Stopped(Exception):
    """Raised between files when a stop was requested."""


class JournalFailed(Exception):
    """The journal refused a record for a reason other than space: no further deletion."""

    def __init__(self, message: str, outcome: Outcome) -> None:
        super().__init__(message)
        self.outcome = outcome


class RecordSink(Protocol):
    def append(self, record: dict[str, object]) -> None: ...


@cache
def _writer() -> str:
    return writer_identity()


class Executor:
    def __init__(
        self,
        kind: AnyKind,
        journal: RecordSink,
        *,
        stop: threading.Event | None = None,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.kind = kind
        self.journal = journal
        self.stop = stop or threading.Event()
        self.on_outcome = on_outcome
        self.slept_s = 0.0  # total time spent in pacing sleeps (for tests and status)

    # ---- pacing -------------------------------------------------------------------------
    def _sleep(self, ms: int) -> None:
        if ms <= 0:
            return
        started = time.monotonic()
        interrupted = self.stop.wait(ms / 1000)
        self.slept_s += time.monotonic() - started
        if interrupted:
            raise Stopped

    def _check_stop(self) -> None:
        if self.stop.is_set():
            raise Stopped

        # ---- re-check -----------------------------------------------------------------------

    def _still_qualifies(
        self, d: Decision, st: os.stat_result | None, floor: int | None, now_ms: int
    ) -> str | None:
        """None if the file may go now; otherwise why not. The engine checks that it is the
        same regular file; the kind checks that its rule still holds."""
        if st is None:
            return Cause.GONE.value
        if stat.S_ISDIR(st.st_mode) and isinstance(self.kind, RemovesDirectories):
            # a whole directory: the same inode with the same entries (its mtime); the size
            # a directory decision carries is the kind's total of the files under it
            ident = d.identity
            if ident is None or (st.st_ino, st.st_dev, st.st_mtime_ns) != (
                ident.ino,
                ident.dev,
                ident.mtime_ns,
            ):
                return "changed since the plan (inode or entries)"
            return self.kind.recheck(d, st, now_ms, floor)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file any more"
        if d.identity is None or identity_of(st) != d.identity:
            return "changed since the plan (inode, size or mtime)"
        return self.kind.recheck(d, st, now_ms, floor)

    # ---- one file -----------------------------------------------------------------------
    def _record(self, d: Decision, ctx: RoundContext, op_id: str) -> dict[str, object]:
        now = ctx.now_ms()
        own = self.kind.journal_fields(d, now)
        age_ms = own.pop("age_ms", None)  # the kind's own age of the data, put in its place
        rec: dict[str, object] = {
            "id": op_id,
            "time_ms": now,
            "kind": str(d.kind),
            "file": d.path,
            "reason": str(d.reason),
            **own,
            "dry_run": ctx.dry_run,
            "disk_ratio_before": ctx.disk_ratio_before,
            "config_hash": ctx.config_hash,
        }
        if d.identity is not None:
            rec["bytes"] = d.identity.size
            rec["mtime_ms"] = d.identity.mtime_ms
            rec["age_ms"] = now - d.identity.mtime_ms if age_ms is None else age_ms
        for key in ("start_offset", "end_offset", "topic", "queue_id"):
            value = getattr(d, key)
            if value is not None:
                rec[key] = value
        if d.reason is Reason.FORCED_AFTER_HOLD and d.detail:
            rec["detail"] = d.detail
        return rec

    def delete_one(self, d: Decision, ctx: RoundContext, floor: int | None = None) -> Outcome:
        started = time.monotonic()
        try:
            dir_fd = self.kind.open_parent(d)
        except OSError as exc:
            return self._done(Outcome(d, False, f"parent directory: {exc}", Cause.CONTAINMENT))
        try:
            name = os.path.basename(d.path)
            try:
                st: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            why_not = self._still_qualifies(d, st, floor, ctx.now_ms())
            if why_not is not None:
                cause = Cause.GONE if why_not == Cause.GONE else Cause.CHANGED
                return self._done(Outcome(d, False, why_not, cause))
            assert st is not None
            op_id = uuid.uuid4().hex
            record = self._record(d, ctx, op_id)
            intent = {**record, "type": "intent", "writer": _writer(), "ino": st.st_ino}
            try:
                self.journal.append(intent)
            except OSError as exc:
                failed = self._done(Outcome(d, False, f"journal: {exc}", Cause.JOURNAL))
                raise JournalFailed(f"intent for {d.path}: {exc}", failed) from exc
            try:
                if stat.S_ISDIR(st.st_mode) and isinstance(self.kind, RemovesDirectories):
                    freed = self.kind.remove_directory(d, dir_fd, name)
                else:
                    os.unlink(name, dir_fd=dir_fd)
                    freed = st.st_blocks * 512
            except OSError as exc:
                abort: dict[str, object] = {
                    "type": "abort", "id": op_id, "file": d.path, "error": str(exc)
                }  # fmt: skip
                outcome = Outcome(d, False, f"unlink: {exc}", Cause.UNLINK_FAILED, errno=exc.errno)
                self._outcome_record(abort, outcome)
                return self._done(outcome)
            record["duration_ms"] = round((time.monotonic() - started) * 1000, 3)
            outcome = Outcome(d, True, freed_bytes=freed)
            self._outcome_record({**record, "type": "deletion"}, outcome)
            return self._done(outcome)
        finally:
            os.close(dir_fd)

    def _outcome_record(self, record: dict[str, object], outcome: Outcome) -> None:
        """Journal what happened to a file after its intent. A failure here ends the round:
        the record is kept in memory when the journal can (``SpoolingJournal.keep``), and a
        crash before it is written is covered by start-up reconciliation."""
        try:
            self.journal.append(record)
        except OSError as exc:
            keep = getattr(self.journal, "keep", None)
            if keep is not None:
                keep(record, exc)
            log.error("journal write failed after an unlink attempt", error=str(exc))
            self._done(outcome)
            raise JournalFailed(f"{record['type']} for {record['file']}: {exc}", outcome) from exc

    def _done(self, outcome: Outcome) -> Outcome:
        if outcome.deleted:
            log.info(
                "deleted",
                file=outcome.decision.path,
                kind=str(outcome.decision.kind),
                reason=str(outcome.decision.reason),
            )
        elif outcome.cause != "unlink_failed":
            # A refused unlink is said by the Cleaner, once per attempt, with its backoff
            # (``Cleaner._note_refusal``): one line per attempt, not two.
            log.warning(
                "not deleted", file=outcome.decision.path, error=outcome.error, cause=outcome.cause
            )
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        return outcome

    # ---- runs ---------------------------------------------------------------------------
    def run(self, run: Run, ctx: RoundContext, outcomes: list[Outcome]) -> list[Outcome]:
        """Carry out one run (see ``Run``). Outcomes are appended to the caller's list as they
        happen, so a stop part-way through still reports every deletion made."""
        deleted = 0
        last = len(run.decisions) - 1
        for i, d in enumerate(run.decisions):
            self._check_stop()
            try:
                outcome = self.delete_one(d, ctx, run.floor)
            except JournalFailed as exc:
                outcomes.append(exc.outcome)
                raise
            outcomes.append(outcome)
            if not outcome.deleted:
                break
            deleted += 1
            if run.batch_max is not None and deleted >= run.batch_max:
                break  # upstream checks the batch before sleeping
            if i < last or run.pause_after_last:
                self._sleep(run.pause_between_ms)
        if deleted:
            self._sleep(run.pause_after_ms)
        return outcomes
