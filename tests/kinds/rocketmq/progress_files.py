"""Writes the broker's progress files byte-exactly as ``shared/spec/consumers.md`` shows them
(fastjson 1.2.83 pretty format: TAB indents, integer map keys unquoted, an inner integer-keyed
map on one line then a newline, the indent and ``}``, no trailing newline), and the timer
store's binary checkpoint and log. Test-only: the code under test never writes these."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

TS = 1700000000000


def _data_version(ts: int) -> list[str]:
    return ['\t"dataVersion":{', "\t\t\"counter\":0,", "\t\t\"stateVersion\":0,",
            f'\t\t"timestamp":{ts}', "\t},"]  # fmt: skip


def _int_map(values: Mapping[int, int], indent: str) -> str:
    if not values:
        return "{}"
    return "{" + ",".join(f"{k}:{v}" for k, v in values.items()) + "\n" + indent + "}"


def consumer_offset_json(table: Mapping[str, Mapping[int, int]], ts: int = TS) -> str:
    """``ConsumerOffsetManager.encode(true)``: dataVersion, the derived groupTopicMap, then
    offsetTable keyed ``topic@group``."""
    group_topics: dict[str, list[str]] = {}
    for key in table:
        topic, _, group = key.partition("@")
        group_topics.setdefault(group, []).append(topic)
    lines = ["{", *_data_version(ts)]
    if group_topics:
        lines.append('\t"groupTopicMap":{')
        entries = [
            f"\t\t{json.dumps(g)}:[{','.join(json.dumps(t) for t in ts_)}]"
            for g, ts_ in sorted(group_topics.items())
        ]
        lines.append(",\n".join(entries))
        lines.append("\t},")
    else:
        lines.append('\t"groupTopicMap":{},')
    if table:
        lines.append('\t"offsetTable":{')
        entries = [f"\t\t{json.dumps(k)}:{_int_map(v, chr(9) * 2)}" for k, v in table.items()]
        lines.append(",\n".join(entries))
        lines.append("\t}")
    else:
        lines.append('\t"offsetTable":{}')
    lines.append("}")
    return "\n".join(lines)


def delay_offset_json(levels: Mapping[int, int], ts: int = TS) -> str:
    return "\n".join(["{", *_data_version(ts), f'\t"offsetTable":{_int_map(levels, chr(9))}', "}"])


def subscription_group_json(groups: Mapping[str, bool], ts: int = TS) -> str:
    """``SubscriptionGroupManager.encode(true)`` (verified shape): group -> consumeEnable."""
    lines = ["{", *_data_version(ts), '\t"forbiddenTable":{},', '\t"subscriptionGroupTable":{']
    entries = []
    for name, enable in groups.items():
        fields = [
            '\t\t\t"attributes":{}', '\t\t\t"brokerId":0', '\t\t\t"consumeBroadcastEnable":true',
            f'\t\t\t"consumeEnable":{str(enable).lower()}', '\t\t\t"consumeFromMinEnable":true',
            '\t\t\t"consumeMessageOrderly":false', '\t\t\t"consumeTimeoutMinute":15',
            f"\t\t\t\"groupName\":{json.dumps(name)}",
            '\t\t\t"groupRetryPolicy":{\n\t\t\t\t"type":"CUSTOMIZED"\n\t\t\t}',
            '\t\t\t"groupSysFlag":0', '\t\t\t"notifyConsumerIdsChangedEnable":true',
            '\t\t\t"retryMaxTimes":16', '\t\t\t"retryQueueNums":1',
            '\t\t\t"whichBrokerWhenConsumeSlowly":1',
        ]  # fmt: skip
        entries.append(f"\t\t{json.dumps(name)}:{{\n" + ",\n".join(fields) + "\n\t\t}")
    lines.append(",\n".join(entries))
    lines.append("\t}")
    lines.append("}")
    return "\n".join(lines)


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))


def timercheck(last_read_ms: int, last_queue_offset: int, flush_pos: int = 0) -> bytes:
    """``TimerCheckpoint``: a 4096-byte page of big-endian int64s."""
    head = struct.pack(">qqqqqqq", last_read_ms, flush_pos, last_queue_offset,
                       last_queue_offset, 0, TS, 0)  # fmt: skip
    return head + bytes(4096 - len(head))


MAGIC_DEFAULT, MAGIC_ROLL = 1, 2


def timerlog_unit(write_ms: int, delay_ms: int, offset_py: int, size_py: int = 256,
                  magic: int = MAGIC_DEFAULT, prev: int = -1) -> bytes:  # fmt: skip
    """One 52-byte unit as ``TimerMessageStore.doEnqueue`` appends it."""
    return struct.pack(">iqiqiqiiq", 52, prev, magic, write_ms, delay_ms, offset_py, size_py,
                       0, 0)  # fmt: skip


def timerlog_file(units: Sequence[bytes], size: int) -> bytes:
    data = b"".join(units)
    return data + bytes(size - len(data))


TIMERLOG_BLANK_MAGIC = -875286124  # 0xCBD43194 as an int32


def timerlog_full_file(units: Sequence[bytes], size: int) -> bytes:
    """A timerlog file the broker has moved on from: units up to where the next unit and a
    16-byte blank no longer fit, then the blank (size = what remains, prevPos 0, the blank
    magic) and the rest of the file as it was (zeros), as ``TimerLog.append`` leaves it."""
    data = b"".join(units)
    remaining = size - len(data)
    assert 52 + 16 > remaining >= 16, f"{len(units)} units do not fill a {size}-byte file"
    return data + struct.pack(">iqi", remaining, 0, TIMERLOG_BLANK_MAGIC) + bytes(remaining - 16)
