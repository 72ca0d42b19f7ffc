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

from retentiond.policy.plan import CommitLogPlan, Decision, QueuesPlan
from retentiond.reasons import FORCED_REASONS, Kind, Reason
from retentiond.reconcile import writer_identity
from retentiond.settings import Settings
from retentiond.store.reader import BinaryReader, identity_of, read_index_header

log = structlog.get_logger("retentiond.execute")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Outcome:
    decision: Decision
    deleted: bool
    error: str | None = None  # why it was not deleted (re-check failed, unlink failed, ...)
    cause: str | None = None  # short label for metrics: changed, gone, unlink_failed, journal
    freed_bytes: int | None = None  # allocated bytes (st_blocks * 512) the unlink released
    errno: int | None = None  # the unlink's errno when it failed


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
        settings: Settings,
        journal: RecordSink,
        *,
        stop: threading.Event | None = None,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.settings = settings
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

    # ---- containment --------------------------------------------------------------------
    def _open_parent(self, d: Decision) -> int:
        """A handle on the directory that must contain the file, opened without symlinks.

        The chain is anchored at a configured directory; below it, every component is opened
        with O_NOFOLLOW, so a directory swapped for a symlink after the scan fails here.
        """
        s = self.settings
        parent = os.path.dirname(d.path)
        if d.kind is Kind.COMMITLOG:
            allowed = {str(p) for p in s.store_path_commitlog}
            if parent not in allowed:
                raise PermissionError(f"{parent} is not a configured CommitLog path")
            return os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        if d.kind is Kind.INDEX:
            if parent != str(s.index_dir):
                raise PermissionError(f"{parent} is not the index directory")
            return os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        topic_dir = os.path.dirname(parent)
        if os.path.dirname(topic_dir) != str(s.consumequeue_dir):
            raise PermissionError(f"{parent} is not a queue directory of this store")
        base = os.open(str(s.consumequeue_dir), os.O_RDONLY | os.O_DIRECTORY)
        try:
            topic_fd = os.open(os.path.basename(topic_dir), _DIR_FLAGS, dir_fd=base)
        finally:
            os.close(base)
        try:
            return os.open(os.path.basename(parent), _DIR_FLAGS, dir_fd=topic_fd)
        finally:
            os.close(topic_fd)

    # ---- re-check -----------------------------------------------------------------------
    def _expired(self, d: Decision, now_ms: int) -> bool:
        reserved = self.settings.file_reserved_time_hours * _HOUR_MS
        return d.identity is not None and now_ms >= d.identity.mtime_ms + reserved

    def _still_qualifies(
        self, d: Decision, st: os.stat_result | None, min_offset: int | None, now_ms: int
    ) -> str | None:
        """None if the file may go now; otherwise why not."""
        if st is None:
            return "gone"
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file any more"
        if d.identity is None or identity_of(st) != d.identity:
            return "changed since the plan (inode, size or mtime)"
        if d.kind is Kind.COMMITLOG:
            exempt = d.reason in FORCED_REASONS or d.reason is Reason.FORCED_AFTER_HOLD
            if not exempt and not self._expired(d, now_ms):
                return "no longer expired"
            return None
        assert min_offset is not None
        if d.kind is Kind.CONSUMEQUEUE:
            fresh = BinaryReader(self.settings.mapped_file_size_consumequeue).cq_last_offset(d.path)
            if fresh.value is None or fresh.value >= min_offset:
                return f"last unit re-read as {fresh.value} ({fresh.problem or 'not below'})"
            return None
        header, _, problem = read_index_header(d.path)
        if header is None or header.end_phy_offset >= min_offset:
            return f"header re-read: {problem or 'endPhyOffset not below the minimum'}"
        return None

    # ---- one file -----------------------------------------------------------------------
    def _record(self, d: Decision, ctx: RoundContext, op_id: str) -> dict[str, object]:
        now = ctx.now_ms()
        rec: dict[str, object] = {
            "id": op_id,
            "time_ms": now,
            "kind": str(d.kind),
            "file": d.path,
            "reason": str(d.reason),
            # Data removed before fileReservedTime: a forced deletion, or a held file forced
            # out that was not expired either.
            "forced": d.reason in FORCED_REASONS
            or (
                d.kind is Kind.COMMITLOG
                and d.reason is Reason.FORCED_AFTER_HOLD
                and not self._expired(d, now)
            ),
            "dry_run": ctx.dry_run,
            "disk_ratio_before": ctx.disk_ratio_before,
            "config_hash": ctx.config_hash,
            "file_reserved_time_hours": self.settings.file_reserved_time_hours,
        }
        if d.identity is not None:
            rec["bytes"] = d.identity.size
            rec["mtime_ms"] = d.identity.mtime_ms
            rec["age_ms"] = now - d.identity.mtime_ms
        for key in ("start_offset", "end_offset", "topic", "queue_id"):
            value = getattr(d, key)
            if value is not None:
                rec[key] = value
        if d.reason is Reason.FORCED_AFTER_HOLD and d.detail:
            rec["detail"] = d.detail
        return rec

    def delete_one(self, d: Decision, ctx: RoundContext, min_offset: int | None = None) -> Outcome:
        started = time.monotonic()
        try:
            dir_fd = self._open_parent(d)
        except OSError as exc:
            return self._done(Outcome(d, False, f"parent directory: {exc}", "containment"))
        try:
            name = os.path.basename(d.path)
            try:
                st: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            why_not = self._still_qualifies(d, st, min_offset, ctx.now_ms())
            if why_not is not None:
                cause = "gone" if why_not == "gone" else "changed"
                return self._done(Outcome(d, False, why_not, cause))
            assert st is not None
            op_id = uuid.uuid4().hex
            record = self._record(d, ctx, op_id)
            intent = {**record, "type": "intent", "writer": _writer(), "ino": st.st_ino}
            try:
                self.journal.append(intent)
            except OSError as exc:
                failed = self._done(Outcome(d, False, f"journal: {exc}", "journal"))
                raise JournalFailed(f"intent for {d.path}: {exc}", failed) from exc
            try:
                os.unlink(name, dir_fd=dir_fd)
            except OSError as exc:
                abort = {"type": "abort", "id": op_id, "file": d.path, "error": str(exc)}
                outcome = Outcome(d, False, f"unlink: {exc}", "unlink_failed", errno=exc.errno)
                self._outcome_record(abort, outcome)
                return self._done(outcome)
            record["duration_ms"] = round((time.monotonic() - started) * 1000, 3)
            outcome = Outcome(d, True, freed_bytes=st.st_blocks * 512)
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
        else:
            log.warning(
                "not deleted", file=outcome.decision.path, error=outcome.error, cause=outcome.cause
            )
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        return outcome

    # ---- passes -------------------------------------------------------------------------
    def _attempt(
        self, d: Decision, ctx: RoundContext, outcomes: list[Outcome], min_offset: int | None = None
    ) -> Outcome:
        """delete_one, with its outcome in ``outcomes`` even when the journal fails."""
        try:
            outcome = self.delete_one(d, ctx, min_offset)
        except JournalFailed as exc:
            outcomes.append(exc.outcome)
            raise
        outcomes.append(outcome)
        return outcome

    def run_commitlog(
        self, plan: CommitLogPlan, ctx: RoundContext, outcomes: list[Outcome]
    ) -> list[Outcome]:
        """Delete in order; sleep between deletions exactly where upstream does (§4.5).

        Outcomes are appended to the caller's list as they happen, so a stop part-way
        through still reports every deletion made.

        Upstream sleeps after a deletion unless the batch is full or the file was the last
        candidate. A file that could not be deleted ends the pass: never past a kept file.
        """
        done = len(outcomes)
        candidates = [d for d in plan.decisions if d.reason is not Reason.NEWEST_FILE]
        for i, d in enumerate(candidates):
            if not d.delete:
                break
            self._check_stop()
            outcome = self._attempt(d, ctx, outcomes)
            if not outcome.deleted:
                break
            if len(outcomes) - done >= self.settings.delete_file_batch_max:
                break  # upstream checks the batch before sleeping
            if i + 1 < len(candidates):
                self._sleep(self.settings.delete_commitlog_files_interval_ms)
        return outcomes

    def run_queues(
        self, plan: QueuesPlan, ctx: RoundContext, outcomes: list[Outcome]
    ) -> list[Outcome]:
        """Each queue oldest-first, stopping at a failure; sleep after each queue that lost a
        file (upstream's deleteConsumeQueueFilesInterval); then the index list, unpaced."""
        for q in plan.queues:
            if not q.deleted:
                continue
            count = 0
            for d in q.deleted:
                self._check_stop()
                outcome = self._attempt(d, ctx, outcomes, plan.min_offset)
                if not outcome.deleted:
                    break
                count += 1
            if count:
                self._sleep(self.settings.delete_consumequeue_files_interval_ms)
        for d in plan.index:
            if not d.delete:
                break
            self._check_stop()
            outcome = self._attempt(d, ctx, outcomes, plan.min_offset)
            if not outcome.deleted:
                break
        return outcomes
