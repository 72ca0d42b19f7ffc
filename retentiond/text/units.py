"""Sizes and ages as people read them: plans, round summaries and `status` all use these."""

from __future__ import annotations

import time
from datetime import datetime
from zoneinfo import ZoneInfo


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def human_age(ms: int | None) -> str:
    if ms is None:
        return "-"
    sign = "-" if ms < 0 else ""
    s = abs(ms) // 1000
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m = rem // 60
    if d:
        return f"{sign}{d}d{h:02d}h"
    if h:
        return f"{sign}{h}h{m:02d}m"
    return f"{sign}{m}m{s % 60:02d}s"


def zone_name(configured: str | None) -> str:
    """The zone plans and reports show times in, by name: the configured IANA name, else the
    machine's own (``/etc/localtime``, ``TZ``), else what the C library calls it."""
    if configured:
        return configured
    from retentiond.config.zones import local_zone_name

    name = local_zone_name()
    if name:
        return name
    return time.tzname[0] or "local"


def _in_zone(ms: int, configured: str | None) -> datetime:
    if configured:
        return datetime.fromtimestamp(ms / 1000, ZoneInfo(configured))
    return datetime.fromtimestamp(ms / 1000).astimezone()  # the C library's local time


def human_time(ms: int | None, configured: str | None) -> str:
    """``2025-01-02 04:00 CET``: a time in the configured zone (None: the machine's)."""
    if ms is None:
        return "-"
    try:
        if configured:
            t = datetime.fromtimestamp(ms / 1000, ZoneInfo(configured))
            if not 1000 <= t.year <= 9998:  # %Y unpadded before 1000; the end of the range
                return t.strftime("%Y-%m-%d %H:%M %Z")
            # strftime's text, built directly: a plan shows tens of thousands of times
            zone = t.tzname() or ""
            return f"{t.year}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d} {zone}"
        # the C library's local time, as ``_in_zone`` has it, in one call
        lt = time.localtime(ms / 1000)
        if not 1000 <= lt.tm_year <= 9998:
            return _in_zone(ms, configured).strftime("%Y-%m-%d %H:%M %Z")
        return (
            f"{lt.tm_year}-{lt.tm_mon:02d}-{lt.tm_mday:02d} {lt.tm_hour:02d}:{lt.tm_min:02d} "
            f"{lt.tm_zone or ''}"
        )
    except (ValueError, OverflowError, OSError):  # past what a date can carry (an mtime)
        return "after 9999-12-31" if ms > 0 else "before 0001-01-01"


def iso_time(ms: int, configured: str | None) -> str:
    """The same time as ISO 8601 with its UTC offset, to the second."""
    return _in_zone(ms, configured).isoformat(timespec="seconds")


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(text: str) -> int:
    """``50GiB``, ``512 MiB``, ``10G``, ``4096``: a size in bytes (binary units, any case;
    ``KiB``/``K`` alike). ValueError for anything else, or a negative size."""
    s = text.strip().lower().replace(" ", "")
    digits = len(s) - len(s.lstrip("0123456789."))
    number, unit = s[:digits], s[digits:]
    unit = unit.removesuffix("ib").removesuffix("b") if unit not in ("b",) else ""
    if unit not in _UNITS or not number or number.count(".") > 1 or number == ".":
        raise ValueError(f"{text!r} is not a size (say 50GiB, 512MiB or a number of bytes)")
    return int(float(number) * _UNITS[unit])
