"""Issue 15's acceptance: the real daemon's control socket and /metrics under broken and
hostile clients, on loopback, bounded in count and time.

The "within N s" deadlines are behaviour (a scrape that waits 30 s for a slot is the bug);
latency figures live in bench/bench_endpoints.py.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import random
import re
import resource
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.test_daemon import Running, start_daemon  # noqa: F401
from tests.e2e.test_prometheus import free_port

pytestmark = pytest.mark.slow

TLS_CLIENT_HELLO = bytes.fromhex(
    "16030100a5010000a10303" + "00" * 32 + "000020c02bc02fc02cc030cca9cca8c009c013c00ac014"
    "009c009d002f0035c012000a0100005800000014001200000f7777772e6578616d706c652e636f6d"
    "000500050100000000000a00080006001d00170018000b00020100000d001200100401040305010503"
    "060106030201020300120000ff01000100"
)


def _proc_status(pid: int) -> tuple[int, int]:
    """(VmRSS in kB, Threads) from /proc/<pid>/status."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]), int(fields["Threads"])


def _control(path: Path, payload: bytes, timeout: float = 5.0) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        try:
            s.sendall(payload)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        except OSError:
            return b""
    return data


def _scrape(url: str, timeout: float) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _tcp(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return s


def _fuzzed(rng: random.Random, i: int) -> bytes:
    kind = i % 6
    if kind == 0:
        return b"[" * rng.randint(1, 200_000) + b"\n"
    if kind == 1:
        return b'{"command": ' * rng.randint(1, 5_000) + b"\n"
    if kind == 2:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 512)))
    if kind == 3:
        return json.dumps({"command": rng.choice(["status", "nope", 1, None])}).encode()
    if kind == 4:
        return b'{"command": "status", "x": "' + b"\\" * rng.randint(0, 999) + b'"}\n'
    return b"x" * rng.randint(60_000, 70_000)


def _raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))


def test_endpoints_survive_hostile_clients(start_daemon: Callable[..., Running]) -> None:  # noqa: F811
    _raise_nofile(4096)
    port = free_port()
    d = start_daemon(retentiond={"metrics": {"listen": f"127.0.0.1:{port}"}})
    d.notify.wait_for("READY")
    sock_path = Path(d.overrides["retentiond"]["controlSocket"])
    url = f"http://127.0.0.1:{port}/metrics"
    assert _scrape(url, 5) == 200
    time.sleep(1.0)  # let start-up allocations settle before the baseline
    rss_before, threads_before = _proc_status(d.proc.pid)

    # --- control socket: 200 idle connections from one process, 1,000 fuzzed payloads ----
    idle = []
    for _ in range(200):  # past its 16 this process is told "busy" at once; the daemon lives
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(sock_path))
        idle.append(s)
    for s in idle:
        s.close()
    rng = random.Random(15)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: _control(sock_path, _fuzzed(rng, i)), range(1000)))

    # 200 idle connections from 20 processes, then 50 status requests from 50 processes at
    # once: every one answered (the goal is within 2 s; the figure is printed, not asserted).
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.helpers.control_clients",
            str(sock_path),
            *("--idle", "200", "--per-process", "10", "--status", "50"),
        ],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    print(f"200 idle, then 50 concurrent status: {summary}")
    assert (summary["idle_opened"], summary["answered"], summary["ok"]) == (200, 50, 50), summary
    doc = d.status()
    assert doc["endpoints"]["control"]["up"] is True
    assert doc["endpoints"]["control"]["errors"].get("bad_request", 0) > 0
    assert doc["endpoints"]["control"]["errors"].get("busy", 0) > 0
    assert "control   up; failed clients: " in d.cli("status").out

    # --- /metrics: 1,000 idle TCP connections, then 100 slow-loris clients --------------
    idle_tcp = [_tcp(port) for _ in range(1000)]
    loris = [_tcp(port) for _ in range(100)]
    header = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 64
    for i in range(3):  # a header byte per second, three seconds of it
        for s in loris:
            with contextlib.suppress(OSError):
                s.sendall(header[i : i + 1])
        start = time.monotonic()
        assert _scrape(url, 30.0) in (200, 503)  # answered despite them (timings: bench/)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
    for s in idle_tcp + loris:
        s.close()
    deadline = time.monotonic() + 5
    while _scrape(url, 1.0) != 200:
        assert time.monotonic() < deadline, "no 200 within 5 s of the clients closing"
        time.sleep(0.1)

    # --- /metrics: malformed HTTP -------------------------------------------------------
    hostile = [
        b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\n" + b"X-H: v\r\n" * 10_000 + b"\r\n",
        bytes(random.Random(1).getrandbits(8) for _ in range(4096)),
        TLS_CLIENT_HELLO,
    ]
    for payload in hostile:
        with _tcp(port) as s:
            try:
                s.sendall(payload)
                s.settimeout(5)
                s.recv(4096)
            except OSError:
                pass
    assert _scrape(url, 5) == 200

    # --- no leak --------------------------------------------------------------------------
    body = urllib.request.urlopen(url, timeout=5).read().decode()
    for endpoint in ("control", "metrics"):
        assert re.search(rf'^retentiond_endpoint_up{{[^}}]*endpoint="{endpoint}"[^}}]*}} 1\.0$',
                         body, re.MULTILINE), endpoint  # fmt: skip
    assert "retentiond_endpoint_client_errors_total" in body
    time.sleep(1.0)
    rss_after, threads_after = _proc_status(d.proc.pid)
    assert threads_after <= threads_before * 1.1 + 0.5, (threads_before, threads_after)
    assert rss_after <= rss_before * 1.1, (rss_before, rss_after)
    assert d.proc.poll() is None
    assert "Traceback" not in d.log.read_text()
    assert os.path.exists(sock_path)


def test_a_metrics_port_held_at_start_is_retried_until_it_binds(
    start_daemon: Callable[..., Running],  # noqa: F811
) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    d = start_daemon(retentiond={"metrics": {"listen": f"127.0.0.1:{port}"}})
    d.notify.wait_for("READY")
    d.wait_until("the bind failure", lambda: "cannot serve /metrics" in d.log.read_text())
    assert d.status()["endpoints"]["metrics"] is None
    assert "metrics   not serving" in d.cli("status").out
    holder.close()
    d.wait_until("the retried bind", lambda: "metrics listening" in d.log.read_text(), 10)
    assert _scrape(f"http://127.0.0.1:{port}/metrics", 5) == 200
    assert d.status()["endpoints"]["metrics"]["up"] is True
