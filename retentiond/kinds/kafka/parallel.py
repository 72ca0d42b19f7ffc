"""``plan`` and ``rescue --dry-run`` on both cores: the partitions split in two, one half
scanned and planned in a forked child while this process does the other, then joined.

``plan``'s text (``plan_and_render``): the halves are split in the order the text lists the
partitions; each renders its own (``report.plan_text``) and the two are joined
(``report.join_text``), a topic split between them counted once. A dry-run ``rescue``
(``rescue_round``) that takes by the plan's order alone (no consumer progress, no guard,
nothing beyond the retention): the halves are split in the scan's order, the ``-delete``,
``-stray`` and ``-future`` dirs all in this process; the child hands over, compactly, each
of its partitions' deletions with the space they hold (``rescue.Half``), which this process
takes after its own. A real rescue deletes: it is always one process.

Only in the CLI (one thread, one plan, then exit): never in the daemon, whose threads make a
fork unsafe; only for a store of ``MIN_PARTITIONS`` or more on two CPUs or more. What both
halves share is settled before the fork: the instant planned for and each log dir's
``.lock`` (probed once: two processes probing it at once would each see the other). Each
half reads the consumer offsets (``__consumer_offsets``) whole, so both know the same
progress; what both print above the partitions (the plan's errors among it) must come out
the same, or the halves are of different plans. The child writes nothing but its result to
the pipe (its stdout and stderr go to ``/dev/null``, so it logs nothing) and ends with
``os._exit``. Whatever goes wrong with it (an exception, a crash, a result that does not
parse or does not fit) costs only time: this process does the child's half itself (``plan``)
or the whole (``rescue``). The output is the single-process output, byte for byte.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.offsets import TOPIC as OFFSETS_TOPIC
from retentiond.kinds.kafka.plan import KafkaPlan
from retentiond.kinds.kafka.report import Chunk, DirText, PlanText, join_text, plan_text
from retentiond.kinds.kafka.rescue import Compact, Half
from retentiond.kinds.kafka.storecheck import log_dir_problem
from retentiond.reasons import Reason

if TYPE_CHECKING:
    from retentiond.config.settings import Settings
    from retentiond.engine.cleaner import Cleaner, RoundResult
    from retentiond.engine.rescue import RescueRequest
    from retentiond.kinds.kafka.config import KafkaServer
    from retentiond.kinds.kafka.offline import LogDirLock
    from retentiond.kinds.kafka.rescue import LossOf


class Kafka(Protocol):
    """What this needs of the kind (``kind.Kafka``)."""

    server: KafkaServer
    locks: dict[str, LogDirLock]
    owned: Callable[[str, fm.PartitionDirName], bool] | None
    lock_probes: Mapping[str, bool] | None


class RescueKafka(Kafka, Protocol):
    """What a rescue needs besides."""

    settings: Settings[KafkaServer]
    rescue_request: RescueRequest | None
    rescue_loss: LossOf | None
    rescue_split: RescueSplit | None


# below this many partitions one process is as fast (the fork, the second scan of the root
# and the join cost a few milliseconds)
MIN_PARTITIONS = 2000
# the share of the partitions the child takes: a little more than half, as this process
# also joins the halves (plan: reads and joins the texts; rescue: selects, reports)
PLAN_CHILD_SHARE = 0.52
RESCUE_CHILD_SHARE = 0.55

Key = tuple[str, int]

# how the last plan or rescue was made ("one process", "two processes", ...): for tests
last_way = ""


def _keys(log_dirs: tuple[str, ...]) -> list[Key] | None:
    """Every partition dir's (topic, partition) in every log dir, sorted; None when a log
    dir cannot be listed (the plan says why; one process is enough for that)."""
    keys: list[Key] = []
    for d in log_dirs:
        if log_dir_problem(d) is not None:
            continue
        try:
            with os.scandir(d) as it:
                names = [e.name for e in it]
        except OSError:
            return None
        for n in names:
            parsed = fm.parse_partition_dir_name(n)
            if parsed is not None:
                keys.append((parsed.topic, parsed.partition))
    keys.sort()
    return keys


def _probe_locks(kind: Kafka) -> dict[str, bool] | None:
    """Each usable log dir's ``.lock``: free (taken and let go at once) or held by another
    process; None if one cannot be probed (one process then probes as it always does)."""
    probes: dict[str, bool] = {}
    for d in kind.server.log_dirs:
        if log_dir_problem(d) is not None:
            continue
        lock = kind.locks[d]
        try:
            free = lock.acquire()
        except OSError:
            return None
        if free:
            lock.release()
        probes[d] = free
    return probes


def split_key(kind: Kafka, min_partitions: int = MIN_PARTITIONS) -> Key | None:
    """Where the second half starts (the first (topic, partition) it plans), None when one
    process should plan it all."""
    if (os.cpu_count() or 1) < 2 or threading.active_count() != 1:
        return None
    keys = _keys(kind.server.log_dirs)
    if keys is None or len(keys) < max(2, min_partitions):
        return None
    key = keys[_at(len(keys), PLAN_CHILD_SHARE)]
    return key if key != keys[0] else None


def _at(n: int, share: float) -> int:
    """Where the child's ``share`` of ``n`` items, sorted, starts (one of each at least)."""
    return min(n - 1, max(1, round(n * (1 - share))))


