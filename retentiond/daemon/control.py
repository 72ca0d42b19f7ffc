"""The local control socket: `status` and `trigger-delete` reach the running daemon here.

A Unix stream socket, mode 0600, so only the service user (and root) can connect; there is no
network listener that accepts commands. One JSON request per connection and one JSON reply:

    -> {"command": "status"}
    <- {"ok": true, "result": {...}}

The socket doubles as a lock: a daemon that finds another one answering on its socket refuses
to start, so two daemons can never clean the same store from the same configuration.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import socketserver
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
import yaml

from retentiond.config.settings import Settings, StoreSection
from retentiond.observe.listener import ErrorCounts, keep_serving

log = structlog.get_logger("retentiond.daemon.control")

DEFAULT_RUNTIME_DIR = Path("/run/retentiond")
SOCKET_NAME = "control.sock"
MAX_REQUEST_BYTES = 64 * 1024
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes including the NUL

Handler = Callable[[dict[str, object]], dict[str, object]]


class ControlError(Exception):
    """The socket cannot be set up, or the daemon cannot be reached."""


class AlreadyRunning(ControlError):
    """Another process answers on our socket."""


def default_socket_path(config_path: Path, environ: Mapping[str, str] | None = None) -> Path:
    """``$RUNTIME_DIRECTORY/control.sock`` under systemd, else
    ``/run/retentiond/<config stem>/control.sock``.

    The two agree for the shipped unit: ``retentiond@broker-a`` has
    ``RuntimeDirectory=retentiond/broker-a`` and reads ``/etc/retentiond/broker-a.yaml``, so an
    operator's shell (which has no ``RUNTIME_DIRECTORY``) finds the socket from the config path.
    """
    env = os.environ if environ is None else environ
    runtime = env.get("RUNTIME_DIRECTORY", "")
    if runtime:
        return Path(runtime.split(":")[0]) / SOCKET_NAME
    return DEFAULT_RUNTIME_DIR / config_path.stem / SOCKET_NAME


def socket_path(settings: Settings[StoreSection], config_path: Path) -> Path:
    if settings.daemon.control_socket is not None:
        return Path(settings.daemon.control_socket)
    return default_socket_path(config_path)


def peek_socket_path(config_path: Path) -> Path:
    """The socket named by a file that does not validate (yet): `status` must keep working
    while an operator's bad edit is being refused by the daemon."""
    configured: object = None
    try:
        text = config_path.read_text(encoding="utf-8", errors="replace")
        if config_path.suffix.lower() in (".yaml", ".yml"):
            doc = yaml.safe_load(text)
            section = doc.get("retentiond") if isinstance(doc, dict) else None
            configured = section.get("controlSocket") if isinstance(section, dict) else None
        else:
            for line in text.splitlines():
                key, sep, value = line.partition("=")
                if sep and key.strip() == "retentiond.controlSocket":
                    configured = value.strip()
    except (OSError, yaml.YAMLError):
        configured = None
    if isinstance(configured, str) and os.path.isabs(configured):
        return Path(configured)
    return default_socket_path(config_path)


def _check_path_length(path: Path) -> None:
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        raise ControlError(
            f"control socket path {path} is longer than {_SUN_PATH_MAX} bytes, the limit of a "
            "Unix socket address; set retentiond.controlSocket to a shorter path"
        )


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def _peer_uid(conn: socket.socket) -> int | None:
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


MAX_NESTING = 32  # a request is one flat object; depth 32 is generous and far from recursion
MAX_CLIENTS = 8  # served at once; one more is answered "busy" at once instead of queued
REQUEST_DEADLINE_S = 2.0  # for the whole request, so a client sending a byte a second is cut


class BadRequest(ValueError):
    """A request we refuse, with the reason the client is told."""


