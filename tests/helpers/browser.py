"""A real headless Chromium for the tests that look at a page as a person would, driven over
the DevTools protocol: started with its own profile and a free debugging port, its first tab
reached over a WebSocket, the page loaded, and everything removed afterwards
(``launched``). What each suite reads of the page is its own: ``tests/e2e/browser.py``
(images, headings, errors, one screenshot), ``tests/analytics/report_browser.py`` (requests,
clicks, screenshots at several widths)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-background-networking",  # this machine's network is closed: no phoning home
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-allow-origins=*",
)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Tab:
    """One page over the DevTools protocol: calls, and the events received meanwhile."""

    def __init__(self, ws_url: str, timeout: float) -> None:
        import websocket  # test-only dependency (websocket-client)

        self.ws = websocket.create_connection(ws_url, timeout=timeout)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, event: str, deadline: float) -> None:
        if any(e.get("method") == event for e in self.events):
            return
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == event:
                return
        raise TimeoutError(f"no {event}")

    def evaluate(self, expression: str) -> Any:
        got = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return got["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions, log errors and failed loads, in order."""
        return page_errors(self.events)


def page_errors(events: Iterable[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.exceptionThrown":
            out.append(json.dumps(params.get("exceptionDetails")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            out.append(json.dumps(params.get("args")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            out.append(params["entry"].get("text", ""))
        elif method == "Network.loadingFailed":
            out.append(f"load failed: {params.get('errorText')}")
    return out


@contextmanager
def launched(
    url: str,
    *,
    domains: tuple[str, ...] = ("Page", "Runtime", "Log"),
    extra_flags: tuple[str, ...] = (),
    timeout: float = 60,
) -> Iterator[Tab]:
    """``url`` loaded in a fresh headless Chromium (own profile, ``domains`` enabled before
    it loads, the events from then on in ``Tab.events``); Chromium stopped and its profile
    removed afterwards."""
    exe = chromium()
    if exe is None:
        raise FileNotFoundError("chromium is not installed (apt-get install chromium)")
    port = free_port()
    profile = tempfile.mkdtemp(prefix="retentiond-chromium-")
    proc = subprocess.Popen(
        [exe, *CHROMIUM_FLAGS, *extra_flags, f"--user-data-dir={profile}",
         f"--remote-debugging-port={port}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    tab: Tab | None = None
    try:
        targets: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not targets:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as r:
                    targets = [t for t in json.load(r) if t.get("type") == "page"]
            except OSError:
                pass
            if not targets:
                time.sleep(0.2)
        if not targets:
            raise TimeoutError("chromium did not open its DevTools endpoint")
        tab = Tab(targets[0]["webSocketDebuggerUrl"], timeout)
        for domain in domains:
            tab.call(f"{domain}.enable")
        tab.events.clear()
        tab.call("Page.navigate", url=url)
        tab.wait_for("Page.loadEventFired", deadline)
        yield tab
    finally:
        if tab is not None:
            tab.ws.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)
