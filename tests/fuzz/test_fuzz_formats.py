"""The binary decoders are total: any bytes decode or give None, never raise, and what they
return is consistent with the bytes. Random bytes, and valid records with random damage."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from retentiond.kinds.rocketmq.formats import (
    CQ_UNIT_SIZE,
    INDEX_HEADER_SIZE,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    decode_blank,
    decode_checkpoint,
    decode_cq_unit,
    decode_index_entry,
    decode_index_header,
    decode_message,
    decode_properties,
    decode_record_header,
    decode_timerlog_offset_py,
    encode_blank,
    encode_message,
    is_never_written,
    iter_records,
)
from tests.fuzz.conftest import FUZZ


def _walk(data: bytes, base: int) -> None:
    end = base
    for rec in iter_records(data, base):
        assert rec.physical_offset >= end and rec.total_size > 0
        assert rec.physical_offset + rec.total_size <= base + len(data)
        end = rec.physical_offset + rec.total_size


@FUZZ
@given(data=st.binary(max_size=600))
def test_every_decoder_takes_any_bytes(data: bytes) -> None:
    """Random bytes through every decoder of formats.py and the file walk."""
    header = decode_record_header(data)
    if header is not None:
        assert header.body_length >= 0 and header.total_size > 0
    message = decode_message(data)
    if message is not None:
        assert len(data) >= message.header.total_size
    blank = decode_blank(data)
    assert blank is None or blank >= 8
    _walk(data, int.from_bytes(data[:7], "big"))
    unit = decode_cq_unit(data[:CQ_UNIT_SIZE])
    assert (unit is None) == (len(data) < CQ_UNIT_SIZE)
    index = decode_index_header(data[:INDEX_HEADER_SIZE])
    assert (index is None) == (len(data) < INDEX_HEADER_SIZE)
    decode_index_entry(data[:20])
    decode_checkpoint(data)
    offset_py = decode_timerlog_offset_py(data)
    assert offset_py is None or (len(data) >= 52 and data[:4] == b"\x00\x00\x00\x34")
    assert is_never_written(data[:8]) == (len(data) >= 8 and not any(data[:8]))
    props = decode_properties(data[:300])
    assert props is None or all(isinstance(k, str) for k in props)


def _valid(i: int) -> bytes:
    """A valid record; fields vary with ``i`` (V1/V2 magic, IPv6 hosts, properties, bodies)."""
    rng = random.Random(i)
    v6 = i % 3 == 0
    return encode_message(
        topic="T" * (1 + rng.randrange(200 if i % 4 == 0 else 20)),
        queue_id=rng.randrange(1 << 31),
        queue_offset=rng.randrange(1 << 40),
        physical_offset=rng.randrange(1 << 50),
        store_timestamp_ms=rng.randrange(1 << 45),
        born_timestamp_ms=rng.randrange(1 << 45),
        body=rng.randbytes(rng.randrange(120)),
        properties={f"k{j}": "v" * j for j in range(i % 4)},
        sysflag=(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6) if v6 else 0,
        born_host=("::1", 1) if v6 else ("10.0.0.1", 2),
        store_host=("fe80::1", 3) if v6 else ("10.0.0.2", 4),
    )


# Built once: generating records inside each case would make 10,000 cases take minutes.
VALID = [_valid(i) for i in range(24)]


@FUZZ
@given(plan=st.binary(min_size=6, max_size=30))
def test_damaged_valid_records_never_crash(plan: bytes) -> None:
    """Valid records, then bytes overwritten and the tail cut off: the decoders must cope.

    One flat draw describes the damage: byte 0 picks how many records (and a trailing BLANK),
    bytes 1-3 which ones, bytes 4-5 where to cut, the rest (position, value) pairs to write.
    """
    data = bytearray(b"".join(VALID[b % len(VALID)] for b in plan[1 : 2 + plan[0] % 3]))
    if plan[0] & 0x80:
        data += encode_blank(64) + bytes(56)
    for j in range(6, len(plan) - 1, 2):
        data[(plan[j] * 7) % len(data)] = plan[j + 1]
    data = data[: int.from_bytes(plan[4:6], "big") % (len(data) + 1)]
    decode_message(bytes(data))
    _walk(bytes(data), 0)


def test_the_valid_records_are_valid() -> None:
    for record in VALID:
        message = decode_message(record)
        assert message is not None and message.header.total_size == len(record)