def _encode(text: PlanText) -> bytes:
    return json.dumps(
        {
            "header": text.header,
            "every_size": text.every_size,
            "dirs": [
                [
                    d.path,
                    d.head,
                    [[c.topic, "\n".join(c.lines), c.counts, c.shown] for c in d.chunks],
                    d.leftovers,
                ]
                for d in text.dirs
            ],
        }
    ).encode()


def _strs(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("not a list of strings")
    return value


def _decode(data: bytes) -> PlanText:
    """The child's text, every field checked (ValueError if anything is off)."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("every_size"), bool):
        raise ValueError("not a plan text")
    dirs = []
    for d in doc["dirs"]:
        path, head, chunks, leftovers = d
        if not isinstance(path, str) or not isinstance(head, str):
            raise ValueError("bad log dir")
        got = []
        for topic, lines, counts, shown in chunks:
            if (
                not isinstance(topic, str)
                or not isinstance(lines, str)
                or not isinstance(shown, bool)
                or not isinstance(counts, list)
                or len(counts) != 5
                or not all(type(c) is int and c >= 0 for c in counts)
            ):
                raise ValueError("bad topic chunk")
            got.append(Chunk(topic, lines.split("\n") if lines else [], counts, shown))
        pairs = []
        for pair in leftovers:
            name, line = _strs(pair)
            pairs.append((name, line))
        dirs.append(DirText(path, head, got, pairs))
    return PlanText(_strs(doc["header"]), dirs, doc["every_size"])


def _child(
    write_fd: int, work: Callable[[], bytes], hook: Callable[[int], None] | None = None
) -> None:
    """In the forked child: do its half, write the result, exit (never returns; nothing
    printed, nothing logged: its stdout and stderr are ``/dev/null``). ``hook``: for tests,
    run first with the pipe's descriptor."""
    status = 1
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        sys.stdout = sys.stderr = open(devnull, "w")  # noqa: SIM115 (to its os._exit)
        if hook is not None:
            hook(write_fd)
        data = work()
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view) :]
        status = 0
    finally:
        os._exit(status)


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        got = os.read(fd, 1 << 20)
        if not got:
            return b"".join(chunks)
        chunks.append(got)


def _exited_ok(pid: int) -> bool:
    try:
        _pid, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return False
    return os.waitstatus_to_exitcode(status) == 0


