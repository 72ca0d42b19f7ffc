"""A broker stand-in for the stress test: appends messages as fast as it can.

Like the broker it holds the store lock, keeps every file of its lists open and mapped, writes
CommitLog records into the newest file, rolls at the end with a BLANK record into the file it
pre-allocated, pre-allocates the next one, and appends a ConsumeQueue unit per message, rolling
queue files when full. When the disk is above the warning level it waits, as the broker
rejects writes (never an error). Files that disappeared are let go at the next roll (what the
broker's own list does after a destroy).

It checks that nothing it is writing disappears: the active and pre-allocated CommitLog files
and every queue's active file must still be the very inode it writes after each batch. Any
such loss, or any OSError, is an error: a line on stderr and exit status 1. At the end
(``--seconds`` elapsed) it prints a JSON summary on stdout.

    python -m tests.helpers.stress_writer ROOT --seconds N [--file-size B] [--queues Q]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import mmap
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from retentiond.kinds.rocketmq.formats import CQ_UNIT, encode_blank, encode_message
from retentiond.kinds.rocketmq.names import offset_to_name

WARNING_LEVEL = 0.90  # diskSpaceWarningLevelRatio: above it the broker refuses writes


@dataclass
class Mapped:
    path: Path
    fd: int
    map: mmap.mmap

    @classmethod
    def create(cls, path: Path, size: int) -> Mapped:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.posix_fallocate(fd, 0, size)  # real blocks, as the broker's warmed-up files
        return cls(path, fd, mmap.mmap(fd, size))

    def intact(self) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(self.fd).st_ino
        except FileNotFoundError:
            return False

    def gone(self) -> bool:
        return os.fstat(self.fd).st_nlink == 0

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


@dataclass
class Queue:
    directory: Path
    file_size: int
    files: list[Mapped] = field(default_factory=list)
    offset: int = 0  # logical byte offset of the next unit

    def append(self, unit: bytes) -> None:
        pos = self.offset % self.file_size
        if pos == 0:
            self.files.append(Mapped.create(self.directory / offset_to_name(self.offset),
                                            self.file_size))  # fmt: skip
        self.files[-1].map[pos : pos + len(unit)] = unit
        self.offset += len(unit)


class Writer:
    def __init__(self, root: Path, file_size: int, cq_file_size: int, queues: int) -> None:
        self.root = root
        self.size = file_size
        self.cl_dir = root / "commitlog"
        for d in (self.cl_dir, root / "consumequeue", root / "index"):
            d.mkdir(parents=True, exist_ok=True)
        self.lock_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.lockf(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # the store's owner
        os.pwrite(self.lock_fd, b"lock", 0)
        self.commitlog: list[Mapped] = [Mapped.create(self.cl_dir / offset_to_name(0), file_size)]
        self.commitlog.append(Mapped.create(self.cl_dir / offset_to_name(file_size), file_size))
        self.active = 0  # index into self.commitlog of the file being written
        self.pos = 0
        self.queues = []
        for q in range(queues):
            d = root / "consumequeue" / "StressTopic" / str(q)
            d.mkdir(parents=True)
            self.queues.append(Queue(d, cq_file_size))
        self.messages = self.rolls = self.waits = self.released = 0

    @property
    def base(self) -> int:
        return int(self.commitlog[self.active].path.name)

    def _disk_full(self) -> bool:
        st = os.statvfs(self.root)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        return used / (used + st.f_bavail * st.f_frsize) > WARNING_LEVEL

    def _roll(self) -> None:
        cur = self.commitlog[self.active]
        cur.map[self.pos : self.pos + 8] = encode_blank(self.size - self.pos)
        self.active += 1
        self.pos = 0
        self._let_go()
        while self._disk_full():  # the broker refuses writes until the cleaner frees space
            self.waits += 1
            time.sleep(0.01)
            self._let_go()
        nxt = self.base + self.size
        self.commitlog.append(Mapped.create(self.cl_dir / offset_to_name(nxt), self.size))
        self.rolls += 1

    def _let_go(self) -> None:
        """Drop files someone deleted from the lists (all but the ones being written)."""
        keep_cl = self._drop_gone(self.commitlog[: self.active])
        self.commitlog = keep_cl + self.commitlog[self.active :]
        self.active = len(keep_cl)
        for q in self.queues:
            q.files = self._drop_gone(q.files[:-1]) + q.files[-1:]

    def _drop_gone(self, files: list[Mapped]) -> list[Mapped]:
        live = []
        for m in files:
            if m.gone():  # asked once per file: it may go between two looks
                m.close()
                self.released += 1
            else:
                live.append(m)
        return live

    def write(self, i: int, body: bytes) -> None:
        q = i % len(self.queues)
        queue = self.queues[q]
        record = encode_message(
            topic="StressTopic", queue_id=q, queue_offset=queue.offset // 20,
            physical_offset=self.base + self.pos, store_timestamp_ms=int(time.time() * 1000),
            born_timestamp_ms=int(time.time() * 1000), body=body, properties={"KEYS": str(i)},
        )  # fmt: skip
        if self.pos + len(record) + 8 > self.size:
            self._roll()
            record = encode_message(
                topic="StressTopic", queue_id=q, queue_offset=queue.offset // 20,
                physical_offset=self.base, store_timestamp_ms=int(time.time() * 1000),
                born_timestamp_ms=int(time.time() * 1000), body=body, properties={"KEYS": str(i)},
            )  # fmt: skip
        phys = self.base + self.pos
        self.commitlog[self.active].map[self.pos : self.pos + len(record)] = record
        self.pos += len(record)
        queue.append(CQ_UNIT.pack(phys, len(record), 0))
        self.messages += 1

    def check(self) -> None:
        """Nothing being written may have been deleted or replaced."""
        for m in self.commitlog[self.active :]:
            if not m.intact():
                raise RuntimeError(f"CommitLog file being written was deleted: {m.path}")
        for q in self.queues:
            if q.files and not q.files[-1].intact():
                raise RuntimeError(f"active ConsumeQueue file was deleted: {q.files[-1].path}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--file-size", type=int, default=256 * 1024)
    parser.add_argument("--cq-file-size", type=int, default=200 * 20)
    parser.add_argument("--queues", type=int, default=4)
    args = parser.parse_args()
    body = os.urandom(1900)
    try:
        w = Writer(args.root, args.file_size, args.cq_file_size, args.queues)
        print("ready", flush=True)
        deadline = time.monotonic() + args.seconds
        i = 0
        while time.monotonic() < deadline:
            for _ in range(64):
                w.write(i, body)
                i += 1
            w.check()
    except Exception as exc:  # any error at all fails the test
        print(f"writer error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    summary = {
        "messages": w.messages, "rolls": w.rolls, "waits": w.waits, "released": w.released,
        "active": str(w.commitlog[w.active].path), "max_offset": w.base + w.pos,
        "queue_offsets": [q.offset for q in w.queues], "cq_file_size": args.cq_file_size,
    }  # fmt: skip
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
