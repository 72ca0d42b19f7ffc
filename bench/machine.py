"""What every bench prints beside its figures: the machine and its load (figures from a shared,
noisy machine mean little without them). Imported by the bench scripts, which run as
``python bench/<script>.py`` and so find this module beside them."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {system}"


def load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())
