"""The seam between the engine and a broker format: what a store kind offers the engine.

A store kind (``retentiond.kinds.<name>``) knows its files and its rules: how to list a store,
which files a round may delete and why, how to tell just before an unlink that a file still
qualifies, and what its round record says. The engine knows the rest and nothing of any kind:
the round's order of business, holds by other processes, pending release, the executor, the
journal. ``docs/architecture.md`` shows where a new kind plugs in.

A kind also speaks for itself on the way out: its part of ``status`` (the document and its
text), of the round's log line, of the metrics' info labels, and of what ``once`` prints. The
text of ``status`` is rendered from the daemon's JSON reply by a client that has no store, so
that part (``KindVoice``) needs no instance: ``kinds.voice_named`` finds it by the name the
reply carries.

The kind drives its own stages, because a format's passes depend on each other (RocketMQ's
queues are judged by the CommitLog minimum *after* its files went): it plans a stage, hands the
engine each ordered run of deletions through ``Round.hold`` and ``Round.execute``, reads the
outcomes back, and plans the next stage. In a dry run or a ``plan`` the same calls simply do
not unlink, so a dry run cannot diverge from a real round.

This module is the leaf of that seam: it names value types only. The round's services are
seen through ``RoundServices`` (``engine.round.Round`` implements it), so a kind, and this
interface, import nothing of the engine's machinery. ``StoreKind`` is generic over the kind's
own snapshot and plan types: each kind is checked against it with its own types
(``StoreKind[Snapshot, Plan]``), while the engine, which only hands a kind's snapshot back to
the same kind, holds any kind (``AnyKind``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, TypeVar, runtime_checkable

from retentiond.config.settings import Settings, StoreSection
from retentiond.engine.decision import Decision
from retentiond.engine.disk import PathUsage
from retentiond.engine.figures import DiskFigures, StoreStats
from retentiond.engine.holds import HeldFile, HoldIntervals
from retentiond.engine.runs import Outcome, Run
from retentiond.journal.rollup import IdleView
from retentiond.reasons import AnyReason, FileKind


class RoundPlan(Protocol):
    """A kind's plan for one round, as the engine, the journal and the reports see it."""

    # Read-only: a kind's plan is a frozen value.
    @property
    def now_ms(self) -> int: ...

    @property
    def config_hash(self) -> str: ...

    @property
    def errors(self) -> tuple[str, ...]:
        """Store errors: nothing was deleted from what they cover."""
        ...

    @property
    def foreign(self) -> tuple[tuple[str, str], ...]:
        """(path, why) of entries outside the naming scheme."""
        ...

    @property
    def manual(self) -> bool: ...

    @property
    def dry_run(self) -> bool: ...

    def decisions(self) -> Iterator[Decision]:
        """Every examined file, with its verdict and reason."""
        ...

    def store_errors(self) -> list[str]:
        """Why (part of) the store could not be judged this round: nothing was deleted from
        what an error covers. Empty when the whole store was judged."""
        ...

    def problems(self) -> list[tuple[str, str]]:
        """(path, problem) for every bad file or foreign entry the plan skipped."""
        ...

    def ran_deletion_pass(self) -> bool:
        """A deletion pass ran: it uses up one of the rounds a manual request opened."""
        ...

    def as_dict(self, *, all_queue_files: bool = True) -> dict[str, object]:
        """The versioned plan document (``plan --json``)."""
        ...


@dataclass(frozen=True)
class BrokerMain:
    """How a store kind's broker process is told by its command line: the argument that is
    its main class, as a whole (``classes``) or by its last dotted part (``simple_names``)."""

    type: str  # what the owner's figures call such a process (the kind's name)
    title: str  # how a warning names it: "a ... broker (its main class)"
    classes: frozenset[str] = frozenset()
    simple_names: frozenset[str] = frozenset()

    def matches(self, arg: str) -> bool:
        return arg in self.classes or arg.rsplit(".", 1)[-1] in self.simple_names


StatusDoc = Mapping[str, object]  # the daemon's status document, as JSON gives it back


@dataclass(frozen=True)
class Cadence:
    """How often the daemon acts on a store, as the kind's settings say."""

    round_interval_ms: int  # the period of the rounds (RocketMQ: cleanResourceInterval)
    # How often files that would not go are looked at again, and the longest backoff after a
    # refused unlink (RocketMQ: redeleteHangedFileInterval).
    retry_interval_ms: int


