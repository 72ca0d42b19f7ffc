"""Minimal, lazy binary reads the policies need, with a cache for immutable files.

Only two values decide ConsumeQueue and index deletion: the CommitLog offset in the last
20-byte unit of a full ConsumeQueue file, and the endPhyOffset of an index header. A file that
is not the last of its queue is full and no longer written, so its value is cached by identity
(inode, size, mtime): a daemon round in which the CommitLog minimum offset moved then costs one
lstat per examined file instead of open + read + close.
"""

from __future__ import annotations

import os
import stat
from typing import NamedTuple

from retentiond.engine.identity import FileIdentity, identity_of
from retentiond.kinds.rocketmq.formats import (
    CQ_UNIT_SIZE,
    INDEX_HEADER_SIZE,
    IndexHeader,
    decode_cq_unit,
    decode_index_header,
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


class BinaryReader:
    """Reads (and caches) the decisive values of full ConsumeQueue files.

    The cache is keyed by path and validated by the file's identity, so a known file costs one
    lstat and an unknown one open + fstat + pread + close, never both.
    """

    def __init__(self, cq_file_size: int, *, cache_limit: int = 2_000_000) -> None:
        self.cq_file_size = cq_file_size
        self._cq_cache: dict[str, tuple[FileIdentity, int]] = {}
        self._cache_limit = cache_limit
        self.reads = 0  # for tests and benchmarks: how many files were actually opened

    def cached_values(self) -> dict[str, tuple[FileIdentity, int]]:
        """Path -> (identity, value) of full files read so far (for the scan cache file)."""
        return self._cq_cache

    def preload(self, values: dict[str, tuple[FileIdentity, int]]) -> None:
        """Values from the cache file; each is used only once an lstat shows the same
        identity (the lister hands out loaded listings as not ``unchanged`` the first time)."""
        if len(self._cq_cache) + len(values) <= self._cache_limit:
            self._cq_cache.update(values)

    def cq_last_offset(self, path: str, *, trust_cache: bool = False) -> ReadResult:
        """CommitLog offset of the last unit of a full, non-last ConsumeQueue file.

        ``trust_cache``: the caller knows the directory is unchanged since the value was
        cached, so the lstat is skipped. Safe because a full ConsumeQueue file is never
        rewritten in place in normal operation, and because the executor re-checks the
        identity and re-reads the value of every file just before deleting it.
        """
        cached = self._cq_cache.get(path)
        if cached is not None and trust_cache:
            return ReadResult(cached[1], cached[0])
        if cached is not None:
            try:
                st = os.lstat(path)
            except OSError as exc:
                del self._cq_cache[path]
                return ReadResult(None, None, f"stat failed: {exc.strerror}")
            ident = identity_of(st)
            if ident == cached[0] and stat.S_ISREG(st.st_mode):
                return ReadResult(cached[1], ident)
            del self._cq_cache[path]
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
        if len(self._cq_cache) >= self._cache_limit:
            self._cq_cache.clear()
        self._cq_cache[path] = (ident, unit.commitlog_offset)
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
