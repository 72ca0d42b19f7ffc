"""The key-table machinery: a configuration key as data, and the value types it takes.

A store kind and the daemon each declare their keys as ``ConfigKey`` entries; the readers
validate from those tables and the README's reference is rendered from them, so the two
cannot drift apart and adding a key is one entry. The value types here are the ones every
kind shares (integers bounded like a Java field, booleans, names, paths, zones, listen
addresses, files); a kind adds its own ``ValueType`` beside its keys.

Brokers parse their keys leniently: a bad int is silently ignored, ratios are silently
clamped. A daemon that deletes data must not guess, so every coercion here refuses instead,
and where it helps the message says what the broker would have done with the same value.
"""

from __future__ import annotations

import math
import os
import re
import zoneinfo
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from retentiond.config.metrics import file_problem, parse_listen
from retentiond.config.problems import type_name
from retentiond.config.zones import is_zone_name

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "ConfigKey",
    "Format",
    "Invalid",
    "Kind",
    "ValueType",
    "check_text",
    "closest_key",
    "format_number",
    "java_trim",
    "parse_java_int",
    "squash",
    "type_name",
]

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1

# Java's String.trim() removes every char <= U+0020, no more (str.strip() would also eat
# U+00A0 and friends, which the broker keeps).
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))
# Integer.parseInt / Long.parseLong, ASCII digits only (Java also takes other Unicode digits;
# we refuse those rather than guess).
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)")


def java_trim(text: str) -> str:
    return text.strip(_JAVA_TRIM)


def parse_java_int(text: str) -> int | None:
    """The value of a string Java's ``parseInt``/``parseLong`` accepts, without the digit-limit
    trap: Python's ``int()`` refuses more than 4300 digits, so long zero-padded or absurdly
    long numbers are measured before converting (they are out of range either way)."""
    if not _JAVA_INT.fullmatch(text):
        return None
    sign = -1 if text[0] == "-" else 1
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > 20:  # beyond any int64; report it as a huge number, not a crash
        return sign * (INT64_MAX + 1) * 10
    return sign * int(digits)


class Format(StrEnum):
    """Which file a raw value came from: YAML values are typed, properties values are strings."""

    YAML = "yaml"
    CONF = "conf"


class Invalid(ValueError):
    """A value that cannot be used; ``str()`` is the part after ``key = value: ``."""