def _halves(
    kind: Kafka,
    cleaner: Cleaner,
    key: Key,
    manual: bool,
    all_queue_files: bool,
    now_ms: int,
    around_fork: Callable[[], AbstractContextManager[object]],
    child_hook: Callable[[int], None] | None,
) -> tuple[KafkaPlan, str] | None:
    """This process plans the partitions before ``key``, a forked child those from it on;
    None if the two do not fit together even with the child's half planned here."""

    def half(second: bool) -> tuple[KafkaPlan, PlanText]:
        if second:
            kind.owned = lambda _e, n: (n.topic, n.partition) >= key
        else:
            kind.owned = lambda _e, n: (n.topic, n.partition) < key
        plan = cleaner.plan(manual=manual, now_ms=now_ms)
        assert isinstance(plan, KafkaPlan)
        return plan, plan_text(plan, all_queue_files=all_queue_files)

    def theirs() -> bytes:
        return _encode(half(True)[1])

    read_fd, write_fd = os.pipe()
    with around_fork():
        pid = os.fork()
        if pid == 0:  # the child
            os.close(read_fd)
            _child(write_fd, theirs, child_hook)
    os.close(write_fd)
    try:
        plan, mine = half(False)
        data = _read_all(read_fd)
    finally:
        os.close(read_fd)
        ok = _exited_ok(pid)
    global last_way
    if ok:
        try:
            got = plan, join_text([mine, _decode(data)])
            last_way = "two processes"
            return got
        except (ValueError, TypeError, KeyError):
            pass
    try:  # the child's half, here
        got = plan, join_text([mine, half(True)[1]])
        last_way = "the child's half here"
        return got
    except ValueError:
        return None


def plan_and_render(
    kind: Kafka,
    cleaner: Cleaner,
    *,
    manual: bool = False,
    all_queue_files: bool = False,
    around_fork: Callable[[], AbstractContextManager[object]] = nullcontext,
    min_partitions: int = MIN_PARTITIONS,
    child_hook: Callable[[int], None] | None = None,  # tests: run first in the child
) -> tuple[KafkaPlan, str]:
    """``plan``'s plan and text, on two processes when the store is large enough. The plan
    returned is this process's half when the text was made in two (its errors are the
    whole plan's: both halves must report the same); the text is always the whole."""
    now_ms = cleaner.clock_ms()
    key = split_key(kind, min_partitions)
    probes = _probe_locks(kind) if key is not None else None
    if key is not None and probes is not None:
        kind.lock_probes = probes
        try:
            got = _halves(
                kind, cleaner, key, manual, all_queue_files, now_ms, around_fork, child_hook
            )
            if got is not None:
                return got
        finally:
            kind.owned = None
            kind.lock_probes = None
    global last_way
    last_way = "one process" if key is None or probes is None else "one process, at last"
    plan = cleaner.plan(manual=manual, now_ms=now_ms)
    assert isinstance(plan, KafkaPlan)
    return plan, join_text([plan_text(plan, all_queue_files=all_queue_files)])


# ---- `rescue --dry-run` -----------------------------------------------------------------


class WholeStore(Exception):
    """The rescue cannot be made of two halves (consumer progress orders it, the guard
    keeps, the child's half did not come or does not fit): one process does it all."""


@dataclass
class ChildRescue:
    """What the child's half gives the rescue (``rescue.Half``), and what must be the same
    in both halves (the plan's errors), or added to this one's (the partitions' foreign
    files, which the round reports)."""

    errors: list[str]
    leftovers: int  # leftover dirs the child's half found (orphans): never split
    halves: dict[str, Half]
    foreign: dict[str, list[tuple[str, str]]]


@dataclass
class RescueSplit:
    """A rescue made of two halves: in the child, ``result`` is set by the kind's rescue;
    in this process, ``receive`` gives the child's (None if it failed)."""

    child: bool
    receive: Callable[[], ChildRescue | None] = lambda: None
    result: ChildRescue | None = None


def _encode_rescue(got: ChildRescue) -> bytes:
    return json.dumps(
        {
            "errors": got.errors,
            "leftovers": got.leftovers,
            "halves": {k: [h.partitions, h.beyond] for k, h in got.halves.items()},
            "foreign": got.foreign,
        }
    ).encode()


_COMPACT_TYPES: tuple[type | tuple[type, ...], ...] = (
    *(str, str, int, int, int, int, int, int, str, int),
    (str, type(None)),
    int,
)
_REASONS = frozenset(f"{r}" for r in Reason)


def _compact(value: Any) -> Compact:
    if (
        not isinstance(value, list)
        or len(value) != len(_COMPACT_TYPES)
        or not all(isinstance(v, t) for v, t in zip(value, _COMPACT_TYPES, strict=True))
        or value[1] not in _REASONS
        or any(isinstance(v, bool) for v in value)
    ):
        raise ValueError("bad segment")
    got: Compact = tuple(value)
    return got


