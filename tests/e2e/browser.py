"""Open a page in a real headless Chromium, as a person would, over the DevTools protocol.

The report is checked the way its readers see it: Chromium loads the file, the test asks the
page which images decoded and which headings came in what order, collects every console error
and uncaught exception, and takes a screenshot of the whole page. Chromium itself is started
and driven by ``tests/helpers/browser.py``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.browser import launched


@dataclass
class PageReport:
    images: list[dict[str, Any]] = field(default_factory=list)  # alt, complete, naturalWidth
    headings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, log errors


def open_page(url: str, screenshot: Path, *, width: int = 1280, timeout: float = 60) -> PageReport:
    """Load ``url``, report its images, headings and errors, and save a full-page PNG."""
    with launched(url, timeout=timeout) as tab:
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
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        report.errors = tab.errors()
        return report
