"""Kafka's on-disk formats, byte for byte (spec §3–§4): what an offline tool must read to judge
a segment the way the broker would, and write to leave a log dir the broker loads cleanly.

Everything is big-endian (Java ``ByteBuffer``). Readers are strict where Kafka is strict
(checkpoint versions and counts) and lenient where Kafka's own loader is (a partial trailing
batch or preallocated zeros end the data), so that a plan never rests on a guess.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

# ---- names (LogFileUtils, LocalLog.parseTopicPartitionName) -----------------------------

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
LOCK_FILE = ".lock"
METADATA_TOPIC = "__cluster_metadata"

_OFFSET_DIGITS = 20
SEGMENT_NAME_SUFFIXES = frozenset({*SEGMENT_SUFFIXES, SNAPSHOT_SUFFIX})
_SPECIAL_DIR_RE = re.compile(r"(.+)-([0-9]+)\.([0-9a-f]{32})-(delete|future|stray)", re.ASCII)
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]+")


def offset_prefix(offset: int) -> str:
    """The 20-digit zero-padded file-name prefix of ``offset`` (``filenamePrefixFromOffset``)."""
    if offset < 0:
        raise ValueError(f"negative offset {offset}")
    return f"{offset:0{_OFFSET_DIGITS}d}"


def segment_file_name(base_offset: int, suffix: str) -> str:
    return offset_prefix(base_offset) + suffix


# the largest offset, a Java long: twenty digits can say more, which the broker cannot parse
MAX_OFFSET_PREFIX = f"{2**63 - 1:0{_OFFSET_DIGITS}d}"


def is_offset_prefix(prefix: str) -> bool:
    """Twenty ASCII digits, as ``filenamePrefixFromOffset`` writes them (of a long: equal
    lengths of digits compare as their numbers)."""
    return (
        len(prefix) == _OFFSET_DIGITS
        and prefix.isascii()
        and prefix.isdigit()
        and prefix <= MAX_OFFSET_PREFIX
    )


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) of a segment or snapshot file name; None for anything else.
    Exactly 20 ASCII digits and one of the suffixes, nothing after it (string slicing, not a
    regex: the scan calls this for every file of every partition)."""
    suffix = name[_OFFSET_DIGITS:]
    if suffix in SEGMENT_NAME_SUFFIXES and is_offset_prefix(name[:_OFFSET_DIGITS]):
        return int(name[:_OFFSET_DIGITS]), suffix
    return None


@dataclass(frozen=True, slots=True)
class PartitionDirName:
    """A partition directory's name, parsed. ``special`` is ``delete``/``future``/``stray``
    for the directories Kafka itself owns transiently (never subject to retention)."""

    topic: str
    partition: int
    special: str | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def parse_partition_dir_name(name: str) -> PartitionDirName | None:
    """Kafka splits on the last ``-`` (topics may contain ``-``); None if not a partition dir.
    The whole name must match (``fullmatch``: ``$`` would let a trailing newline through) and
    the partition be ASCII digits (``str.isdigit`` and ``\\d`` take other scripts' digits,
    and ``int`` refuses some of them, such as ``'²'``)."""
    m = _SPECIAL_DIR_RE.fullmatch(name)
    if m:
        return PartitionDirName(m.group(1), int(m.group(2)), m.group(4))
    topic, dash, part = name.rpartition("-")
    if (
        not dash
        or not topic
        or not (part.isascii() and part.isdigit())
        or not _TOPIC_RE.fullmatch(topic)
    ):
        return None
    if part != str(int(part)):
        return None  # Kafka writes partitions without leading zeros
    return PartitionDirName(topic, int(part))


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


# ---- .index / .timeindex (OffsetIndex, TimeIndex) ---------------------------------------

_INDEX_ENTRY = struct.Struct(">ii")
_TIME_INDEX_ENTRY = struct.Struct(">qi")


class FormatError(ValueError):
    """A file does not have the format Kafka writes; the message names file and position."""


def encode_offset_index(entries: Sequence[tuple[int, int]]) -> bytes:
    """(relative offset, position) pairs as OffsetIndex writes them."""
    return b"".join(_INDEX_ENTRY.pack(r, p) for r, p in entries)


