"""Every configuration key retentiond accepts, as data.

The loader validates from this table and the README's reference is rendered from it, so the
two cannot drift apart and adding a key is one ``ConfigKey`` entry. Keys carry RocketMQ's own
names (``MessageStoreConfig`` / ``BrokerConfig``) so an operator can copy lines between the
broker's file and ours; daemon-only keys live under ``retentiond.``.

Upstream parses these keys leniently: a bad int is silently ignored, ratios are silently
clamped, a bad ``deleteWhen`` silently stops all cleaning (spec §3, §4.3). A daemon that
deletes data must not guess, so every coercion here refuses instead, and where it helps the
message says what the broker would have done with the same value.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import socket
import zoneinfo
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from retentiond.config import settings as s

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1

# Java's String.trim() removes every char <= U+0020, no more (str.strip() would also eat
# U+00A0 and friends, which the broker keeps).
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))
# Integer.parseInt / Long.parseLong, ASCII digits only (Java also takes other Unicode digits;
# we refuse those rather than guess).
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)")


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


class Kind(StrEnum):
    INT = "integer"
    PERCENT = "integer percent"
    FRACTION = "fraction"
    BOOL = "boolean"
    TEXT = "string"
    PATH = "absolute path"
    PATHS = "path list"
    HOURS = "hour list"
    ZONE = "IANA time zone"
    LISTEN = "host:port"
    FILE = "file path"


class Format(StrEnum):
    """Which file a raw value came from: YAML values are typed, .conf values are strings."""

    YAML = "yaml"
    CONF = "conf"


class Invalid(ValueError):
    """A value that cannot be used; ``str()`` is the part after ``key = value: ``."""


def type_name(value: object) -> str:
    """How a YAML value's type is named in messages (YAML words, not Python ones)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


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


def _format_number(value: float) -> str:
    return f"{value:.2f}"


@dataclass(frozen=True)
class ConfigKey:
    """One accepted key. ``key`` is its name in broker.conf; in broker.yaml the dotted daemon
    keys (``retentiond.journal.dir``) are nested mappings instead."""

    key: str
    field: str  # Settings attribute; "daemon.x" for DaemonSettings
    kind: Kind
    description: str
    default: object = None
    default_factory: Callable[[Mapping[str, object]], object] | None = None
    default_doc: str | None = None
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    java_type: str = "int"  # bounds ints like the broker's field does: "int" or "long"
    nullable: bool = False  # YAML null / empty .conf value mean "use the default"
    round_to: int | None = None  # upstream getter rounds up to a multiple of this
    upstream_note: str = ""  # shown in the reference: where the broker differs

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
        """Turn a raw value from a file into the Settings value, or raise ``Invalid``."""
        if raw is None and fmt is Format.YAML:
            if self.nullable:
                return None
            default = self.doc_default.replace("`", "")
            raise Invalid(f"must not be null; remove the key to use the default ({default})")
        return _COERCERS[self.kind](self, raw, fmt)

    @property
    def doc_default(self) -> str:
        if self.default_doc is not None:
            return self.default_doc
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, float):
            return _format_number(self.default)
        return str(self.default)

    @property
    def doc_allowed(self) -> str:
        lo, hi = self.minimum, self.maximum
        if self.kind in (Kind.INT, Kind.PERCENT):
            text = f"{lo:g} – {self.upper_bound:.0f}"
            if self.round_to:
                text += f", rounded up to a multiple of {self.round_to}"
            return text
        if self.kind is Kind.FRACTION:
            assert lo is not None and hi is not None
            return (
                f"{_format_number(lo)} – {_format_number(hi)} "
                f"(broker.conf: {round(lo * 100)} – {round(hi * 100)} percent)"
            )
        return {
            Kind.BOOL: "`true` / `false`",
            Kind.TEXT: "non-empty, no `/`",
            Kind.PATH: "absolute",
            Kind.PATHS: "absolute paths joined by `,`",
            Kind.HOURS: "hours `0`–`23` joined by `;`, no spaces",
            Kind.ZONE: "a zoneinfo key, e.g. `Asia/Shanghai`",
            Kind.LISTEN: "`host:port` or `[ipv6]:port`; port 0 picks a free one",
            Kind.FILE: "absolute path of a readable file",
        }[self.kind]


