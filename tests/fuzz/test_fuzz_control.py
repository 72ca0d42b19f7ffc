"""The control request parser on arbitrary bytes: it returns a request with a known command
or raises BadRequest, and nothing else — for random bytes, and for bytes built from JSON's
own brackets, quotes and the real commands (nesting, strings, escapes). And the server's loop
on the same bytes cut in arbitrary pieces: one reply per connection, whatever came."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retentiond.daemon.control import BadRequest, ControlServer, parse_request
from tests.fuzz.conftest import EXAMPLES, FUZZ

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


@pytest.fixture(scope="module")
def live() -> Iterator[ControlServer]:
    directory = Path(tempfile.mkdtemp(prefix="rd-fz-", dir="/tmp"))
    srv = ControlServer(
        directory / "control.sock",
        {"status": lambda req: {"rounds": 3}},
        identity=lambda: {"config": "/etc/retentiond/a.yaml", "config_hash": "h", "pid": 1},
    )
    srv.start()
    yield srv
    srv.stop()
    shutil.rmtree(directory, ignore_errors=True)


# A case here is a connection through the loop and a worker (~3 ms, not microseconds): a
# fifth of the parser's count, which the chunkings of 24 pieces cover well.
@settings(FUZZ, max_examples=max(1, EXAMPLES // 5))
@given(
    pieces=st.lists(st.integers(0, len(PIECES) - 1), max_size=24),
    raw=st.binary(max_size=64),
    cuts=st.lists(st.integers(1, 64), max_size=8),
)
def test_the_server_answers_any_bytes_in_any_chunks_with_one_reply(
    live: ControlServer, pieces: list[int], raw: bytes, cuts: list[int]
) -> None:
    """Whatever arrives, in whatever pieces, ending with the stream: one JSON reply that
    names the daemon (or none for a connection that sent nothing), and the loop lives on."""
    data = VALID[: len(raw)] + raw + b"".join(PIECES[i] for i in pieces)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(live.path))
        at = 0
        for cut in cuts:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(data[at : at + cut])
            at += cut
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data[at:])
            sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    if not data:
        assert reply == b""
        return
    assert reply.endswith(b"\n") and reply.count(b"\n") == 1
    doc = json.loads(reply)
    assert isinstance(doc["ok"], bool) and doc["daemon"]["pid"] == 1
    assert live.up
