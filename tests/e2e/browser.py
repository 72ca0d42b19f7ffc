"""Open a page in a real headless Chromium, as a person would, over the DevTools protocol.

The report is checked the way its readers see it: Chromium loads the file, the test asks the
page which images decoded and which headings came in what order, collects every console error
and uncaught exception, and takes a screenshot of the whole page.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
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


@dataclass
class PageReport:
    images: list[dict[str, Any]] = field(default_factory=list)  # alt, complete, naturalWidth
    headings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, log errors


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Tab:
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


def open_page(url: str, screenshot: Path, *, width: int = 1280, timeout: float = 60) -> PageReport:
    """Load ``url``, report its images, headings and errors, and save a full-page PNG."""
    exe = chromium()
    if exe is None:
        raise FileNotFoundError("chromium is not installed (apt-get install chromium)")
    port = _free_port()
    profile = tempfile.mkdtemp(prefix="retentiond-chromium-")
    proc = subprocess.Popen(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--remote-debugging-port={port}",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    try:
        targets: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as r:
                    targets = [t for t in json.load(r) if t.get("type") == "page"]
                if targets:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        if not targets:
            raise TimeoutError("chromium did not open its DevTools endpoint")
        tab = _Tab(targets[0]["webSocketDebuggerUrl"], timeout)
        for domain in ("Page", "Runtime", "Log"):
            tab.call(f"{domain}.enable")
        tab.events.clear()
        tab.call("Page.navigate", url=url)
        tab.wait_for("Page.loadEventFired", deadline)
        report = PageReport()
        report.images = tab.evaluate(
            "Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete, "
            "naturalWidth: i.naturalWidth}))"
        )
        report.headings = tab.evaluate(
            "Array.from(document.querySelectorAll('h1,h2')).map(h => h.textContent)"
        )
        height = int(tab.evaluate("document.documentElement.scrollHeight") or 1000)
        tab.call(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=min(height, 16000), deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        shot = tab.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        import base64

        screenshot.write_bytes(base64.b64decode(shot["data"]))
        for e in tab.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                report.errors.append(json.dumps(params.get("args")))
            elif method == "Runtime.exceptionThrown":
                report.errors.append(json.dumps(params.get("exceptionDetails")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                report.errors.append(params["entry"].get("text", ""))
        tab.ws.close()
        return report
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)