def decode_offset_index(data: bytes) -> list[tuple[int, int]]:
    """Entries up to the first all-zero slot after the first (a preallocated tail); Kafka
    itself trusts every whole 8-byte slot of a trimmed file."""
    out: list[tuple[int, int]] = []
    for i in range(len(data) // _INDEX_ENTRY.size):
        rel, pos = _INDEX_ENTRY.unpack_from(data, i * _INDEX_ENTRY.size)
        if i > 0 and rel == 0 and pos == 0:
            break
        out.append((rel, pos))
    return out


def encode_time_index(entries: Sequence[tuple[int, int]]) -> bytes:
    """(timestamp ms, relative offset) pairs as TimeIndex writes them."""
    return b"".join(_TIME_INDEX_ENTRY.pack(t, r) for t, r in entries)


def decode_time_index(data: bytes) -> list[tuple[int, int]]:
    """Entries up to the first all-zero slot (timestamps strictly increase, so zeros after the
    first entry are preallocation)."""
    out: list[tuple[int, int]] = []
    for i in range(len(data) // _TIME_INDEX_ENTRY.size):
        ts, rel = _TIME_INDEX_ENTRY.unpack_from(data, i * _TIME_INDEX_ENTRY.size)
        if i > 0 and ts == 0 and rel == 0:
            break
        out.append((ts, rel))
    return out


# ---- text checkpoints (CheckpointFile, LeaderEpochCheckpointFile) -----------------------


def _parse_checkpoint(text: str, path: str, parts: int) -> list[list[str]]:
    """Version 0, a count, then ``count`` lines of ``parts`` whitespace-separated fields;
    an empty file (or a version line alone) means no entries, as in CheckpointFile."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return []
    if lines[0].strip() != "0":
        raise FormatError(f"{path}: line 1: unrecognised version {lines[0]!r}")
    if len(lines) == 1:
        return []
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise FormatError(f"{path}: line 2: bad entry count {lines[1]!r}") from None
    rows = []
    for n, line in enumerate(lines[2:], start=3):
        fields = line.split()
        if len(fields) != parts:
            raise FormatError(f"{path}: line {n}: malformed entry {line!r}")
        rows.append(fields)
    if len(rows) != count:
        raise FormatError(f"{path}: expected {count} entries, found {len(rows)}")
    return rows


def parse_offset_checkpoint(text: str, path: str = "<checkpoint>") -> dict[tuple[str, int], int]:
    """``topic partition offset`` lines → {(topic, partition): offset}."""
    out: dict[tuple[str, int], int] = {}
    for n, (topic, part, off) in enumerate(_parse_checkpoint(text, path, 3), start=3):
        try:
            out[(topic, int(part))] = int(off)
        except ValueError:
            bad = f"{topic} {part} {off}"
            raise FormatError(f"{path}: line {n}: non-numeric field in {bad!r}") from None
    return out


def format_offset_checkpoint(entries: dict[tuple[str, int], int]) -> str:
    lines = ["0", str(len(entries))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    return "\n".join(lines) + "\n"


def parse_leader_epoch_checkpoint(text: str, path: str = "<checkpoint>") -> list[tuple[int, int]]:
    """``epoch startOffset`` lines → [(epoch, start offset)] in file order."""
    out = []
    for n, (epoch, start) in enumerate(_parse_checkpoint(text, path, 2), start=3):
        try:
            out.append((int(epoch), int(start)))
        except ValueError:
            raise FormatError(f"{path}: line {n}: non-numeric entry {epoch} {start}") from None
    return out


def format_leader_epoch_checkpoint(entries: Sequence[tuple[int, int]]) -> str:
    lines = ["0", str(len(entries))] + [f"{e} {s}" for e, s in entries]
    return "\n".join(lines) + "\n"


def truncate_epochs_from_start(
    entries: Sequence[tuple[int, int]], start_offset: int
) -> list[tuple[int, int]]:
    """LeaderEpochFileCache.truncateFromStart: drop the entries starting at or below the new
    log start offset except the last of them, which moves up to start at it."""
    below = [e for e in entries if e[1] <= start_offset]
    above = [e for e in entries if e[1] > start_offset]
    if not below:
        return list(entries)
    return [(below[-1][0], start_offset), *above]


# ---- .log record batches (DefaultRecordBatch, LegacyRecord, FileLogInputStream) ---------

LOG_OVERHEAD = 12  # baseOffset int64 + batchLength int32
HEADER_SIZE_UP_TO_MAGIC = 17
RECORD_OVERHEAD_V0 = 14
V2_HEADER_SIZE = 61
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_LEGACY_HEAD = struct.Struct(">qiIbb")
CONTROL_FLAG = 0x20
TRANSACTIONAL_FLAG = 0x10


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """What retention needs of one batch. For legacy (magic 0/1) entries ``base_offset`` and
    ``last_offset`` are both the outer offset (a compressed wrapper's last inner offset)."""

    position: int
    base_offset: int
    last_offset: int
    size: int  # whole batch, LOG_OVERHEAD included
    magic: int
    attributes: int
    max_timestamp: int  # -1 when the format has none (magic 0)
    records_count: int

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & CONTROL_FLAG)


def iter_batches(data: bytes | memoryview, path: str = "<log>") -> Iterator[BatchHeader]:
    """The complete batches of a ``.log``, as FileLogInputStream.nextBatch walks them.

    A size below the v0 record overhead (preallocated zeros) or a batch running past the end
    (a partial write) ends the data, as a recovering broker truncates there. An unknown
    magic is a FormatError naming the file and the position.
    """
    end = len(data)
    pos = 0
    while pos < end - HEADER_SIZE_UP_TO_MAGIC:
        base, length = struct.unpack_from(">qi", data, pos)
        if length < RECORD_OVERHEAD_V0 or pos + LOG_OVERHEAD + length > end:
            return
        magic = data[pos + 16]
        if magic == 2:
            if length + LOG_OVERHEAD < V2_HEADER_SIZE:
                return
            (_, _, _, _, _, attrs, last_delta, _, max_ts, _, _, _, count) = _V2_HEADER.unpack_from(
                data, pos
            )
            yield BatchHeader(
                pos, base, base + last_delta, LOG_OVERHEAD + length, 2, attrs, max_ts, count
            )
        elif magic in (0, 1):
            _, _, _, _, attrs = _LEGACY_HEAD.unpack_from(data, pos)
            ts = struct.unpack_from(">q", data, pos + 18)[0] if magic == 1 else -1
            yield BatchHeader(pos, base, base, LOG_OVERHEAD + length, magic, attrs, ts, 1)
        else:
            raise FormatError(f"{path}: position {pos}: unknown record batch magic {magic}")
        pos += LOG_OVERHEAD + length


class LogSummary(NamedTuple):
    """A segment's ``.log`` read once: the figures §4.3 and §4.4 derive from it. A
    NamedTuple: a plan makes tens of thousands, and a frozen dataclass costs a setattr per
    field."""

    valid_bytes: int  # end of the last complete batch
    batch_count: int
    max_timestamp: int  # max(batch.maxTimestamp), -1 if none or no timestamps
    next_offset: int | None  # last offset + 1 of the last batch; None when there is none


_BATCH_HEAD = struct.Struct(">qiiB")  # baseOffset, batchLength, leader epoch, magic
_V2_OFFSETS_AND_MAX_TS = struct.Struct(">iqq")  # lastOffsetDelta, baseTimestamp, maxTimestamp
# a v2 batch header up to maxTimestamp in one read: the four above, crc, attributes, then
# lastOffsetDelta, baseTimestamp, maxTimestamp (43 bytes)
_V2_HEAD = struct.Struct(">qiiBIhiqq")
_V1_TIMESTAMP = struct.Struct(">q")


def summarize_log(data: bytes | memoryview, path: str = "<log>", at: int = 0) -> LogSummary:
    """``iter_batches`` folded into the figures retention needs, without a BatchHeader per
    batch (the plan summarizes tens of thousands of segments): the same stops, the same
    error, the same values. A v2 batch (every batch Kafka 0.11+ writes) costs one unpack.
    ``at``: where ``data`` starts in the file, for the position an error names."""
    end = len(data)
    pos = count = 0
    max_ts = -1
    last: int | None = None
    head = _BATCH_HEAD.unpack_from
    v2_head = _V2_HEAD.unpack_from
    v2 = _V2_OFFSETS_AND_MAX_TS.unpack_from
    v2_end = end - _V2_HEAD.size  # a whole v2 header fits at a position up to here
    while pos < end - HEADER_SIZE_UP_TO_MAGIC:
        if pos <= v2_end:
            base, length, _, magic, _, _, delta, _, ts = v2_head(data, pos)
        else:
            base, length, _, magic = head(data, pos)
        if length < RECORD_OVERHEAD_V0 or pos + LOG_OVERHEAD + length > end:
            break
        if magic == 2:
            if length + LOG_OVERHEAD < V2_HEADER_SIZE:
                break
            if pos > v2_end:  # cannot happen: the batch is longer than the header
                delta, _, ts = v2(data, pos + 23)
            last = base + delta
        elif magic == 1:
            ts = _V1_TIMESTAMP.unpack_from(data, pos + 18)[0]
            last = base
        elif magic == 0:
            ts = -1
            last = base
        else:
            raise FormatError(f"{path}: position {at + pos}: unknown record batch magic {magic}")
        if ts > max_ts:
            max_ts = ts
        count += 1
        pos += LOG_OVERHEAD + length
    return LogSummary(pos, count, max_ts, None if last is None else last + 1)


LOG_READ_WINDOW = 1 << 20


def summarize_log_fd(fd: int, size: int, path: str, window: int = LOG_READ_WINDOW) -> LogSummary:
    """``summarize_log`` of an open ``.log`` of ``size`` bytes, read with ``pread`` a window
    at a time: the same figures as over the whole file. Not ``mmap``: a live broker truncates
    a segment (follower truncation, a preallocated segment's roll) while a plan-only round
    reads it, and a mapped page past the new end kills the whole process with SIGBUS; a
    ``pread`` just returns fewer bytes, and the walk stops where the valid batches stop.
    Each turn either moves past at least one batch or ends the walk: a window stops at the
    first batch it does not hold whole, and the next turn starts there."""
    pos = count = 0
    max_ts = -1
    next_offset: int | None = None
    while size - pos > HEADER_SIZE_UP_TO_MAGIC:
        buf = os.pread(fd, min(window, size - pos), pos)
        part = summarize_log(buf, path, pos)
        if part.valid_bytes == 0:
            # the batch here is longer than the window: read it whole if the file holds it
            if len(buf) < LOG_OVERHEAD:
                break
            length = int.from_bytes(buf[8:12], "big", signed=True)
            if length < RECORD_OVERHEAD_V0 or pos + LOG_OVERHEAD + length > size:
                break
            part = summarize_log(os.pread(fd, LOG_OVERHEAD + length, pos), path, pos)
            if part.valid_bytes == 0:
                break
        count += part.batch_count
        max_ts = max(max_ts, part.max_timestamp)
        next_offset = part.next_offset
        pos += part.valid_bytes
    return LogSummary(pos, count, max_ts, next_offset)


def read_log_summary(path: str) -> LogSummary:
    with open(path, "rb") as f:
        return summarize_log(f.read(), path)


def largest_timestamp(summary: LogSummary, log_mtime_ms: int) -> tuple[int, bool]:
    """LogSegment.largestTimestamp (§4.3): the batches' max timestamp, else the ``.log``'s
    mtime; the flag says whether the mtime was used (Kafka's log line tells the two apart)."""
    if summary.max_timestamp >= 0:
        return summary.max_timestamp, False
    return log_mtime_ms, True


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, text: str) -> None:
    """CheckpointFile.write: ``<file>.tmp``, fsync, rename over the file, fsync the dir."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


# ---- producer snapshots (ProducerStateManager.writeSnapshot) ----------------------------

_CRC32C_TABLE: list[int] = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as Kafka's ``Crc32C``; small inputs only (snapshots, tests)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


PRODUCER_SNAPSHOT_VERSION = 1


def empty_producer_snapshot() -> bytes:
    """A producer snapshot with no producers: version int16, CRC-32C (uint32) of what follows,
    then the entries array (int32 count 0). The state of a log that has lost every segment and
    was rebuilt from nothing, which is what the broker would load without a snapshot."""
    body = struct.pack(">i", 0)
    return struct.pack(">hI", PRODUCER_SNAPSHOT_VERSION, crc32c(body)) + body
