"""The control socket: 0600, one JSON request per connection, and a lock against twins."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from retentiond.daemon import control
from retentiond.daemon.control import AlreadyRunning, ControlError, ControlServer, request


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rd-ctl-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server(short_dir: Path) -> Iterator[ControlServer]:
    srv = ControlServer(
        short_dir / "run" / "control.sock",
        {"status": lambda req: {"rounds": 3}, "boom": lambda req: 1 / 0},  # type: ignore[dict-item]
    )
    srv.start()
    yield srv
    srv.stop()


def test_socket_is_created_mode_0600(server: ControlServer) -> None:
    st = os.stat(server.path)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600


def test_status_round_trip(server: ControlServer) -> None:
    assert request(server.path, "status") == {"rounds": 3}


def test_unknown_command_is_refused_with_the_known_ones(server: ControlServer) -> None:
    with pytest.raises(ControlError, match="boom, status"):
        request(server.path, "format-disk")


def test_a_failing_command_is_reported_and_the_server_lives_on(server: ControlServer) -> None:
    with pytest.raises(ControlError, match="boom failed"):
        request(server.path, "boom")
    assert request(server.path, "status") == {"rounds": 3}


def test_garbage_request_gets_an_error_reply(server: ControlServer) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(server.path))
        sock.sendall(b"not json\n")
        assert b'"ok": false' in sock.recv(4096)


def test_second_daemon_on_the_same_socket_refuses_to_start(server: ControlServer) -> None:
    with pytest.raises(AlreadyRunning):
        ControlServer(server.path, {}).start()


def test_stale_socket_of_a_killed_daemon_is_replaced(short_dir: Path) -> None:
    path = short_dir / "control.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))  # bound, never listening: what a SIGKILLed daemon leaves
    srv = ControlServer(path, {"status": lambda req: {}})
    srv.start()
    try:
        assert request(path, "status") == {}
    finally:
        srv.stop()
    assert not path.exists()


def test_a_regular_file_in_the_way_is_never_removed(short_dir: Path) -> None:
    path = short_dir / "control.sock"
    path.write_text("precious")
    with pytest.raises(ControlError, match="not a socket"):
        ControlServer(path, {}).start()
    assert path.read_text() == "precious"


def test_no_daemon_is_a_clear_error(short_dir: Path) -> None:
    with pytest.raises(ControlError, match="is retentiond running"):
        request(short_dir / "control.sock", "status")


def test_overlong_path_is_refused_with_advice(short_dir: Path) -> None:
    with pytest.raises(ControlError, match=r"retentiond\.controlSocket"):
        ControlServer(short_dir / ("x" * 120), {}).start()


def test_default_path_follows_runtime_directory_then_config_name() -> None:
    config = Path("/etc/retentiond/broker-a.yaml")
    assert control.default_socket_path(config, {"RUNTIME_DIRECTORY": "/run/x:/run/y"}) == Path(
        "/run/x/control.sock"
    )
    assert control.default_socket_path(config, {}) == Path("/run/retentiond/broker-a/control.sock")


def test_peek_finds_the_socket_in_a_file_that_does_not_validate(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("fileReservedTime: -5\nretentiond:\n  controlSocket: /tmp/x.sock\n")
    assert control.peek_socket_path(config) == Path("/tmp/x.sock")
    conf = tmp_path / "broker.conf"
    conf.write_text("fileReservedTime=oops\nretentiond.controlSocket=/tmp/y.sock\n")
    assert control.peek_socket_path(conf) == Path("/tmp/y.sock")