# --- coercion, one function per kind ------------------------------------------------------


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
        if spec.kind is Kind.PERCENT and _DECIMAL.fullmatch(text):
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


def _coerce_fraction(spec: ConfigKey, raw: object, fmt: Format) -> float:
    assert spec.minimum is not None and spec.maximum is not None
    lo, hi = spec.minimum, spec.maximum
    if fmt is Format.CONF:
        # Upstream's field is an int percent (85), divided by 100.0 by its getter.
        text = java_trim(str(raw))
        percent = parse_java_int(text)
        lo_p, hi_p = round(lo * 100), round(hi * 100)
        if percent is None:
            hint = ""
            if _DECIMAL.fullmatch(text):
                hint = f"; did you mean {round(float(text) * 100)}?"
            raise Invalid(
                f"must be a whole percent between {lo_p} and {hi_p} in broker.conf (the broker "
                f"reads this key as an int and would silently ignore {text!r}){hint}"
            )
        if not lo_p <= percent <= hi_p:
            clamp: float = lo_p if percent < lo_p else hi_p
            raise Invalid(
                f"must be a percent between {lo_p} and {hi_p} "
                f"(the broker would silently clamp it to {clamp})"
            )
        return percent / 100.0
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise Invalid(f"must be a number, not {type_name(raw)}")
    value = float(raw)
    if not math.isfinite(value):
        raise Invalid("must be a finite number")
    span = f"{_format_number(lo)} and {_format_number(hi)}"
    if value > 1:
        if lo <= value / 100 <= hi:
            raise Invalid(f"must be a fraction between {span}; did you mean {value / 100:.2f}?")
        raise Invalid(f"must be a fraction between {span} (broker.yaml takes 0.85, not 85)")
    if not lo <= value <= hi:
        clamp = lo if value < lo else hi
        raise Invalid(
            f"must be a fraction between {span} "
            f"(the broker would silently clamp it to {_format_number(clamp)})"
        )
    return value


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


def _string(spec: ConfigKey, raw: object, fmt: Format) -> str:
    """Strings are trimmed as the broker's String setters trim them (spec §3)."""
    if not isinstance(raw, str):
        raise Invalid(f"must be a string, not {type_name(raw)}; quote it")
    text = java_trim(raw)
    check_text(text)
    return text


def _coerce_text(spec: ConfigKey, raw: object, fmt: Format) -> str:
    text = _string(spec, raw, fmt)
    if not text:
        raise Invalid("must not be empty")
    # The shipper files deletion records under .../cluster=<name>/broker=<name>/.
    if "/" in text or text in (".", "..") or any(ord(c) < 0x20 or c == "\x7f" for c in text):
        raise Invalid("must not contain '/' or control characters, nor be '.' or '..'")
    return text


def _path(spec: ConfigKey, text: str, fmt: Format, what: str = "must be") -> Path:
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
    text = _string(spec, raw, fmt)
    if not text:
        if spec.nullable:
            return None
        raise Invalid("must not be empty")
    return _path(spec, text, fmt)


def _coerce_paths(spec: ConfigKey, raw: object, fmt: Format) -> tuple[Path, ...]:
    """MultiPathMappedFileQueue.getPaths: the whole string trimmed, split on ',', trailing
    empty elements dropped (Java's String.split), elements themselves NOT trimmed."""
    text = _string(spec, raw, fmt)
    if not text:
        raise Invalid("must not be empty; remove the key to use <storePathRootDir>/commitlog")
    parts = text.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    if not parts:
        raise Invalid("lists no path")
    paths: list[Path] = []
    for number, part in enumerate(parts, 1):
        if part == "":
            raise Invalid(f"element {number} is empty (two ',' in a row or a leading ',')")
        if java_trim(part) != part:
            raise Invalid(
                f"element {number} {part!r} has spaces around it; the broker does not trim "
                "elements and would use a different directory"
            )
        path = _path(spec, part, fmt, what=f"element {number} {part!r} is not")
        if path in paths:
            raise Invalid(f"path {str(path)!r} is listed twice")
        paths.append(path)
    return tuple(paths)


