"""Clients of a control socket in many processes, for the tests of the daemon's limits.

    python -m tests.helpers.control_clients SOCKET [--idle N] [--per-process K]
        [--status M] [--config PATH]

Opens ``--idle`` connections that never send a byte, spread over processes of
``--per-process`` each (the daemon caps the connections of one client process), and once they
are all open, ``--status`` processes send one ``status`` request each at the same moment (a
pipe closed under all of them at once). Then the idle holders look whether their connections
are still open. Prints one JSON line:

    {"idle_opened": 200, "idle_open_after": 200, "answered": 50, "ok": 50,
     "errors": [], "seconds": 0.41}

``seconds`` runs from the moment the requests are let go to the last reply. Processes are
forked from this small single-threaded one, so 50 of them start in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time

DEADLINE_S = 120  # the whole run; a hung daemon ends it with an error, not a hung test


def _line(fd: int, doc: dict[str, object]) -> None:
    os.write(fd, json.dumps(doc).encode() + b"\n")  # < PIPE_BUF: one atomic write


def _holder(path: str, count: int, out: int, release: int) -> None:
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        socks.append(s)
    _line(out, {"held": count})
    os.read(release, 1)  # EOF when the parent is done
    still_open = 0
    for s in socks:
        s.setblocking(False)
        try:
            s.recv(1)  # b"" (closed by the daemon) or bytes: not idle any more
        except BlockingIOError:
            still_open += 1
        except OSError:
            pass
    _line(out, {"open_after": still_open})


def _asker(path: str, config: str | None, out: int, ready: int, go: int) -> None:
    payload: dict[str, object] = {"command": "status"}
    if config is not None:
        payload["config"] = config
    _line(ready, {"ready": True})
    os.read(go, 1)  # EOF: everyone goes at once
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(60)
            s.connect(path)
            s.sendall(json.dumps(payload).encode() + b"\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        reply = json.loads(data)
        _line(out, {"ok": bool(reply.get("ok")), "error": reply.get("error"), "t": _now()})
    except Exception as exc:
        _line(out, {"ok": False, "error": f"{type(exc).__name__}: {exc}", "t": _now()})


def _now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _fork(close: tuple[int, ...], run: object, *args: object) -> int:
    """``run(*args)`` in a child that first closes ``close`` (write ends whose EOF some child
    waits for: a child holding one open would wait for itself)."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for fd in close:
                os.close(fd)
            signal.alarm(DEADLINE_S)
            run(*args)  # type: ignore[operator]
        except BaseException:
            code = 1
        os._exit(code)
    return pid


class _Lines:
    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, b""

    def take(self, n: int) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        while len(out) < n:
            while b"\n" not in self.buf:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    raise RuntimeError(f"the children ended after {len(out)} of {n} lines")
                self.buf += chunk
            line, self.buf = self.buf.split(b"\n", 1)
            out.append(json.loads(line))
        return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("socket")
    p.add_argument("--idle", type=int, default=0)
    p.add_argument("--per-process", type=int, default=10)
    p.add_argument("--status", type=int, default=0)
    p.add_argument("--config")
    args = p.parse_args()
    signal.alarm(DEADLINE_S)

    out_r, out_w = os.pipe()
    release_r, release_w = os.pipe()
    go_r, go_w = os.pipe()
    children = []
    counts = [args.per_process] * (args.idle // args.per_process)
    if args.idle % args.per_process:
        counts.append(args.idle % args.per_process)
    for count in counts:
        children.append(_fork((release_w, go_w), _holder, args.socket, count, out_w, release_r))
    lines = _Lines(out_r)
    held = sum(int(d["held"]) for d in lines.take(len(counts)))  # type: ignore[call-overload]

    ready_r, ready_w = os.pipe()
    for _ in range(args.status):
        children.append(
            _fork((release_w, go_w), _asker, args.socket, args.config, out_w, ready_w, go_r)
        )
    _Lines(ready_r).take(args.status)
    os.close(go_r)
    start = _now()
    os.close(go_w)  # every asker's read returns now
    replies = lines.take(args.status)
    end = max((float(r["t"]) for r in replies), default=start)  # type: ignore[arg-type]
    os.close(release_w)
    open_after = sum(
        int(d["open_after"])  # type: ignore[call-overload]
        for d in lines.take(len(counts))
    )
    for pid in children:
        os.waitpid(pid, 0)
    errors = sorted({str(r["error"]) for r in replies if not r["ok"]})
    summary = {
        "idle_opened": held,
        "idle_open_after": open_after,
        "answered": len(replies),
        "ok": sum(1 for r in replies if r["ok"]),
        "errors": errors,
        "seconds": round(end - start, 3),
    }
    print(json.dumps(summary))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
