"""Realistic RocketMQ stores on disk, byte-exact, for tests, the demo daemon and benchmarks.

A cleaner that is only ever tested against hand-made files learns the test author's beliefs,
not the broker's layout. Every file written here follows shared/spec/rocketmq.md §1-§2 as the
broker would leave it: records appended with the END_OF_FILE rule, ConsumeQueue units at
``queue_offset * 20``, IndexFiles with the broker's header bookkeeping, one pre-allocated
CommitLog file, a checkpoint and a lock file. The summary returned alongside lets a test check
the cleaner against what was written rather than against what the cleaner itself reads back.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import random
import time
import zlib
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from retentiond.kinds.rocketmq.formats import (
    BLANK_RECORD_SIZE,
    CQ_UNIT,
    CQ_UNIT_SIZE,
    INDEX_ENTRY,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
    INDEX_SLOT,
    INDEX_SLOT_SIZE,
    IndexHeader,
    StoreCheckpoint,
    encode_blank,
    encode_checkpoint,
    encode_message_frame,
    encode_properties,
    index_file_size,
    index_key_hash,
    message_length,
    tags_code,
)
from retentiond.kinds.rocketmq.names import offset_to_name
from retentiond.storegen import GenStoreRequest

_HOUR_MS = 3_600_000
_INT_MAX = (1 << 31) - 1
# A gap this long between written bytes is left as a hole in sparse mode: a filesystem block.
_HOLE_MIN = 4096
_FLUSH_AT = 8 << 20
_ZEROS = memoryview(bytes(1 << 20))
_BODY_PATTERN_LEN = 1 << 16
_Encoder = Callable[[int], tuple[bytes, bytes]]  # physical offset -> (head, tail)
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class StoreSpec:
    """What to generate. Sizes use the broker's own config names (see ``write_config``)."""

    commitlog_file_size: int = 1024 * 1024  # mappedFileSizeCommitLog
    cq_file_size: int = 140 * CQ_UNIT_SIZE  # mappedFileSizeConsumeQueue, a multiple of 20
    max_hash_slot_num: int = 100
    max_index_num: int = 64
    messages: int = 1000
    message_size: int = 1024  # whole record; the body shrinks or grows to fit (never < 0)
    topics: int = 4
    queues_per_topic: int = 4  # messages go round-robin over (topic, queue)
    topic_prefix: str = "TopicTest"  # one topic: exactly this name; several: prefix + number
    # KEYS and TAGS property values; "{i}" is the message's global sequence number. An empty
    # value omits the property (no KEYS: no index entry; no TAGS: tagsCode 0). KEYS may hold
    # several space-separated keys, each indexed, as upstream.
    keys: str = "key-{i}"
    tags: str = "TagA"
    # CommitLog directories, relative to the root or absolute; () means <root>/commitlog.
    # Several paths place file i in sorted(paths)[i % n], like MultiPathMappedFileQueue.
    commitlog_paths: tuple[str, ...] = ()
    # Message store times (and so file mtimes) spread linearly between these ages.
    oldest_age_hours: float = 96.0
    newest_age_hours: float = 0.0
    preallocate: bool = True  # one zero-filled file after the last, as AllocateMappedFileService
    sparse: bool = False  # bodies, zero tails and unused space become holes
    checkpoint: bool = True
    lock_file: bool = True
    index: bool = True
    now_ms: int | None = None  # None: the wall clock at generation time
    seed: int = 0  # body bytes and born-timestamp jitter

    def topic_names(self) -> list[str]:
        if self.topics == 1:
            return [self.topic_prefix]
        return [f"{self.topic_prefix}{t}" for t in range(self.topics)]

    def validate(self) -> None:
        if self.commitlog_file_size <= 0:
            raise ValueError("commitlog_file_size must be positive")
        if self.cq_file_size <= 0 or self.cq_file_size % CQ_UNIT_SIZE:
            raise ValueError("cq_file_size must be a positive multiple of 20")
        if self.max_hash_slot_num <= 0 or self.max_index_num < 2:
            raise ValueError("an index file needs at least one slot and one entry")
        if self.messages < 0 or self.message_size < 0:
            raise ValueError("messages and message_size must not be negative")
        if self.topics <= 0 or self.queues_per_topic <= 0:
            raise ValueError("need at least one topic and one queue")
        if self.oldest_age_hours < self.newest_age_hours:
            raise ValueError("oldest_age_hours must be >= newest_age_hours")


