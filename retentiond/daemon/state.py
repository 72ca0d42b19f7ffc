"""What the running daemon knows about itself, for `status`, STATUS= and the logs.

Written by the round thread, the scheduler's event listener, the main thread (reloads) and
read by the control-socket thread, so every access goes through one lock and readers get a
plain JSON-ready copy. The cleaning state proper (last CommitLog minimum, manual rounds) lives
in the Cleaner; this is the daemon's record around it, plus the bookkeeping upstream keeps for
files that could not be deleted (first-attempt times), which survives reloads with the daemon.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from retentiond.config.settings import Settings, StoreSection
from retentiond.engine.cleaner import RoundListener, RoundResult
from retentiond.engine.execute import Outcome
from retentiond.engine.kind import AnyKind, RoundPlan
from retentiond.reasons import Cause

_HOUR_MS = 3_600_000
# Causes (execute.Outcome.cause) that leave a file on disk that should have gone: tracked as
# "hung" until a later round deletes it or it disappears.
HUNG_CAUSES = frozenset({Cause.UNLINK_FAILED, Cause.CHANGED, Cause.CONTAINMENT})


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def round_summary(result: RoundResult) -> dict[str, object]:
    plan = result.plan
    return {
        "time_ms": plan.now_ms,
        "duration_ms": round(result.duration_s * 1000, 1),
        "manual": plan.manual,
        "dry_run": plan.dry_run,
        "stopped": result.stopped,
        "deleted": result.counts(),
        "failures": len(result.failed),
        "errors": plan.store_errors(),
        "config_hash": plan.config_hash,
    }


def scan_ok(plan: RoundPlan) -> bool:
    """The store was read and measured completely (what READY=1 waits for)."""
    return not plan.store_errors()


@dataclass
class HungFile:
    first_attempt_ms: int
    last_error: str | None
    cause: str | None


@dataclass
class DaemonState(RoundListener):
    """Listens to the Cleaner's rounds (``file_done``) for the files that would not go."""

    config_path: Path
    settings: Settings[StoreSection]
    kind: AnyKind  # for its part of the document (its settings may lag a reload: unused)
    config_version: int = 1
    started_ms: int = field(default_factory=wall_ms)
    ready: bool = False
    rounds: int = 0
    round_failures: int = 0  # rounds that raised: a bug or an unexpected OS error
    running_since_ms: int | None = None
    last_round: dict[str, object] | None = None
    last_error: str | None = None
    triggers: dict[str, object] | None = None
    pending_expired: int | None = None
    scan_fields: dict[str, object] | None = None  # the kind's other status fields (Kafka)
    last_fields: dict[str, object] | None = None  # all of the last scan's status fields
    last_scan_ms: int | None = None
    reloads_ok: int = 0
    reloads_unchanged: int = 0
    reloads_failed: int = 0
    last_reload: dict[str, object] | None = None
    missed_coalesced: int = 0  # due runs folded into one (the scheduler woke up late)
    missed_overlap: int = 0  # runs skipped because the previous round was still running
    missed_misfire: int = 0  # runs dropped for being too late (only with a grace time)
    interval_ms: int = 0
    hung: dict[str, HungFile] = field(default_factory=dict)
    last_redelete_ms: int = 0  # upstream lastRedeleteTimestamp: 0, so the first tick qualifies
    _last_scheduled: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.interval_ms = self.kind.cadence(self.settings).round_interval_ms

    # ---- rounds -------------------------------------------------------------------------
    def mark_ready(self) -> bool:
        """True the first time only: READY=1 is sent once per process."""
        with self._lock:
            first, self.ready = not self.ready, True
            return first

    def note_error(self, error: str) -> None:
        with self._lock:
            self.last_error = error

    def round_started(self) -> None:
        with self._lock:
            self.running_since_ms = wall_ms()

    def observe_plan(self, plan: RoundPlan, kind: AnyKind, deleted: frozenset[str]) -> None:
        """Record what a scan saw: triggers, disk ratios, expired files left."""
        fields = kind.status_fields(plan, deleted)
        with self._lock:
            self.last_scan_ms = plan.now_ms
            self.last_fields = fields
            self.triggers = fields.get("triggers")  # type: ignore[assignment]
            self.pending_expired = fields.get("pending_expired")  # type: ignore[assignment]
            # what the document shows elsewhere: the triggers and expired files at the top,
            # the disk figures under the kind's ``disk`` (``status_settings``)
            self.scan_fields = {
                k: v for k, v in fields.items() if k not in ("triggers", "pending_expired", "disk")
            }

    def round_done(self, result: RoundResult, kind: AnyKind) -> None:
        deleted = frozenset(o.decision.path for o in result.deleted)
        self.observe_plan(result.plan, kind, deleted)
        with self._lock:
            self.rounds += 1
            self.running_since_ms = None
            self.last_round = round_summary(result)
            errors = self.last_round["errors"]
            self.last_error = "; ".join(errors) if isinstance(errors, list) and errors else None

    def round_failed(self, error: str) -> None:
        with self._lock:
            self.rounds += 1
            self.round_failures += 1
            self.running_since_ms = None
            self.last_error = error

    # ---- files that could not be deleted ------------------------------------------------
    def file_done(self, outcome: Outcome) -> None:
        """Remember when a file first failed to go (a ``RoundListener`` hook)."""
        path = outcome.decision.path
        with self._lock:
            if outcome.deleted or outcome.cause == Cause.GONE:
                self.hung.pop(path, None)
            elif outcome.cause in HUNG_CAUSES:
                first = self.hung[path].first_attempt_ms if path in self.hung else wall_ms()
                self.hung[path] = HungFile(first, outcome.error, outcome.cause)

    def redelete_due(self, now_ms: int, interval_ms: int) -> bool:
        """upstream reDeleteHangedFile's gate: strictly more than the interval since the last."""
        with self._lock:
            if now_ms - self.last_redelete_ms > interval_ms:
                self.last_redelete_ms = now_ms
                return True
            return False

    def prune_hung(self) -> dict[str, HungFile]:
        """Forget hung files that are gone by now; return the ones still on disk."""
        with self._lock:
            for path in [p for p in self.hung if not os.path.lexists(p)]:
                del self.hung[path]
            return dict(self.hung)

    # ---- reloads ------------------------------------------------------------------------
    def reload_applied(
        self, settings: Settings[StoreSection], trigger: str, changes: list[str]
    ) -> None:
        with self._lock:
            self.settings = settings
            self.config_version += 1
            self.reloads_ok += 1
            self.last_reload = _reload_record(trigger, "applied", changes=changes)

    def reload_unchanged(self, trigger: str) -> None:
        with self._lock:
            self.reloads_unchanged += 1
            self.last_reload = _reload_record(trigger, "unchanged")

    def reload_refused(self, trigger: str, problems: list[str]) -> None:
        with self._lock:
            self.reloads_failed += 1
            self.last_reload = _reload_record(trigger, "refused", problems=problems)

    # ---- the scheduler ------------------------------------------------------------------
    def run_scheduled(self, run_time_s: float) -> None:
        """A round was due at ``run_time_s``; count the runs coalesced since the last one."""
        with self._lock:
            if self._last_scheduled is not None and self.interval_ms > 0:
                gap = (run_time_s - self._last_scheduled) * 1000 / self.interval_ms
                self.missed_coalesced += max(0, round(gap) - 1)
            self._last_scheduled = run_time_s

    def run_skipped(self, run_time_s: float, *, overlap: bool) -> None:
        self.run_scheduled(run_time_s)
        with self._lock:
            if overlap:
                self.missed_overlap += 1
            else:
                self.missed_misfire += 1

    def rescheduled(self, interval_ms: int) -> None:
        with self._lock:
            self.interval_ms = interval_ms
            self._last_scheduled = None

    # ---- reading ------------------------------------------------------------------------
    def snapshot(self) -> dict[str, object]:
        """A JSON-ready copy (the `status --json` document, minus the live scheduler bits)."""
        with self._lock:
            s = self.settings
            return {
                "pid": os.getpid(),
                "now_ms": wall_ms(),
                "started_ms": self.started_ms,
                "ready": self.ready,
                "broker": s.broker_name,
                "cluster": s.broker_cluster_name,
                "store": s.store_label,
                "store_kind": self.kind.name,
                "config": {
                    "path": str(self.config_path),
                    "hash": s.config_hash,
                    "version": self.config_version,
                    "reloads": {
                        "applied": self.reloads_ok,
                        "unchanged": self.reloads_unchanged,
                        "refused": self.reloads_failed,
                    },
                    "last_reload": self.last_reload,
                },
                "rounds": {
                    "count": self.rounds,
                    "failed": self.round_failures,
                    "interval_ms": self.interval_ms,
                    "running_since_ms": self.running_since_ms,
                    "last": self.last_round,
                    "last_error": self.last_error,
                    "missed": {
                        "total": self.missed_coalesced + self.missed_overlap + self.missed_misfire,
                        "coalesced": self.missed_coalesced,
                        "overlap": self.missed_overlap,
                        "misfire": self.missed_misfire,
                    },
                },
                **self.kind.status_settings(s, self.last_fields),
                "timezone": s.daemon.timezone or "local",
                "dry_run": s.daemon.dry_run,
                "triggers": self.triggers,
                "pending_expired": self.pending_expired,
                "scan": self.scan_fields,
                "last_scan_ms": self.last_scan_ms,
                "hung_files": [
                    {"file": p, "first_attempt_ms": h.first_attempt_ms, "error": h.last_error}
                    for p, h in sorted(self.hung.items())
                ],
            }


def _reload_record(trigger: str, outcome: str, **extra: object) -> dict[str, object]:
    return {"time_ms": wall_ms(), "trigger": trigger, "outcome": outcome, **extra}
