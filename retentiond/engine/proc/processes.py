"""Other processes described with psutil: who they are (pid, user, command), read through the
same ``/proc`` root as the rest of the engine.

psutil reads ``/proc`` through one module-global, ``psutil.PROCFS_PATH``. The engine takes a
``proc_root`` per object (tests pass a fixture tree, a container the host's ``/proc`` mounted
elsewhere), so every psutil call here runs inside ``procfs(root)``, which sets the global under
a lock and puts it back: two threads asking about different roots never see each other's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_PSUTIL = threading.Lock()
COMMAND_CHARS = 160  # a JVM command line runs to kilobytes of classpath: people need the start


@contextmanager
def procfs(proc_root: str) -> Iterator[None]:
    """psutil reads ``proc_root`` for the duration (one thread at a time)."""
    import psutil  # here: a command that describes no process does not import it (start-up)

    with _PSUTIL:
        previous = psutil.PROCFS_PATH
        psutil.PROCFS_PATH = proc_root
        try:
            yield
        finally:
            psutil.PROCFS_PATH = previous


def same_pid_namespace(proc_root: str, pid: int) -> bool:
    """Whether ``pid`` under ``proc_root`` is the process our own kernel calls ``pid``.

    Syscalls that take a pid (``prlimit``, behind ``psutil.Process.rlimit``) address our PID
    namespace; a host ``/proc`` mounted elsewhere numbers processes differently, so there only
    what ``proc_root`` itself shows may be used.
    """
    if os.path.realpath(proc_root) == "/proc":
        return True
    try:
        there, here = os.stat(f"{proc_root}/{pid}"), os.stat(f"/proc/{pid}")
    except OSError:
        return False
    return (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino)


def short_command(cmdline: Iterable[str], name: str | None = None) -> str:
    """The command line on one line, cut to ``COMMAND_CHARS``; ``[name]`` when it is empty
    (kernel threads, zombies)."""
    text = " ".join(" ".join(cmdline).split())  # one line: a `-c` script spans several
    if not text:
        return f"[{name}]" if name else "?"
    return text if len(text) <= COMMAND_CHARS else text[: COMMAND_CHARS - 3] + "..."


@dataclass(frozen=True)
class ProcessLabel:
    """Enough to tell a person which process is meant."""

    pid: int
    user: str | None
    command: str

    def as_dict(self) -> dict[str, object]:
        return {"pid": self.pid, "user": self.user, "command": self.command}

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.user or '?'}): {self.command}"


def describe(pids: Iterable[int], proc_root: str) -> list[ProcessLabel]:
    """Pid, user and command of each process still running. Both come from world-readable
    files (``status``, ``cmdline``), so this works for the very processes whose ``fd`` and
    ``maps`` we may not read."""
    import psutil

    found: list[ProcessLabel] = []
    with procfs(proc_root):
        for pid in pids:
            try:
                p = psutil.Process(pid)
                with p.oneshot():
                    name = p.name()
                    try:
                        user: str | None = p.username()
                    except (psutil.AccessDenied, KeyError):
                        user = None
                    try:
                        command = short_command(p.cmdline(), name)
                    except psutil.AccessDenied:
                        command = f"[{name}]"
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            except (psutil.Error, OSError):
                found.append(ProcessLabel(pid, None, "?"))
                continue
            found.append(ProcessLabel(pid, user, command))
    return found