@dataclass(frozen=True, slots=True)
class CommitLogFile:
    path: Path
    start_offset: int  # the file name
    size: int
    mtime_ms: int
    message_count: int
    first_message_offset: int | None  # physical offsets; None for the pre-allocated file
    last_message_offset: int | None
    write_position: int  # bytes in use: the file size once a BLANK closed it
    preallocated: bool


@dataclass(frozen=True, slots=True)
class ConsumeQueueFile:
    location: str  # the path as a string: 10^5 Path objects would cost seconds to build
    start: int  # byte offset in the logical queue = the file name
    unit_count: int
    first_commitlog_offset: int
    last_commitlog_offset: int  # what CQ deletion compares with the CommitLog minimum
    mtime_ms: int

    @property
    def path(self) -> Path:
        return Path(self.location)


@dataclass(frozen=True, slots=True)
class IndexFileInfo:
    path: Path
    header: IndexHeader  # header.end_phy_offset is what index deletion compares
    entry_count: int
    full: bool
    mtime_ms: int


@dataclass(frozen=True)
class GeneratedStore:
    root: Path
    spec: StoreSpec
    now_ms: int
    commitlog_dirs: tuple[Path, ...]  # in the configured order
    commitlog_files: tuple[CommitLogFile, ...]  # by offset, pre-allocated file last
    queues: dict[tuple[str, int], tuple[ConsumeQueueFile, ...]]
    index_files: tuple[IndexFileInfo, ...]
    min_offset: int  # CommitLog min offset: start of the first file
    max_offset: int  # CommitLog max offset: end of the last message
    message_count: int
    checkpoint: StoreCheckpoint | None

    @property
    def data_files(self) -> tuple[CommitLogFile, ...]:
        return tuple(f for f in self.commitlog_files if not f.preallocated)

    @property
    def cq_file_count(self) -> int:
        return sum(len(files) for files in self.queues.values())

    def iter_cq_files(self) -> Iterator[ConsumeQueueFile]:
        for files in self.queues.values():
            yield from files

    def summary(self) -> str:
        """One line for a human running ``gen-store``."""
        pre = sum(f.preallocated for f in self.commitlog_files)
        return (
            f"{self.message_count} messages, {len(self.commitlog_files)} CommitLog files"
            f" ({pre} pre-allocated), {len(self.queues)} queues with {self.cq_file_count}"
            f" ConsumeQueue files, {len(self.index_files)} index files,"
            f" offsets [{self.min_offset}, {self.max_offset})"
        )


# --- Writing --------------------------------------------------------------------------------


class _FileWriter:
    """Positional writes coalesced into few syscalls; gaps become holes or zeros by mode."""

    def __init__(self, path: str, size: int, sparse: bool) -> None:
        self._fd = os.open(path, _OPEN_FLAGS, 0o644)
        self._size = size
        self._sparse = sparse
        self._run_start = 0
        self._run = bytearray()

    def put(self, pos: int, data: bytes) -> None:
        run_end = self._run_start + len(self._run)
        gap = pos - run_end
        if gap < 0:
            raise ValueError("writes must move forward")
        if gap:
            if self._sparse and gap >= _HOLE_MIN:
                self._flush()
                self._run_start = pos
            else:
                self._run += bytes(gap)
        self._run += data
        if len(self._run) >= _FLUSH_AT:
            self._flush()

    def _flush(self) -> None:
        view = memoryview(self._run)
        pos = self._run_start
        while view:
            written = os.pwrite(self._fd, view, pos)
            view = view[written:]
            pos += written
        self._run_start = pos
        self._run = bytearray()

    def close(self, mtime_ms: int) -> None:
        try:
            self._flush()
            pos = self._run_start
            if self._sparse:
                os.ftruncate(self._fd, self._size)
            else:
                while pos < self._size:
                    pos += os.pwrite(self._fd, _ZEROS[: self._size - pos], pos)
            ns = mtime_ms * 1_000_000
            os.utime(self._fd, ns=(ns, ns))
        finally:
            os.close(self._fd)


