"""The /metrics server for real: loopback sockets, a self-signed certificate made by the
openssl CLI, HTTP basic auth, password and certificate rotation, a client that stalls."""

from __future__ import annotations

import base64
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge

from retentiond.observe import server as server_mod
from retentiond.observe.server import MetricsServer, PasswordFile, TlsFiles
from tests.helpers.tls import make_cert


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Gauge("retentiond_test_value", "A value to find in the scrape.", registry=registry).set(42)
    return registry


@pytest.fixture
def serve(registry: CollectorRegistry) -> Iterator:
    started: list[MetricsServer] = []

    def start(**kwargs) -> MetricsServer:
        srv = MetricsServer(registry, kwargs.pop("host", "127.0.0.1"), 0, **kwargs)
        srv.start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def get(url: str, *, cafile: Path | None = None, auth: tuple[str, str] | None = None):
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


def test_plain_http_on_loopback(serve) -> None:
    srv = serve()
    assert srv.url.startswith("http://127.0.0.1:") and srv.port != 0
    status, headers, body = get(srv.url)
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    assert "retentiond_test_value 42.0" in body


def test_the_root_is_a_landing_page_and_any_other_path_is_404(serve) -> None:
    srv = serve()
    root = srv.url.removesuffix("/metrics")
    status, headers, body = get(root + "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert '<a href="/metrics">' in body and "retentiond_test_value" not in body
    assert get(root + "/metrics?name[]=retentiond_test_value")[0] == 200
    for path in ("/metric", "/metrics/", "/metrics/x", "/favicon.ico", "/index.html"):
        status, _, body = get(root + path)
        assert status == 404, path
        assert "retentiond_test_value" not in body, path
    request = urllib.request.Request(root + "/", method="HEAD")
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200 and response.read() == b""


def test_the_landing_page_and_404_are_behind_basic_auth_too(serve, tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret")
    secret.chmod(0o600)
    srv = serve(password=PasswordFile("prom", secret))
    root = srv.url.removesuffix("/metrics")
    assert get(root + "/")[0] == 401 and get(root + "/nope")[0] == 401
    assert get(root + "/", auth=("prom", "s3cret"))[0] == 200
    assert get(root + "/nope", auth=("prom", "s3cret"))[0] == 404


def test_ipv6_loopback(serve) -> None:
    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    srv = serve(host="::1")
    assert srv.url.startswith("http://[::1]:")
    assert get(srv.url)[0] == 200


def test_tls_serves_https_and_refuses_plain_http(serve, tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    srv = serve(tls=TlsFiles(cert, key))
    assert srv.url.startswith("https://")
    status, _, body = get(srv.url, cafile=cert)
    assert status == 200 and "retentiond_test_value" in body
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        get(srv.url.replace("https://", "http://"))
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(srv.url, cafile=make_cert(tmp_path / "other", "other")[0])


def test_basic_auth_refuses_without_or_with_wrong_credentials(serve, tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    srv = serve(password=PasswordFile("prom", secret))
    status, headers, body = get(srv.url)
    assert status == 401
    assert headers["WWW-Authenticate"].startswith('Basic realm="retentiond"')
    assert "retentiond_test_value" not in body
    assert get(srv.url, auth=("prom", "wrong"))[0] == 401
    assert get(srv.url, auth=("other", "s3cret"))[0] == 401
    assert get(srv.url, auth=("prom", "s3cret\n"))[0] == 401
    status, _, body = get(srv.url, auth=("prom", "s3cret"))
    assert status == 200 and "retentiond_test_value 42.0" in body


def test_malformed_authorization_headers_are_refused(serve, tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret")
    srv = serve(password=PasswordFile("prom", secret))
    for header in ("Bearer abc", "Basic !!!", "Basic", "basic " + "A" * 5000):
        request = urllib.request.Request(srv.url, headers={"Authorization": header})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=5)
        assert info.value.code == 401


def test_the_password_file_is_reread_when_it_changes(serve, tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("first\n")
    srv = serve(password=PasswordFile("prom", secret))
    assert get(srv.url, auth=("prom", "first"))[0] == 200
    rotated = tmp_path / "pw.new"
    rotated.write_text("second\n")
    rotated.replace(secret)  # as a secret manager swaps it
    assert get(srv.url, auth=("prom", "first"))[0] == 401
    assert get(srv.url, auth=("prom", "second"))[0] == 200
    secret.unlink()  # unreadable: nobody gets in (fail closed)
    assert get(srv.url, auth=("prom", "second"))[0] == 401


def test_tls_and_basic_auth_together(serve, tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    secret = tmp_path / "pw"
    secret.write_text("s3cret")
    srv = serve(tls=TlsFiles(cert, key), password=PasswordFile("prom", secret))
    assert get(srv.url, cafile=cert)[0] == 401
    assert get(srv.url, cafile=cert, auth=("prom", "s3cret"))[0] == 200


def test_the_certificate_is_reloaded_when_its_files_change(serve, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(server_mod, "RELOAD_CHECK_S", 0.0)
    cert, key = make_cert(tmp_path / "live")
    old_cert = tmp_path / "old.pem"
    old_cert.write_bytes(cert.read_bytes())
    srv = serve(tls=TlsFiles(cert, key))
    assert get(srv.url, cafile=old_cert)[0] == 200
    new_cert, new_key = make_cert(tmp_path / "next", "next")
    shutil.copy(new_key, key)
    shutil.copy(new_cert, cert)
    get_new = None
    for _ in range(20):  # the check runs as the next connection is accepted
        try:
            get_new = get(srv.url, cafile=new_cert)
            break
        except urllib.error.URLError:
            time.sleep(0.1)
    assert get_new is not None and get_new[0] == 200
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(srv.url, cafile=old_cert)


def test_a_stalled_client_does_not_block_scrapes(serve, tmp_path: Path) -> None:
    """The TLS handshake happens in the connection's thread, not in the accept loop."""
    cert, key = make_cert(tmp_path)
    srv = serve(tls=TlsFiles(cert, key))
    silent = socket.create_connection(("127.0.0.1", srv.port))
    try:
        started = time.monotonic()
        assert get(srv.url, cafile=cert)[0] == 200
        assert time.monotonic() - started < 2
    finally:
        silent.close()


def test_stop_releases_the_port(registry: CollectorRegistry) -> None:
    srv = MetricsServer(registry, "127.0.0.1", 0)
    srv.start()
    port = srv.port
    srv.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    again = MetricsServer(registry, "127.0.0.1", port)
    again.start()
    again.stop()
