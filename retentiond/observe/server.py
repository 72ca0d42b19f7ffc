"""The ``/metrics`` HTTP(S) endpoint: prometheus_client's WSGI app behind our own small server.

Why not ``prometheus_client.start_http_server``: it has TLS (0.18+) but no basic auth, and it
does the TLS handshake in the accepting thread, where one slow client stalls every scrape.
Here the handshake is deferred to the connection's own thread (``do_handshake_on_connect``
off), each connection has a timeout, and basic auth is a WSGI wrapper checked before the
registry is touched.

The password lives in a file (``basicAuthPasswordFile``) and is re-read when the file changes,
so it can be rotated without a restart; the certificate and key are reloaded the same way
(checked at most every few seconds, on the next connection). The secret is never logged, and
compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import io
import os
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app

from retentiond.config.metrics import read_password
from retentiond.observe.listener import ErrorCounts, keep_serving

log = structlog.get_logger(__name__)

RELOAD_CHECK_S = 5.0  # how often the certificate files are stat-ed, at most
REALM = "retentiond"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _file_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class PasswordFile:
    """The expected ``user:password``, re-read whenever the file's stat changes."""

    def __init__(self, username: str, path: Path) -> None:
        self.username = username
        self.path = path
        self._lock = threading.Lock()
        self._key: tuple[int, int, int, int] | None = None
        self._expected: bytes | None = None
        self.expected()  # fail at start, not at the first scrape
        if self._expected is None:
            raise OSError(f"cannot read the basic-auth password file {path}")
        mode = os.stat(path).st_mode
        if mode & 0o077:
            log.warning(
                "the basic-auth password file is readable by others; chmod 600 it",
                file=str(path),
                mode=oct(mode & 0o777),
            )

    def expected(self) -> bytes | None:
        """None while the file cannot be read: then nobody gets in (fail closed)."""
        key = _file_key(self.path)
        with self._lock:
            if key is not None and key == self._key:
                return self._expected
            try:
                password = read_password(self.path)
            except (OSError, ValueError) as exc:
                if self._key is not None or self._expected is None:
                    log.error(
                        "cannot read the basic-auth password file",
                        file=str(self.path),
                        error=type(exc).__name__,
                    )
                self._key, self._expected = None, None
                return None
            self._key = key
            self._expected = f"{self.username}:{password}".encode()
            return self._expected

    def allows(self, header: str | None) -> bool:
        expected = self.expected()
        if expected is None or not header:
            return False
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, expected)


def basic_auth(app: WsgiApp, password: PasswordFile) -> WsgiApp:
    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if password.allows(environ.get("HTTP_AUTHORIZATION")):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"'),
            ],
        )
        return [b"401 Unauthorized\n"]

    return guarded


LANDING_PAGE = b"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>retentiond</title></head>
<body>
<h1>retentiond</h1>
<p>Retention for RocketMQ and Kafka broker stores.</p>
<p><a href="/metrics">Metrics</a></p>
</body>
</html>
"""


def routes(metrics: WsgiApp) -> WsgiApp:
    """``/metrics`` is the scrape; ``/`` a small page linking it (what a person who opens the
    address in a browser sees); any other path is 404, so a mistyped scrape path fails
    instead of silently scraping."""

    def route(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/":
            body, status, content_type = LANDING_PAGE, "200 OK", "text/html; charset=utf-8"
        else:
            body, status, content_type = b"404 Not Found\n", "404 Not Found", "text/plain"
        start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body] if environ.get("REQUEST_METHOD") != "HEAD" else []

    return route


class TlsFiles:
    """A server SSLContext whose certificate and key follow their files."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = cert, key
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.load_cert_chain(cert, key)
        self._keys = (_file_key(cert), _file_key(key))
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def maybe_reload(self) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._checked < RELOAD_CHECK_S:
                return
            self._checked = now
            keys = (_file_key(self.cert), _file_key(self.key))
            if keys == self._keys:
                return
            try:
                self.context.load_cert_chain(self.cert, self.key)
            except (ssl.SSLError, OSError) as exc:
                log.error(
                    "cannot reload the metrics TLS certificate; keeping the old one",
                    cert=str(self.cert),
                    error=str(exc),
                )
                return
            self._keys = keys
            log.info("metrics TLS certificate reloaded", cert=str(self.cert))


MAX_REQUESTS = 40  # node_exporter's --web.max-requests default; 503 beyond it
REQUEST_DEADLINE_S = 10.0  # the whole request, TLS handshake included, not each recv
_BUSY_BODY = b"503 Service Unavailable: too many concurrent scrapes\n"
_BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\nConnection: close\r\n\r\n".encode()
    + _BUSY_BODY
)


