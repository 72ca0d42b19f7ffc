"""The store's own file-naming schemes, and nothing else.

A file is ours to consider only if its name matches the scheme of the directory it sits in;
everything else is "foreign" and never touched (safety rule 2).
"""

from __future__ import annotations

import re

OFFSET_NAME_DIGITS = 20  # UtilAll.offset2FileName: 20-digit, zero-padded decimal
INDEX_NAME_DIGITS = 17  # yyyyMMddHHmmssSSS, JVM default zone

_OFFSET_NAME = re.compile(r"[0-9]{20}")
_INDEX_NAME = re.compile(r"[0-9]{17}")
_QUEUE_ID = re.compile(r"-?[0-9]{1,10}")  # a negative int (the rest: see parse_queue_id)

# Long.MAX_VALUE: a 20-digit name above it does not parse upstream (names that overflow).
MAX_OFFSET = (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


def offset_to_name(offset: int) -> str:
    if not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"offset {offset} out of range for a store file name")
    return f"{offset:020d}"


def parse_offset_name(name: str) -> int | None:
    """Start offset of a CommitLog/ConsumeQueue file name, or None if it is not one."""
    if not _OFFSET_NAME.fullmatch(name):
        return None
    value = int(name)
    return value if value <= MAX_OFFSET else None


def is_index_name(name: str) -> bool:
    return _INDEX_NAME.fullmatch(name) is not None


def parse_queue_id(name: str) -> int | None:
    """The queue id of a queue directory, or None if the broker never reads it as one.

    ConsumeQueueStore skips names that are not ints, and for the others opens
    ``<topic>/<the int>``: so only a name that is the decimal form of its id (``0``, ``17``,
    ``-1``) is a queue; ``00``, ``01``, ``+1`` or ``-0`` name a directory the broker never
    reads, whose files are not its own.
    """
    if len(name) <= 10 and name.isascii() and name.isdigit():
        if name[0] == "0" and len(name) > 1:
            return None  # a leading zero
        value = int(name)  # the common case without the regex (100k directories a scan)
        return value if value <= _INT_MAX else None
    if not _QUEUE_ID.fullmatch(name):
        return None
    value = int(name)
    if str(value) != name:
        return None  # "-0", "-01"
    return value if _INT_MIN <= value <= _INT_MAX else None