class KindVoice(Protocol):
    """What a kind says for itself from documents alone, with no store and no settings: a
    `status` client renders the daemon's reply through it. Class-level (attributes and static
    methods), so the kind's class itself is its voice."""

    # Read-only, so that a class declaring them as ``ClassVar`` is a voice, and so are its
    # instances.
    @property
    def name(self) -> str:
        """The kind's name in documents (``store_kind``) and metric labels."""
        ...

    @property
    def product(self) -> str:
        """The broker it cleans for, for people: "a RocketMQ broker"."""
        ...

    @property
    def info_label_names(self) -> tuple[str, ...]:
        """The ``retentiond_config_info`` labels it fills, in their order: its own
        (``StoreKind.info_labels``) and, where it wants them, the shared ones (timezone,
        clean_resource_interval_ms, dry_run)."""
        ...

    @staticmethod
    def status_lines(doc: StatusDoc, manual_line: str) -> list[str]:
        """Its lines of ``retentiond status`` (after the rounds, before the hung files), the
        line about manual rounds (``manual_line``) among them where it belongs."""
        ...

    @staticmethod
    def summary_parts(doc: StatusDoc) -> list[str]:
        """Its parts of systemd's one-line STATUS= (after the rounds and the last deletion)."""
        ...

    @staticmethod
    def manual_request_text(rounds: object) -> str:
        """What ``trigger-delete`` prints once the daemon opened ``rounds`` manual rounds."""
        ...


class RoundServices(Protocol):
    """What a kind may ask of the engine during one round (``engine.round.Round``): disk
    figures net of pending release, holds by other processes, and the execution of its
    runs. In a ``plan`` and a dry run ``execute`` unlinks nothing."""

    @property
    def now_ms(self) -> int: ...

    @property
    def manual(self) -> bool: ...

    def phase(self, name: str) -> None:
        """The kind starts planning another of its file kinds (the metrics time each)."""
        ...

    @property
    def executes(self) -> bool:
        """Runs are carried out (a real round with a journal)."""
        ...

    @property
    def remembers(self) -> bool:
        """The kind may update its round memory (not for ``plan``, which changes nothing)."""
        ...

    @property
    def halted(self) -> bool:
        """A stop request or a journal failure ended the round: later runs are not carried
        out."""
        ...

    def refresh_pending(self) -> None:
        """Before the disk is judged: forget pending files that were released since."""
        ...

    def adjusted(self, usage: PathUsage) -> PathUsage:
        """A path's usage once unlinked-but-held bytes on its filesystem are released."""
        ...

    def pending_bytes(self) -> int: ...

    def look_for_pending(self) -> bool:
        """Look for unlinked-but-held files if not done yet this round; True when the
        pending totals changed."""
        ...

    def note_disk_ratio(self, ratio: float | None) -> None:
        """The ratio every deletion record of this round carries as ``disk_ratio_before``."""
        ...

    def hold(self, decisions: tuple[Decision, ...]) -> tuple[Decision, ...]:
        """An ordered run with held files deferred (or forced once their interval passed)
        and refused unlinks kept while they back off; everything behind a kept file is kept."""
        ...

    def execute(self, run: Run) -> list[Outcome]:
        """Carry out a run (nothing in a plan or dry run, or once the round has halted);
        its outcomes."""
        ...


SnapshotT = TypeVar("SnapshotT")
PlanT = TypeVar("PlanT", bound=RoundPlan)