def _coerce_hours(spec: ConfigKey, raw: object, fmt: Format) -> str:
    """UtilAll.isItTimeToDo: split on ';' (trailing empties dropped), Integer.parseInt each
    element with no trimming. The broker throws on a bad element and that stops all CommitLog
    cleaning for the tick (spec §4.3), so each bad element is named."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = str(raw)  # only reached when a caller hands us a YAML int without its raw text
    if not isinstance(raw, str):
        raise Invalid(f"must be hours like '04' or '04;05', not {type_name(raw)}")
    text = java_trim(raw)
    if not text:
        raise Invalid(
            "must list at least one hour 0..23 (an empty deleteWhen makes the broker throw "
            "NumberFormatException and stop all CommitLog cleaning)"
        )
    parts = text.split(";")
    while parts and parts[-1] == "":
        parts.pop()
    if not parts:
        raise Invalid(
            "lists no hour (the broker would never delete by time); list at least one hour 0..23"
        )
    errors: list[str] = []
    malformed = False
    out_of_range: list[str] = []
    for part in parts:
        if part == "":
            errors.append("an element is empty (';;' or a leading ';')")
            malformed = True
        elif parse_java_int(part) is None:
            spaces = " (no spaces allowed: write '04;05')" if java_trim(part) != part else ""
            errors.append(f"{part!r} is not a whole hour{spaces}")
            malformed = True
        elif not 0 <= (parse_java_int(part) or 0) <= 23:
            out_of_range.append(part)
    if out_of_range:
        got = "" if len(parts) == 1 else f" (got {', '.join(map(repr, out_of_range))})"
        errors.append(f"each hour must be 0..23{got}")
    if errors:
        if malformed:
            errors.append(
                "the broker would throw NumberFormatException there and skip all CommitLog cleaning"
            )
        raise Invalid("; ".join(errors))
    return text


def delete_hours(delete_when: str) -> tuple[int, ...]:
    """The hours a validated ``deleteWhen`` opens, sorted and unique."""
    parts = [p for p in delete_when.split(";") if p != ""]
    return tuple(sorted({v for p in parts if (v := parse_java_int(p)) is not None}))


def _coerce_zone(spec: ConfigKey, raw: object, fmt: Format) -> str | None:
    text = _string(spec, raw, fmt)
    if not text:
        if fmt is Format.CONF:
            return None
        raise Invalid(
            "must be an IANA zone name like 'Asia/Shanghai'; "
            "leave it out (or null) for the machine's local zone"
        )
    if not is_zone_name(text):
        hint = ""
        try:
            close = difflib.get_close_matches(text, zoneinfo.available_timezones(), n=1)
        except Exception:  # an unreadable tzdata tree only costs us the hint
            close = []
        if close:
            hint = f"; did you mean {close[0]!r}?"
        raise Invalid(f"unknown time zone (use an IANA name like 'Asia/Shanghai'){hint}")
    return text


def is_zone_name(name: str) -> bool:
    """Whether zoneinfo can load ``name``; it raises several unrelated types for bad keys
    (KeyError subclass, ValueError, OSError for odd paths), none of which matter here."""
    try:
        zoneinfo.ZoneInfo(name)
    except Exception:
        return False
    return True


def _coerce_listen(spec: ConfigKey, raw: object, fmt: Format) -> str:
    from retentiond.config.metrics import parse_listen

    text = _string(spec, raw, fmt)
    try:
        parse_listen(text)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    return text


def _coerce_file(spec: ConfigKey, raw: object, fmt: Format) -> Path | None:
    """A path that must name a readable regular file now (a certificate, a password file)."""
    from retentiond.config.metrics import file_problem

    path = _coerce_path(spec, raw, fmt)
    if path is not None and (problem := file_problem(path)) is not None:
        raise Invalid(problem)
    return path


_COERCERS: dict[Kind, Callable[[ConfigKey, object, Format], object]] = {
    Kind.INT: _coerce_int,
    Kind.PERCENT: _coerce_int,
    Kind.FRACTION: _coerce_fraction,
    Kind.BOOL: _coerce_bool,
    Kind.TEXT: _coerce_text,
    Kind.PATH: _coerce_path,
    Kind.PATHS: _coerce_paths,
    Kind.HOURS: _coerce_hours,
    Kind.ZONE: _coerce_zone,
    Kind.LISTEN: _coerce_listen,
    Kind.FILE: _coerce_file,
}


# --- defaults that depend on the machine or on other keys ----------------------------------


def _default_root(_: Mapping[str, object]) -> Path:
    """``${user.home}/store``, as MessageStoreConfig does."""
    home = os.path.expanduser("~")
    if not os.path.isabs(home):
        raise Invalid("the default ~/store cannot be used: no home directory; set the key")
    return Path(home) / "store"


def _default_commitlog(values: Mapping[str, object]) -> tuple[Path, ...] | None:
    root = values.get("storePathRootDir")
    return (root / "commitlog",) if isinstance(root, Path) else None


def default_broker_name(_: Mapping[str, object] | None = None) -> str:
    """BrokerConfig's default: the local host name, or ``DEFAULT_BROKER`` if there is none."""
    try:
        name = socket.gethostname()
    except OSError:
        name = ""
    return name or "DEFAULT_BROKER"


