"""A stand-in store kind, outside the package: one directory of numbered files.

It exists to show that ``engine.kind.StoreKind`` is all a new broker format needs: it imports
nothing from ``retentiond.kinds``, declares its own file kind and reason through
``retentiond.reasons``, and runs real rounds through the engine (holds, the executor, the
journal, the metrics, the status document). mypy checks it against the protocol in
``make lint``.

The store: ``<directory>/<20-digit number>``, oldest (lowest number) first, as a log of
segments would be. The rule: a file older than ``max_age_ms`` goes, oldest first; never the
newest file, never a file behind one that stays. Anything else in the directory (another
name, a subdirectory, a symlink) is foreign and never touched.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

from retentiond.config.settings import Settings, StoreSection
from retentiond.engine.decision import Decision
from retentiond.engine.disk import measure_path
from retentiond.engine.execute import open_dir_below
from retentiond.engine.figures import DiskFigures, KindStats, StoreStats
from retentiond.engine.holds import HeldFile
from retentiond.engine.identity import FileIdentity, identity_of
from retentiond.engine.kind import BrokerMain, Cadence, RoundServices, StatusDoc, StoreKind
from retentiond.engine.runs import Run
from retentiond.journal.rollup import IdleView
from retentiond.reasons import (
    SCHEMA_VERSION,
    AnyReason,
    FileKind,
    Reason,
    Verdict,
    register_kind,
    register_reason,
)

NUMBERED = register_kind("standin_file")
TOO_OLD = register_reason("standin_too_old")
PHASE = NUMBERED.value
HOLD_INTERVAL_MS = 120_000


@dataclass(frozen=True)
class StandInConfig:
    directory: str
    max_age_ms: int


@dataclass(frozen=True)
class StandInSection:
    """The stand-in's section of the settings (``config.settings.StoreSection``)."""

    directory: str
    broker_name: str = "standin"
    broker_cluster_name: str = "standin"
    round_interval_ms: int = 10_000
    retry_interval_ms: int = 120_000

    @property
    def kind_name(self) -> str:
        return "standin"

    @property
    def store_dirs(self) -> tuple[str, ...]:
        return (self.directory,)

    @property
    def restart_keys(self) -> frozenset[str]:
        return frozenset({"directory"})

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind_name,
            "directory": self.directory,
            "broker_name": self.broker_name,
            "broker_cluster_name": self.broker_cluster_name,
        }

    def key_values(self) -> dict[str, object]:
        return {"directory": self.directory, "roundInterval": self.round_interval_ms}


@dataclass(frozen=True)
class StandInFile:
    path: str
    number: int
    identity: FileIdentity


@dataclass(frozen=True)
class StandInSnapshot:
    files: tuple[StandInFile, ...]  # oldest first
    foreign: tuple[tuple[str, str], ...]
    errors: tuple[str, ...]


@dataclass(frozen=True)
class StandInPlan:
    now_ms: int
    config_hash: str
    files: tuple[Decision, ...]
    errors: tuple[str, ...] = ()
    foreign: tuple[tuple[str, str], ...] = ()
    manual: bool = False
    dry_run: bool = True

    def decisions(self) -> Iterator[Decision]:
        yield from self.files

    def store_errors(self) -> list[str]:
        return list(self.errors)

    def problems(self) -> list[tuple[str, str]]:
        return [(path, f"not a numbered file ({why}); never touched") for path, why in self.foreign]

    def ran_deletion_pass(self) -> bool:
        return not self.errors

    def as_dict(self, *, all_queue_files: bool = True) -> dict[str, object]:
        return {
            "schema_version": SCHEMA_VERSION,
            "type": "plan",
            "now_ms": self.now_ms,
            "config_hash": self.config_hash,
            "errors": list(self.errors),
            "files": [d.as_dict(self.now_ms) for d in self.files],
        }


class _Intervals:
    def interval(self, kind: FileKind) -> int:
        return HOLD_INTERVAL_MS


def _number(name: str) -> int | None:
    return int(name) if len(name) == 20 and name.isdigit() else None


