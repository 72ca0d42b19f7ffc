"""The control request parser on arbitrary bytes: it returns a request with a known command
or raises BadRequest, and nothing else — for random bytes, and for bytes built from JSON's
own brackets, quotes and the real commands (nesting, strings, escapes)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from retentiond.daemon.control import BadRequest, parse_request
from tests.fuzz.conftest import FUZZ

COMMANDS = {"status": None, "trigger-delete": None}
PIECES = [
    b"[",
    b"]",
    b"{",
    b"}",
    b'"',
    b"\\",
    b":",
    b",",
    b" ",
    b"\n",
    b"1",
    b"-0.5e999",
    b"null",
    b'"command"',
    b'"status"',
    b'"trigger-delete"',
    b"\\u0000",
    b"\xff",
    b"\xc3\xa9",
    b"NaN",
    b"[" * 40,
    b"{" * 40,
    b'{"a":' * 40,
    b"]" * 40,
    b"}" * 40,
]
VALID = json.dumps({"command": "status"}).encode()


def _check(data: bytes) -> None:
    try:
        request = parse_request(data, COMMANDS)
    except BadRequest as exc:
        assert str(exc)
        return
    assert isinstance(request, dict) and request["command"] in COMMANDS


@FUZZ
@given(
    raw=st.binary(max_size=256),
    pieces=st.lists(st.integers(0, len(PIECES) - 1), max_size=40),
    depth=st.integers(0, 200_000),
)
def test_parser_returns_a_request_or_bad_request(raw: bytes, pieces: list[int], depth: int) -> None:
    _check(raw)
    built = b"".join(PIECES[i] for i in pieces)
    _check(built)
    _check(VALID[: len(raw)] + built)
    _check(b"[" * depth if depth % 3 else b'{"command": "status", "x": ' + b"[" * depth)