def check_text(text: str) -> None:
    """Paths and names end up in syscalls, file names and UTF-8 logs; a NUL or a lone UTF-16
    surrogate (possible via YAML ``\\ud800`` or a .properties ``\\uD800``) would crash there
    instead of here."""
    if "\x00" in text:
        raise Invalid("contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Invalid("contains characters that cannot be encoded (a lone surrogate)") from None


def format_number(value: float) -> str:
    return f"{value:.2f}"


Coercer = Callable[["ConfigKey", object, Format], object]


@dataclass(frozen=True, eq=False)
class ValueType:
    """What a key's value is: its name in the reference, how a raw value becomes the setting
    (or ``Invalid``), and the reference's "Allowed" column."""

    name: str
    coerce: Coercer
    allowed: Callable[[ConfigKey], str]

    @property
    def value(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ConfigKey:
    """One accepted key. ``key`` is its name in a properties file; in YAML the dotted daemon
    keys (``retentiond.journal.dir``) are nested mappings instead."""

    key: str
    field: str  # the attribute it sets: of the kind's section, or "daemon.x" for DaemonSettings
    kind: ValueType
    description: str
    default: object = None
    default_factory: Callable[[Mapping[str, object]], object] | None = None
    default_doc: str | None = None
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    java_type: str = "int"  # bounds ints like the broker's field does: "int" or "long"
    nullable: bool = False  # YAML null / empty properties value mean "use the default"
    round_to: int | None = None  # upstream getter rounds up to a multiple of this
    upstream_note: str = ""  # shown in the reference: where the broker differs
    as_written: bool = False  # YAML: an unquoted number is taken as the text written

    @property
    def is_daemon(self) -> bool:
        return self.key.startswith("retentiond.")

    @property
    def java_max(self) -> int:
        return INT32_MAX if self.java_type == "int" else INT64_MAX

    @property
    def upper_bound(self) -> float:
        if self.kind in (Kind.INT, Kind.PERCENT):
            return self.java_max if self.maximum is None else min(self.maximum, self.java_max)
        return math.inf if self.maximum is None else self.maximum

    def default_value(self, values: Mapping[str, object]) -> object:
        """The value when the key is absent; ``values`` holds the keys resolved before it."""
        if self.default_factory is not None:
            return self.default_factory(values)
        return self.default

    def coerce(self, raw: object, fmt: Format) -> object:
        """Turn a raw value from a file into the setting's value, or raise ``Invalid``."""
        if raw is None and fmt is Format.YAML:
            if self.nullable:
                return None
            default = self.doc_default.replace("`", "")
            raise Invalid(f"must not be null; remove the key to use the default ({default})")
        return self.kind.coerce(self, raw, fmt)

    @property
    def doc_default(self) -> str:
        if self.default_doc is not None:
            return self.default_doc
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, float):
            return format_number(self.default)
        return str(self.default)

    @property
    def doc_allowed(self) -> str:
        return self.kind.allowed(self)


# --- coercion, one function per value type --------------------------------------------------


def _yaml_int(spec: ConfigKey, raw: object) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        hint = ""
        if isinstance(raw, str) and parse_java_int(java_trim(raw)) is not None:
            hint = "; remove the quotes"
        elif isinstance(raw, float) and spec.kind is Kind.PERCENT and 0 < raw <= 1:
            hint = f"; this key is a percent, did you mean {round(raw * 100)}?"
        raise Invalid(f"must be a whole number, not {type_name(raw)}{hint}")
    return raw


def _conf_int(spec: ConfigKey, raw: object) -> int:
    text = java_trim(str(raw))
    value = parse_java_int(text)
    if value is None:
        note = f" (the broker would silently ignore it and keep {spec.doc_default})"
        if spec.kind is Kind.PERCENT and DECIMAL.fullmatch(text):
            note += f"; this key is a percent, did you mean {round(float(text) * 100)}?"
        raise Invalid("must be a whole number" + ("" if spec.is_daemon else note))
    return value


def _coerce_int(spec: ConfigKey, raw: object, fmt: Format) -> int:
    value = _yaml_int(spec, raw) if fmt is Format.YAML else _conf_int(spec, raw)
    lo, hi = spec.minimum, spec.upper_bound
    too_low = lo is not None and value < lo
    if not too_low and value <= hi:
        if spec.round_to:
            value = -(-value // spec.round_to) * spec.round_to
        return value
    if spec.kind is Kind.PERCENT:
        raise Invalid(
            f"must be a percent between {lo:g} and {hi:.0f} "
            f"(the broker would silently clamp it to {lo if too_low else hi:.0f})"
        )
    if too_low:
        raise Invalid(f"must be at least {lo:g}")
    if spec.round_to:
        why = f" (rounded up to a multiple of {spec.round_to} it must still fit a Java int)"
    elif spec.maximum is not None and spec.maximum < spec.java_max:
        why = ""
    else:
        why = f" (a Java {spec.java_type})"
    raise Invalid(f"must be at most {hi:.0f}{why}")


def _int_allowed(spec: ConfigKey) -> str:
    text = f"{spec.minimum:g} – {spec.upper_bound:.0f}"
    if spec.round_to:
        text += f", rounded up to a multiple of {spec.round_to}"
    return text


def _coerce_bool(spec: ConfigKey, raw: object, fmt: Format) -> bool:
    if fmt is Format.YAML:
        if not isinstance(raw, bool):
            raise Invalid(f"must be true or false, not {type_name(raw)}")
        return raw
    text = java_trim(str(raw)).lower()
    if text not in ("true", "false"):
        note = "" if spec.is_daemon else " (the broker would read anything but 'true' as false)"
        raise Invalid("must be true or false" + note)
    return text == "true"


def string_value(spec: ConfigKey, raw: object, fmt: Format) -> str:
    """Strings are trimmed as the broker's String setters trim them."""
    if not isinstance(raw, str):
        raise Invalid(f"must be a string, not {type_name(raw)}; quote it")
    text = java_trim(raw)
    check_text(text)
    return text


def _coerce_text(spec: ConfigKey, raw: object, fmt: Format) -> str:
    text = string_value(spec, raw, fmt)
    if not text:
        raise Invalid("must not be empty")
    # The shipper files deletion records under .../cluster=<name>/broker=<name>/.
    if "/" in text or text in (".", "..") or any(ord(c) < 0x20 or c == "\x7f" for c in text):
        raise Invalid("must not contain '/' or control characters, nor be '.' or '..'")
    return text


def absolute_path(spec: ConfigKey, text: str, fmt: Format, what: str = "must be") -> Path:
    """``text`` as an absolute path; ``~`` is expanded in YAML (and in the daemon's own keys)
    only, since the broker does not expand it."""
    if text.startswith("~"):
        if fmt is Format.CONF and not spec.is_daemon:
            raise Invalid(
                "the broker does not expand '~' (Java would treat it as a relative directory "
                "named '~'); write the absolute path"
            )
        expanded = os.path.expanduser(text)
        if expanded == text:
            raise Invalid("cannot expand '~': no home directory is known; write the absolute path")
        text = expanded
    if not os.path.isabs(text):
        raise Invalid(f"{what} an absolute path")
    return Path(text)


def _coerce_path(spec: ConfigKey, raw: object, fmt: Format) -> Path | None:
    text = string_value(spec, raw, fmt)
    if not text:
        if spec.nullable:
            return None
        raise Invalid("must not be empty")
    return absolute_path(spec, text, fmt)


def _coerce_zone(spec: ConfigKey, raw: object, fmt: Format) -> str | None:
    text = string_value(spec, raw, fmt)
    if not text:
        if fmt is Format.CONF:
            return None
        raise Invalid(
            "must be an IANA zone name like 'Asia/Shanghai'; "
            "leave it out (or null) for the machine's local zone"
        )
    if not is_zone_name(text):
        hint = ""
        import difflib  # only for a refusal's hint: not in every process's start-up

        try:
            close = difflib.get_close_matches(text, zoneinfo.available_timezones(), n=1)
        except Exception:  # an unreadable tzdata tree only costs us the hint
            close = []
        if close:
            hint = f"; did you mean {close[0]!r}?"
        raise Invalid(f"unknown time zone (use an IANA name like 'Asia/Shanghai'){hint}")
    return text


def _coerce_listen(spec: ConfigKey, raw: object, fmt: Format) -> str:
    text = string_value(spec, raw, fmt)
    try:
        parse_listen(text)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    return text


def _coerce_file(spec: ConfigKey, raw: object, fmt: Format) -> Path | None:
    """A path that must name a readable regular file now (a certificate, a password file)."""
    path = _coerce_path(spec, raw, fmt)
    if path is not None and (problem := file_problem(path)) is not None:
        raise Invalid(problem)
    return path


def _fixed(text: str) -> Callable[[ConfigKey], str]:
    def allowed(spec: ConfigKey) -> str:
        return text

    return allowed


class Kind:
    """The value types every kind shares (a kind declares its own beside its keys)."""

    INT = ValueType("integer", _coerce_int, _int_allowed)
    PERCENT = ValueType("integer percent", _coerce_int, _int_allowed)
    BOOL = ValueType("boolean", _coerce_bool, _fixed("`true` / `false`"))
    TEXT = ValueType("string", _coerce_text, _fixed("non-empty, no `/`"))
    PATH = ValueType("absolute path", _coerce_path, _fixed("absolute"))
    ZONE = ValueType("IANA time zone", _coerce_zone, _fixed("a zoneinfo key, e.g. `Asia/Shanghai`"))
    LISTEN = ValueType(
        "host:port", _coerce_listen, _fixed("`host:port` or `[ipv6]:port`; port 0 picks a free one")
    )
    FILE = ValueType("file path", _coerce_file, _fixed("absolute path of a readable file"))


# --- names --------------------------------------------------------------------------------


def squash(key: str) -> str:
    """Keys compared loosely: ``dry_run`` and ``DryRun`` are one."""
    return key.lower().replace("_", "").replace("-", "")


def closest_key(key: str, candidates: list[str], cutoff: float) -> str | None:
    """The candidate ``key`` was most likely meant to be, or None."""
    loose = squash(key)
    for candidate in candidates:
        if squash(candidate) == loose:
            return candidate
    if len(key) > 200:  # difflib is quadratic; nobody misspells a key that badly
        return None
    import difflib  # only for a refusal's hint: not in every process's start-up

    lowered = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[close[0]] if close else None
