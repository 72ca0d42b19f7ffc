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
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from retentiond.config.settings import Settings
from retentiond.engine.decision import Decision
from retentiond.engine.figures import DiskFigures, StoreStats
from retentiond.engine.holds import HeldFile, HoldIntervals
from retentiond.engine.owner import BrokerMain
from retentiond.engine.rollup import IdleView
from retentiond.reasons import Kind, Reason

if TYPE_CHECKING:
    from retentiond.engine.round import Round


class RoundPlan(Protocol):
    """A kind's plan for one round, as the engine, the journal and the reports see it."""

    now_ms: int
    config_hash: str
    errors: tuple[str, ...]  # store errors: nothing was deleted from what they cover
    foreign: tuple[tuple[str, str], ...]  # (path, why) of entries outside the naming scheme
    manual: bool
    dry_run: bool

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


class StoreKind(KindVoice, Protocol):
    """One broker format behind the engine. Lives as long as its Cleaner; keeps its own
    between-round memory (caches, the offsets its passes acted on)."""

    file_kinds: tuple[Kind, ...]  # the kinds of file it deletes, for counts and labels
    phases: tuple[str, ...]  # the stages of its round, in order (``Round.phase``; metrics)
    # (file kind, reason) pairs its deletions can carry: their counters start at 0.
    deletion_series: tuple[tuple[Kind, Reason], ...]
    brokers: tuple[BrokerMain, ...]  # its broker process, told by its main class (owner)
    settings: Settings

    def reconfigure(self, settings: Settings) -> None:
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
    def scan(self, now_ms: int, *, executes: bool = True) -> Any:
        """A read-only snapshot of the store (the kind's own type). ``executes``: the round
        may delete (a real round), so the kind may take what it needs for the whole round
        (Kafka: each log dir's ``.lock``); a plan or a dry run only looks."""
        ...

    def plan_round(self, snapshot: Any, rnd: Round) -> RoundPlan:
        """Plan the round stage by stage, executing through ``rnd`` (see the module doc)."""
        ...

    def redelete_candidate(self, now_ms: int, held: Mapping[str, HeldFile]) -> Decision | None:
        """upstream reDeleteHangedFile: the head file a round left because it was held, to be
        tried again between rounds; None when there is none."""
        ...

    def status(self) -> dict[str, object]:
        """The kind's part of the daemon's ``status`` document (its round memory)."""
        ...

    def round_fields(self, plan: RoundPlan, deleted: frozenset[str]) -> dict[str, object]:
        """The kind's part of the journal's ``round`` record."""
        ...

    def idle_view(self, record: Mapping[str, Any]) -> IdleView | None:
        """How a ``round`` record of this kind reads for folding idle rounds into summaries
        (``engine.rollup``): its state, ratio, stuck flag and the fields the summary carries.
        None: never idle (the store could not be measured)."""
        ...

    # ---- for people and dashboards ------------------------------------------------------
    def render_plan(self, plan: RoundPlan, *, all_queue_files: bool = False) -> str:
        """The plan as ``retentiond plan`` prints it."""
        ...

    def status_fields(self, plan: RoundPlan, deleted: frozenset[str]) -> dict[str, object]:
        """What ``status`` shows of the last scan (RocketMQ: triggers, expired files left)."""
        ...

    def store_stats(
        self, plan: RoundPlan, deleted: frozenset[str], previous: StoreStats | None
    ) -> StoreStats:
        """Files, bytes and oldest age per file kind after a round that deleted ``deleted``."""
        ...

    def disk_figures(self, settings: Settings, now_ms: int) -> DiskFigures:
        """The disk as it is now (at scrape time): ratios, and the disk state if it has any."""
        ...

    def phases_succeeded(self, plan: RoundPlan) -> tuple[str, ...]:
        """The phases of a round that ran to completion (for last-success times)."""
        ...

    def cadence(self, settings: Settings) -> Cadence:
        """The rounds' period and the retry interval that ``settings`` give."""
        ...

    def status_settings(self, settings: Settings, scan: StatusDoc | None) -> dict[str, object]:
        """Its part of the status document that follows the settings in force (a reload shows
        at once, before the next round) and the last scan's ``status_fields`` (None before
        the first): RocketMQ's ``delete_when`` and ``disk`` section."""
        ...

    def log_fields(self, scan: StatusDoc, manual_rounds_left: int) -> dict[str, object]:
        """The fields of the daemon's "round done" log line from the round's ``status_fields``."""
        ...

    def info_labels(self, settings: Settings) -> dict[str, str]:
        """The values of its ``info_label_names`` under ``settings``."""
        ...

    def reserved_time_s(self, settings: Settings) -> float | None:
        """The one age at which a file expires, where the kind has one (fileReservedTime)."""
        ...

    def plan_only_notes(self, plan: RoundPlan) -> list[str]:
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
        """The kind's part of an ``intent``/``deletion`` record (``forced`` at least)."""
        ...
