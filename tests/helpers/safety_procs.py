"""Real processes for the safety tests: readers holding store files, a stand-in broker holding
the store lock and mapping its files, and a view of /proc without the environment's own
unreadable processes.

Some sandboxes run a supervisor as pid 1 whose /proc entries even root cannot read. The daemon
rightly counts that as doubt (any file someone holds is then treated as held by another
process). Tests about *other* rules need a complete view, so ``ProcView`` builds a proc root of
symlinks to /proc/<pid> for every process except those already unreadable when the test
started (never a process the test starts), and points the Cleaner (``proc_root``) or the daemon
(``RETENTIOND_PROC_ROOT``) at it. On a machine where every process is readable it is /proc.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_HOLDER = r"""
import fcntl, mmap, os, sys
lock, mode, *paths = sys.argv[1:]
keep = []
if lock != "-":
    fd = os.open(lock, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # as FileChannel.tryLock(0, 1, false)
    keep.append(fd)
for p in paths:
    f = open(p, "rb")
    if mode == "map" and os.fstat(f.fileno()).st_size:
        keep.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
        f.close()  # the mapping alone keeps the file referenced
    else:
        keep.append(f)
print("ready", flush=True)
sys.stdin.read()
"""


class Holder:
    """A process holding files open (``mode="open"``) or mapped (``"map"``), optionally the
    store lock too (then it is the store's owner, like the broker)."""

    def __init__(self, paths: list[Path] | list[str], *, lock: Path | None = None, mode="open"):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(lock or "-"), mode, *map(str, paths)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert line.strip() == "ready", f"holder failed to start: {line!r}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()

    def __enter__(self) -> Holder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _readable(pid: str) -> bool:
    try:
        for entry in os.scandir(f"/proc/{pid}/fd"):
            os.stat(entry.path)
        with open(f"/proc/{pid}/maps") as fh:
            fh.read(1)
    except PermissionError:
        return False
    except OSError:
        return True
    return True


def _kernel_thread(pid: str) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return bool(int(text[text.rindex(")") + 2 :].split()[6]) & 0x00200000)
    except (OSError, ValueError, IndexError):
        return False


def environment_unreadable() -> set[str]:
    """Processes of the test environment whose /proc entries we cannot read."""
    return {
        p for p in os.listdir("/proc") if p.isdigit() and not _readable(p) and not _kernel_thread(p)
    }


class ProcView:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.excluded = environment_unreadable()
        root.mkdir(parents=True, exist_ok=True)
        os.symlink("/proc/locks", root / "locks")
        os.symlink("/proc/sys", root / "sys")
        self.refresh()

    def refresh(self) -> None:
        """Link every current process (but the excluded); drop links to exited ones."""
        current = {p for p in os.listdir("/proc") if p.isdigit()} - self.excluded
        for name in os.listdir(self.root):
            if name.isdigit() and name not in current:
                os.unlink(self.root / name)
        for pid in current:
            link = self.root / pid
            if not os.path.lexists(link):
                os.symlink(f"/proc/{pid}", link)

    def __str__(self) -> str:
        return str(self.root)