class StandInVoice:
    """What the stand-in says from a status document alone (``engine.kind.KindVoice``)."""

    name: ClassVar[str] = "standin"
    product: ClassVar[str] = "Stand-in"
    info_label_names: ClassVar[tuple[str, ...]] = ("timezone", "dry_run", "standin_max_age_ms")

    @staticmethod
    def status_lines(doc: StatusDoc, manual_line: str) -> list[str]:
        scan = doc.get("scan")
        left = scan.get("files_left") if isinstance(scan, Mapping) else None
        newest = scan.get("newest") if isinstance(scan, Mapping) else None
        planned = doc.get("standin_rounds_planned")
        return [
            f"numbered  {left if left is not None else '?'} files left, newest {newest}; "
            f"{planned} rounds planned",
            manual_line,
        ]

    @staticmethod
    def summary_parts(doc: StatusDoc) -> list[str]:
        scan = doc.get("scan")
        left = scan.get("files_left") if isinstance(scan, Mapping) else None
        return [f"{left} numbered files left"]

    @staticmethod
    def manual_request_text(rounds: object) -> str:
        return f"manual deletion requested: {rounds} rounds (the stand-in ignores it)"


class StandIn(StandInVoice):
    file_kinds: tuple[FileKind, ...] = (NUMBERED,)
    phases: tuple[str, ...] = (PHASE,)
    deletion_series = ((NUMBERED, TOO_OLD),)
    brokers: tuple[BrokerMain, ...] = ()  # no broker process of its own

    def __init__(self, settings: Settings[StoreSection], config: StandInConfig) -> None:
        self.settings = settings
        self.config = config
        self.rounds_planned = 0  # its round memory

    def reconfigure(self, settings: Settings[StoreSection]) -> None:
        self.settings = settings

    # ---- where its files are ------------------------------------------------------------
    def directories(self) -> tuple[str, ...]:
        d = self.config.directory
        return tuple(sorted({d, os.path.realpath(d)}))

    def owner_lock(self) -> str:
        return os.path.join(self.config.directory, ".lock")

    def hold_intervals(self) -> _Intervals:
        return _Intervals()

    # ---- a round ------------------------------------------------------------------------
    def scan(self, now_ms: int, *, executes: bool = True) -> StandInSnapshot:
        files: list[StandInFile] = []
        foreign: list[tuple[str, str]] = []
        try:
            entries = list(os.scandir(self.config.directory))
        except OSError as e:
            return StandInSnapshot((), (), (f"{self.config.directory}: {e.strerror}",))
        for entry in entries:
            number = _number(entry.name)
            st = entry.stat(follow_symlinks=False)
            if number is None or not stat.S_ISREG(st.st_mode):
                foreign.append((entry.path, "name" if number is None else "not a regular file"))
                continue
            files.append(StandInFile(entry.path, number, identity_of(st)))
        files.sort(key=lambda f: f.number)
        return StandInSnapshot(tuple(files), tuple(sorted(foreign)), ())

    def plan_round(self, snapshot: StandInSnapshot, rnd: RoundServices) -> StandInPlan:
        rnd.phase(PHASE)
        decisions: list[Decision] = []
        why: AnyReason
        kept = False
        last = len(snapshot.files) - 1
        for i, f in enumerate(snapshot.files):
            if i == last:
                verdict, why = Verdict.KEEP, Reason.NEWEST_FILE
            elif kept:
                verdict, why = Verdict.KEEP, Reason.AFTER_FIRST_KEPT
            elif rnd.now_ms - f.identity.mtime_ms >= self.config.max_age_ms:
                verdict, why = Verdict.DELETE, TOO_OLD
            else:
                verdict, why = Verdict.KEEP, Reason.NOT_EXPIRED
            kept = kept or verdict is Verdict.KEEP
            decisions.append(
                Decision(NUMBERED, f.path, verdict, why, f.identity, start_offset=f.number)
            )
        planned = rnd.hold(tuple(decisions)) if not snapshot.errors else tuple(decisions)
        if not snapshot.errors:
            rnd.execute(Run(tuple(d for d in planned if d.delete)))
        if rnd.remembers:
            self.rounds_planned += 1
        return StandInPlan(
            now_ms=rnd.now_ms,
            config_hash=self.settings.config_hash,
            files=planned,
            errors=snapshot.errors,
            foreign=snapshot.foreign,
            manual=rnd.manual,
            dry_run=not rnd.executes,
        )

    def redelete_candidate(self, now_ms: int, held: Mapping[str, HeldFile]) -> Decision | None:
        return None

    def status(self) -> dict[str, object]:
        return {"standin_rounds_planned": self.rounds_planned}

    def round_fields(self, plan: StandInPlan, deleted: frozenset[str]) -> dict[str, object]:
        return {"files_left": sum(1 for d in plan.files if d.path not in deleted)}

    def idle_view(self, record: Mapping[str, object]) -> IdleView | None:
        return None  # every round is journaled whole

    # ---- for people and dashboards ------------------------------------------------------
    def render_plan(self, plan: StandInPlan, *, all_queue_files: bool = False) -> str:
        return "".join(
            f"{os.path.basename(d.path)} {d.verdict.value} {d.reason.value}\n" for d in plan.files
        )

    def status_fields(self, plan: StandInPlan, deleted: frozenset[str]) -> dict[str, object]:
        left = [d for d in plan.files if d.path not in deleted]
        return {
            "files_left": len(left),
            "newest": os.path.basename(left[-1].path) if left else None,
        }

    def store_stats(
        self, plan: StandInPlan, deleted: frozenset[str], previous: StoreStats | None
    ) -> StoreStats:
        left = [d.identity for d in plan.files if d.path not in deleted and d.identity]
        oldest = min((i.mtime_ms for i in left), default=None)
        stats = KindStats(len(left), sum(i.size for i in left), oldest, plan.now_ms)
        return StoreStats({NUMBERED: stats})

    def disk_figures(self, settings: Settings[StoreSection], now_ms: int) -> DiskFigures:
        return DiskFigures(((PHASE, measure_path(self.config.directory)),))

    def phases_succeeded(self, plan: StandInPlan) -> tuple[str, ...]:
        return () if plan.errors else self.phases

    def cadence(self, settings: Settings[StoreSection]) -> Cadence:
        return Cadence(settings.round_interval_ms, settings.retry_interval_ms)

    def status_settings(
        self, settings: Settings[StoreSection], scan: StatusDoc | None
    ) -> dict[str, object]:
        return {"delete_when": None, "disk": None}

    def log_fields(self, scan: StatusDoc, manual_rounds_left: int) -> dict[str, object]:
        return dict(scan)

    def info_labels(self, settings: Settings[StoreSection]) -> dict[str, str]:
        return {"standin_max_age_ms": str(self.config.max_age_ms)}

    def reserved_time_s(self, settings: Settings[StoreSection]) -> float | None:
        return self.config.max_age_ms / 1000

    def plan_only_notes(self, plan: StandInPlan) -> list[str]:
        return []

    # ---- just before an unlink ----------------------------------------------------------
    def open_parent(self, decision: Decision) -> int:
        parent = os.path.dirname(decision.path)
        if parent != self.config.directory or decision.kind is not NUMBERED:
            raise PermissionError(f"{parent} is not the stand-in's directory")
        return open_dir_below(parent)

    def recheck(
        self, decision: Decision, st: os.stat_result, now_ms: int, floor: int | None
    ) -> str | None:
        if now_ms - st.st_mtime_ns // 1_000_000 < self.config.max_age_ms:
            return "no longer old enough"
        return None

    def journal_fields(self, decision: Decision, now_ms: int) -> dict[str, object]:
        return {"forced": False, "max_age_ms": self.config.max_age_ms}


def stand_in(
    settings: Settings[StoreSection], config: StandInConfig
) -> StoreKind[StandInSnapshot, StandInPlan]:
    """The stand-in as the engine's protocol sees it (mypy checks it here)."""
    return StandIn(settings, config)
