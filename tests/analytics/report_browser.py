"""The fleet report in a real headless Chromium, driven over the DevTools protocol.

Beside what ``tests/e2e/browser.py`` reads of a page (images, headings, errors), this one
records every request the page makes (the Network domain), clicks table headers as a person
would (real mouse events at the header's position) and takes screenshots at several widths.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.e2e.browser import CHROMIUM_FLAGS, _free_port, _Tab, chromium

FLAGS = (*CHROMIUM_FLAGS, "--disable-quic")


class Page:
    def __init__(self, tab: _Tab) -> None:
        self.tab = tab

    def evaluate(self, expression: str) -> Any:
        return self.tab.evaluate(expression)

    def requests(self) -> list[str]:
        """Every URL the page asked for since it started loading."""
        return [
            e["params"]["request"]["url"]
            for e in self.tab.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def errors(self) -> list[str]:
        out = []
        for e in self.tab.events:
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

    def click(self, selector: str) -> None:
        """A real left click in the middle of the first element matching ``selector``."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            self.tab.call(
                "Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1
            )

    def screenshot(self, path: Path, width: int) -> Path:
        """The whole page at ``width`` CSS pixels."""
        self.tab.call(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=900, deviceScaleFactor=1, mobile=width < 700,
        )  # fmt: skip
        height = int(self.evaluate("document.documentElement.scrollHeight") or 900)
        self.tab.call(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=min(height, 30000), deviceScaleFactor=1, mobile=width < 700,
        )  # fmt: skip
        shot = self.tab.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextmanager
def opened(url: str, *, timeout: float = 60) -> Iterator[Page]:
    """``url`` loaded in a fresh headless Chromium (own profile), closed afterwards."""
    exe = chromium()
    if exe is None:
        raise FileNotFoundError("chromium is not installed (apt-get install chromium)")
    port = _free_port()
    profile = tempfile.mkdtemp(prefix="retentiond-chromium-")
    proc = subprocess.Popen(
        [exe, *FLAGS, f"--user-data-dir={profile}", f"--remote-debugging-port={port}",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    tab: _Tab | None = None
    try:
        targets: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not targets:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as r:
                    targets = [t for t in json.load(r) if t.get("type") == "page"]
            except OSError:
                time.sleep(0.2)
        if not targets:
            raise TimeoutError("chromium did not open its DevTools endpoint")
        tab = _Tab(targets[0]["webSocketDebuggerUrl"], timeout)
        for domain in ("Page", "Runtime", "Log", "Network"):
            tab.call(f"{domain}.enable")
        tab.events.clear()
        tab.call("Page.navigate", url=url)
        tab.wait_for("Page.loadEventFired", deadline)
        yield Page(tab)
    finally:
        if tab is not None:
            tab.ws.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)
