"""A stand-in broker as a real process: it takes the store lock, maps files and opens
descriptors on command, under the command line a test chooses.

Mappings are made with libc's ``mmap`` through ctypes, one page each of one small file, so
100,000 of them cost 100,000 map entries and no descriptor (Python's ``mmap.mmap`` dups the
descriptor for every mapping). Consecutive one-page mappings of the same file at offset 0
cannot merge into one entry: their file offsets are not contiguous.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# argv: lock path ("-" for none), then anything (the command line the test wants to show).
# stdin commands: "map N FILE" (N one-page mappings of FILE), "open N FILE" (N descriptors),
# "nofile SOFT" (set the soft RLIMIT_NOFILE); each answers "ok" once done.
HELPER = r"""
import ctypes, fcntl, os, resource, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
PAGE = os.sysconf("SC_PAGE_SIZE")
keep = []
if sys.argv[1] != "-":
    fd = os.open(sys.argv[1], os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # as FileChannel.tryLock(0, 1, false)
    keep.append(fd)
print("ready", flush=True)
for line in sys.stdin:
    word, *args = line.split()
    if word == "map":
        fd = os.open(args[1], os.O_RDONLY)
        for _ in range(int(args[0])):
            if libc.mmap(None, PAGE, 1, 1, fd, 0) in (None, ctypes.c_void_p(-1).value):
                print("mmap failed", ctypes.get_errno(), flush=True)
                break
        else:
            os.close(fd)  # the mappings alone keep the file referenced
            print("ok", flush=True)
    elif word == "open":
        keep.extend(os.open(args[1], os.O_RDONLY) for _ in range(int(args[0])))
        print("ok", flush=True)
    elif word == "nofile":
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(args[0]), hard))
        print("ok", flush=True)
"""

BROKER_ARGS = ("-server", "-Xms8g", "org.apache.rocketmq.broker.BrokerStartup", "-c", "broker.conf")


class FakeBroker:
    """The helper process; ``args`` are appended to its command line after the script, and
    ``argv0`` replaces the interpreter's name at its start (as ``exec -a`` does)."""

    def __init__(
        self, lock: Path | None, args: tuple[str, ...] = BROKER_ARGS, *, argv0: str | None = None
    ) -> None:
        self.proc = subprocess.Popen(
            [argv0 or sys.executable, "-c", HELPER, str(lock or "-"), *args],
            executable=sys.executable,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._expect("ready")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _expect(self, word: str) -> None:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert line.strip() == word, f"helper said {line!r}, not {word!r}"

    def command(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        self._expect("ok")

    def map(self, n: int, path: Path) -> None:
        self.command(f"map {n} {path}")

    def open(self, n: int, path: Path) -> None:
        self.command(f"open {n} {path}")

    def nofile(self, soft: int) -> None:
        self.command(f"nofile {soft}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()

    def __enter__(self) -> FakeBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