_MS = "ms"

KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "storePathRootDir",
        "store_path_root_dir",
        Kind.PATH,
        "Root of the broker's store: consumequeue/, index/, checkpoint, lock live here.",
        default_factory=_default_root,
        default_doc="`~/store`",
    ),
    ConfigKey(
        "storePathCommitLog",
        "store_path_commitlog",
        Kind.PATHS,
        "CommitLog directory; several joined by `,` make a multi-path CommitLog.",
        default_factory=_default_commitlog,
        default_doc="`<storePathRootDir>/commitlog`",
    ),
    ConfigKey(
        "fileReservedTime",
        "file_reserved_time_hours",
        Kind.INT,
        "A CommitLog file is expired this long after its last modification.",
        default=s.DEFAULT_FILE_RESERVED_TIME_HOURS,
        unit="hours",
        minimum=0,
    ),
    ConfigKey(
        "deleteWhen",
        "delete_when",
        Kind.HOURS,
        "Hours of the day (in `retentiond.timezone`) during which expired files are deleted.",
        default=s.DEFAULT_DELETE_WHEN,
        default_doc='`"04"`',
        unit="hour of day",
    ),
    ConfigKey(
        "diskMaxUsedSpaceRatio",
        "disk_max_used_space_ratio",
        Kind.PERCENT,
        "Above this disk usage, expired files are deleted at any hour.",
        default=s.DEFAULT_DISK_MAX_USED_SPACE_RATIO,
        unit="percent",
        minimum=10,
        maximum=95,
        upstream_note="the broker clamps to [10, 95]; we refuse",
    ),
    ConfigKey(
        "cleanResourceInterval",
        "clean_resource_interval_ms",
        Kind.INT,
        "Period of the cleaning rounds; a reload reschedules them (upstream reads it once).",
        default=s.DEFAULT_CLEAN_RESOURCE_INTERVAL_MS,
        unit=_MS,
        minimum=1,
    ),
    ConfigKey(
        "deleteCommitLogFilesInterval",
        "delete_commitlog_files_interval_ms",
        Kind.INT,
        "Pause between two CommitLog deletions within a round.",
        default=s.DEFAULT_DELETE_COMMITLOG_FILES_INTERVAL_MS,
        unit=_MS,
        minimum=0,
    ),
    ConfigKey(
        "deleteConsumeQueueFilesInterval",
        "delete_consumequeue_files_interval_ms",
        Kind.INT,
        "Pause after each queue that had files deleted.",
        default=s.DEFAULT_DELETE_CONSUMEQUEUE_FILES_INTERVAL_MS,
        unit=_MS,
        minimum=0,
    ),
    ConfigKey(
        "destroyMapedFileIntervalForcibly",
        "destroy_mapped_file_interval_forcibly_ms",
        Kind.INT,
        "Grace period for a file another process holds before it is deleted anyway "
        "(upstream spells it `Maped`).",
        default=s.DEFAULT_DESTROY_MAPPED_FILE_INTERVAL_FORCIBLY_MS,
        unit=_MS,
        minimum=0,
    ),
    ConfigKey(
        "redeleteHangedFileInterval",
        "redelete_hanged_file_interval_ms",
        Kind.INT,
        "How often a first CommitLog file that could not be deleted is retried.",
        default=s.DEFAULT_REDELETE_HANGED_FILE_INTERVAL_MS,
        unit=_MS,
        minimum=0,
    ),
    ConfigKey(
        "cleanFileForciblyEnable",
        "clean_file_forcibly_enable",
        Kind.BOOL,
        "Whether usage above `diskSpaceCleanForciblyRatio` deletes files that are not expired.",
        default=True,
    ),
    ConfigKey(
        "deleteFileBatchMax",
        "delete_file_batch_max",
        Kind.INT,
        "Most CommitLog files deleted in one round.",
        default=s.DEFAULT_DELETE_FILE_BATCH_MAX,
        unit="files",
        minimum=1,
    ),
    ConfigKey(
        "diskSpaceCleanForciblyRatio",
        "disk_space_clean_forcibly_ratio",
        Kind.FRACTION,
        "Above this disk usage, files are deleted regardless of age (oldest first).",
        default=s.DEFAULT_DISK_SPACE_CLEAN_FORCIBLY_RATIO,
        unit="fraction of disk",
        minimum=0.30,
        maximum=0.85,
        upstream_note="broker.conf gives it in percent (85); the broker clamps; we refuse",
    ),
    ConfigKey(
        "diskSpaceWarningLevelRatio",
        "disk_space_warning_level_ratio",
        Kind.FRACTION,
        "Above this disk usage the broker rejects writes; we force-clean and warn.",
        default=s.DEFAULT_DISK_SPACE_WARNING_LEVEL_RATIO,
        unit="fraction of disk",
        minimum=0.35,
        maximum=0.90,
        upstream_note="broker.conf gives it in percent (90); the broker clamps; we refuse",
    ),
    ConfigKey(
        "mappedFileSizeCommitLog",
        "mapped_file_size_commitlog",
        Kind.INT,
        "Size of every CommitLog file; files of another size are never touched.",
        default=s.DEFAULT_MAPPED_FILE_SIZE_COMMITLOG,
        unit="bytes",
        minimum=1,
    ),
    ConfigKey(
        "mappedFileSizeConsumeQueue",
        "mapped_file_size_consumequeue",
        Kind.INT,
        "Size of every ConsumeQueue file, rounded up to whole 20-byte units as upstream does.",
        default=s.DEFAULT_MAPPED_FILE_SIZE_CONSUMEQUEUE,
        unit="bytes",
        minimum=1,
        maximum=INT32_MAX - INT32_MAX % s.CQ_UNIT_SIZE,
        round_to=s.CQ_UNIT_SIZE,
    ),
    ConfigKey(
        "maxHashSlotNum",
        "max_hash_slot_num",
        Kind.INT,
        "Hash slots per index file; with `maxIndexNum` it fixes the index file size.",
        default=s.DEFAULT_MAX_HASH_SLOT_NUM,
        unit="slots",
        minimum=1,
    ),
    ConfigKey(
        "maxIndexNum",
        "max_index_num",
        Kind.INT,
        "Entries per index file (entry 0 is reserved, hence at least 2).",
        default=s.DEFAULT_MAX_INDEX_NUM,
        unit="entries",
        minimum=2,
    ),
    ConfigKey(
        "brokerName",
        "broker_name",
        Kind.TEXT,
        "Names this broker in logs, metrics and shipped deletion records.",
        default_factory=default_broker_name,
        default_doc="the host name",
    ),
    ConfigKey(
        "brokerClusterName",
        "broker_cluster_name",
        Kind.TEXT,
        "Names the cluster in logs, metrics and shipped deletion records.",
        default="DefaultCluster",
    ),
    ConfigKey(
        "retentiond.timezone",
        "daemon.timezone",
        Kind.ZONE,
        "Zone in which `deleteWhen` hours are read; the broker uses the JVM's default zone.",
        default=None,
        default_doc="the machine's local zone",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.dryRun",
        "daemon.dry_run",
        Kind.BOOL,
        "Plan every round and report it, but delete (and journal) nothing.",
        default=False,
    ),
    ConfigKey(
        "retentiond.journal.dir",
        "daemon.journal_dir",
        Kind.PATH,
        "Where the write-ahead deletion journal is kept.",
        default=None,
        default_doc="chosen by the journal",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.journal.maxSegmentBytes",
        "daemon.journal_max_segment_bytes",
        Kind.INT,
        "A journal segment is closed (and becomes shippable) before a write would take it past "
        "this size; a record is never split.",
        default=s.DEFAULT_JOURNAL_MAX_SEGMENT_BYTES,
        unit="bytes",
        minimum=4096,
        java_type="long",
    ),
    ConfigKey(
        "retentiond.journal.maxSegmentAge",
        "daemon.journal_max_segment_age_ms",
        Kind.INT,
        "A journal segment is closed once its first record is this old, even if nothing new "
        "arrives, so a quiet broker's records still reach the fleet.",
        default=s.DEFAULT_JOURNAL_MAX_SEGMENT_AGE_MS,
        unit=_MS,
        minimum=1000,
        java_type="long",
    ),
    ConfigKey(
        "retentiond.journal.roundSummaryInterval",
        "daemon.journal_round_summary_interval_ms",
        Kind.INT,
        "Idle rounds (nothing deleted, nothing failed, same triggers and disk state, ratio within "
        "0.01 of the last round record) are folded into one round_summary record written at "
        "most this often; 0 writes every round in full.",
        default=s.DEFAULT_JOURNAL_ROUND_SUMMARY_INTERVAL_MS,
        unit=_MS,
        minimum=0,
        java_type="long",
    ),
    ConfigKey(
        "retentiond.ship.target",
        "daemon.ship_target",
        Kind.PATH,
        "Directory (local, or an NFS/HDFS/object-store mount) that closed journal segments are "
        "shipped to for the fleet analysis; it must exist (point it inside the mount).",
        default=None,
        default_doc="none (shipping off)",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.ship.interval",
        "daemon.ship_interval_ms",
        Kind.INT,
        "Period of the shipping job (when a target is set).",
        default=s.DEFAULT_SHIP_INTERVAL_MS,
        unit=_MS,
        minimum=1000,
        java_type="long",
    ),
    ConfigKey(
        "retentiond.ship.maxLocalBytes",
        "daemon.ship_max_local_bytes",
        Kind.INT,
        "Most bytes of closed, unshipped segments kept while the target is unreachable; past "
        "it the oldest are dropped, with an error log and a metric.",
        default=s.DEFAULT_SHIP_MAX_LOCAL_BYTES,
        unit="bytes",
        minimum=0,
        java_type="long",
    ),
    ConfigKey(
        "retentiond.initialDelay",
        "daemon.initial_delay_ms",
        Kind.INT,
        "Delay before the first round after start, as the broker's fixed 60 s.",
        default=s.DEFAULT_INITIAL_DELAY_MS,
        unit=_MS,
        minimum=0,
    ),
    ConfigKey(
        "retentiond.controlSocket",
        "daemon.control_socket",
        Kind.PATH,
        "Unix socket (mode 0600) on which `status` and `trigger-delete` reach the daemon.",
        default=None,
        default_doc="`$RUNTIME_DIRECTORY/control.sock`, else "
        "`/run/retentiond/<config file stem>-<8 hex of the sha256 of its real path>/control.sock`",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.metrics.listen",
        "daemon.metrics_listen",
        Kind.LISTEN,
        "Address of the Prometheus `/metrics` endpoint; loopback only unless you say otherwise.",
        default=s.DEFAULT_METRICS_LISTEN,
    ),
    ConfigKey(
        "retentiond.metrics.tlsCertFile",
        "daemon.metrics_tls_cert_file",
        Kind.FILE,
        "PEM certificate (chain) for HTTPS on `/metrics`; needs `tlsKeyFile` too.",
        default=None,
        default_doc="none (plain HTTP)",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.metrics.tlsKeyFile",
        "daemon.metrics_tls_key_file",
        Kind.FILE,
        "PEM private key of `tlsCertFile`.",
        default=None,
        default_doc="none",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.metrics.basicAuthUsername",
        "daemon.metrics_basic_auth_username",
        Kind.TEXT,
        "User name that `/metrics` requires (HTTP basic auth); needs `basicAuthPasswordFile`.",
        default=None,
        default_doc="none (no authentication)",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.metrics.basicAuthPasswordFile",
        "daemon.metrics_basic_auth_password_file",
        Kind.FILE,
        "File holding the basic-auth password (one trailing newline ignored), so the secret "
        "is never in the config or the logs; re-read when it changes.",
        default=None,
        default_doc="none",
        nullable=True,
    ),
)