class _DeadlineSocket:
    """Wraps a connection so every recv gets only what is left of the request's deadline.

    A per-recv timeout lets a client that sends one header byte a second hold a slot forever;
    this cuts it at the deadline whatever it sends."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def _arm(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request deadline passed")
        self._sock.settimeout(left)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._arm()
        return self._sock.recv_into(buffer, nbytes, flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._arm()
        return self._sock.recv(bufsize, flags)

    def makefile(self, mode: str = "r", buffering: int | None = None, **kw: Any) -> Any:
        """Raw, like ``socket.makefile(mode, 0)``: reads go through ``recv_into`` above."""
        return socket.SocketIO(self, mode.replace("b", ""))  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _QuietHandler(WSGIRequestHandler):
    """Scrapes are not worth a log line each; failures show up as errors in Prometheus."""

    timeout = REQUEST_DEADLINE_S

    def setup(self) -> None:
        deadline = time.monotonic() + REQUEST_DEADLINE_S
        self.connection = self.request
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(REQUEST_DEADLINE_S)  # the handshake is inside the deadline
            self.request.do_handshake()
        self.connection = _DeadlineSocket(self.request, deadline)
        self.rfile = io.BufferedReader(self.connection.makefile("rb"))
        self.wfile = self.connection.makefile("wb", 0)  # wsgiref loops over partial writes

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingMixIn, WSGIServer):
    """wsgiref's server with a thread per connection, at most ``max_requests`` of them."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128
    tls: TlsFiles | None = None
    max_requests: int = MAX_REQUESTS
    slots: threading.BoundedSemaphore
    errors: ErrorCounts

    def get_request(self) -> tuple[socket.socket, Any]:
        if self.tls is not None:
            self.tls.maybe_reload()
        return super().get_request()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.count("busy")
            if self.tls is None:  # a TLS client would need a handshake first: just close
                with contextlib.suppress(OSError):
                    request.settimeout(0.2)
                    request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def count(self, kind: str) -> None:
        self.errors.add(kind)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up, fails the handshake or times out: counted, not printed.
        exc = sys.exc_info()[1]
        self.count(type(exc).__name__ if exc is not None else "unknown")


def _server_class(host: str) -> type[_Server]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return type("MetricsHTTPServer", (_Server,), {"address_family": family})


@dataclass
class MetricsServer:
    """Serves ``registry`` on (host, port) until ``stop``."""

    registry: CollectorRegistry
    host: str
    port: int
    tls: TlsFiles | None = None
    password: PasswordFile | None = None
    max_requests: int = MAX_REQUESTS

    def __post_init__(self) -> None:
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.up = False
        self.restarts = 0
        self.last_error: str | None = None
        self.errors = ErrorCounts(
            "metrics connection failed (logged once per kind)",
            level="info",
            quiet=frozenset({"busy"}),
        )

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/metrics"

    def start(self) -> str:
        """Bind and serve in a background thread; returns the URL (with the real port)."""
        self._httpd = self._bind()
        self.port = self._httpd.server_address[1]
        self.up = True
        self._thread = threading.Thread(target=self._supervise, name="metrics-http", daemon=True)
        self._thread.start()
        return self.url

    def _bind(self) -> _Server:
        app: WsgiApp = routes(make_wsgi_app(self.registry))
        if self.password is not None:
            app = basic_auth(app, self.password)
        httpd = make_server(
            self.host,
            self.port,
            app,
            server_class=_server_class(self.host),
            handler_class=_QuietHandler,
        )
        httpd.max_requests = self.max_requests
        httpd.slots = threading.BoundedSemaphore(self.max_requests)
        httpd.errors = self.errors
        if self.tls is not None:
            httpd.tls = self.tls
            httpd.socket = self.tls.context.wrap_socket(
                httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        return httpd

    def _supervise(self) -> None:
        keep_serving(
            self._stop,
            self,
            what="metrics listener",
            current=lambda: self._httpd,
            rebind=self._rebind,
            forget=self._forget,
            count_failure=lambda exc: self.errors.add("listener", exc),
            where=lambda: {"url": self.url},
            poll_interval_s=0.1,
        )

    def _rebind(self) -> _Server:
        self._httpd = self._bind()
        return self._httpd

    def _forget(self) -> None:
        self._httpd = None

    @property
    def state(self) -> dict[str, object]:
        return {
            "up": self.up,
            "restarts": self.restarts,
            "last_error": self.last_error,
            "errors": self.errors.snapshot(),
            "max_requests": self.max_requests,
        }

    def stop(self) -> None:
        self._stop.set()
        httpd = self._httpd
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        self._httpd = None
        self.up = False
