"""The opt-in guard of what a deletion loses (``retentiond.guard.*``), shared by every kind.

Off by default (``report``), so that retentiond stays exactly the broker's cleaner: each
deletion only *says* what it loses. With ``keep`` a file holding unread messages of an active
group (or pending timers) is kept with its own reason, until the disk passes the kind's
safety ratio (each kind names its own).
"""

from __future__ import annotations

import re

from retentiond.config.keys import ConfigKey, Format, Invalid, Kind, ValueType, string_value

GUARD_MODES = ("report", "keep")
DEFAULT_STALE_AFTER_MS = 7 * 86_400_000
DEFAULT_TOP_GROUPS = 20

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"(\d+)\s*(ms|s|m|h|d)?")
_GLOB = re.compile(r"[%|a-zA-Z0-9_*?\[\]!+-]+")


def _mode(spec: ConfigKey, raw: object, fmt: Format) -> str:
    text = string_value(spec, raw, fmt)
    if text not in GUARD_MODES:
        raise Invalid("must be 'report' or 'keep'")
    return text


def _globs(spec: ConfigKey, raw: object, fmt: Format) -> tuple[str, ...]:
    if isinstance(raw, list) and fmt is Format.YAML:
        items = [string_value(spec, v, fmt) for v in raw]
    else:
        items = [p.strip() for p in string_value(spec, raw, fmt).split(",")]
    items = [i for i in items if i]
    for item in items:
        if not _GLOB.fullmatch(item):
            raise Invalid(f"{item!r} is not a group name or a * glob")
    return tuple(items)


def _duration(spec: ConfigKey, raw: object, fmt: Format) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        text = str(raw)
    else:
        text = string_value(spec, raw, fmt)
    m = _DURATION.fullmatch(text)
    if m is None:
        raise Invalid("must be a duration: a number of ms, or with a unit ms, s, m, h, d (7d)")
    value = int(m.group(1)) * _UNITS[m.group(2) or "ms"]
    if value <= 0:
        raise Invalid("must be positive")
    return value


MODE = ValueType("report | keep", _mode, lambda spec: "`report` / `keep`")
GLOBS = ValueType(
    "list of group names", _globs, lambda spec: "names or `*` globs (comma-separated in .conf)"
)
DURATION = ValueType("duration", _duration, lambda spec: "ms, or a number with ms/s/m/h/d")

GUARD_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "retentiond.guard.unconsumed",
        "daemon.guard_unconsumed",
        MODE,
        "`report`: every deletion says which groups lose unread messages; `keep`: a file "
        "holding unread messages of an enabled group stays (reason `unconsumed`) until the "
        "disk passes the kind's safety ratio.",
        default="report",
    ),
    ConfigKey(
        "retentiond.guard.timers",
        "daemon.guard_timers",
        MODE,
        "As `unconsumed`, for pending timer, delay-level and half messages (reason "
        "`pending_timer`), for the kinds that have them.",
        default="report",
    ),
    ConfigKey(
        "retentiond.guard.ignoreGroups",
        "daemon.guard_ignore_groups",
        GLOBS,
        "Groups reported (state `ignored`) but never protected by the guard.",
        default=(),
        default_doc="none",
    ),
    ConfigKey(
        "retentiond.guard.staleAfter",
        "daemon.guard_stale_after_ms",
        DURATION,
        "A group whose offsets have not moved for this long, as the daemon observes them, is "
        "reported as `stale` and no longer protected.",
        default=DEFAULT_STALE_AFTER_MS,
        default_doc="7d",
    ),
    ConfigKey(
        "retentiond.guard.topGroups",
        "daemon.guard_top_groups",
        Kind.INT,
        "Groups given their own `group` label in the loss metrics (by risk); the rest summed.",
        default=DEFAULT_TOP_GROUPS,
        minimum=1,
        maximum=1000,
    ),
)