BY_KEY: dict[str, ConfigKey] = {k.key: k for k in KEYS}
BY_FIELD: dict[str, ConfigKey] = {k.field: k for k in KEYS}

DAEMON_NAMESPACE = "retentiond"

# Keys people put in broker files that the broker silently ignores (apache/rocketmq#2260):
# refused in both formats, with what to write instead.
LEGACY_KEYS: dict[str, str] = {
    "mapedFileSizeCommitLog": (
        "an old misspelling that RocketMQ 5.x silently ignores (see apache/rocketmq#2260), so "
        "the broker uses 1 GiB; the key is mappedFileSizeCommitLog"
    ),
    "mapedFileSizeConsumeQueue": (
        "an old misspelling that RocketMQ 5.x silently ignores, so the broker uses 6000000; "
        "the key is mappedFileSizeConsumeQueue"
    ),
    "storePathConsumeQueue": (
        "RocketMQ has no such setting and silently ignores it (see apache/rocketmq#2260): the "
        "ConsumeQueue always lives in <storePathRootDir>/consumequeue"
    ),
    "storePathIndex": (
        "RocketMQ has no such setting and silently ignores it: the index always lives in "
        "<storePathRootDir>/index"
    ),
    "maxCommitLogFilesNumber": (
        "RocketMQ has no such setting and silently ignores it (see apache/rocketmq#2260); "
        "retention is fileReservedTime (hours) plus the disk-usage ratios"
    ),
}

