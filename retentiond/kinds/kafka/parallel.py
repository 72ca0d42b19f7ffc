"""``plan`` and a dry-run ``rescue`` of a large store on both cores: half the partitions
scanned and planned in a forked child (``engine.forked``) while this process does the other
half, then joined.

Only inside a one-off command (``forked.one_off``: ``plan``, ``rescue``), never in the
daemon, and only for a store of ``MIN_PARTITIONS`` or more on two CPUs or more
(``forked.allowed``). ``Kafka.scan`` decides (``split_for``, from each log dir's root
listing, made once: ``Split.roots``) and then scans only its ``__consumer_offsets``
partitions and reads its checkpoints (so both halves know the same consumer progress);
``Kafka.plan_round`` forks, each process scans and plans its half (the root listing and
the checkpoints taken from that first scan, not read again), and:

- ``plan``: the halves are split in the order the text lists the partitions; the child
  renders its part of ``plan``'s text (``report.plan_text``), which ``render_plan`` joins
  with this process's (``report.join_text``). What reads the plan's partitions otherwise
  (``plan --json``, ``plan --all``) has the child's half planned here on first use
  (``LogDirPlan.complete``).
- a dry-run ``rescue`` that takes by the plan's order alone (no consumer progress, no guard,
  nothing beyond the retention): the child takes partition dirs spread evenly over the
  scan's order (every other one, by name: each half holds a like share of every topic, so
  of its reads, ``lstat``s and deletions), the ``-delete``, ``-stray`` and ``-future`` dirs
  all here; the child hands over each of its partitions' deletions with the space they hold
  (``rescue.Half``), which this process takes in the scan's order, between its own. A real
  rescue deletes: it is one process.

The child writes nothing but its result (its stdout and stderr go to ``/dev/null``: it logs
nothing). What both halves say of the whole store (its errors) must be the same. A child
that fails, or halves that do not fit, only cost time: the child's half is planned here, or
the whole store at once; the output is the single-process output, byte for byte.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from retentiond.engine import forked
from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.offsets import TOPIC as OFFSETS_TOPIC
from retentiond.kinds.kafka.report import PlanText
from retentiond.kinds.kafka.rescue import Half
from retentiond.kinds.kafka.scan import RootListing, list_log_dir
from retentiond.kinds.kafka.storecheck import log_dir_problem

# below this many partitions one process is as fast
MIN_PARTITIONS = 2000
# the share of the partitions the child takes, so that both halves end together: plan's
# child renders its part as this process does, which then only joins the texts; a rescue's
# child measures what its deletions hold, which this process then selects and reports
# (spread over the partitions: ``_spread``)
PLAN_CHILD_SHARE = 0.51
RESCUE_CHILD_SHARE = 0.49

# how the last plan or rescue was made ("one process", "two processes", ...): for tests
last_way = ""
# tests: run first in the child (to make it fail)
child_hook: Callable[[], None] | None = None

Owned = Callable[[str, fm.PartitionDirName], bool]


@dataclass(frozen=True)
class Split:
    """Which partition dirs (by entry name and parsed name) each process plans."""

    rescue: bool
    child: Owned
    parent: Owned
    topics: frozenset[str]  # every topic with a partition dir
    roots: Mapping[str, RootListing]  # each usable log dir's listing, which the scans reuse


@dataclass
class PlanHalf:
    """What the child's half of a ``plan`` gives: the plan's errors as it saw them and its
    part of the text."""

    errors: list[str]
    text: PlanText


@dataclass
class ChildRescue:
    """What the child's half gives a dry-run rescue (``rescue.Half`` per usable log dir),
    the plan's errors as it saw them, the leftover dirs it found (orphans: then one process
    does it all) and its partitions' foreign files (the round reports them)."""

    errors: list[str]
    leftovers: int
    halves: dict[str, Half]
    foreign: dict[str, list[tuple[str, str]]]
    # filled in by this process: the space of its own half's segments, by .log path
    known: dict[str, int] = field(default_factory=dict)


def way(how: str) -> None:
    global last_way
    last_way = how


def _listing(log_dirs: tuple[str, ...]) -> dict[str, RootListing] | None:
    """The listing of each usable log dir (its partition dirs: ``Split.roots``); None when
    one cannot be listed (one process then says why)."""
    got = {}
    for d in log_dirs:
        if log_dir_problem(d) is not None:
            continue
        try:
            got[d] = list_log_dir(d)
        except OSError:
            return None
    return got


def _spread(names: list[str], share: float) -> frozenset[str]:
    """``share`` of ``names`` taken evenly along them (0.5: every other one)."""
    return frozenset(n for i, n in enumerate(names) if int((i + 1) * share) > int(i * share))


def _at(n: int, share: float) -> int:
    """Where the child's ``share`` of ``n`` sorted items starts (one of each at least)."""
    return min(n - 1, max(1, round(n * (1 - share))))


def split_for(log_dirs: tuple[str, ...], *, rescue: bool) -> Split | None:
    """How to split the store between two processes; None for one."""
    if not forked.allowed(2, 2):  # not a one-off command, or one CPU: list nothing
        return None
    roots = _listing(log_dirs)
    if roots is None:
        return None
    listed = [d for r in roots.values() for d in r.dirs]
    topics = frozenset(n.topic for _e, n in listed)
    if rescue:
        if OFFSETS_TOPIC in topics:
            return None  # consumer progress may order the rescue
        names = sorted(e for e, n in listed if n.special is None)
        if len(names) < 2 or not forked.allowed(len(names), MIN_PARTITIONS):
            return None
        theirs = _spread(names, RESCUE_CHILD_SHARE)
        if not theirs or len(theirs) == len(names):
            return None
        return Split(
            True,
            lambda e, _n: e in theirs,
            lambda e, _n: e not in theirs,
            topics,
            roots,
        )
    if forked.whole_plan():
        return None  # plan --json, --all: made from the whole plan, which the child keeps
    keys = sorted((n.topic, n.partition) for _e, n in listed)
    if len(keys) < 2 or not forked.allowed(len(keys), MIN_PARTITIONS):
        return None
    at = keys[_at(len(keys), PLAN_CHILD_SHARE)]
    if at == keys[0]:
        return None
    return Split(
        False,
        lambda _e, n: (n.topic, n.partition) >= at,
        lambda _e, n: (n.topic, n.partition) < at,
        topics,
        roots,
    )


def quiet() -> None:
    """In the child, first: nothing it prints or logs reaches the command's output."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = open(devnull, "w")  # noqa: SIM115 (until its os._exit)
    if child_hook is not None:
        child_hook()
