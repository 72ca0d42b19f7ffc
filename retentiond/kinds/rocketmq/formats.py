"""Big-endian binary layouts of the RocketMQ store (shared/spec/rocketmq.md §2).

Readers here are total: given bytes they either decode or return None; they never raise on
garbage, because a bad file must be skipped and reported, never crash a round. Encoders exist so
tests, the demo and benchmarks run against byte-exact stores rather than hand-made stand-ins.
"""

from __future__ import annotations

import functools
import ipaddress
import operator
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple

# ConsumeQueue unit: commitLogOffset:int64 | msgSize:int32 | tagsCode:int64
CQ_UNIT = struct.Struct(">qiq")
CQ_UNIT_SIZE = CQ_UNIT.size  # 20

# IndexFile header (40 bytes).
INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_HEADER_SIZE = INDEX_HEADER.size  # 40
# Hash slot: index number of the newest entry of the bucket (0 = empty).
INDEX_SLOT = struct.Struct(">i")
INDEX_SLOT_SIZE = INDEX_SLOT.size  # 4
# Index entry: keyHash:int32 | phyOffset:int64 | timeDiffSec:int32 | prevIndex:int32
INDEX_ENTRY = struct.Struct(">iqii")
INDEX_ENTRY_SIZE = INDEX_ENTRY.size  # 20

# CommitLog magic codes, as unsigned 32-bit values.
MESSAGE_MAGIC_V1 = 0xDAA320A7
MESSAGE_MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194
RECORD_PREFIX = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE
BLANK_RECORD_SIZE = RECORD_PREFIX.size  # END_FILE_MIN_BLANK_LENGTH = 4 + 4

# Message sysflag bits that change the record layout or meaning.
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

# Record up to BORNHOST: TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET,
# SYSFLAG, BORNTIMESTAMP. Everything after it shifts with the host address widths.
_MSG_HEAD = struct.Struct(">iIiiiqqiq")  # 48 bytes
_MSG_TS = struct.Struct(">q")
_MSG_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPARED TRANSACTION OFFSET, BODYLEN
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
# Fixed part of a record with IPv4 born and store hosts and a V1 (1-byte) topic length.
MESSAGE_FIXED_LENGTH = 91
# Topics longer than this (Java chars) get the V2 magic and a 2-byte topic length upstream.
V1_MAX_TOPIC_LENGTH = 127
PROPERTY_NAME_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# StoreCheckpoint: physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp,
# masterFlushedOffset, confirmPhyOffset (the last one since 5.1.1).
CHECKPOINT = struct.Struct(">qqqqq")
CHECKPOINT_FILE_SIZE = 4096  # one OS page, mapped as a whole

# TimerLog unit (§2.8): size:int32 (=52) | prevPos:int64 | magic:int32 (1 DEFAULT, +2 ROLL,
# +4 DELETE) | currWriteTime:int64 | delayTime:int32 | offsetPy:int64 | sizePy:int32 |
# topicHash:int32 | reserved:int64. A file ends in a blank of at least 16 bytes (size, 0,
# BLANK_MAGIC) once the next unit and a blank no longer fit.
TIMERLOG_UNIT = struct.Struct(">iqiqiqiiq")
TIMERLOG_UNIT_SIZE = TIMERLOG_UNIT.size  # 52
TIMERLOG_MIN_BLANK = 16
TIMERLOG_OFFSET_PY_AT = 28

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_HASH_CHUNK = 256
_POW31 = [pow(31, k, 1 << 32) for k in range(_HASH_CHUNK + 1)]
_POW31_DESC = _POW31[_HASH_CHUNK - 1 :: -1]  # 31**255 ... 31**0


class CqUnit(NamedTuple):
    commitlog_offset: int
    size: int
    tags_code: int


class IndexHeader(NamedTuple):
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


class IndexEntry(NamedTuple):
    key_hash: int
    phy_offset: int
    time_diff_s: int
    prev_index: int


