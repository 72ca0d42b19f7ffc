"""The local control socket: `status` and `trigger-delete` reach the running daemon here.

A Unix stream socket, mode 0600, so only the service user (and root) can connect; there is no
network listener that accepts commands. One JSON request per connection and one JSON reply:

    -> {"command": "status", "config": "/etc/retentiond/broker-a.yaml"}
    <- {"ok": true, "result": {...},
        "daemon": {"config": "/etc/retentiond/broker-a.yaml", "config_hash": "…", "pid": 4242}}

Every reply, refusals included, says which daemon answered: the real path of its configuration
file, the hash of the settings it runs and its pid. A request that names a ``config`` other
than the daemon's is refused before any command runs (``"wrong_config": true``), so a client
that reached another broker's daemon never triggers anything there.

The socket's default place depends on the configuration's real path
(``/run/retentiond/<stem>-<8 hex of its sha256>/control.sock``), so two brokers whose files
share a name get two sockets; under systemd it is ``$RUNTIME_DIRECTORY/control.sock``. The
socket doubles as a lock: a daemon that finds another one answering on its socket refuses to
start, so two daemons can never clean the same store from the same configuration.

One thread serves every connection from a ``selectors`` loop: an idle or slow client costs a
file descriptor and nothing else, each connection has a deadline for the whole request, and
one client process (``SO_PEERCRED`` pid) may hold at most ``max_per_peer`` connections; the
commands themselves run on two worker threads so that a slow one never stalls the loop.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import heapq
import itertools
import json
import os
import queue
import resource
import selectors
import socket
import stat
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog
import yaml

from retentiond.config.settings import Settings, StoreSection
from retentiond.observe.listener import ErrorCounts, keep_serving

log = structlog.get_logger(__name__)

DEFAULT_RUNTIME_DIR = Path("/run/retentiond")
SOCKET_NAME = "control.sock"
MAX_REQUEST_BYTES = 64 * 1024
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes including the NUL

Handler = Callable[[dict[str, object]], dict[str, object]]
Identity = Callable[[], Mapping[str, object]]


class ControlError(Exception):
    """The socket cannot be set up, or the daemon cannot be reached."""


class AlreadyRunning(ControlError):
    """Another process answers on our socket."""


class WrongDaemon(ControlError):
    """A daemon answered, but it serves another configuration file."""

    def __init__(self, message: str, daemon: Mapping[str, object]) -> None:
        super().__init__(message)
        self.daemon = dict(daemon)


def real_config_path(config_path: Path) -> str:
    """What identifies a configuration: its real path (symlinks resolved)."""
    return os.path.realpath(config_path)


def config_path_hash(config_path: Path) -> str:
    """8 hex digits of the sha256 of the configuration's real path."""
    return hashlib.sha256(os.fsencode(real_config_path(config_path))).hexdigest()[:8]


def default_socket_path(config_path: Path, environ: Mapping[str, str] | None = None) -> Path:
    """``$RUNTIME_DIRECTORY/control.sock`` under systemd, else
    ``/run/retentiond/<stem>-<8 hex of sha256(real path)>/control.sock``.

    The hash keeps apart two brokers whose configuration files have the same name in
    different directories. The shipped unit runs with ``RuntimeDirectory=retentiond/%i``
    (its hardening allows no other place), which the clients also try (``client_socket_paths``).
    """
    env = os.environ if environ is None else environ
    runtime = env.get("RUNTIME_DIRECTORY", "")
    if runtime:
        return Path(runtime.split(":")[0]) / SOCKET_NAME
    stem = Path(real_config_path(config_path)).stem
    return DEFAULT_RUNTIME_DIR / f"{stem}-{config_path_hash(config_path)}" / SOCKET_NAME


def socket_path(settings: Settings[StoreSection], config_path: Path) -> Path:
    if settings.daemon.control_socket is not None:
        return Path(settings.daemon.control_socket)
    return default_socket_path(config_path)


def _configured_socket(config_path: Path) -> Path | None:
    """``retentiond.controlSocket`` read from the raw text of a file that does not validate."""
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
    return None


def peek_socket_path(config_path: Path) -> Path:
    """The socket named by a file that does not validate (yet): `status` must keep working
    while an operator's bad edit is being refused by the daemon."""
    return _configured_socket(config_path) or default_socket_path(config_path)


