"""Time-zone names: whether zoneinfo knows one, and the machine's own zone for display."""

from __future__ import annotations

import os
import re
import zoneinfo

__all__ = ["is_zone_name", "local_zone_name"]

_ZONEINFO_DIR = re.compile(r"/zoneinfo/(?:posix/|right/)?(.+)$")


def is_zone_name(name: str) -> bool:
    """Whether zoneinfo can load ``name``; it raises several unrelated types for bad keys
    (KeyError subclass, ValueError, OSError for odd paths), none of which matter here."""
    try:
        zoneinfo.ZoneInfo(name)
    except Exception:
        return False
    return True


def local_zone_name() -> str | None:
    """Best-effort IANA name of the zone the machine (and so a broker's JVM) uses.

    Only for display ("delete hours are in Europe/Paris"): the daemon itself computes local
    time through the C library whatever this returns. None when it cannot be told.
    """
    tz = os.environ.get("TZ")
    if tz is not None:
        name = tz[1:] if tz.startswith(":") else tz
        if name == "":
            return "UTC"  # glibc: an empty TZ means UTC
        if is_zone_name(name):
            return name
        match = _ZONEINFO_DIR.search(name)
        if match and is_zone_name(match.group(1)):
            return match.group(1)
        return None  # a POSIX rule string such as "CET-1CEST": no IANA name to give
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        target = ""
    match = _ZONEINFO_DIR.search(target)
    if match and is_zone_name(match.group(1)):
        return match.group(1)
    try:
        with open("/etc/timezone", encoding="utf-8") as handle:
            name = handle.readline().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if name and is_zone_name(name) else None
