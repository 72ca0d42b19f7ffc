"""What a store kind may ask of the engine during one round: disk figures net of pending
release, holds by other processes, and the execution of its runs.

A ``Round`` is made by the Cleaner for every round, ``plan`` and dry run alike; only its mode
differs. In a ``plan`` nothing is remembered and nothing is unlinked; in a dry run nothing is
unlinked; in a real round the executor carries out each run. A stop request or a journal
failure halts the round: later runs are not carried out, and the kind can see why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum

from retentiond.engine.decision import Decision
from retentiond.engine.disk import PathUsage
from retentiond.engine.execute import Executor, JournalFailed, Outcome, RoundContext, Run, Stopped
from retentiond.engine.guard import Guard
from retentiond.engine.holds import HeldFile, HoldersOf, HoldIntervals, hold_in_order
from retentiond.engine.kind import AnyKind
from retentiond.engine.refused import RefusedFile, keep_refused


class Mode(Enum):
    PLAN = "plan"  # what a round would do now: changes nothing, not even round memory
    DRY_RUN = "dry_run"  # a round that stops before every unlink
    REAL = "real"


class Round:
    def __init__(
        self,
        kind: AnyKind,
        guard: Guard,
        *,
        now_ms: int,
        manual: bool,
        mode: Mode,
        held: Callable[[], Mapping[str, HeldFile]],
        remember_held: Callable[[dict[str, HeldFile]], None],
        executor: Executor | None,
        context: RoundContext,
        on_phase: Callable[[str], None] | None = None,
        refused: Callable[[], Mapping[str, RefusedFile]] | None = None,
    ) -> None:
        self.kind = kind
        self.guard = guard
        self.now_ms = now_ms
        self.manual = manual
        self.mode = mode
        self._held = held  # the Cleaner's first attempts, read at each hold
        self._remember_held = remember_held
        self._executor = executor
        self.context = context
        self.outcomes: list[Outcome] = []
        self.seen_held: dict[str, HeldFile] = {}  # files found held this round, by path
        self.stopped = False
        self.journal_error: str | None = None
        self._holders: HoldersOf | None = None
        self._rules: HoldIntervals | None = None  # the kind's intervals, read once a round
        self._on_phase = on_phase
        self._refused = refused  # the Cleaner's refused unlinks, read at each hold

    def phase(self, name: str) -> None:
        """The kind starts planning another of its file kinds (the metrics time each)."""
        if self._on_phase is not None:
            self._on_phase(name)

    # ---- mode ---------------------------------------------------------------------------
    @property
    def executes(self) -> bool:
        """Runs are carried out (a real round with a journal)."""
        return self._executor is not None

    @property
    def remembers(self) -> bool:
        """The kind may update its round memory (not for ``plan``, which changes nothing)."""
        return self.mode is not Mode.PLAN

    @property
    def halted(self) -> bool:
        return self.stopped or self.journal_error is not None

    # ---- disk ---------------------------------------------------------------------------
    def refresh_pending(self) -> None:
        """Before the disk is judged: forget pending files that were released since."""
        self.guard.refresh_pending(self.kind, self.now_ms)

    def adjusted(self, usage: PathUsage) -> PathUsage:
        """A path's usage once unlinked-but-held bytes on its filesystem are released."""
        return self.guard.adjusted(usage)

    def pending_bytes(self) -> int:
        return self.guard.inuse.totals().bytes

    def look_for_pending(self) -> bool:
        """Build this round's holder map if it is not built yet (it may turn up pending
        bytes, say after a restart); True when the pending totals changed."""
        if self.guard.inuse.has_map:
            return False
        before = self.guard.inuse.totals()
        self.guard.holder_map(self.kind, self.now_ms)
        return self.guard.inuse.totals() != before

    def note_disk_ratio(self, ratio: float | None) -> None:
        """The ratio every deletion record of this round carries as ``disk_ratio_before``."""
        self.context.disk_ratio_before = ratio

    # ---- holds --------------------------------------------------------------------------
    def hold(self, decisions: tuple[Decision, ...]) -> tuple[Decision, ...]:
        """An ordered run with held files deferred (or forced once their interval passed) and
        files whose unlink was refused kept until their backoff has passed (``engine.refused``:
        no intent/abort pair every round while a fault lasts); everything behind a kept file
        is kept too."""
        if not any(d.delete for d in decisions):
            return decisions
        if self._refused is not None:
            decisions = keep_refused(decisions, self._refused(), self.now_ms)
            if not any(d.delete for d in decisions):
                return decisions
        if self._holders is None:
            self._holders = self.guard.holders_of(self.kind, self.now_ms)
        if self._rules is None:  # (a plan on 100k queues holds once per queue with deletions)
            self._rules = self.guard.rules(self.kind)
        rules = self._rules
        seen: dict[str, HeldFile] = {}
        out = hold_in_order(decisions, self._holders, self._held(), self.now_ms, rules, seen)
        if not seen:
            return out
        self.seen_held.update(seen)
        if self.mode is Mode.REAL:
            self._remember_held(seen)  # before any unlink, as upstream's firstShutdown
        return out

    # ---- execution ----------------------------------------------------------------------
    def execute(self, run: Run) -> list[Outcome]:
        """Carry out a run; nothing in a plan or dry run, or once the round has halted.
        Returns this run's outcomes (also kept in ``outcomes``)."""
        if self._executor is None or self.halted or not run.decisions:
            return []
        done = len(self.outcomes)
        try:
            self._executor.run(run, self.context, self.outcomes)
        except Stopped:
            self.stopped = True
        except JournalFailed as exc:
            self.journal_error = str(exc)
        return self.outcomes[done:]

    @property
    def slept_s(self) -> float:
        return self._executor.slept_s if self._executor is not None else 0.0