def client_socket_paths(
    config_path: Path,
    settings: Settings[StoreSection] | None,
    environ: Mapping[str, str] | None = None,
) -> list[Path]:
    """Where a client looks for the daemon of ``config_path``, in order.

    A configured ``controlSocket`` is the only place. Otherwise the default, then the same
    without ``$RUNTIME_DIRECTORY`` (a client run from another unit), then the shipped unit's
    ``/run/retentiond/<instance>/control.sock`` (``retentiond@broker-a`` reads
    ``/etc/retentiond/broker-a.yaml``). A daemon found anywhere is only used if it says it
    serves this very file, so trying several places never reaches another broker's daemon."""
    if settings is not None:
        configured = settings.daemon.control_socket
        explicit = Path(configured) if configured is not None else None
    else:
        explicit = _configured_socket(config_path)
    if explicit is not None:
        return [explicit]
    candidates = [
        default_socket_path(config_path, environ),
        default_socket_path(config_path, {}),
        DEFAULT_RUNTIME_DIR / config_path.stem / SOCKET_NAME,
        DEFAULT_RUNTIME_DIR / Path(real_config_path(config_path)).stem / SOCKET_NAME,
    ]
    return list(dict.fromkeys(candidates))


def _check_path_length(path: Path) -> None:
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        raise ControlError(
            f"control socket path {path} is longer than {_SUN_PATH_MAX} bytes, the limit of a "
            "Unix socket address; set retentiond.controlSocket to a shorter path"
        )


