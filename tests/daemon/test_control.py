"""The control socket: 0600, one JSON request per connection, and a lock against twins."""

from __future__ import annotations

import hashlib
import json
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


def test_default_path_follows_runtime_directory_then_config_name_and_hash(
    tmp_path: Path,
) -> None:
    config = Path("/etc/retentiond/broker-a.yaml")
    assert control.default_socket_path(config, {"RUNTIME_DIRECTORY": "/run/x:/run/y"}) == Path(
        "/run/x/control.sock"
    )
    digest = hashlib.sha256(b"/etc/retentiond/broker-a.yaml").hexdigest()[:8]
    assert control.default_socket_path(config, {}) == Path(
        f"/run/retentiond/broker-a-{digest}/control.sock"
    )
    # Same name, other directories: other sockets. A symlink is the file it points to.
    a, b = tmp_path / "a" / "broker.yaml", tmp_path / "b" / "broker.yaml"
    assert control.default_socket_path(a, {}) != control.default_socket_path(b, {})
    (tmp_path / "a").mkdir()
    a.write_text("x")
    link = tmp_path / "link.yaml"
    link.symlink_to(a)
    assert control.default_socket_path(link, {}) == control.default_socket_path(a, {})
    assert control.default_socket_path(link, {}).parent.name.startswith("broker-")


def test_clients_look_at_the_default_then_where_the_shipped_unit_puts_it() -> None:
    config = Path("/etc/retentiond/broker-a.yaml")
    places = control.client_socket_paths(config, None, {})
    assert places == [
        control.default_socket_path(config, {}),
        Path("/run/retentiond/broker-a/control.sock"),  # RuntimeDirectory=retentiond/%i
    ]


def test_peek_finds_the_socket_in_a_file_that_does_not_validate(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("fileReservedTime: -5\nretentiond:\n  controlSocket: /tmp/x.sock\n")
    assert control.peek_socket_path(config) == Path("/tmp/x.sock")
    conf = tmp_path / "broker.conf"
    conf.write_text("fileReservedTime=oops\nretentiond.controlSocket=/tmp/y.sock\n")
    assert control.peek_socket_path(conf) == Path("/tmp/y.sock")


IDENTITY = {"config": "/etc/retentiond/a.yaml", "config_hash": "abc", "pid": 7}


@pytest.fixture
def identified(short_dir: Path) -> Iterator[tuple[ControlServer, list[str]]]:
    ran: list[str] = []

    def trigger(req: dict[str, object]) -> dict[str, object]:
        ran.append("trigger-delete")
        return {"manual_rounds": 20}

    srv = ControlServer(
        short_dir / "run" / "control.sock",
        {"status": lambda req: {"rounds": 3}, "trigger-delete": trigger},
        identity=lambda: IDENTITY,
    )
    srv.start()
    yield srv, ran
    srv.stop()


def _raw_reply(path: Path, payload: bytes) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(path))
        sock.sendall(payload)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    reply = json.loads(data)
    assert isinstance(reply, dict)
    return reply


def test_every_reply_says_which_daemon_answered(
    identified: tuple[ControlServer, list[str]],
) -> None:
    srv, _ = identified
    for payload in (b'{"command": "status"}\n', b"garbage\n", b'{"command": "nope"}\n'):
        assert _raw_reply(srv.path, payload)["daemon"] == IDENTITY


def test_a_request_for_another_configuration_runs_nothing(
    identified: tuple[ControlServer, list[str]],
) -> None:
    srv, ran = identified
    reply = _raw_reply(
        srv.path, b'{"command": "trigger-delete", "config": "/etc/retentiond/b.yaml"}\n'
    )
    assert reply["ok"] is False and reply["wrong_config"] is True
    assert "serves /etc/retentiond/a.yaml, not /etc/retentiond/b.yaml" in str(reply["error"])
    assert ran == []
    wrong = r"\(pid 7\) serves /etc/retentiond/a\.yaml, not /etc/retentiond/b\.yaml; nothing"
    with pytest.raises(control.WrongDaemon, match=wrong):
        control.ask([srv.path], "trigger-delete", config="/etc/retentiond/b.yaml")
    assert ran == []
    answer = control.ask([srv.path], "trigger-delete", config="/etc/retentiond/a.yaml")
    assert answer.result == {"manual_rounds": 20} and answer.daemon == IDENTITY
    assert ran == ["trigger-delete"]


def test_ask_passes_over_places_without_the_right_daemon(
    identified: tuple[ControlServer, list[str]], short_dir: Path
) -> None:
    srv, ran = identified
    other = ControlServer(
        short_dir / "other.sock",
        {"trigger-delete": lambda req: ran.append("other") or {}},  # type: ignore[func-returns-value]
        identity=lambda: {**IDENTITY, "config": "/etc/retentiond/b.yaml", "pid": 8},
    )
    other.start()
    try:
        places = [short_dir / "none.sock", other.path, srv.path]
        answer = control.ask(places, "trigger-delete", config="/etc/retentiond/a.yaml")
        assert answer.path == srv.path and answer.daemon["pid"] == 7
        assert ran == ["trigger-delete"]
        with pytest.raises(ControlError, match="is retentiond running"):
            control.ask([short_dir / "x.sock", short_dir / "y.sock"], "status", config="/z")
    finally:
        other.stop()


def test_a_twin_on_a_shared_socket_is_named_at_start(
    identified: tuple[ControlServer, list[str]],
) -> None:
    srv, _ = identified
    twin = ControlServer(
        srv.path, {}, identity=lambda: {**IDENTITY, "config": "/etc/retentiond/b.yaml"}
    )
    with pytest.raises(AlreadyRunning, match=r"serving /etc/retentiond/a\.yaml.*its own"):
        twin.start()


def test_the_socket_directory_made_by_the_daemon_goes_with_it(short_dir: Path) -> None:
    path = short_dir / "broker-0123abcd" / "control.sock"
    srv = ControlServer(path, {"status": lambda req: {}})
    srv.start()
    assert request(path, "status") == {}
    srv.stop()
    assert not path.parent.exists()
