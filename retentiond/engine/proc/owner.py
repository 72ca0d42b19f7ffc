"""The broker beside us: the process holding the store's lock, and how close it is to its limits.

Every CommitLog, ConsumeQueue and index file a RocketMQ broker keeps is memory-mapped and
open; a Kafka broker maps each index file. A broker that reaches ``vm.max_map_count`` fails
with "Map failed", one that reaches its ``RLIMIT_NOFILE`` cannot open the next file, and
retention is what keeps both in check. So each round (never more often: ``OwnerWatch`` is
refreshed by the Cleaner's round, scrapes and ``status`` read the last report) we read:

* with psutil: pid, executable name, command line (the store kind's broker is recognised by
  its main classes, ``BrokerMain``; another lock holder is warned about once), user, start
  time, resident memory, open descriptors and the soft ``RLIMIT_NOFILE``;
* by hand: the number of memory maps, as lines of ``/proc/<pid>/maps`` (see ``count_maps``),
  and ``/proc/sys/vm/max_map_count``.

Everything is read through the engine's ``proc_root``. A figure we may not read (another
user's broker without CAP_SYS_PTRACE: ``fd`` and ``maps`` are refused) is None and named in
``unreadable``; the rest is still reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import structlog

from retentiond.engine.kind import BrokerMain
from retentiond.engine.proc.files import PROC, LockOwner
from retentiond.engine.proc.processes import procfs, same_pid_namespace, short_command

T = TypeVar("T")

log = structlog.get_logger(__name__)

_CHUNK = 1 << 20


def recognise(cmdline: Sequence[str], brokers: Sequence[BrokerMain]) -> tuple[str, str | None]:
    """``(type, main class)``: the type of the first of ``brokers`` whose main class is an
    argument, or ``other`` (no main class)."""
    for arg in cmdline:
        for broker in brokers:
            if broker.matches(arg):
                return broker.type, arg
    return "other", None


def count_maps(pid: int, proc_root: str = PROC) -> int:
    """Memory maps of ``pid``: the lines of ``/proc/<pid>/maps``, counted in 1 MiB reads.

    Not ``psutil.Process.memory_maps()``: it reads ``smaps``, for which the kernel walks the
    page tables of every mapping to sum its RSS, PSS and swap, and parses 20 lines per mapping
    in Python. Measured by bench/bench_owner.py against one process with 100,000 mappings
    (bench/README.md, 2 vCPU EPYC): lines of ``maps`` 0.11 s, ``memory_maps()`` 2.8-2.9 s.
    Raises OSError (PermissionError without CAP_SYS_PTRACE over another user's process).
    """
    lines = 0
    with open(f"{proc_root}/{pid}/maps", "rb", buffering=0) as fh:
        while chunk := fh.read(_CHUNK):
            lines += chunk.count(b"\n")
    return lines


def max_map_count(proc_root: str = PROC) -> int | None:
    """``vm.max_map_count``: the most mappings one process may have (default 65530)."""
    try:
        with open(f"{proc_root}/sys/vm/max_map_count", encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _limits_file_nofile(pid: int, proc_root: str) -> int | None:
    """Soft ``Max open files`` from ``/proc/<pid>/limits`` (world-readable; right in another
    PID namespace, where ``prlimit(pid)`` would ask a different process)."""
    with open(f"{proc_root}/{pid}/limits", encoding="ascii", errors="replace") as fh:
        for line in fh:
            if line.startswith("Max open files"):
                soft = line[len("Max open files") :].split()[0]
                return None if soft == "unlimited" else int(soft)
    raise OSError(f"no 'Max open files' line in {proc_root}/{pid}/limits")


@dataclass(frozen=True)
class OwnerFigures:
    """One reading of the owner process. None: that figure could not be read (see
    ``unreadable``)."""

    pid: int
    name: str | None  # the executable's name (``comm``): java, python3, ...
    exe: str | None
    cmdline: tuple[str, ...]
    type: str  # rocketmq, kafka, other; unknown if the command line could not be read
    main_class: str | None
    user: str | None
    start_time_s: float | None
    rss_bytes: int | None
    open_fds: int | None
    max_fds: int | None  # the soft RLIMIT_NOFILE; None: unlimited or unreadable
    memory_maps: int | None
    unreadable: tuple[str, ...] = ()  # "open_fds: AccessDenied", ...

    @property
    def command(self) -> str:
        return short_command(self.cmdline, self.name)

    def as_dict(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "name": self.name,
            "exe": self.exe,
            "command": self.command,
            "type": self.type,
            "main_class": self.main_class,
            "user": self.user,
            "start_time_s": self.start_time_s,
            "rss_bytes": self.rss_bytes,
            "open_fds": self.open_fds,
            "max_fds": self.max_fds,
            "memory_maps": self.memory_maps,
            "unreadable": list(self.unreadable),
        }


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def read_owner(
    pid: int, proc_root: str = PROC, brokers: Sequence[BrokerMain] = ()
) -> OwnerFigures | None:
    """The figures of ``pid`` (its type told by ``brokers``); None if it is gone."""
    import psutil  # here: a command that never reads an owner does not import it (start-up)

    unreadable: list[str] = []
    same_ns = same_pid_namespace(proc_root, pid)

    def take(key: str, read: Callable[[], T]) -> T | None:
        try:
            return read()
        except psutil.NoSuchProcess:
            raise
        except (psutil.Error, OSError, ValueError, IndexError) as exc:
            unreadable.append(f"{key}: {_why(exc)}")
            return None

    def fd_limit() -> int | None:
        if same_ns:
            try:
                soft, _ = p.rlimit(psutil.RLIMIT_NOFILE)
                return None if soft == psutil.RLIM_INFINITY else int(soft)
            except psutil.AccessDenied:
                pass  # prlimit on another user's process needs CAP_SYS_RESOURCE
        return _limits_file_nofile(pid, proc_root)

    try:
        with procfs(proc_root):
            p = psutil.Process(pid)
            with p.oneshot():
                name = take("name", p.name)
                exe = take("exe", lambda: p.exe() or None)
                got_cmdline = take("cmdline", lambda: tuple(p.cmdline()))
                user = take("user", p.username)
                start_time_s = take("start_time_s", p.create_time)
                rss_bytes = take("rss_bytes", lambda: p.memory_info().rss)
                open_fds = take("open_fds", p.num_fds)
                max_fds = take("max_fds", fd_limit)
            memory_maps = take("memory_maps", lambda: count_maps(pid, proc_root))
    except psutil.NoSuchProcess:  # ZombieProcess too: it holds no lock, maps or files
        return None
    except (psutil.Error, OSError):
        return None
    cmdline: tuple[str, ...]
    if got_cmdline is not None:
        cmdline = got_cmdline
        kind, main = recognise(cmdline, brokers)
    else:
        cmdline, (kind, main) = (), ("unknown", None)
    return OwnerFigures(
        pid=pid,
        name=name,
        exe=exe,
        cmdline=cmdline,
        type=kind,
        main_class=main,
        user=user,
        start_time_s=start_time_s,
        rss_bytes=rss_bytes,
        open_fds=open_fds,
        max_fds=max_fds,
        memory_maps=memory_maps,
        unreadable=tuple(unreadable),
    )


@dataclass(frozen=True)
class OwnerReport:
    """What the last round saw of the owner; replaced whole, so readers need no lock."""

    running: bool | None  # a process holds the store lock (None: cannot tell)
    pids: frozenset[int] = frozenset()
    process: OwnerFigures | None = None  # None: no owner, or not visible here
    vm_max_map_count: int | None = None
    read_at_s: float | None = None
    read_s: float = 0.0  # what the reading cost

    def as_dict(self) -> dict[str, object]:
        return {
            "process": self.process.as_dict() if self.process else None,
            "vm_max_map_count": self.vm_max_map_count,
            "read_at_s": self.read_at_s,
            "read_ms": round(self.read_s * 1000, 3),
        }


class OwnerWatch:
    """The owner's figures, read at most once per ``refresh`` (the Cleaner calls it once per
    round), and the one-time warning about a lock holder that is no known broker."""

    def __init__(self, proc_root: str = PROC, brokers: Sequence[BrokerMain] = ()) -> None:
        self.proc_root = proc_root
        self.brokers = tuple(brokers)  # the store kind's broker, by its main classes
        self.report: OwnerReport | None = None  # None until the first refresh
        self.reads = 0  # how many times the figures were read (tests: never per scrape)
        self._warned: set[tuple[int, float | None]] = set()

    def refresh(self, owner: LockOwner) -> OwnerReport:
        started = time.monotonic()
        figures = None
        if owner.running and owner.pids:
            # A POSIX lock belongs to one process; several pids would be a broker restarting.
            try:
                figures = read_owner(min(owner.pids), self.proc_root, self.brokers)
            except Exception:  # describing the broker must never break a round
                log.exception("cannot read the owner broker's figures")
            self.reads += 1
        report = OwnerReport(
            running=owner.running,
            pids=owner.pids,
            process=figures,
            vm_max_map_count=max_map_count(self.proc_root),
            read_at_s=time.time(),
            read_s=time.monotonic() - started,
        )
        self.report = report
        if figures is not None and figures.type in ("other", "unknown"):
            key = (figures.pid, figures.start_time_s)
            if key not in self._warned:
                self._warned.add(key)
                titles = [b.title for b in self.brokers] or ["a known broker"]
                known = f"neither {' nor '.join(titles)}" if len(titles) > 1 else f"not {titles[0]}"
                log.warning(
                    f"the process holding the store lock is {known}: its files are still "
                    "treated as the owner's",
                    pid=figures.pid,
                    user=figures.user,
                    command=" ".join(" ".join(figures.cmdline).split()),  # whole: said once
                )
        return report
