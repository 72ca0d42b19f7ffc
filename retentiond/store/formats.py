"""Big-endian binary layouts of the RocketMQ store (shared/spec/rocketmq.md §2).

Readers here are total: given bytes they either decode or return None; they never raise on
garbage, because a bad file must be skipped and reported, never crash a round.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

# ConsumeQueue unit: commitLogOffset:int64 | msgSize:int32 | tagsCode:int64
CQ_UNIT = struct.Struct(">qiq")
CQ_UNIT_SIZE = CQ_UNIT.size  # 20

# IndexFile header (40 bytes).
INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_HEADER_SIZE = INDEX_HEADER.size  # 40

# CommitLog magic codes, as unsigned 32-bit values.
MESSAGE_MAGIC_V1 = 0xDAA320A7
MESSAGE_MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194
RECORD_PREFIX = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE


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


def decode_cq_unit(data: bytes) -> CqUnit | None:
    if len(data) != CQ_UNIT_SIZE:
        return None
    return CqUnit(*CQ_UNIT.unpack(data))


def encode_cq_unit(commitlog_offset: int, size: int, tags_code: int) -> bytes:
    return CQ_UNIT.pack(commitlog_offset, size, tags_code)


def decode_index_header(data: bytes) -> IndexHeader | None:
    if len(data) != INDEX_HEADER_SIZE:
        return None
    return IndexHeader(*INDEX_HEADER.unpack(data))


def encode_index_header(header: IndexHeader) -> bytes:
    return INDEX_HEADER.pack(*header)


def record_prefix_holds_data(prefix: bytes) -> bool:
    """Whether the first 8 bytes of a CommitLog file show it was ever written.

    A pre-allocated file is zero-filled; the first record of a written one starts with a
    positive TOTALSIZE and a message or blank magic.
    """
    if len(prefix) < RECORD_PREFIX.size:
        return False
    total, magic = RECORD_PREFIX.unpack(prefix[: RECORD_PREFIX.size])
    return total > 0 and magic in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2, BLANK_MAGIC)