def _nesting(data: bytes) -> int:
    """The deepest ``[``/``{`` nesting outside strings, measured before json.loads: the
    decoder recurses per level and 100,000 ``[`` raise RecursionError inside it."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_NESTING:
                    return deepest
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def parse_request(data: bytes, commands: Mapping[str, object]) -> dict[str, object]:
    """One request line to a dict with a known ``command``; ``BadRequest`` says what is wrong.

    Never raises anything else, whatever the bytes (the fuzz test holds it to that)."""
    if len(data) > MAX_REQUEST_BYTES:
        raise BadRequest(f"request larger than {MAX_REQUEST_BYTES} bytes")
    if _nesting(data) > MAX_NESTING:
        raise BadRequest(f"request nested deeper than {MAX_NESTING} levels")
    try:
        request = json.loads(data)
    except (ValueError, RecursionError):
        raise BadRequest("request is not one line of JSON") from None
    if not isinstance(request, dict):
        raise BadRequest("request is not a JSON object")
    command = request.get("command")
    if not isinstance(command, str) or command not in commands:
        known = ", ".join(sorted(commands))
        raise BadRequest(f"unknown command; commands: {known}")
    return request


def _read_line(conn: socket.socket, deadline: float) -> bytes:
    """Up to the first newline, within ``deadline`` (monotonic) for the whole read."""
    data = b""
    while b"\n" not in data:
        if len(data) > MAX_REQUEST_BYTES:
            raise BadRequest(f"request larger than {MAX_REQUEST_BYTES} bytes")
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request deadline passed")
        conn.settimeout(left)
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


class _Handler(socketserver.BaseRequestHandler):
    server: _UnixServer

    def handle(self) -> None:
        self.server.control._handle(self.request)


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """socketserver's accept loop, with a semaphore in front of its thread per connection."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64
    control: ControlServer

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.control._slots.acquire(blocking=False):
            self.control.errors.add("busy")
            with contextlib.suppress(OSError):
                request.settimeout(0.2)
                request.sendall(_encode({"ok": False, "error": "busy: too many clients; retry"}))
            _drain(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.control._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.control._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        self.control.errors.add(type(exc).__name__ if exc else "unknown", exc)


def _drain(conn: socket.socket) -> None:
    """Read what the client already sent, without waiting: closing a socket with unread
    data resets it, and the client would lose the reply it was sent."""
    with contextlib.suppress(OSError):
        conn.setblocking(False)
        for _ in range(64):
            if not conn.recv(65536):
                return


def _encode(reply: Mapping[str, object]) -> bytes:
    return json.dumps(reply, default=str).encode() + b"\n"


class ControlServer:
    """Serves up to ``max_clients`` requests at once, each within ``deadline_s``.

    The accept loop is socketserver's; it runs under a supervisor that re-creates the socket
    with backoff should the loop ever die, and ``state`` tells ``status`` and metrics."""

    def __init__(
        self,
        path: Path,
        handlers: Mapping[str, Handler],
        *,
        max_clients: int = MAX_CLIENTS,
        deadline_s: float = REQUEST_DEADLINE_S,
    ) -> None:
        self.path = path
        self.handlers = dict(handlers)
        self.max_clients = max_clients
        self.deadline_s = deadline_s
        self.errors = ErrorCounts("control connection failed (logged once per kind)")
        self.restarts = 0
        self.up = False
        self.last_error: str | None = None
        self._slots = threading.BoundedSemaphore(max_clients)
        self._server: _UnixServer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def state(self) -> dict[str, object]:
        return {
            "up": self.up,
            "restarts": self.restarts,
            "last_error": self.last_error,
            "errors": self.errors.snapshot(),
            "max_clients": self.max_clients,
        }

    def start(self) -> None:
        _check_path_length(self.path)
        self._clear_stale()
        self._server = self._bind()
        self.up = True
        self._thread = threading.Thread(target=self._supervise, name="control", daemon=True)
        self._thread.start()

    def _bind(self) -> _UnixServer:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        server = _UnixServer(str(self.path), _Handler, bind_and_activate=False)
        server.control = self
        os.set_inheritable(server.socket.fileno(), False)
        old_umask = os.umask(0o177)  # born 0600: no window in which others could connect
        try:
            server.server_bind()
        except OSError as exc:
            server.server_close()
            raise ControlError(f"cannot create control socket {self.path}: {exc}") from None
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        server.server_activate()
        return server

    def _supervise(self) -> None:
        keep_serving(
            self._stop,
            self,
            what="control socket",
            current=lambda: self._server,
            rebind=self._rebind,
            forget=self._forget,
            count_failure=lambda exc: self.errors.add("listener", exc),
            where=lambda: {"path": str(self.path)},
            poll_interval_s=0.2,
        )

    def _rebind(self) -> _UnixServer:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._server = self._bind()
        return self._server

    def _forget(self) -> None:
        self._server = None

    def _clear_stale(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ControlError(f"{self.path} exists and is not a socket; refusing to replace it")
        if _answers(self.path):
            raise AlreadyRunning(
                f"another retentiond already answers on {self.path}; refusing to start a second "
                "daemon for the same configuration"
            )
        self.path.unlink()  # left behind by a daemon that was killed

    def stop(self) -> None:
        self._stop.set()
        server = self._server
        if server is not None:
            server.shutdown()
            server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        self.up = False
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _handle(self, conn: socket.socket) -> None:
        """One connection: every failure becomes a reply if it can and a count always."""
        deadline = time.monotonic() + self.deadline_s
        try:
            self._answer(conn, deadline)
        except TimeoutError as exc:
            self.errors.add("timeout", exc)
        except OSError as exc:
            self.errors.add(type(exc).__name__, exc)
        except Exception as exc:  # the thread must never die with a trace; count and move on
            self.errors.add(type(exc).__name__, exc)
        _drain(conn)

    def _answer(self, conn: socket.socket, deadline: float) -> None:
        uid = _peer_uid(conn)
        if uid is not None and uid not in (0, os.getuid()):
            # The 0600 mode already keeps others out; this covers a socket path someone
            # pointed into a shared directory with looser ACLs.
            self._reply(conn, {"ok": False, "error": "permission denied"}, deadline)
            return
        try:
            request = parse_request(_read_line(conn, deadline), self.handlers)
        except BadRequest as exc:
            self.errors.add("bad_request", exc)
            self._reply(conn, {"ok": False, "error": f"bad request: {exc}"}, deadline)
            return
        command = str(request["command"])
        try:
            reply: dict[str, object] = {"ok": True, "result": self.handlers[command](request)}
        except Exception as exc:  # a failing command must not kill the control thread
            log.exception("control command failed", command=command)
            reply = {"ok": False, "error": f"{command} failed: {exc}"}
        self._reply(conn, reply, deadline)

    @staticmethod
    def _reply(conn: socket.socket, reply: dict[str, object], deadline: float) -> None:
        conn.settimeout(max(0.05, deadline - time.monotonic()))
        conn.sendall(_encode(reply))


def request(path: Path, command: str, *, timeout: float = 5.0) -> dict[str, object]:
    """Send one command; return the daemon's ``result`` or raise ``ControlError``."""
    _check_path_length(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
            # A busy daemon answers at once, before reading, and closes: its reply is here.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(json.dumps({"command": command}).encode() + b"\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        except FileNotFoundError:
            raise ControlError(
                f"no daemon: {path} does not exist (is retentiond running?)"
            ) from None
        except ConnectionRefusedError:
            raise ControlError(f"no daemon answers on {path} (stale socket?)") from None
        except PermissionError:
            raise ControlError(
                f"permission denied on {path}: run as the service user (or root)"
            ) from None
        except OSError as exc:
            raise ControlError(f"cannot talk to the daemon on {path}: {exc}") from None
    try:
        reply = json.loads(data)
    except ValueError:
        raise ControlError(f"the daemon on {path} sent an unreadable reply") from None
    if not isinstance(reply, dict) or not reply.get("ok"):
        error = reply.get("error") if isinstance(reply, dict) else None
        raise ControlError(f"the daemon refused {command!r}: {error or 'no reason given'}")
    result = reply.get("result")
    return result if isinstance(result, dict) else {}