class MessageHeader(NamedTuple):
    """The fixed fields of a message record, everything before the body."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sysflag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body_length: int

    @property
    def body_position(self) -> int:
        """Where the body starts inside the record (88 with IPv4 hosts)."""
        return _host_fields_end(self.sysflag) + _MSG_TAIL.size


class Message(NamedTuple):
    header: MessageHeader
    body: bytes
    topic: str
    properties: dict[str, str]


class Record(NamedTuple):
    """One record met while walking a CommitLog file: a message, or the BLANK that ends it."""

    physical_offset: int  # fileFromOffset + position in the file
    total_size: int
    header: MessageHeader | None  # None for the BLANK record

    @property
    def is_blank(self) -> bool:
        return self.header is None


class StoreCheckpoint(NamedTuple):
    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0


# --- ConsumeQueue -------------------------------------------------------------------------


def decode_cq_unit(data: bytes) -> CqUnit | None:
    if len(data) != CQ_UNIT_SIZE:
        return None
    return CqUnit(*CQ_UNIT.unpack(data))


def encode_cq_unit(commitlog_offset: int, size: int, tags_code: int) -> bytes:
    return CQ_UNIT.pack(commitlog_offset, size, tags_code)


# --- IndexFile ----------------------------------------------------------------------------


def decode_index_header(data: bytes) -> IndexHeader | None:
    if len(data) != INDEX_HEADER_SIZE:
        return None
    return IndexHeader(*INDEX_HEADER.unpack(data))


def encode_index_header(header: IndexHeader) -> bytes:
    return INDEX_HEADER.pack(*header)


def encode_index_entry(key_hash: int, phy_offset: int, time_diff_s: int, prev_index: int) -> bytes:
    return INDEX_ENTRY.pack(key_hash, phy_offset, time_diff_s, prev_index)


def decode_index_entry(data: bytes) -> IndexEntry | None:
    if len(data) != INDEX_ENTRY_SIZE:
        return None
    return IndexEntry(*INDEX_ENTRY.unpack(data))


def index_file_size(max_hash_slot_num: int, max_index_num: int) -> int:
    return (
        INDEX_HEADER_SIZE + max_hash_slot_num * INDEX_SLOT_SIZE + max_index_num * INDEX_ENTRY_SIZE
    )


def java_string_hash(text: str) -> int:
    """``String.hashCode()``: CQ tagsCodes and index buckets are defined by it, not by Python's."""
    if text.isascii():
        units: Sequence[int] = text.encode("ascii")
    else:
        # Java hashes UTF-16 code units, so characters outside the BMP count twice.
        raw = text.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(raw) // 2}H", raw)
    # sum(c[j] * 31**(n-1-j)): the same polynomial as Java's loop, evaluated in C.
    h = 0
    for start in range(0, len(units), _HASH_CHUNK):
        chunk = units[start : start + _HASH_CHUNK]
        h = h * _POW31[len(chunk)] + sum(map(operator.mul, chunk, _POW31_DESC[-len(chunk) :]))
        h &= 0xFFFFFFFF
    return h - (1 << 32) if h > _INT_MAX else h


def index_key_hash(topic: str, key: str) -> int:
    """The non-negative hash an IndexFile stores for ``topic#key``.

    ``Math.abs(Integer.MIN_VALUE)`` is still negative in Java, and upstream maps it to 0.
    """
    h = abs(java_string_hash(f"{topic}#{key}"))
    return 0 if h > _INT_MAX else h


def tags_code(tags: str | None) -> int:
    """CQ tagsCode of an ordinary topic: the TAGS property's hash, 0 without tags."""
    return java_string_hash(tags) if tags else 0


# --- CommitLog ----------------------------------------------------------------------------


def message_length(
    body_len: int,
    topic_len: int,
    props_len: int,
    *,
    topic_len_size: int = 1,
    born_host_len: int = 8,
    store_host_len: int = 8,
) -> int:
    """Record size as ``calMsgLength`` computes it (91 + payload for IPv4 hosts and V1)."""
    return (
        MESSAGE_FIXED_LENGTH
        - 1
        - 16
        + topic_len_size
        + born_host_len
        + store_host_len
        + body_len
        + topic_len
        + props_len
    )


def encode_properties(properties: dict[str, str]) -> bytes:
    return "".join(
        f"{k}{PROPERTY_NAME_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items()
    ).encode()


def decode_properties(data: bytes) -> dict[str, str] | None:
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return None
    props: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        name, sep, value = item.partition(PROPERTY_NAME_SEPARATOR)
        if not sep:
            return None
        props[name] = value
    return props


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


@functools.lru_cache(maxsize=64)
def _encode_host(host: tuple[str, int]) -> tuple[bytes, bool]:
    addr = ipaddress.ip_address(host[0])
    return addr.packed + _I32.pack(host[1]), addr.version == 6