def _write_small(path: str, data: bytes, size: int, sparse: bool, mtime_ms: int) -> None:
    """One open/write/utime/close: ConsumeQueue files are many and tiny."""
    fd = os.open(path, _OPEN_FLAGS, 0o644)
    try:
        pad = max(0, size - len(data))
        if sparse and pad >= _HOLE_MIN:
            os.write(fd, data)
            os.ftruncate(fd, size)
        else:
            os.write(fd, data + bytes(pad) if pad else data)
        ns = mtime_ms * 1_000_000
        os.utime(fd, ns=(ns, ns))
    finally:
        os.close(fd)


class _IndexBuilder:
    """The broker's IndexFile.putKey bookkeeping, files rolled when indexCount hits the max."""

    def __init__(self, directory: Path, spec: StoreSpec) -> None:
        self._dir = directory
        self._slots = spec.max_hash_slot_num
        self._max = spec.max_index_num
        self._size = index_file_size(spec.max_hash_slot_num, spec.max_index_num)
        self._entries_at = INDEX_HEADER_SIZE + self._slots * INDEX_SLOT_SIZE
        self._sparse = spec.sparse
        self._buf: bytearray | None = None
        self._name_ms = -1
        self._begin_ts = self._end_ts = self._begin_phy = self._end_phy = 0
        self._hash_slot_count = 0
        self._count = 1
        self.files: list[IndexFileInfo] = []
        self.last_full_end_ts = 0  # checkpoint.indexMsgTimestamp

    def add(self, key_hash: int, phy_offset: int, store_ts: int) -> None:
        if self._buf is None or self._count >= self._max:
            self._roll(store_ts)
        buf = self._buf
        assert buf is not None
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self._slots) * INDEX_SLOT_SIZE
        (prev,) = INDEX_SLOT.unpack_from(buf, slot_pos)
        if prev <= 0 or prev > self._count:
            prev = 0
        if self._begin_ts <= 0:
            diff = 0
        else:
            diff = min(max((store_ts - self._begin_ts) // 1000, 0), _INT_MAX)
        INDEX_ENTRY.pack_into(
            buf, self._entries_at + self._count * INDEX_ENTRY.size, key_hash, phy_offset, diff, prev
        )
        INDEX_SLOT.pack_into(buf, slot_pos, self._count)
        if self._count <= 1:
            self._begin_phy, self._begin_ts = phy_offset, store_ts
        if prev == 0:
            self._hash_slot_count += 1
        self._count += 1
        self._end_phy, self._end_ts = phy_offset, store_ts

    def _roll(self, now_ms: int) -> None:
        if self._buf is not None:
            self._finish()
        # Created when the next key arrives; names must stay unique and increasing.
        self._name_ms = max(now_ms, self._name_ms + 1)
        self._buf = bytearray(self._size)
        # A new file starts from the previous full file's end values (IndexFile ctor).
        self._begin_ts, self._begin_phy = self._end_ts, self._end_phy
        self._hash_slot_count = 0
        self._count = 1

    def _finish(self) -> None:
        buf = self._buf
        assert buf is not None
        header = IndexHeader(
            self._begin_ts,
            self._end_ts,
            self._begin_phy,
            self._end_phy,
            self._hash_slot_count,
            self._count,
        )
        INDEX_HEADER.pack_into(buf, 0, *header)
        path = self._dir / _index_name(self._name_ms)
        writer = _FileWriter(str(path), self._size, self._sparse)
        used = self._entries_at + self._count * INDEX_ENTRY.size
        writer.put(0, bytes(buf[: used if self._sparse else self._size]))
        writer.close(self._end_ts)
        full = self._count >= self._max
        if full:
            self.last_full_end_ts = self._end_ts
        self.files.append(IndexFileInfo(path, header, self._count - 1, full, self._end_ts))
        self._buf = None

    def close(self) -> None:
        if self._buf is not None:
            self._finish()


def _index_name(ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in the local zone, as the JVM default zone would render it."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"


def commitlog_dirs(root: Path, spec: StoreSpec) -> tuple[Path, ...]:
    """Absolute CommitLog directories in the configured order."""
    root = Path(root).absolute()
    if not spec.commitlog_paths:
        return (root / "commitlog",)
    return tuple(p if p.is_absolute() else root / p for p in map(Path, spec.commitlog_paths))


def _ensure_empty_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if any(path.iterdir()):
        raise FileExistsError(f"{path} is not empty; refusing to mix a new store into it")


class _CommitLogBuilder:
    """Appends records with the broker's END_OF_FILE rule and remembers what each file holds."""

    def __init__(self, placement: list[Path], spec: StoreSpec) -> None:
        self._placement = placement
        self._size = spec.commitlog_file_size
        self._sparse = spec.sparse
        self._writer: _FileWriter | None = None
        self._idx = -1
        self._pos = 0
        self._count = 0
        self._first: int | None = None
        self._first_ts = self._last_ts = 0
        self._last: int | None = None
        self.files: list[CommitLogFile] = []

    @property
    def max_offset(self) -> int:
        return 0 if self._writer is None else self._idx * self._size + self._pos

    def _path(self, idx: int) -> Path:
        # MultiPathMappedFileQueue: file i goes to sorted(paths)[i % n].
        return self._placement[idx % len(self._placement)] / offset_to_name(idx * self._size)

    def append(self, total: int, store_ts: int, encode: _Encoder, body: bytes | None) -> int:
        """Write one record of ``total`` bytes; returns its physical offset.

        ``encode(offset)`` gives the bytes before and after the body; ``body`` None means an
        all-zero body that sparse mode leaves as a hole.
        """
        if self._writer is None or self._pos + total + BLANK_RECORD_SIZE > self._size:
            if total + BLANK_RECORD_SIZE > self._size:
                raise ValueError(
                    f"a {total}-byte message plus an 8-byte blank does not fit a"
                    f" {self._size}-byte CommitLog file"
                )
            if self._writer is not None:
                self._writer.put(self._pos, encode_blank(self._size - self._pos))
                self._close(self._size)
            self._idx += 1
            self._writer = _FileWriter(str(self._path(self._idx)), self._size, self._sparse)
            self._pos, self._count, self._first, self._first_ts = 0, 0, None, store_ts
        offset = self._idx * self._size + self._pos
        head, tail = encode(offset)
        if body is None:
            self._writer.put(self._pos, head)
            self._writer.put(self._pos + total - len(tail), tail)
        else:
            self._writer.put(self._pos, head + body + tail)
        if self._first is None:
            self._first = offset
        self._last, self._last_ts = offset, store_ts
        self._count += 1
        self._pos += total
        return offset

    def _close(self, write_position: int) -> None:
        assert self._writer is not None
        self._writer.close(self._last_ts)
        self.files.append(
            CommitLogFile(
                path=self._path(self._idx),
                start_offset=self._idx * self._size,
                size=self._size,
                mtime_ms=self._last_ts,
                message_count=self._count,
                first_message_offset=self._first,
                last_message_offset=self._last,
                write_position=write_position,
                preallocated=False,
            )
        )

    def finish(self, preallocate: bool) -> None:
        """Close the active file (not rolled: no BLANK) and add the pre-allocated one."""
        if self._writer is None:
            return
        self._close(self._pos)
        if not preallocate:
            return
        idx = self._idx + 1
        # Allocated when the active file was created, so it carries that file's birth time.
        _FileWriter(str(self._path(idx)), self._size, self._sparse).close(self._first_ts)
        self.files.append(
            CommitLogFile(
                path=self._path(idx),
                start_offset=idx * self._size,
                size=self._size,
                mtime_ms=self._first_ts,
                message_count=0,
                first_message_offset=None,
                last_message_offset=None,
                write_position=0,
                preallocated=True,
            )
        )


class _Bodies:
    """Message bodies and their CRCs: seeded bytes when dense, zeros (a hole) when sparse."""

    def __init__(self, seed: int, sparse: bool) -> None:
        self._sparse = sparse
        self._pattern = random.Random(seed).randbytes(_BODY_PATTERN_LEN)
        self._pattern2 = self._pattern * 2
        self._zero_crc: dict[int, int] = {}

    def body(self, i: int, length: int) -> tuple[bytes | None, int]:
        if self._sparse:
            crc = self._zero_crc.get(length)
            if crc is None:
                crc = self._zero_crc[length] = zlib.crc32(bytes(length)) & 0x7FFFFFFF
            return None, crc
        start = (i * 4099) % _BODY_PATTERN_LEN
        if length <= _BODY_PATTERN_LEN:
            body = self._pattern2[start : start + length]
        else:
            body = (self._pattern * (length // _BODY_PATTERN_LEN + 2))[start : start + length]
        return body, zlib.crc32(body) & 0x7FFFFFFF


class _Properties:
    """KEYS/TAGS per message, computed once when the templates do not depend on ``{i}``."""

    def __init__(self, keys: str, tags: str) -> None:
        self._keys, self._tags = keys, tags
        self.varies = "{i}" in keys or "{i}" in tags
        self.tags_vary = "{i}" in tags
        self._const = None if self.varies else self._build(0)

    def _build(self, i: int) -> tuple[bytes, str, str]:
        tags = self._tags.format(i=i) if "{i}" in self._tags else self._tags
        keys = self._keys.format(i=i) if "{i}" in self._keys else self._keys
        props: dict[str, str] = {}
        if tags:
            props["TAGS"] = tags
        if keys:
            props["KEYS"] = keys
        return encode_properties(props), tags, keys

    def of(self, i: int) -> tuple[bytes, str, str]:
        """(encoded properties, TAGS, KEYS) of message ``i``."""
        return self._const if self._const is not None else self._build(i)


def generate_store(
    root: Path, spec: StoreSpec, progress: Callable[[str], None] | None = None
) -> GeneratedStore:
    """Write a complete store under ``root`` and describe it.

    ``root`` may exist, but its store directories must be empty: mixing two generations would
    make the returned summary lie. ``progress``, if given, is told what is being written now
    (``gen-store`` on a terminal).
    """
    spec.validate()
    root = Path(root).absolute()
    now_ms = spec.now_ms if spec.now_ms is not None else int(time.time() * 1000)
    cl_dirs = commitlog_dirs(root, spec)
    placement = sorted(set(cl_dirs), key=str)
    cq_root = root / "consumequeue"
    index_dir = root / "index"
    root.mkdir(parents=True, exist_ok=True)
    for d in (*placement, cq_root, index_dir):
        _ensure_empty_dir(d)
    (root / "config").mkdir(exist_ok=True)

    topics = spec.topic_names()
    topic_lens = [len(t.encode()) for t in topics]
    qpt = spec.queues_per_topic
    npairs = len(topics) * qpt
    n = spec.messages
    rng = random.Random(spec.seed)
    bodies = _Bodies(spec.seed, spec.sparse)
    properties = _Properties(spec.keys, spec.tags)
    const_tags_code = 0 if properties.tags_vary else tags_code(spec.tags)
    tag_codes = array("q") if properties.tags_vary else None
    t_oldest = now_ms - round(spec.oldest_age_hours * _HOUR_MS)
    span = now_ms - round(spec.newest_age_hours * _HOUR_MS) - t_oldest

    # Per message, what the ConsumeQueues and the summary need afterwards.
    phys = array("q", bytes(8 * n))
    sizes = array("i", bytes(4 * n))
    stamps = array("q", bytes(8 * n))
    commitlog = _CommitLogBuilder(placement, spec)
    index = _IndexBuilder(index_dir, spec) if spec.index else None

    for i in range(n):
        if progress is not None and not i & 0x3FFF:
            progress(f"CommitLog and index: message {i:,} of {n:,}")
        pair = i % npairs
        t, queue_id = divmod(pair, qpt)
        store_ts = t_oldest + (span * i // (n - 1) if n > 1 else span)
        props, tags, keys = properties.of(i)
        body_len = max(0, spec.message_size - message_length(0, topic_lens[t], len(props)))
        total = message_length(body_len, topic_lens[t], len(props))
        body, crc = bodies.body(i, body_len)
        frame = functools.partial(
            _frame,
            topic=topics[t],
            queue_id=queue_id,
            queue_offset=i // npairs,
            store_timestamp_ms=store_ts,
            born_timestamp_ms=store_ts - 1 - rng.randrange(8),
            body_len=body_len,
            body_crc=crc,
            properties=props,
        )
        offset = commitlog.append(total, store_ts, frame, body)
        phys[i], sizes[i], stamps[i] = offset, total, store_ts
        if tag_codes is not None:
            tag_codes.append(tags_code(tags))
        if index is not None and keys:
            for key in keys.split(" "):
                if key:
                    index.add(index_key_hash(topics[t], key), offset, store_ts)
    commitlog.finish(spec.preallocate)
    if index is not None:
        index.close()

    if progress is not None:
        progress("ConsumeQueues")
    queues = _write_consume_queues(
        cq_root, spec, topics, phys, sizes, stamps, tag_codes, const_tags_code
    )

    max_offset = commitlog.max_offset
    checkpoint = None
    if spec.checkpoint:
        last_ts = stamps[n - 1] if n else 0
        checkpoint = StoreCheckpoint(
            physic_msg_timestamp=last_ts,
            logics_msg_timestamp=last_ts,
            # Set when a full index file is flushed, so it trails the newest messages.
            index_msg_timestamp=index.last_full_end_ts if index is not None else 0,
            master_flushed_offset=0,
            confirm_phy_offset=max_offset,
        )
        _write_small(str(root / "checkpoint"), encode_checkpoint(checkpoint), 0, False, now_ms)
    if spec.lock_file:
        _write_small(str(root / "lock"), b"lock", 0, False, now_ms)
    # A broker persists its (here empty) consumer offsets within seconds of starting: fastjson
    # 1.x pretty format, TAB indents, no trailing newline (shared/spec/consumers.md §A.1.2).
    offsets = (
        '{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n'
        f'\t\t"timestamp":{now_ms}\n\t}},\n\t"groupTopicMap":{{}},\n\t"offsetTable":{{}}\n}}'
    )
    _write_small(str(root / "config" / "consumerOffset.json"), offsets.encode(), 0, False, now_ms)

    return GeneratedStore(
        root=root,
        spec=spec,
        now_ms=now_ms,
        commitlog_dirs=cl_dirs,
        commitlog_files=tuple(commitlog.files),
        queues=queues,
        index_files=tuple(index.files) if index is not None else (),
        min_offset=0,
        max_offset=max_offset,
        message_count=n,
        checkpoint=checkpoint,
    )


def _frame(physical_offset: int, **fields: Any) -> tuple[bytes, bytes]:
    return encode_message_frame(physical_offset=physical_offset, **fields)


def _write_consume_queues(
    cq_root: Path,
    spec: StoreSpec,
    topics: list[str],
    phys: array[int],
    sizes: array[int],
    stamps: array[int],
    tag_codes: array[int] | None,
    const_tags_code: int,
) -> dict[tuple[str, int], tuple[ConsumeQueueFile, ...]]:
    n = len(phys)
    qpt = spec.queues_per_topic
    npairs = len(topics) * qpt
    per_file = spec.cq_file_size // CQ_UNIT_SIZE
    pack = CQ_UNIT.pack
    queues: dict[tuple[str, int], tuple[ConsumeQueueFile, ...]] = {}
    for t, topic in enumerate(topics):
        topic_dir = f"{cq_root}/{topic}"
        made_topic_dir = False
        for queue_id in range(qpt):
            pair = t * qpt + queue_id
            count = n // npairs + (1 if pair < n % npairs else 0)
            if count == 0:
                continue  # the broker makes a queue's directory on its first message
            if not made_topic_dir:
                os.mkdir(topic_dir)
                made_topic_dir = True
            queue_dir = f"{topic_dir}/{queue_id}"
            os.mkdir(queue_dir)
            members = range(pair, n, npairs)
            if tag_codes is None:
                units = b"".join([pack(phys[i], sizes[i], const_tags_code) for i in members])
            else:
                units = b"".join([pack(phys[i], sizes[i], tag_codes[i]) for i in members])
            files = []
            for f in range(math.ceil(count / per_file)):
                first_k = f * per_file
                last_k = min(count, first_k + per_file) - 1
                first_i = first_k * npairs + pair
                last_i = last_k * npairs + pair
                name = offset_to_name(f * spec.cq_file_size)
                path = f"{queue_dir}/{name}"
                data = units[first_k * CQ_UNIT_SIZE : (last_k + 1) * CQ_UNIT_SIZE]
                mtime = stamps[last_i]
                _write_small(path, data, spec.cq_file_size, spec.sparse, mtime)
                files.append(
                    ConsumeQueueFile(
                        path,
                        f * spec.cq_file_size,
                        last_k - first_k + 1,
                        phys[first_i],
                        phys[last_i],
                        mtime,
                    )
                )
            queues[(topic, queue_id)] = tuple(files)
    return queues


# --- Config ---------------------------------------------------------------------------------


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = dict(value) if isinstance(value, Mapping) else value
    return base


def write_config(root: Path, spec: StoreSpec, path: Path, **overrides: Any) -> Path:
    """A broker.yaml describing the generated store; ``overrides`` are raw YAML keys
    (``fileReservedTime=1``, ``retentiond={"journal": {"dir": ...}}``), merged into nested maps.
    """
    root = Path(root).absolute()
    data: dict[str, Any] = {
        "storePathRootDir": str(root),
        "storePathCommitLog": ",".join(str(d) for d in commitlog_dirs(root, spec)),
        "mappedFileSizeCommitLog": spec.commitlog_file_size,
        "mappedFileSizeConsumeQueue": spec.cq_file_size,
        "maxHashSlotNum": spec.max_hash_slot_num,
        "maxIndexNum": spec.max_index_num,
    }
    _deep_merge(data, overrides)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    return path


# --- Presets --------------------------------------------------------------------------------

PRESETS: dict[str, StoreSpec] = {
    # Small enough to eyeball, old enough that the default 72 h reservation has work to do:
    # 63 messages per 64 KiB file, 60 files over 5 days, 8 ConsumeQueue files per queue.
    "demo": StoreSpec(
        commitlog_file_size=64 * 1024,
        cq_file_size=30 * CQ_UNIT_SIZE,
        max_hash_slot_num=100,
        max_index_num=256,
        messages=60 * 63 - 30,
        message_size=1024,
        topics=4,
        queues_per_topic=4,
        oldest_age_hours=120.0,
        newest_age_hours=0.0,
    ),
    # DefaultMessageStoreCleanFilesTest (spec §5.1): 55 files of one 120-B message + 8-B blank.
    "upstream-test": StoreSpec(
        commitlog_file_size=128,
        cq_file_size=140,
        max_hash_slot_num=100,
        max_index_num=8,
        messages=55,
        message_size=120,
        topics=1,
        queues_per_topic=1,
        topic_prefix="test",
        keys="hello",
        tags="",
        oldest_age_hours=0.0,
        newest_age_hours=0.0,
        preallocate=False,
    ),
    # 100,000 queues with 2 ConsumeQueue files each; ~74 sparse 1 GiB CommitLog files.
    # The daemon tests' store: 40 CommitLog files of 64 KiB (63 messages each) whose ages
    # spread over 130 h, so about 17 are older than 72 h and about 32 older than 24 h.
    "daemon-test": StoreSpec(
        commitlog_file_size=64 * 1024,
        cq_file_size=30 * CQ_UNIT_SIZE,
        max_hash_slot_num=100,
        max_index_num=256,
        messages=40 * 63 - 30,
        message_size=1024,
        topics=2,
        queues_per_topic=2,
        oldest_age_hours=130.0,
        newest_age_hours=0.0,
    ),
    "bench-100k": StoreSpec(
        commitlog_file_size=1024 * 1024 * 1024,
        cq_file_size=2 * CQ_UNIT_SIZE,
        max_hash_slot_num=5_000,
        max_index_num=50_000,
        messages=300_000,
        # Not block-aligned, so a record's tail shares a block with the next record's head.
        message_size=262_000,
        topics=1000,
        queues_per_topic=100,
        oldest_age_hours=96.0,
        newest_age_hours=0.0,
        sparse=True,
    ),
}
# The same 100,000 queues (and the same CommitLog) in the shapes brokers have: a producer
# auto-creates a topic with 4 queues (DefaultMQProducer.defaultTopicQueueNums), a TopicConfig
# defaults to 16, and light message queues are ``%LMQ%<name>/0`` directories of one short file
# each (MixAll.LMQ_PREFIX, LMQ_QUEUE_ID). ``bench-100k`` is 1,000 topics x 100 queues.
PRESETS["bench-16q"] = dataclasses.replace(PRESETS["bench-100k"], topics=6_250, queues_per_topic=16)
PRESETS["bench-4q"] = dataclasses.replace(PRESETS["bench-100k"], topics=25_000, queues_per_topic=4)
PRESETS["bench-lmq"] = dataclasses.replace(
    PRESETS["bench-100k"],
    topics=100_000,
    queues_per_topic=1,
    topic_prefix="%LMQ%lmq",
    # One or two units per queue in a file of four: every queue one short (newest) file.
    cq_file_size=4 * CQ_UNIT_SIZE,
    messages=150_000,
    message_size=524_000,  # the same CommitLog bytes as the others: about 75 files of 1 GiB
)

__all__ = [
    "PRESETS",
    "CommitLogFile",
    "ConsumeQueueFile",
    "GeneratedStore",
    "IndexFileInfo",
    "StoreSpec",
    "commitlog_dirs",
    "generate_store",
    "write_config",
]


def gen_store(request: GenStoreRequest) -> list[str]:
    """``gen-store`` for RocketMQ: a preset store, adjusted by the request, and its broker.yaml."""
    spec = PRESETS[request.preset]
    overrides: dict[str, Any] = {"sparse": True} if request.sparse else {}
    if request.messages is not None:
        overrides["messages"] = request.messages
    if request.file_size is not None:
        overrides["commitlog_file_size"] = request.file_size
    if request.oldest_hours is not None:
        overrides["oldest_age_hours"] = request.oldest_hours
    spec = dataclasses.replace(spec, **overrides)
    root = request.dir.absolute()
    store = generate_store(root, spec, request.progress)
    lines = [f"generated store at {root}: {store.summary()}"]
    if request.config_out is not None:
        path = write_config(root, spec, request.config_out.absolute())
        lines.append(f"wrote config {path}")
    return lines