# Real broker keys that retentiond cannot honour; refused when set to a non-blank value.
UNSUPPORTED_KEYS: dict[str, str] = {
    "readOnlyCommitLogStorePaths": (
        "not supported: the broker merges these paths into the CommitLog and deletes from them, "
        "but retentiond does not scan them, so it would misjudge the oldest CommitLog offset"
    ),
}

# Real RocketMQ keys that look like ours (difflib ratio >= 0.7): never near-misses.
UPSTREAM_LOOKALIKES: frozenset[str] = frozenset(
    {
        "mappedFileSizeConsumeQueueExt",
        "mapperFileSizeBatchConsumeQueue",
        "mappedFileSizeTimerLog",
        "storePathDLedgerCommitLog",
        "storePathEpochFile",
        "storePathBrokerIdentity",
        "deleteWhenRocksdb",
        "brokerRole",
        "brokerId",
        "maxBatchDeleteFilesNum",
        "logicalDiskSpaceCleanForciblyThreshold",
        "timerCheckMetricsWhen",
    }
)

NEAR_MISS_RATIO = 0.85


def squash(key: str) -> str:
    """Keys compared loosely: ``file_reserved_time`` and ``FileReservedTime`` are one."""
    return key.lower().replace("_", "").replace("-", "")


def closest_key(key: str, candidates: list[str], cutoff: float) -> str | None:
    """The candidate ``key`` was most likely meant to be, or None."""
    loose = squash(key)
    for candidate in candidates:
        if squash(candidate) == loose:
            return candidate
    if len(key) > 200:  # difflib is quadratic; nobody misspells a key that badly
        return None
    lowered = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[close[0]] if close else None