class StoreKind(KindVoice, Protocol[SnapshotT, PlanT]):
    """One broker format behind the engine. Lives as long as its Cleaner; keeps its own
    between-round memory (caches, the offsets its passes acted on). ``SnapshotT`` is what
    its ``scan`` returns, ``PlanT`` its plan (a ``RoundPlan``)."""

    # Read-only: constants of the kind (its own, possibly narrower, types).
    @property
    def file_kinds(self) -> tuple[FileKind, ...]:
        """The kinds of file it deletes, for counts and labels."""
        ...

    @property
    def phases(self) -> tuple[str, ...]:
        """The stages of its round, in order (``RoundServices.phase``; metrics)."""
        ...

    @property
    def deletion_series(self) -> tuple[tuple[FileKind, AnyReason], ...]:
        """(file kind, reason) pairs its deletions can carry: their counters start at 0."""
        ...

    @property
    def brokers(self) -> tuple[BrokerMain, ...]:
        """Its broker process, told by its main class (``engine.proc.owner``)."""
        ...

    @property
    def settings(self) -> Settings[StoreSection]:
        """The settings in force (``reconfigure`` changes them)."""
        ...

    def reconfigure(self, settings: Settings[StoreSection]) -> None:
        """Take new settings from the next round on; round memory survives a reload."""
        ...

    # ---- where its files are ------------------------------------------------------------
    def directories(self) -> tuple[str, ...]:
        """The directories its files live in, as configured and as resolved (``/proc``
        shows the resolved path of an open file)."""
        ...

    def owner_lock(self) -> str:
        """The file the broker locks while it runs: its holder is the store's owner."""
        ...

    def hold_intervals(self) -> HoldIntervals:
        """How long a file another process holds may wait before it goes anyway."""
        ...

    # ---- a round ------------------------------------------------------------------------
    def scan(self, now_ms: int, *, executes: bool = True) -> SnapshotT:
        """A read-only snapshot of the store (the kind's own type). ``executes``: the round
        may delete (a real round), so the kind may take what it needs for the whole round
        (Kafka: each log dir's ``.lock``); a plan or a dry run only looks."""
        ...

    def plan_round(self, snapshot: SnapshotT, rnd: RoundServices) -> PlanT:
        """Plan the round stage by stage, executing through ``rnd`` (see the module doc)."""
        ...

    def redelete_candidate(self, now_ms: int, held: Mapping[str, HeldFile]) -> Decision | None:
        """upstream reDeleteHangedFile: the head file a round left because it was held, to be
        tried again between rounds; None when there is none."""
        ...

    def status(self) -> dict[str, object]:
        """The kind's part of the daemon's ``status`` document (its round memory)."""
        ...

    def round_fields(self, plan: PlanT, deleted: frozenset[str]) -> dict[str, object]:
        """The kind's part of the journal's ``round`` record."""
        ...

    def idle_view(self, record: Mapping[str, object]) -> IdleView | None:
        """How a ``round`` record of this kind reads for folding idle rounds into summaries
        (``journal.rollup``): its state, ratio, stuck flag and the fields the summary carries.
        None: never idle (the store could not be measured)."""
        ...

    # ---- for people and dashboards ------------------------------------------------------
    def render_plan(self, plan: PlanT, *, all_queue_files: bool = False) -> str:
        """The plan as ``retentiond plan`` prints it."""
        ...

    def status_fields(self, plan: PlanT, deleted: frozenset[str]) -> dict[str, object]:
        """What ``status`` shows of the last scan (RocketMQ: triggers, expired files left;
        Kafka: plan-only log dirs, verdict counts). Keys other than ``triggers``,
        ``pending_expired`` and ``disk`` (figures ``status_settings`` shows under ``disk``)
        are the document's ``scan`` section."""
        ...

    def store_stats(
        self, plan: PlanT, deleted: frozenset[str], previous: StoreStats | None
    ) -> StoreStats:
        """Files, bytes and oldest age per file kind after a round that deleted ``deleted``."""
        ...

    def disk_figures(self, settings: Settings[StoreSection], now_ms: int) -> DiskFigures:
        """The disk as it is now (at scrape time): ratios, and the disk state if it has any."""
        ...

    def phases_succeeded(self, plan: PlanT) -> tuple[str, ...]:
        """The phases of a round that ran to completion (for last-success times)."""
        ...

    def cadence(self, settings: Settings[StoreSection]) -> Cadence:
        """The rounds' period and the retry interval that ``settings`` give."""
        ...

    def status_settings(
        self, settings: Settings[StoreSection], scan: StatusDoc | None
    ) -> dict[str, object]:
        """Its part of the status document that follows the settings in force (a reload shows
        at once, before the next round) and the last scan's ``status_fields`` (None before
        the first): ``delete_when`` and the ``disk`` section (the disk figures against the
        kind's thresholds)."""
        ...

    def log_fields(self, scan: StatusDoc, manual_rounds_left: int) -> dict[str, object]:
        """The fields of the daemon's "round done" log line from the round's ``status_fields``."""
        ...

    def info_labels(self, settings: Settings[StoreSection]) -> dict[str, str]:
        """The values of its ``info_label_names`` under ``settings``."""
        ...

    def reserved_time_s(self, settings: Settings[StoreSection]) -> float | None:
        """The one age at which a file expires, where the kind has one (fileReservedTime)."""
        ...

    def plan_only_notes(self, plan: PlanT) -> list[str]:
        """Lines ``once`` prints after a real round for the parts of the store it could only
        plan (Kafka: the log dirs a running broker holds); empty when it could act on all."""
        ...

    # ---- just before an unlink ----------------------------------------------------------
    def open_parent(self, decision: Decision) -> int:
        """A directory handle on the file's parent, reached from a configured directory
        without following a symlink; raises ``PermissionError`` for a path outside the store."""
        ...

    def recheck(
        self, decision: Decision, st: os.stat_result, now_ms: int, floor: int | None
    ) -> str | None:
        """None if the file (identity already checked) still qualifies; otherwise why not.
        ``floor`` is the value the run was planned against (a minimum offset, say)."""
        ...

    def journal_fields(self, decision: Decision, now_ms: int) -> dict[str, object]:
        """The kind's part of an ``intent``/``deletion`` record (``forced`` at least). An
        ``age_ms`` among them is the age of the file's data where the kind judges it by
        something other than the mtime (Kafka: a segment's largest timestamp); the engine
        writes it in place of ``time_ms - mtime_ms``."""
        ...


@runtime_checkable
class RemovesDirectories(Protocol):
    """A kind some of whose deletions are whole directories (Kafka: leftover partition
    dirs). For such a decision the executor re-checks the directory's inode, device and
    mtime (its entries unchanged; the decision's ``identity.size`` is the kind's total of the
    files under it), journals the intent, then has the kind remove it."""

    def remove_directory(self, decision: Decision, parent_fd: int, name: str) -> int:
        """Remove the directory ``name`` under ``parent_fd`` (from ``open_parent``); the
        bytes freed. Raises OSError when it could not, leaving what it did not remove."""
        ...


# Any kind, as the engine and the daemon hold it: they hand a kind's snapshot and plan back
# to the same kind only, and read a plan through ``RoundPlan``.
AnyKind: TypeAlias = StoreKind[Any, Any]
