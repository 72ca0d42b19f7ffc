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
import stat
import struct
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import structlog
import yaml

from retentiond.config.settings import Settings

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


def socket_path(settings: Settings, config_path: Path) -> Path:
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


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while b"\n" not in data and len(data) <= MAX_REQUEST_BYTES:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


class ControlServer:
    """Serves requests one at a time on a thread of its own (they take microseconds)."""

    def __init__(self, path: Path, handlers: Mapping[str, Handler]) -> None:
        self.path = path
        self.handlers = dict(handlers)
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        _check_path_length(self.path)
        self._clear_stale()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old_umask = os.umask(0o177)  # born 0600: no window in which others could connect
        try:
            sock.bind(str(self.path))
        except OSError as exc:
            sock.close()
            raise ControlError(f"cannot create control socket {self.path}: {exc}") from None
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        sock.listen(8)
        sock.settimeout(0.2)  # how quickly stop() is noticed
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="control", daemon=True)
        self._thread.start()

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
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            with conn:
                try:
                    self._handle(conn)
                except OSError as exc:
                    log.debug("control connection failed", error=str(exc))

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(2.0)
        uid = _peer_uid(conn)
        if uid is not None and uid not in (0, os.getuid()):
            # The 0600 mode already keeps others out; this covers a socket path someone
            # pointed into a shared directory with looser ACLs.
            self._reply(conn, {"ok": False, "error": "permission denied"})
            return
        try:
            request = json.loads(_read_line(conn))
            command = request["command"]
            handler = self.handlers[command]
        except (ValueError, KeyError, TypeError):
            known = ", ".join(sorted(self.handlers))
            self._reply(conn, {"ok": False, "error": f"bad request; commands: {known}"})
            return
        try:
            reply = {"ok": True, "result": handler(request)}
        except Exception as exc:  # a failing command must not kill the control thread
            log.exception("control command failed", command=command)
            reply = {"ok": False, "error": f"{command} failed: {exc}"}
        self._reply(conn, reply)

    @staticmethod
    def _reply(conn: socket.socket, reply: dict[str, object]) -> None:
        conn.sendall(json.dumps(reply, default=str).encode() + b"\n")


def request(path: Path, command: str, *, timeout: float = 5.0) -> dict[str, object]:
    """Send one command; return the daemon's ``result`` or raise ``ControlError``."""
    _check_path_length(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
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