def encode_message_frame(
    *,
    topic: str,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp_ms: int,
    born_timestamp_ms: int,
    body_len: int,
    body_crc: int,
    properties: bytes,
    sysflag: int = 0,
    flag: int = 0,
    born_host: tuple[str, int] = ("127.0.0.1", 10911),
    store_host: tuple[str, int] = ("127.0.0.1", 10911),
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
) -> tuple[bytes, bytes]:
    """The record minus its body: ``(bytes before the body, bytes after it)``.

    Split so a sparse store can leave the body as a hole while the CRC still describes the
    (all-zero) body the hole reads as.
    """
    topic_bytes = topic.encode()
    v2 = len(topic) > V1_MAX_TOPIC_LENGTH  # autoMessageVersionOnTopicLen, counted in chars
    born, born_v6 = _encode_host(born_host)
    store, store_v6 = _encode_host(store_host)
    sysflag = (sysflag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)) | (
        (SYSFLAG_BORNHOST_V6 if born_v6 else 0) | (SYSFLAG_STOREHOST_V6 if store_v6 else 0)
    )
    if len(properties) > 0x7FFF:
        raise ValueError("properties longer than Short.MAX_VALUE bytes")
    if len(topic_bytes) > (0x7FFF if v2 else 0xFF):
        raise ValueError("topic too long for its length field")
    total = message_length(
        body_len,
        len(topic_bytes),
        len(properties),
        topic_len_size=2 if v2 else 1,
        born_host_len=len(born),
        store_host_len=len(store),
    )
    head = b"".join(
        (
            _MSG_HEAD.pack(
                total,
                MESSAGE_MAGIC_V2 if v2 else MESSAGE_MAGIC_V1,
                body_crc,
                queue_id,
                flag,
                queue_offset,
                physical_offset,
                sysflag,
                born_timestamp_ms,
            ),
            born,
            _MSG_TS.pack(store_timestamp_ms),
            store,
            _MSG_TAIL.pack(reconsume_times, prepared_transaction_offset, body_len),
        )
    )
    tail = b"".join(
        (
            _U16.pack(len(topic_bytes)) if v2 else _U8.pack(len(topic_bytes)),
            topic_bytes,
            _I16.pack(len(properties)),
            properties,
        )
    )
    return head, tail


def encode_message(
    *,
    topic: str,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    store_timestamp_ms: int,
    born_timestamp_ms: int,
    body: bytes,
    properties: dict[str, str],
    sysflag: int = 0,
    flag: int = 0,
    born_host: tuple[str, int] = ("127.0.0.1", 10911),
    store_host: tuple[str, int] = ("127.0.0.1", 10911),
) -> bytes:
    head, tail = encode_message_frame(
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        store_timestamp_ms=store_timestamp_ms,
        born_timestamp_ms=born_timestamp_ms,
        body_len=len(body),
        body_crc=body_crc(body),
        properties=encode_properties(properties),
        sysflag=sysflag,
        flag=flag,
        born_host=born_host,
        store_host=store_host,
    )
    return head + body + tail


def encode_blank(remaining: int) -> bytes:
    """The END_OF_FILE record: only 8 bytes are written, TOTALSIZE covers the whole rest."""
    if remaining < BLANK_RECORD_SIZE:
        raise ValueError("a blank record needs at least 8 bytes")
    return RECORD_PREFIX.pack(remaining, BLANK_MAGIC)


def decode_blank(buf: bytes | memoryview) -> int | None:
    """TOTALSIZE of a BLANK record at the start of ``buf``, or None if it is not one."""
    if len(buf) < BLANK_RECORD_SIZE:
        return None
    total, magic = RECORD_PREFIX.unpack_from(buf)
    return total if magic == BLANK_MAGIC and total >= BLANK_RECORD_SIZE else None


def _host_fields_end(sysflag: int) -> int:
    """Offset of RECONSUMETIMES, i.e. the end of born host, store timestamp and store host."""
    born = 20 if sysflag & SYSFLAG_BORNHOST_V6 else 8
    store = 20 if sysflag & SYSFLAG_STOREHOST_V6 else 8
    return _MSG_HEAD.size + born + _MSG_TS.size + store


def _decode_host(raw: bytes) -> tuple[str, int]:
    return str(ipaddress.ip_address(raw[:-4])), _I32.unpack(raw[-4:])[0]


def decode_record_header(buf: bytes | memoryview) -> MessageHeader | None:
    """Fixed fields of the message record at the start of ``buf``.

    ``buf`` may stop anywhere after the BODYLEN field; only the header has to be there. A BLANK
    record, a zero tail, a short buffer or fields that cannot describe a real record give None.
    """
    if len(buf) < _MSG_HEAD.size:
        return None
    head = _MSG_HEAD.unpack_from(buf)
    total, magic, crc, queue_id, flag, queue_offset, phy_offset, sysflag, born_ts = head
    if magic not in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2):
        return None
    born_len = 20 if sysflag & SYSFLAG_BORNHOST_V6 else 8
    store_len = 20 if sysflag & SYSFLAG_STOREHOST_V6 else 8
    hosts_end = _host_fields_end(sysflag)
    if len(buf) < hosts_end + _MSG_TAIL.size:
        return None
    pos = _MSG_HEAD.size
    born_host = _decode_host(bytes(buf[pos : pos + born_len]))
    pos += born_len
    (store_ts,) = _MSG_TS.unpack_from(buf, pos)
    pos += _MSG_TS.size
    store_host = _decode_host(bytes(buf[pos : pos + store_len]))
    reconsume, prepared, body_len = _MSG_TAIL.unpack_from(buf, hosts_end)
    minimum = message_length(
        0,
        0,
        0,
        topic_len_size=2 if magic == MESSAGE_MAGIC_V2 else 1,
        born_host_len=born_len,
        store_host_len=store_len,
    )
    if body_len < 0 or total < minimum + body_len or queue_offset < 0 or phy_offset < 0:
        return None
    return MessageHeader(
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phy_offset,
        sysflag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        body_len,
    )


