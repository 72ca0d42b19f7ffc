"""Minimal, lazy binary reads the policies need; values of immutable files are reused.

Only three values decide ConsumeQueue, index and timer log deletion: the CommitLog offset in
the last 20-byte unit of a full ConsumeQueue file, the endPhyOffset of an index header, and
the CommitLog offset in the last 52-byte unit of a full timerlog file. A file that
is not the last of its queue is full and no longer written, so its value is reused while its
identity (inode, size, mtime) holds: a daemon round in which the CommitLog minimum offset moved
then costs at most one lstat per examined file instead of open + read + close.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

from retentiond.engine.identity import FileIdentity, identity_of
from retentiond.kinds.rocketmq.formats import (
    CQ_UNIT_SIZE,
    INDEX_HEADER_SIZE,
    TIMERLOG_UNIT_SIZE,
    IndexHeader,
    decode_cq_unit,
    decode_index_header,
    decode_timerlog_offset_py,
    timerlog_last_unit_at,
)

# O_NONBLOCK: a FIFO that slipped in under a store name must not hang the round.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class ReadResult(NamedTuple):
    """A value read from a file with the identity it had, or why it could not be read."""

    value: int | None
    identity: FileIdentity | None
    problem: str | None = None


def read_at(path: str, offset: int, length: int) -> tuple[bytes, FileIdentity]:
    """Read ``length`` bytes at ``offset`` without following a symlink.

    Raises OSError (including ELOOP for a symlink) or ValueError for a non-regular file.
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        return os.pread(fd, length, offset), identity_of(st)
    finally:
        os.close(fd)


# A value read earlier: (identity it was read from, value, ctime_ns or None). The change time
# is kept for values from the scan cache file: a file rewritten in place with its size kept and
# its mtime put back by utime still has a new ctime.
Known = tuple[FileIdentity, int, int | None]


class BinaryReader:
    """Reads the decisive value of full ConsumeQueue files.

    It keeps no cache of its own: the values read earlier live in the per-queue decisions the
    planner keeps between rounds (or in the scan cache file after a restart), and are handed
    in as ``known``, so a known file costs one lstat (or nothing, see ``trust``) and an
    unknown one open + fstat + pread + close, never both.
    """

    def __init__(self, cq_file_size: int) -> None:
        self.cq_file_size = cq_file_size
        self.reads = 0  # for tests and benchmarks: how many files were actually opened

    def cq_last_offset(
        self, path: str, known: Known | None = None, *, trust: bool = False
    ) -> ReadResult:
        """CommitLog offset of the last unit of a full, non-last ConsumeQueue file.

        ``known``: the identity and value seen for this path earlier; it is used when an lstat
        shows the same identity (a regular file with the same inode, device, size and mtime,
        and ctime when known),
        else the file is read again. ``trust``: the caller knows the directory is unchanged
        since ``known`` was verified in this process, so the lstat is skipped. Safe because a
        full ConsumeQueue file is never rewritten in place in normal operation, and because
        the executor re-checks the identity and re-reads the value of every file just before
        deleting it.
        """
        if known is not None:
            if trust:
                return ReadResult(known[1], known[0])
            try:
                st = os.lstat(path)
            except OSError as exc:
                return ReadResult(None, None, f"stat failed: {exc.strerror}")
            ident = known[0]
            if (
                st.st_ino == ident.ino
                and st.st_size == ident.size
                and st.st_mtime_ns == ident.mtime_ns
                and st.st_dev == ident.dev
                and (known[2] is None or st.st_ctime_ns == known[2])
                and stat.S_ISREG(st.st_mode)
            ):
                return ReadResult(known[1], ident)
        try:
            self.reads += 1
            data, ident = read_at(path, self.cq_file_size - CQ_UNIT_SIZE, CQ_UNIT_SIZE)
        except (OSError, ValueError) as exc:
            return ReadResult(None, None, f"read failed: {exc}")
        if ident.size != self.cq_file_size:
            return ReadResult(None, ident, f"size {ident.size} != {self.cq_file_size}")
        unit = decode_cq_unit(data)
        if unit is None:
            return ReadResult(None, ident, "short read")
        if not any(data):
            # A never-written unit in a full file: we cannot tell what it covers.
            return ReadResult(None, ident, "last unit is all zero")
        if unit.commitlog_offset < 0:
            return ReadResult(None, ident, f"negative offset {unit.commitlog_offset}")
        return ReadResult(unit.commitlog_offset, ident)


def read_index_header(path: str) -> tuple[IndexHeader | None, FileIdentity | None, str | None]:
    """The 40-byte header of an index file (never cached: the last file changes)."""
    try:
        data, ident = read_at(path, 0, INDEX_HEADER_SIZE)
    except (OSError, ValueError) as exc:
        return None, None, f"read failed: {exc}"
    header = decode_index_header(data)
    if header is None:
        return None, ident, f"short header ({len(data)} bytes)"
    return header, ident, None


def read_prefix(path: str, length: int = 8) -> bytes | None:
    try:
        data, _ = read_at(path, 0, length)
    except (OSError, ValueError):
        return None
    return data


def read_timerlog_last_offset(path: str, file_size: int) -> ReadResult:
    """The CommitLog offset in the last unit of a full timerlog file of ``file_size`` bytes
    (where TimerLog ``getOffsetForLastUnit`` puts it), read without following a symlink; None
    with the reason when the file has another size or holds no unit there."""
    at = timerlog_last_unit_at(file_size)
    if at < 0:
        return ReadResult(None, None, f"a file of {file_size} bytes holds no timerlog unit")
    try:
        data, ident = read_at(path, at, TIMERLOG_UNIT_SIZE)
    except (OSError, ValueError) as exc:
        return ReadResult(None, None, f"read failed: {exc}")
    if ident.size != file_size:
        return ReadResult(None, ident, f"size {ident.size} != {file_size}")
    value = decode_timerlog_offset_py(data)
    if value is None:
        return ReadResult(None, ident, f"no timerlog unit at byte {at} (bad data)")
    return ReadResult(value, ident)
