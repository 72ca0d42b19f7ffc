"""sd_notify by hand: what lands on the socket is exactly what systemd parses."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from retentiond.daemon.notify import Notifier, monotonic_usec, one_line, watchdog_interval_s


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    sock.bind(path)
    sock.settimeout(2)
    yield sock, path
    sock.close()


def test_ready_with_status_is_one_datagram(receiver: tuple[socket.socket, str]) -> None:
    sock, path = receiver
    assert Notifier(path).ready("3 rounds\nsecond line")
    assert sock.recv(4096) == b"READY=1\nSTATUS=3 rounds second line"


def test_abstract_socket_address() -> None:
    """``@name`` in NOTIFY_SOCKET is the abstract address ``\\0name``."""
    name = f"retentiond-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        sock.settimeout(2)
        assert Notifier(f"@{name}").stopping()
        assert sock.recv(4096) == b"STOPPING=1\nSTATUS=stopping"


def test_reloading_carries_the_monotonic_clock(receiver: tuple[socket.socket, str]) -> None:
    sock, path = receiver
    before = monotonic_usec()
    Notifier(path).reloading()
    fields = dict(line.split("=", 1) for line in sock.recv(4096).decode().splitlines())
    assert fields["RELOADING"] == "1"
    assert before <= int(fields["MONOTONIC_USEC"]) <= monotonic_usec()


def test_without_notify_socket_nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notifier = Notifier()
    assert not notifier.enabled
    assert not notifier.watchdog()


def test_relative_notify_socket_is_ignored() -> None:
    assert not Notifier("relative/path").enabled


def test_a_receiver_that_stops_reading_never_blocks_the_sender(
    receiver: tuple[socket.socket, str],
) -> None:
    """Unix datagram queues hold only a handful of messages; a blocked send would freeze a
    round. The sender drops instead."""
    _, path = receiver
    notifier = Notifier(path)
    started = time.monotonic()
    results = [notifier.status(f"round {i}") for i in range(500)]
    assert time.monotonic() - started < 2
    assert not all(results)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "60000000"}, 30.0),
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": str(os.getpid())}, 30.0),
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "1"}, None),  # meant for another process
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec(
    env: dict[str, str], expected: float | None
) -> None:
    assert watchdog_interval_s(env) == expected


def test_one_line_flattens_and_truncates() -> None:
    assert one_line("a\nb  c") == "a b c"
    assert len(one_line("x" * 500)) == 200