def render_reference_markdown() -> str:
    """The README's key reference, from the same table the loader validates with."""
    lines = [
        "| Key | Type | Default | Allowed | Unit | Description |",
        "|---|---|---|---|---|---|",
    ]
    for spec in KEYS:
        description = spec.description
        if spec.upstream_note:
            description += f" *({spec.upstream_note}.)*"
        cells = [
            f"`{spec.key}`",
            spec.kind.value,
            spec.default_doc if spec.default_doc is not None else f"`{spec.doc_default}`",
            spec.doc_allowed,
            spec.unit or "–",
            description,
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += [
        "",
        "In `broker.yaml` the `retentiond.*` keys are nested (`retentiond:` → `journal:` → "
        "`dir:`); in `broker.conf` they are written dotted. In `broker.conf` the two "
        "`diskSpace…Ratio` keys are integer percents as upstream (85, 90). Unknown keys are "
        "refused in `broker.yaml`; in `broker.conf` they are ignored (the broker owns that "
        "file) unless they look like a misspelling of a key above or are one of the keys "
        "RocketMQ silently ignores: " + ", ".join(f"`{k}`" for k in LEGACY_KEYS) + ". A leading "
        "`~` in a path is expanded in `broker.yaml` only: the broker does not expand it.",
    ]
    return "\n".join(lines) + "\n"