def _peer_cred(conn: socket.socket) -> tuple[int, int | None]:
    """(pid, uid) of the peer; pid 0 when the kernel cannot say (another pid namespace), and
    all such peers share one cap."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return 0, None
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


MAX_NESTING = 32  # a request is one flat object; depth 32 is generous and far from recursion
MAX_PER_PEER = 16  # connections one client process may hold; one more is told "busy" at once
REQUEST_DEADLINE_S = 2.0  # for the whole request, so a client sending a byte a second is cut
LINGER_S = 0.5  # after the reply, for the client to read it and hang up before we close
WORKERS = 2  # threads that run the commands; the loop itself never waits on one
_NOFILE_RESERVE = 256  # descriptors kept for the store, the journal and /metrics


def max_connections_for_fd_limit() -> int:
    """All clients together may hold half of the descriptors left over by the daemon's own
    needs: a guard for the process, not a budget to share (that is ``max_per_peer``)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(64, (soft - _NOFILE_RESERVE) // 2)


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


def _encode(reply: Mapping[str, object]) -> bytes:
    return json.dumps(reply, default=str).encode() + b"\n"


# ---- the server ------------------------------------------------------------------------

_READING, _WORKING, _WRITING, _CLOSING = "reading", "working", "writing", "closing"


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: int | None  # the pid its slot is counted under; None: not counted (told busy)
    deadline: float
    state: str = _READING
    inbuf: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None
    closed: bool = False


class _Loop:
    """One listening socket and its connections, served by ``serve_forever`` in one thread.

    It has what ``keep_serving`` needs of a server (``serve_forever``, ``shutdown``,
    ``server_close``); ``service_actions`` runs once per turn of the loop."""

    def __init__(self, control: ControlServer, listener: socket.socket) -> None:
        self.control = control
        self.socket = listener
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (listener, self._wake_r, self._wake_w):
            s.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ, "listener")
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._conns: set[_Conn] = set()
        self._per_peer: dict[int, int] = {}
        self._deadlines: list[tuple[float, int, _Conn]] = []
        self._seq = itertools.count()
        self._done: deque[tuple[_Conn, dict[str, object] | None]] = deque()
        self._listening = True
        self._resume_listening_at = 0.0
        self._shutdown_request = False
        self._stopped = threading.Event()
        self._stopped.set()
        self._closed = False
        self._scratch = bytearray(65536)
        self._view = memoryview(self._scratch)

    # -- what keep_serving and ControlServer call -----------------------------------------
    @property
    def connections(self) -> int:
        return len(self._conns)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        try:
            while not self._shutdown_request:
                now = time.monotonic()
                timeout = poll_interval
                if self._deadlines:
                    timeout = min(timeout, max(0.0, self._deadlines[0][0] - now))
                if not self._listening:
                    timeout = min(timeout, max(0.0, self._resume_listening_at - now))
                for key, mask in self.selector.select(timeout):
                    if key.data == "listener":
                        self._accept()
                    elif key.data == "wake":
                        self._take_done()
                    else:
                        self._on_event(key.data, mask)
                self._expire(time.monotonic())
                self.service_actions()
        finally:
            self._stopped.set()

    def service_actions(self) -> None:
        if not self._listening and time.monotonic() >= self._resume_listening_at:
            self.selector.register(self.socket, selectors.EVENT_READ, "listener")
            self._listening = True

    def shutdown(self) -> None:
        self._shutdown_request = True
        self._wake()
        self._stopped.wait(5.0)

    def server_close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in list(self._conns):
            self._close(conn)
        with contextlib.suppress(Exception):
            self.selector.close()
        for s in (self.socket, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()

    def complete(self, conn: _Conn, reply: dict[str, object] | None) -> None:
        """From a worker thread: the reply to ``conn`` is ready (None: hang up on it)."""
        self._done.append((conn, reply))
        self._wake()

    # -- the loop's own work --------------------------------------------------------------
    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe already wakes the loop
            self._wake_w.send(b"\0")

    def _accept(self) -> None:
        control = self.control
        for _ in range(256):  # then let the others have a turn
            try:
                sock, _addr = self.socket.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                control.errors.add(errno.errorcode.get(exc.errno or 0, type(exc).__name__), exc)
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors: stop accepting a moment instead of spinning on a
                    # listener that stays readable.
                    self.selector.unregister(self.socket)
                    self._listening = False
                    self._resume_listening_at = time.monotonic() + 0.1
                    return
                continue
            sock.setblocking(False)
            self._admit(sock)

    def _admit(self, sock: socket.socket) -> None:
        control = self.control
        now = time.monotonic()
        pid, uid = _peer_cred(sock)
        if uid is not None and uid not in (0, os.getuid()):
            # The 0600 mode already keeps others out; this covers a socket path someone
            # pointed into a shared directory with looser ACLs.
            conn = _Conn(sock, None, now + LINGER_S)
            self._conns.add(conn)
            self._push_deadline(conn)
            self._send(conn, control.envelope({"ok": False, "error": "permission denied"}))
            return
        held = self._per_peer.get(pid, 0)
        if held >= control.max_per_peer or len(self._conns) >= control.max_connections:
            control.errors.add("busy")
            conn = _Conn(sock, None, now + LINGER_S)
            self._conns.add(conn)
            self._push_deadline(conn)
            who = (
                f"this process (pid {pid}) holds {held} connections, the limit"
                if held >= control.max_per_peer
                else f"{len(self._conns) - 1} connections are open, the limit"
            )
            self._send(conn, control.envelope({"ok": False, "error": f"busy: {who}; retry"}))
            return
        self._per_peer[pid] = held + 1
        conn = _Conn(sock, pid, now + control.deadline_s)
        self._conns.add(conn)
        self.selector.register(sock, selectors.EVENT_READ, conn)
        self._push_deadline(conn)

    def _push_deadline(self, conn: _Conn) -> None:
        heapq.heappush(self._deadlines, (conn.deadline, next(self._seq), conn))

    def _on_event(self, conn: _Conn, mask: int) -> None:
        try:
            if conn.state == _READING:
                self._read(conn)
            elif conn.state == _WRITING:
                self._write(conn)
            elif conn.state == _CLOSING:
                self._linger(conn)
        except OSError as exc:
            if conn.state != _CLOSING:  # answered already: how the client hangs up is its own
                self.control.errors.add(type(exc).__name__, exc)
            self._close(conn)
        except Exception as exc:  # never let a client end the loop; count and move on
            self.control.errors.add(type(exc).__name__, exc)
            self._close(conn)

    def _read(self, conn: _Conn) -> None:
        # Into one scratch buffer, and never more than one byte past the limit: a client's
        # megabytes cost no memory here.
        want = min(len(self._scratch), MAX_REQUEST_BYTES + 1 - len(conn.inbuf))
        n = conn.sock.recv_into(self._scratch, want)
        if n:
            conn.inbuf += self._view[:n]
            newline = conn.inbuf.find(b"\n")
            if newline >= 0:
                self._request(conn, bytes(conn.inbuf[:newline]))
            elif len(conn.inbuf) > MAX_REQUEST_BYTES:
                self._request(conn, bytes(conn.inbuf))  # refused as too large
            return
        if not conn.inbuf:
            self._close(conn)  # connected and hung up: a probe, not a request
            return
        self._request(conn, bytes(conn.inbuf))  # the request ended with the stream

    def _request(self, conn: _Conn, line: bytes) -> None:
        conn.state = _WORKING
        conn.inbuf = bytearray()
        self.selector.unregister(conn.sock)  # nothing more is read until the reply is sent
        self.control.dispatch(self, conn, line)

    def _take_done(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass
        while self._done:
            conn, reply = self._done.popleft()
            if conn.closed:
                continue
            if reply is None:
                self._close(conn)
                continue
            # The deadline covers reading and writing; a command's own time is not the
            # client's fault, so the reply gets at least a second to go out.
            conn.deadline = max(conn.deadline, time.monotonic() + 1.0)
            self._push_deadline(conn)
            self._send(conn, self.control.envelope(reply))

    def _send(self, conn: _Conn, reply: Mapping[str, object]) -> None:
        conn.out = memoryview(_encode(reply))
        conn.state = _WRITING
        try:
            self._write(conn)
        except OSError as exc:
            self.control.errors.add(type(exc).__name__, exc)
            self._close(conn)
            return
        if not conn.closed and conn.state == _WRITING:
            self._watch(conn, selectors.EVENT_WRITE)

    def _watch(self, conn: _Conn, events: int) -> None:
        try:
            self.selector.modify(conn.sock, events, conn)
        except KeyError:
            self.selector.register(conn.sock, events, conn)

    def _write(self, conn: _Conn) -> None:
        assert conn.out is not None
        try:
            sent = conn.sock.send(conn.out)
        except BlockingIOError:
            return
        conn.out = conn.out[sent:]
        if len(conn.out):
            return
        # All sent: say so (FIN), then read what the client still sends until it hangs up,
        # since closing with unread data would reset the connection and lose the reply.
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)
        self._release(conn)  # answered: a client's next request never waits on this one
        conn.state = _CLOSING
        conn.deadline = min(conn.deadline, time.monotonic() + LINGER_S)
        self._push_deadline(conn)
        self._watch(conn, selectors.EVENT_READ)

    def _linger(self, conn: _Conn) -> None:
        for _ in range(16):
            try:
                if not conn.sock.recv_into(self._scratch):
                    self._close(conn)
                    return
            except BlockingIOError:
                return

    def _release(self, conn: _Conn) -> None:
        """Give back ``conn``'s place among its process's ``max_per_peer``."""
        if conn.peer is None:
            return
        left = self._per_peer.get(conn.peer, 1) - 1
        if left > 0:
            self._per_peer[conn.peer] = left
        else:
            self._per_peer.pop(conn.peer, None)
        conn.peer = None

    def _expire(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _seq, conn = heapq.heappop(self._deadlines)
            if conn.closed or deadline != conn.deadline:
                continue  # closed, or given a later deadline since
            if conn.state == _WORKING:
                continue  # the reply is on its way; its own deadline is set then
            if conn.state in (_READING, _WRITING):
                self.control.errors.add("timeout")
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._conns.discard(conn)
        self._release(conn)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()


class ControlServer:
    """Serves any number of idle or slow clients at the cost of a descriptor each, each
    connection within ``deadline_s``, at most ``max_per_peer`` connections per client process.

    The loop runs under a supervisor that re-creates the socket with backoff should it ever
    die, and ``state`` tells ``status`` and metrics."""

    def __init__(
        self,
        path: Path,
        handlers: Mapping[str, Handler],
        *,
        identity: Identity | None = None,
        max_per_peer: int = MAX_PER_PEER,
        max_connections: int | None = None,
        deadline_s: float = REQUEST_DEADLINE_S,
    ) -> None:
        self.path = path
        self.handlers = dict(handlers)
        self.identity = identity
        self.max_per_peer = max_per_peer
        self.max_connections = (
            max_connections if max_connections is not None else max_connections_for_fd_limit()
        )
        self.deadline_s = deadline_s
        self.errors = ErrorCounts(
            "control connection failed (logged once per kind)", quiet=frozenset({"busy"})
        )
        self.restarts = 0
        self.up = False
        self.last_error: str | None = None
        self._server: _Loop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # (loop, connection, request) for a worker; None stops one
        self._work: queue.SimpleQueue[tuple[_Loop, _Conn, dict[str, object]] | None] = (
            queue.SimpleQueue()
        )
        self._workers: list[threading.Thread] = []
        self._made_dir = False

    @property
    def state(self) -> dict[str, object]:
        return {
            "up": self.up,
            "restarts": self.restarts,
            "last_error": self.last_error,
            "errors": self.errors.snapshot(),
            "max_clients_per_peer": self.max_per_peer,
        }

    @property
    def connections(self) -> int:
        """Client connections open now (idle ones included)."""
        server = self._server
        return server.connections if server is not None else 0

    def envelope(self, reply: Mapping[str, object]) -> dict[str, object]:
        """``reply`` with the daemon's identity, as every reply carries it."""
        out = dict(reply)
        if self.identity is not None:
            try:
                out["daemon"] = dict(self.identity())
            except Exception as exc:  # an identity that fails must not cost the reply
                self.errors.add("identity", exc)
        return out

    def start(self) -> None:
        _check_path_length(self.path)
        self._clear_stale()
        self._server = self._bind()
        self.up = True
        for n in range(WORKERS):
            worker = threading.Thread(target=self._run_work, name=f"control-{n}", daemon=True)
            worker.start()
            self._workers.append(worker)
        self._thread = threading.Thread(target=self._supervise, name="control", daemon=True)
        self._thread.start()

    def _bind(self) -> _Loop:
        parent = self.path.parent
        if not parent.exists():
            parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._made_dir = True
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # born 0600: no window in which others could connect
        try:
            sock.bind(str(self.path))
        except OSError as exc:
            sock.close()
            raise ControlError(f"cannot create control socket {self.path}: {exc}") from None
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        sock.listen(socket.SOMAXCONN)  # a burst waits in the kernel, not in a client's error
        return _Loop(self, sock)

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
            poll_interval_s=0.5,
        )

    def _rebind(self) -> _Loop:
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
        other = _probe(self.path)
        if other is not None:
            mine = self.identity() if self.identity is not None else {}
            who = _describe(other)
            if other.get("config") and mine.get("config") and other["config"] != mine["config"]:
                raise AlreadyRunning(
                    f"another retentiond{who} already answers on {self.path}; two "
                    "configurations name the same control socket: give each its own "
                    "retentiond.controlSocket (or leave it unset)"
                )
            raise AlreadyRunning(
                f"another retentiond{who} already answers on {self.path}; refusing to start "
                "a second daemon for the same configuration"
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
        for _ in self._workers:
            self._work.put(None)
        self._workers.clear()
        self.up = False
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if self._made_dir:
            with contextlib.suppress(OSError):
                self.path.parent.rmdir()  # ours, and empty now

    # -- requests -------------------------------------------------------------------------
    def dispatch(self, loop: _Loop, conn: _Conn, line: bytes) -> None:
        """From the loop: refuse ``line`` at once, or queue its command for a worker."""
        try:
            request = parse_request(line, self.handlers)
        except BadRequest as exc:
            self.errors.add("bad_request", exc)
            loop.complete(conn, {"ok": False, "error": f"bad request: {exc}"})
            return
        wanted = request.get("config")
        mine = self.identity().get("config") if self.identity is not None else None
        if isinstance(wanted, str) and mine is not None and wanted != mine:
            error = f"this daemon serves {mine}, not {wanted}; nothing was done"
            self.errors.add("wrong_config", BadRequest(error))
            loop.complete(conn, {"ok": False, "wrong_config": True, "error": error})
            return
        self._work.put((loop, conn, request))

    def _run_work(self) -> None:
        while (item := self._work.get()) is not None:
            loop, conn, request = item
            reply: dict[str, object] | None = None
            try:
                reply = self._answer(request)
            except Exception as exc:  # a worker must outlive anything a command does
                self.errors.add(type(exc).__name__, exc)
            loop.complete(conn, reply)

    def _answer(self, request: dict[str, object]) -> dict[str, object]:
        command = str(request["command"])
        try:
            return {"ok": True, "result": self.handlers[command](request)}
        except Exception as exc:  # a failing command must not kill a worker
            log.exception("control command failed", command=command)
            return {"ok": False, "error": f"{command} failed: {exc}"}


def _describe(daemon: Mapping[str, object]) -> str:
    parts = [f"pid {daemon['pid']}"] if daemon.get("pid") else []
    if daemon.get("config"):
        parts.append(f"serving {daemon['config']}")
    return f" ({', '.join(parts)})" if parts else ""


def _probe(path: Path) -> dict[str, object] | None:
    """None if nothing answers on ``path``; else what the daemon there says of itself."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return None
        # Any request is answered with the daemon's identity; this one names no command.
        try:
            probe.sendall(b'{"command": null}\n')
            data = b""
            while len(data) < MAX_REQUEST_BYTES and (chunk := probe.recv(65536)):
                data += chunk
            reply = json.loads(data)
        except (OSError, ValueError):
            return {}
    daemon = reply.get("daemon") if isinstance(reply, dict) else None
    return dict(daemon) if isinstance(daemon, dict) else {}


# ---- the client ------------------------------------------------------------------------


class NoDaemon(ControlError):
    """Nothing listens at that place."""


@dataclass(frozen=True)
class Answer:
    """A daemon's result, and which daemon gave it (``{}`` from one that does not say)."""

    result: dict[str, object]
    daemon: dict[str, object]
    path: Path


def _exchange(
    path: Path, payload: Mapping[str, object], timeout: float, config: str | None = None
) -> dict[str, object]:
    """One request and its reply. ``WrongDaemon`` if the daemon says it serves a file other
    than ``config``, whatever it answered (a "busy" too)."""
    _check_path_length(path)
    command = payload.get("command")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            _connect(sock, path, timeout)
            # A busy daemon answers at once, before reading, and closes: its reply is here.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(json.dumps(payload).encode() + b"\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        except FileNotFoundError:
            raise NoDaemon(f"no daemon: {path} does not exist (is retentiond running?)") from None
        except ConnectionRefusedError:
            raise NoDaemon(f"no daemon answers on {path} (stale socket?)") from None
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
    if not isinstance(reply, dict):
        raise ControlError(f"the daemon on {path} sent an unreadable reply")
    daemon = reply.get("daemon")
    daemon = dict(daemon) if isinstance(daemon, dict) else {}
    serves = daemon.get("config")
    if reply.get("wrong_config") or (config is not None and serves not in (None, config)):
        pid = f" (pid {daemon['pid']})" if daemon.get("pid") else ""
        # Refused by the daemon itself unless it ignored the request's config (and ran it).
        done = "nothing was asked of it" if not reply.get("ok") else f"it answered {command!r}"
        raise WrongDaemon(
            f"the daemon on {path}{pid} serves {serves or 'another configuration'}, "
            f"not {config}; {done}",
            daemon,
        )
    if not reply.get("ok"):
        error = reply.get("error")
        raise ControlError(f"the daemon refused {command!r}: {error or 'no reason given'}")
    reply["daemon"] = daemon
    return reply


def _connect(sock: socket.socket, path: Path, timeout: float) -> None:
    """``connect`` that waits (up to ``timeout``) while the daemon's backlog is full: with a
    timeout set, a Unix socket's connect fails at once with EAGAIN instead of waiting."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.connect(str(path))
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the daemon's queue stayed full for {timeout} s") from None
            time.sleep(0.01)


def request(path: Path, command: str, *, timeout: float = 5.0) -> dict[str, object]:
    """Send one command; return the daemon's ``result`` or raise ``ControlError``."""
    result = _exchange(path, {"command": command}, timeout).get("result")
    return result if isinstance(result, dict) else {}


def ask(paths: Iterable[Path], command: str, *, config: str, timeout: float = 5.0) -> Answer:
    """``command`` to the daemon serving the configuration whose real path is ``config``,
    looked for at each of ``paths`` in turn.

    The request names ``config``, so a daemon serving another file refuses it before running
    anything, and the next place is tried. Raises ``WrongDaemon`` if no place had the right
    daemon but some place had another; the right daemon's own refusal ("busy", a failing
    command) at once; else what went wrong at the first place."""
    paths = list(paths)
    wrong: WrongDaemon | None = None
    failed: ControlError | None = None
    missing: list[NoDaemon] = []
    for path in paths:
        try:
            reply = _exchange(path, {"command": command, "config": config}, timeout, config)
        except WrongDaemon as exc:
            wrong = wrong or exc
            continue
        except NoDaemon as exc:
            missing.append(exc)
            continue
        except ControlError as exc:
            if str(exc).startswith("the daemon refused"):
                raise  # our daemon (it did not say otherwise) answered
            failed = failed or exc
            continue
        result = reply.get("result")
        daemon = reply.get("daemon")
        return Answer(
            result if isinstance(result, dict) else {},
            daemon if isinstance(daemon, dict) else {},
            path,
        )
    if wrong is not None:
        raise wrong
    if failed is not None:
        raise failed
    if len(missing) == 1:
        raise missing[0]
    tried = ", ".join(str(p) for p in paths)
    raise NoDaemon(f"no daemon serving {config} answers at {tried} (is retentiond running?)")
