"""The fleet report in a real headless Chromium, driven over the DevTools protocol.

Beside what ``tests/e2e/browser.py`` reads of a page (images, headings, errors), this one
records every request the page makes (the Network domain), clicks table headers as a person
would (real mouse events at the header's position) and takes screenshots at several widths.
Chromium itself is started and driven by ``tests/helpers/browser.py``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers.browser import Tab, launched

FLAGS = ("--disable-quic",)


class Page:
    def __init__(self, tab: Tab) -> None:
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
        return self.tab.errors()

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
    domains = ("Page", "Runtime", "Log", "Network")
    with launched(url, domains=domains, extra_flags=FLAGS, timeout=timeout) as tab:
        yield Page(tab)
