"""The lazy readers on real small files: whatever a ConsumeQueue, index or timerlog file holds
(any length, any bytes, a valid-looking file truncated or damaged), they return a value or a
problem and never raise; a value is only ever returned for a file of the right size. The name
parsers and the /proc line parsers are total too."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from retentiond.engine.proc.files import parse_lock_line, parse_maps_line
from retentiond.kinds.rocketmq.formats import CQ_UNIT, TIMERLOG_UNIT
from retentiond.kinds.rocketmq.names import (
    MAX_OFFSET,
    is_index_name,
    parse_offset_name,
    parse_queue_id,
)
from retentiond.kinds.rocketmq.reader import (
    BinaryReader,
    read_index_header,
    read_prefix,
    read_timerlog_last_offset,
)
from tests.fuzz.conftest import FUZZ, scratch_dir

CQ_SIZE = 8 * 20
TL_SIZE = 120  # a timerlog file of two 52-byte units (the last at byte 52) and a 16-byte blank
_FILE = str(scratch_dir("rd-fuzz-") / "00000000000000000000")


def _write(data: bytes) -> None:
    fd = os.open(_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _shape(data: bytes, shape: int) -> bytes:
    """0: as drawn; 1: exactly a ConsumeQueue file; 2: a full file whose last unit was never
    written; 3: an index header and a little more; 4: exactly a timerlog file; 5: a timerlog
    file with a real last unit among drawn bytes."""
    if shape == 1:
        return (data * (CQ_SIZE // max(1, len(data)) + 1))[:CQ_SIZE] if data else bytes(CQ_SIZE)
    if shape == 2:
        return (data + bytes(CQ_SIZE))[: CQ_SIZE - 20] + bytes(20)
    if shape == 3:
        return (data + bytes(48))[:48]
    if shape == 4:
        return (data * (TL_SIZE // max(1, len(data)) + 1))[:TL_SIZE] if data else bytes(TL_SIZE)
    if shape == 5:  # a real last unit (any flags, any offset) in otherwise drawn bytes
        unit = TIMERLOG_UNIT.pack(52, -1, (data[:1] or b"\x01")[0] & 0xF, 0, 0,
                                  int.from_bytes((data + bytes(8))[:8], "big", signed=True),
                                  0, 0, 0)  # fmt: skip
        return (data + bytes(52))[:52] + unit + (data + bytes(16))[:16]
    return data


@FUZZ
@given(data=st.binary(max_size=200), shape=st.integers(0, 5))
def test_readers_take_any_file(data: bytes, shape: int) -> None:
    """One real file per case, read as a ConsumeQueue, an index and a timerlog file."""
    data = _shape(data, shape)
    _write(data)
    got = BinaryReader(CQ_SIZE).cq_last_offset(_FILE)
    if got.value is not None:
        assert len(data) == CQ_SIZE and got.value >= 0 and got.problem is None
        assert CQ_UNIT.unpack(data[-20:])[0] == got.value
    else:
        assert got.problem
    header, ident, problem = read_index_header(_FILE)
    assert (header is None) == (len(data) < 40)
    assert (problem is None) == (header is not None)
    assert ident is not None and ident.size == len(data)
    assert read_prefix(_FILE) == data[:8]
    got = read_timerlog_last_offset(_FILE, TL_SIZE)
    assert got.value is not None or shape != 5
    if got.value is not None:
        unit = TIMERLOG_UNIT.unpack(data[52:104])
        assert len(data) == TL_SIZE and unit[0] == 52 and (unit[2] | 0xF) == 0xF
        assert unit[5] == got.value and got.problem is None
    else:
        assert got.problem


def _name(raw: bytes) -> str:
    """Any text, or the digit strings that matter: 20 digits (up to and past Long.MAX_VALUE),
    17 digits, signed ints past the int range."""
    kind, rest = (raw[0], raw[1:]) if raw else (0, b"")
    n = int.from_bytes(rest[:9], "big")
    if kind % 4 == 1:
        return f"{n * 1327 % 10**20:020d}" if kind & 0x10 else f"{n % 10**21:020d}"[-20:]
    if kind % 4 == 2:
        return f"{n % 10**17:017d}"
    if kind % 4 == 3:
        return str(n - (1 << 40))
    return rest.decode("utf-8", "replace")


@FUZZ
@given(raw=st.binary(max_size=24), line=st.binary(max_size=100))
def test_name_and_proc_parsers_take_anything(raw: bytes, line: bytes) -> None:
    name = _name(raw)
    offset = parse_offset_name(name)
    assert offset is None or (0 <= offset <= MAX_OFFSET and len(name) == 20)
    queue_id = parse_queue_id(name)
    assert queue_id is None or -(1 << 31) <= queue_id < (1 << 31)
    assert queue_id is None or str(queue_id) == name  # the broker opens <topic>/<the int>
    assert is_index_name(name) == (len(name) == 17 and name.isascii() and name.isdigit())
    text = line.decode("latin-1")
    parsed = parse_lock_line(text)
    assert parsed is None or len(parsed) == 4
    maps = parse_maps_line(text)
    assert maps is None or maps[1] != 0
