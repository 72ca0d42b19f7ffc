"""Java ``Properties.load``, once, for every broker's properties file.

A broker that runs on the JVM reads its own file with ``java.util.Properties``; reading it any
other way would give keys or path strings that differ from what the broker itself sees
(escapes, continuation lines, separators). Every reader goes through here (``config.readers``
for a key table, a kind for its broker's own keys), and each decides what to do with an entry
that cannot be decoded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["PropertyLine", "parse_properties"]

_PROP_WS = " \t\f"
_NEWLINE = re.compile(r"\r\n|\r|\n")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    """Properties.loadConvert; a malformed \\uXXXX fails the broker's start, so it is an error
    here too (``ValueError``). UTF-16 surrogate pairs written as two escapes are joined; a lone
    surrogate is kept (Java strings allow it) for the key's own check to refuse."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i >= n:
            break
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i : i + 4]
            if len(digits) < 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError("malformed \\uxxxx escape (the broker would refuse to start)")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    result = "".join(out)
    if any("\ud800" <= ch <= "\udfff" for ch in result):
        pairs = result.encode("utf-16-le", "surrogatepass")
        result = pairs.decode("utf-16-le", "surrogatepass")
    return result


def _odd_trailing_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    """Properties.load0: the key ends at the first unescaped '=', ':' or whitespace; then
    whitespace and at most one '=' or ':' are skipped."""
    n = len(line)
    key_end = n
    value_start = n
    has_separator = False
    backslash = False
    for i, c in enumerate(line):
        if not backslash and c in "=:":
            key_end, value_start, has_separator = i, i + 1, True
            break
        if not backslash and c in _PROP_WS:
            key_end, value_start = i, i + 1
            break
        backslash = c == "\\" and not backslash
    while value_start < n:
        c = line[value_start]
        if c not in _PROP_WS:
            if has_separator or c not in "=:":
                break
            has_separator = True
        value_start += 1
    return line[:key_end], line[value_start:]


class PropertyLine(NamedTuple):
    line: int
    key: str | None  # None if the key itself could not be decoded
    value: str
    error: str | None = None  # set when the entry cannot be decoded


def parse_properties(text: str) -> Iterator[PropertyLine]:
    """The entries of a Java properties text, keys and values unescaped but untrimmed."""
    lines = _NEWLINE.split(text)
    i = 0
    while i < len(lines):
        number = i + 1
        line = lines[i].lstrip(_PROP_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _odd_trailing_backslashes(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(_PROP_WS)
            i += 1
        raw_key, raw_value = _split_key_value(line)
        try:
            key = _unescape(raw_key)
        except ValueError as exc:
            yield PropertyLine(number, None, raw_value, str(exc))
            continue
        try:
            yield PropertyLine(number, key, _unescape(raw_value))
        except ValueError as exc:
            yield PropertyLine(number, key, raw_value, str(exc))