def _decode_rescue(data: bytes) -> ChildRescue:
    doc = json.loads(data)
    leftovers = doc["leftovers"]
    if type(leftovers) is not int:
        raise ValueError("bad leftovers")
    halves = {}
    for path, (parts, beyond) in doc["halves"].items():
        if not isinstance(beyond, bool) or not isinstance(parts, list):
            raise ValueError("bad half")
        halves[path] = Half([[_compact(c) for c in segs] for segs in parts], beyond)
    foreign = {}
    for path, pairs in doc["foreign"].items():
        got = []
        for pair in pairs:
            where, why = _strs(pair)
            got.append((where, why))
        foreign[path] = got
    return ChildRescue(_strs(doc["errors"]), leftovers, halves, foreign)


def _rescue_key(kind: Kafka, min_partitions: int) -> str | None:
    """The first partition dir name (the scan's order) the child's half takes; None when one
    process should do it all. The ``-delete``, ``-stray`` and ``-future`` dirs stay here."""
    if (os.cpu_count() or 1) < 2 or threading.active_count() != 1:
        return None
    names: list[str] = []
    for d in kind.server.log_dirs:
        if log_dir_problem(d) is not None:
            continue
        try:
            with os.scandir(d) as it:
                listed = [e.name for e in it]
        except OSError:
            return None
        for n in listed:
            parsed = fm.parse_partition_dir_name(n)
            if parsed is None or parsed.special is not None:
                continue
            if parsed.topic == OFFSETS_TOPIC:
                return None  # consumer progress may order the rescue
            names.append(n)
    if len(names) < max(2, min_partitions):
        return None
    names.sort()
    key = names[_at(len(names), RESCUE_CHILD_SHARE)]
    return key if key != names[0] else None


def rescue_round(
    kind: RescueKafka,
    cleaner: Cleaner,
    *,
    dry_run: bool,
    min_partitions: int = MIN_PARTITIONS,
    child_hook: Callable[[int], None] | None = None,  # tests: run first in the child
) -> RoundResult:
    """``rescue``'s round; a dry run of a large store that takes by the plan's order alone
    on two processes (``rescue.Half``). A real rescue is always one process: it deletes."""
    request = kind.rescue_request
    now_ms = cleaner.clock_ms()
    key = None
    if (
        dry_run
        and request is not None
        and not request.beyond_retention
        and kind.rescue_loss is None
        and kind.settings.daemon.guard_unconsumed != "keep"
    ):
        key = _rescue_key(kind, min_partitions)
    probes = _probe_locks(kind) if key is not None else None
    global last_way
    if key is None or probes is None:
        last_way = "one process"
        return cleaner.run_round(dry_run=dry_run, now_ms=now_ms)
    split_at = key
    kind.lock_probes = probes
    try:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(read_fd)

            def work() -> bytes:
                kind.owned = lambda e, n: n.special is None and e >= split_at
                split = kind.rescue_split = RescueSplit(child=True)
                cleaner.plan(now_ms=now_ms)  # the round as a dry run plans it, with no report
                if split.result is None:
                    raise WholeStore("no half")
                return _encode_rescue(split.result)

            _child(write_fd, work, child_hook)
        os.close(write_fd)
        reaped = False

        def receive() -> ChildRescue | None:
            nonlocal reaped
            data = _read_all(read_fd)
            reaped, ok = True, _exited_ok(pid)
            if not ok:
                return None
            try:
                return _decode_rescue(data)
            except (ValueError, TypeError, KeyError, AttributeError):
                return None

        kind.owned = lambda e, n: n.special is not None or e < split_at
        kind.rescue_split = RescueSplit(child=False, receive=receive)
        try:
            result = cleaner.run_round(dry_run=True, now_ms=now_ms)
            last_way = "two processes"
            return result
        except WholeStore:
            pass
        finally:
            if not reaped:  # not needed (a broker holds a dir) or this process failed
                os.kill(pid, signal.SIGKILL)
                receive()
            os.close(read_fd)
            kind.owned = None
            kind.rescue_split = None
    finally:
        kind.lock_probes = None
    last_way = "one process, after two did not fit"
    return cleaner.run_round(dry_run=True, now_ms=now_ms)