def decode_message(buf: bytes) -> Message | None:
    """A whole message record at the start of ``buf``; None unless every field is consistent."""
    header = decode_record_header(buf)
    if header is None or len(buf) < header.total_size:
        return None
    pos = header.body_position
    body = bytes(buf[pos : pos + header.body_length])
    pos += header.body_length
    if header.magic == MESSAGE_MAGIC_V2:
        (topic_len,) = _U16.unpack_from(buf, pos)
        pos += 2
    else:
        topic_len = buf[pos]
        pos += 1
    topic_raw = bytes(buf[pos : pos + topic_len])
    pos += topic_len
    if pos + 2 > header.total_size:
        return None
    (props_len,) = _I16.unpack_from(buf, pos)
    pos += 2
    if props_len < 0 or pos + props_len != header.total_size:
        return None
    props = decode_properties(bytes(buf[pos : pos + props_len]))
    try:
        topic = topic_raw.decode()
    except UnicodeDecodeError:
        return None
    if props is None:
        return None
    return Message(header, body, topic, props)


def iter_records(data: bytes, file_from_offset: int) -> Iterator[Record]:
    """Walk a CommitLog file's records as the broker's recovery does.

    Stops after a BLANK record (end of a full file) or at the first bytes that are not a
    complete record (the unwritten tail of the active file, or damage).
    """
    view = memoryview(data)
    pos = 0
    end = len(data)
    while end - pos > 4:
        blank = decode_blank(view[pos : pos + BLANK_RECORD_SIZE])
        if blank is not None:
            if pos + blank == end:
                yield Record(file_from_offset + pos, blank, None)
            return
        header = decode_record_header(view[pos : pos + 256])
        if header is None or pos + header.total_size > end:
            return
        yield Record(file_from_offset + pos, header.total_size, header)
        pos += header.total_size


# --- Pre-allocation and checkpoint --------------------------------------------------------


def is_never_written(prefix: bytes) -> bool:
    """Whether the first bytes of a CommitLog file show a pre-allocated, never-written file.

    The broker pre-allocates the next file zero-filled. Only an all-zero prefix of full length
    counts: anything else (a record, garbage, a short file) is treated as holding data, which
    errs on the side of keeping more files, never fewer.
    """
    return len(prefix) >= RECORD_PREFIX.size and not any(prefix[: RECORD_PREFIX.size])


def timerlog_last_unit_at(file_size: int) -> int:
    """Where the last unit of a full timerlog file of ``file_size`` bytes starts (TimerLog
    ``getOffsetForLastUnit``: 104,857,532 for 100 MiB); negative when none fits."""
    return (
        file_size
        - (file_size - TIMERLOG_MIN_BLANK) % TIMERLOG_UNIT_SIZE
        - TIMERLOG_MIN_BLANK
        - TIMERLOG_UNIT_SIZE
    )


def decode_timerlog_offset_py(data: bytes) -> int | None:
    """The CommitLog offset of a timerlog unit, or None unless it is one: a size of 52 and a
    magic made of the unit flags only, as the broker's timerlog cleaner requires."""
    if len(data) < TIMERLOG_UNIT_SIZE:
        return None
    size, _prev, magic = struct.unpack_from(">iqi", data)
    if size != TIMERLOG_UNIT_SIZE or (magic | 0xF) != 0xF:
        return None
    value: int = struct.unpack_from(">q", data, TIMERLOG_OFFSET_PY_AT)[0]
    return value


def encode_checkpoint(checkpoint: StoreCheckpoint) -> bytes:
    data = CHECKPOINT.pack(*checkpoint)
    return data + bytes(CHECKPOINT_FILE_SIZE - len(data))


def decode_checkpoint(data: bytes) -> StoreCheckpoint | None:
    """Checkpoint fields; a 5.1.0 file (no confirmPhyOffset) reads it as 0."""
    if len(data) >= CHECKPOINT.size:
        return StoreCheckpoint(*CHECKPOINT.unpack_from(data))
    if len(data) >= CHECKPOINT.size - 8:
        physic, logics, index, flushed = struct.unpack_from(">qqqq", data)
        return StoreCheckpoint(physic, logics, index, flushed, 0)
    return None
