"""The control socket and /metrics under concurrent clients (issue 15).

Starts the real daemon (``python -m retentiond run``) on a generated store, then:

* ``status`` latency with N concurrent clients (each sends one request, in rounds), p50/p99;
* scrapes per second with M concurrent clients over a fixed time.

Usage: ``.venv/bin/python bench/bench_endpoints.py [--clients 50] [--scrapers 40]``
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from retentiond.storegen.rocketmq import PRESETS, generate_store, write_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(path: str) -> float:
    start = time.perf_counter()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(b'{"command": "status"}\n')
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    if not json.loads(data).get("ok"):
        raise RuntimeError(data[:200])
    return time.perf_counter() - start


def _scrape(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as resp:
        resp.read()
        return int(resp.status)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--scrapers", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="rd-bench-ep-", dir="/tmp"))
    spec = PRESETS["daemon-test"]
    store = generate_store(tmp / "store", spec)
    port = _free_port()
    sock = str(tmp / "c.sock")
    config = write_config(
        store.root,
        spec,
        tmp / "broker.yaml",
        retentiond={
            "controlSocket": sock,
            "journal": {"dir": str(tmp / "journal")},
            "metrics": {"listen": f"127.0.0.1:{port}"},
        },
    )
    log = open(tmp / "daemon.log", "wb")  # noqa: SIM115 - open for the daemon's lifetime
    proc = subprocess.Popen(
        [sys.executable, "-m", "retentiond", "run", "--config", str(config)],
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _status(sock)
                _scrape(url)
                break
            except (OSError, RuntimeError, ValueError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        latencies: list[float] = []
        busy = 0
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            for _ in range(args.rounds):
                for f in [pool.submit(_status, sock) for _ in range(args.clients)]:
                    try:
                        latencies.append(f.result())
                    except RuntimeError:
                        busy += 1
        latencies.sort()
        p50 = statistics.median(latencies) * 1000
        p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
        print(
            f"status, {args.clients} concurrent clients x {args.rounds} rounds: "
            f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, busy replies {busy}"
        )
        codes: dict[int, int] = {}
        stop = time.monotonic() + args.seconds

        def scraper() -> None:
            while time.monotonic() < stop:
                try:
                    code = _scrape(url)
                except urllib.error.HTTPError as exc:
                    code = exc.code
                codes[code] = codes.get(code, 0) + 1

        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(args.scrapers) as pool:
            for f in [pool.submit(scraper) for _ in range(args.scrapers)]:
                f.result()
        elapsed = time.monotonic() - start
        total = sum(codes.values())
        print(
            f"/metrics, {args.scrapers} concurrent scrapers for {elapsed:.1f} s: "
            f"{total / elapsed:.0f} scrapes/s (codes {dict(sorted(codes.items()))})"
        )
        print(f"nproc {os.cpu_count()}, load {os.getloadavg()}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


if __name__ == "__main__":
    main()
