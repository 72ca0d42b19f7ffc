"""Byte layouts of shared/spec/rocketmq.md §2: encoders round-trip, readers never raise."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retentiond.kinds.rocketmq.formats import (
    BLANK_MAGIC,
    CHECKPOINT_FILE_SIZE,
    CQ_UNIT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    MESSAGE_FIXED_LENGTH,
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    IndexHeader,
    StoreCheckpoint,
    decode_blank,
    decode_checkpoint,
    decode_cq_unit,
    decode_index_entry,
    decode_index_header,
    decode_message,
    decode_properties,
    decode_record_header,
    encode_blank,
    encode_checkpoint,
    encode_cq_unit,
    encode_index_entry,
    encode_index_header,
    encode_message,
    encode_properties,
    index_file_size,
    index_key_hash,
    is_never_written,
    iter_records,
    java_string_hash,
    message_length,
    tags_code,
)


def upstream_message(physical_offset: int = 0, queue_offset: int = 0) -> bytes:
    """The message DefaultMessageStoreCleanFilesTest stores (spec §5.1)."""
    return encode_message(
        topic="test",
        queue_id=0,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        store_timestamp_ms=1_700_000_000_123,
        born_timestamp_ms=1_700_000_000_100,
        body=b"0123456789abcd",
        properties={"KEYS": "hello"},
    )


# --- CommitLog messages -----------------------------------------------------------------


def test_upstream_test_message_is_120_bytes_with_a_14_byte_body():
    msg = upstream_message()
    assert MESSAGE_FIXED_LENGTH == 91
    assert message_length(14, 4, 11) == 120
    assert len(msg) == 120
    assert struct.unpack_from(">iI", msg) == (120, MESSAGE_MAGIC_V1)


def test_message_fields_sit_at_the_documented_offsets():
    msg = upstream_message(physical_offset=6912, queue_offset=54)
    assert struct.unpack_from(">i", msg, 8)[0] == zlib.crc32(b"0123456789abcd") & 0x7FFFFFFF
    assert struct.unpack_from(">q", msg, 20)[0] == 54  # QUEUEOFFSET
    assert struct.unpack_from(">q", msg, 28)[0] == 6912  # PHYSICALOFFSET
    assert struct.unpack_from(">q", msg, 56)[0] == 1_700_000_000_123  # STORETIMESTAMP
    assert struct.unpack_from(">i", msg, 84)[0] == 14  # BODYLEN
    assert msg[88:102] == b"0123456789abcd"
    assert msg[102] == 4 and msg[103:107] == b"test"  # V1: one-byte topic length
    assert msg[107:109] == b"\x00\x0b" and msg[109:] == b"KEYS\x01hello\x02"


def test_message_round_trips():
    decoded = decode_message(upstream_message(physical_offset=128, queue_offset=1))
    assert decoded is not None
    h = decoded.header
    assert (h.total_size, h.magic, h.queue_id, h.queue_offset, h.physical_offset) == (
        120,
        MESSAGE_MAGIC_V1,
        0,
        1,
        128,
    )
    assert (h.born_timestamp, h.store_timestamp) == (1_700_000_000_100, 1_700_000_000_123)
    assert h.born_host == h.store_host == ("127.0.0.1", 10911)
    assert h.body_position == 88
    assert (decoded.body, decoded.topic, decoded.properties) == (
        b"0123456789abcd",
        "test",
        {"KEYS": "hello"},
    )


def test_long_topic_switches_to_v2_with_a_two_byte_topic_length():
    topic = "%RETRY%" + "g" * 130
    msg = encode_message(
        topic=topic,
        queue_id=3,
        queue_offset=7,
        physical_offset=0,
        store_timestamp_ms=2,
        born_timestamp_ms=1,
        body=b"x",
        properties={},
    )
    assert len(msg) == message_length(1, len(topic), 0, topic_len_size=2)
    decoded = decode_message(msg)
    assert decoded is not None
    assert decoded.header.magic == MESSAGE_MAGIC_V2
    assert decoded.topic == topic


def test_ipv6_hosts_set_the_sysflag_bits_and_widen_the_record():
    msg = encode_message(
        topic="t",
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        store_timestamp_ms=5,
        born_timestamp_ms=4,
        body=b"",
        properties={},
        born_host=("::1", 1234),
        store_host=("10.0.0.1", 10911),
    )
    decoded = decode_message(msg)
    assert decoded is not None
    h = decoded.header
    assert h.sysflag & SYSFLAG_BORNHOST_V6 and not h.sysflag & SYSFLAG_STOREHOST_V6
    assert h.born_host == ("::1", 1234) and h.store_host == ("10.0.0.1", 10911)
    assert h.store_timestamp == 5
    assert len(msg) == message_length(0, 1, 0, born_host_len=20)


def test_header_decodes_from_a_prefix_of_the_record():
    msg = upstream_message()
    header = decode_record_header(msg[:88])
    assert header is not None and header.total_size == 120
    assert decode_record_header(msg[:87]) is None
    assert decode_message(msg[:100]) is None  # the whole record is not there


def test_blank_record_is_8_bytes_covering_the_rest_of_the_file():
    blank = encode_blank(8)
    assert blank == struct.pack(">iI", 8, BLANK_MAGIC)
    assert decode_blank(blank) == 8
    assert decode_record_header(blank + bytes(100)) is None
    with pytest.raises(ValueError):
        encode_blank(7)


def test_iter_records_walks_a_full_file_to_its_blank():
    data = upstream_message(1280) + encode_blank(8)
    records = list(iter_records(data, 1280))
    assert [(r.physical_offset, r.total_size, r.is_blank) for r in records] == [
        (1280, 120, False),
        (1400, 8, True),
    ]


def test_iter_records_stops_at_the_unwritten_tail_and_at_damage():
    assert len(list(iter_records(upstream_message() + bytes(8), 0))) == 1
    assert list(iter_records(bytes(128), 0)) == []
    assert list(iter_records(upstream_message()[:119], 0)) == []
    # A blank that does not end the data is not a valid end of file.
    assert list(iter_records(encode_blank(16) + bytes(4), 0)) == []


def test_properties_round_trip():
    props = {"KEYS": "a b", "TAGS": "TagA", "UNIQ_KEY": "00FF"}
    raw = encode_properties(props)
    assert raw == b"KEYS\x01a b\x02TAGS\x01TagA\x02UNIQ_KEY\x0100FF\x02"
    assert decode_properties(raw) == props
    assert decode_properties(b"no-separator\x02") is None
    assert decode_properties(b"\xff\x01x\x02") is None


# --- Hashes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello", 99162322),
        ("TagA", 2598919),
        ("polygenelubricants", -(1 << 31)),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # a surrogate pair hashes as two UTF-16 units
    ],
)
def test_java_string_hash(text: str, expected: int):
    assert java_string_hash(text) == expected


def test_java_string_hash_matches_the_plain_loop_on_long_strings():
    def reference(s: str) -> int:
        h = 0
        units = s.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(units), 2):
            h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
        return h - (1 << 32) if h >= 1 << 31 else h

    for text in ("x" * 255, "TopicTest#" * 26, "é" * 257 + "z", "%RETRY%" * 99):
        assert java_string_hash(text) == reference(text)


def test_index_key_hash_is_non_negative_and_maps_integer_min_to_zero():
    assert index_key_hash("test", "hello") == abs(java_string_hash("test#hello"))
    negative = next(k for k in ("a", "b", "c", "key-1", "key-2") if java_string_hash(f"T#{k}") < 0)
    assert index_key_hash("T", negative) == -java_string_hash(f"T#{negative}")
    key = "k131600\uba8d\uffec"  # found so that "test#" + key hashes to Integer.MIN_VALUE
    assert java_string_hash(f"test#{key}") == -(1 << 31)
    assert index_key_hash("test", key) == 0


def test_tags_code_is_zero_without_tags():
    assert tags_code(None) == tags_code("") == 0
    assert tags_code("TagA") == 2598919


# --- ConsumeQueue, index, checkpoint ------------------------------------------------------


def test_cq_unit_round_trip():
    raw = encode_cq_unit(6912, 120, -5)
    assert len(raw) == CQ_UNIT_SIZE
    unit = decode_cq_unit(raw)
    assert unit is not None and tuple(unit) == (6912, 120, -5)
    assert decode_cq_unit(raw[:19]) is None


def test_index_header_and_entry_round_trip():
    header = IndexHeader(1, 2, 0, 768, 1, 8)
    raw = encode_index_header(header)
    assert len(raw) == INDEX_HEADER_SIZE
    assert struct.unpack_from(">q", raw, 24)[0] == 768  # endPhyOffset
    assert decode_index_header(raw) == header
    entry = encode_index_entry(342082977, 768, 3, 6)
    assert len(entry) == INDEX_ENTRY_SIZE
    decoded = decode_index_entry(entry)
    assert decoded is not None and tuple(decoded) == (342082977, 768, 3, 6)
    assert index_file_size(100, 8) == 600


def test_checkpoint_round_trip_and_the_5_1_0_layout():
    cp = StoreCheckpoint(10, 20, 30, 40, 50)
    raw = encode_checkpoint(cp)
    assert len(raw) == CHECKPOINT_FILE_SIZE
    assert decode_checkpoint(raw) == cp
    assert decode_checkpoint(raw[:32]) == StoreCheckpoint(10, 20, 30, 40, 0)
    assert decode_checkpoint(raw[:31]) is None


def test_never_written_means_a_zero_prefix():
    assert is_never_written(bytes(8))
    assert not is_never_written(bytes(7))
    assert not is_never_written(upstream_message()[:8])
    assert not is_never_written(encode_blank(8))


# --- Properties ---------------------------------------------------------------------------


@given(st.binary(max_size=400))
def test_readers_never_raise_on_garbage(data: bytes):
    for reader in (
        decode_record_header,
        decode_message,
        decode_blank,
        decode_cq_unit,
        decode_index_header,
        decode_index_entry,
        decode_checkpoint,
    ):
        reader(data)
    for record in iter_records(data, 0):
        assert record.total_size > 0


@given(st.binary(min_size=88, max_size=300))
def test_garbage_behind_a_message_magic_never_raises(tail: bytes):
    data = struct.pack(">iI", len(tail) + 8, MESSAGE_MAGIC_V1) + tail
    decode_record_header(data)
    decode_message(data)
    list(iter_records(data, 0))


@given(
    topic=st.text(st.sampled_from("abcXYZ019_-%"), min_size=1, max_size=200),
    queue_id=st.integers(0, 1023),
    queue_offset=st.integers(0, 1 << 40),
    physical_offset=st.integers(0, 1 << 50),
    store_ts=st.integers(0, 1 << 45),
    body=st.binary(max_size=64),
    props=st.dictionaries(
        st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=8),
        st.text(max_size=10).filter(lambda v: "\x01" not in v and "\x02" not in v),
        max_size=4,
    ),
)
def test_any_message_round_trips(
    topic, queue_id, queue_offset, physical_offset, store_ts, body, props
):
    msg = encode_message(
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        store_timestamp_ms=store_ts,
        born_timestamp_ms=store_ts,
        body=body,
        properties=props,
    )
    decoded = decode_message(msg)
    assert decoded is not None
    assert decoded.header.total_size == len(msg)
    assert (decoded.header.queue_offset, decoded.header.physical_offset) == (
        queue_offset,
        physical_offset,
    )
    assert (decoded.topic, decoded.body, decoded.properties) == (topic, body, props)
    (record,) = iter_records(msg, physical_offset)
    assert record.header == decoded.header
