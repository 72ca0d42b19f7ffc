"""The format readers against bytes packed from the spec (§3–§4) and kafka-python's encoder."""

from __future__ import annotations

import struct

import pytest

from retentiond.kinds.kafka import formats as fm
from tests.kinds.kafka.kafkalog import v1_message, v2_batch


def test_segment_and_partition_names() -> None:
    assert fm.segment_file_name(42, ".log") == "00000000000000000042.log"
    assert fm.parse_segment_file_name("00000000000000000042.timeindex") == (42, ".timeindex")
    assert fm.parse_segment_file_name("42.log") is None
    assert fm.parse_segment_file_name("00000000000000000042.log.deleted") is None
    p = fm.parse_partition_dir_name("my-topic-12")
    assert p == fm.PartitionDirName("my-topic", 12)
    d = fm.parse_partition_dir_name("my-topic-3." + "ab" * 16 + "-delete")
    assert d == fm.PartitionDirName("my-topic", 3, "delete")
    assert fm.parse_partition_dir_name("lost+found") is None
    assert fm.parse_partition_dir_name("topic-01") is None


def test_indexes_round_trip_and_stop_at_preallocated_zeros() -> None:
    raw = struct.pack(">ii", 3, 4096) + struct.pack(">ii", 9, 8192) + bytes(80)
    assert fm.decode_offset_index(raw) == [(3, 4096), (9, 8192)]
    assert fm.encode_offset_index([(3, 4096), (9, 8192)]) == raw[:16]
    raw_t = struct.pack(">qi", 1000, 3) + struct.pack(">qi", 2000, 9) + bytes(24)
    assert fm.decode_time_index(raw_t) == [(1000, 3), (2000, 9)]
    assert fm.encode_time_index([(1000, 3), (2000, 9)]) == raw_t[:24]


def test_offset_checkpoint() -> None:
    text = "0\n3\nmy-topic 0 1234\nmy-topic 1 99\nother 0 0\n"
    parsed = fm.parse_offset_checkpoint(text)
    assert parsed == {("my-topic", 0): 1234, ("my-topic", 1): 99, ("other", 0): 0}
    assert fm.format_offset_checkpoint(parsed) == text
    assert fm.parse_offset_checkpoint("") == {}
    assert fm.parse_offset_checkpoint("0\n") == {}
    with pytest.raises(fm.FormatError, match="version"):
        fm.parse_offset_checkpoint("1\n0\n", "f")
    with pytest.raises(fm.FormatError, match="expected 2 entries"):
        fm.parse_offset_checkpoint("0\n2\nt 0 1\n", "f")


def test_leader_epoch_checkpoint_and_truncation() -> None:
    text = "0\n2\n0 40\n1 90\n"
    epochs = fm.parse_leader_epoch_checkpoint(text)
    assert epochs == [(0, 40), (1, 90)]
    assert fm.format_leader_epoch_checkpoint(epochs) == text
    assert fm.truncate_epochs_from_start(epochs, 100) == [(1, 100)]
    assert fm.truncate_epochs_from_start(epochs, 10) == epochs


def test_v2_batches_give_max_timestamp_and_next_offset() -> None:
    data = v2_batch(100, [5, 50, 7]) + v2_batch(103, [40])
    s = fm.summarize_log(data)
    assert s == fm.LogSummary(len(data), 2, 50, 104)
    # a partial trailing batch and preallocated zeros end the data
    assert fm.summarize_log(data + v2_batch(104, [99])[:30]).next_offset == 104
    assert fm.summarize_log(data + bytes(4096)).max_timestamp == 50


def test_legacy_v1_messages() -> None:
    data = v1_message(7, 1234) + v1_message(8, 999)
    s = fm.summarize_log(data)
    assert (s.max_timestamp, s.next_offset, s.batch_count) == (1234, 9, 2)


def test_unknown_magic_names_file_and_position() -> None:
    bad = bytearray(v2_batch(0, [1]))
    bad[16] = 7
    with pytest.raises(fm.FormatError, match=r"x\.log: position 0: unknown record batch magic 7"):
        fm.summarize_log(bytes(bad), "x.log")


def test_empty_producer_snapshot_crc() -> None:
    snap = fm.empty_producer_snapshot()
    version, crc = struct.unpack_from(">hI", snap)
    assert version == 1 and crc == fm.crc32c(snap[6:]) and snap[6:] == bytes(4)
