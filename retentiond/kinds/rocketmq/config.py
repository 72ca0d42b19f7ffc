"""RocketMQ's configuration: its keys (``MessageStoreConfig`` / ``BrokerConfig``), their
defaults and cross-checks, and the section of the settings they make (``RocketMQStore``).

Keys carry RocketMQ's own names so an operator can copy lines between the broker's file and
ours. RocketMQ itself swallows bad values (a typo'd key, ``fileReservedTime=0.1``, a
``deleteWhen`` of ``"04; 05"``) and carries on with defaults, which is how disks fill up
unnoticed (spec §3, §6). A daemon that deletes data refuses instead, naming the file, the key
and the value, and lists all problems in one go.

Two formats because two audiences: ``broker.yaml`` is ours (strict, typed, fractions for
ratios), while ``broker.conf`` is the broker's own properties file, full of keys that are none
of our business, so there only keys that look like ours are checked.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from retentiond.config.daemon import DAEMON_KEYS, cross_checks, daemon_settings
from retentiond.config.keys import (
    DECIMAL,
    INT32_MAX,
    ConfigKey,
    Format,
    Invalid,
    Kind,
    ValueType,
    absolute_path,
    format_number,
    java_trim,
    parse_java_int,
    string_value,
    type_name,
)
from retentiond.config.loader import Claim, ConfigFile, Draft
from retentiond.config.readers import read_properties, read_yaml
from retentiond.config.reference import render_reference
from retentiond.config.settings import DaemonSettings, Settings, StoreSection, plain
from retentiond.config.show import ShownKey, daemon_rows, shown
from retentiond.config.table import KeyTable
from retentiond.kinds.rocketmq.formats import (
    CQ_UNIT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SLOT_SIZE,
)

KIND_NAME = "rocketmq"
TITLE = "RocketMQ"
YAML_NAME = "broker.yaml"

# RocketMQ defaults (MessageStoreConfig, 5.x). See shared/spec/rocketmq.md §3.
DEFAULT_FILE_RESERVED_TIME_HOURS = 72
DEFAULT_DELETE_WHEN = "04"
DEFAULT_DISK_MAX_USED_SPACE_RATIO = 75  # percent, clamped upstream to [10, 95]
DEFAULT_CLEAN_RESOURCE_INTERVAL_MS = 10_000
DEFAULT_DELETE_COMMITLOG_FILES_INTERVAL_MS = 100
DEFAULT_DELETE_CONSUMEQUEUE_FILES_INTERVAL_MS = 100
DEFAULT_DESTROY_MAPPED_FILE_INTERVAL_FORCIBLY_MS = 120_000
DEFAULT_REDELETE_HANGED_FILE_INTERVAL_MS = 120_000
DEFAULT_DELETE_FILE_BATCH_MAX = 10
DEFAULT_DISK_SPACE_CLEAN_FORCIBLY_RATIO = 0.85  # clamped upstream to [0.30, 0.85]
DEFAULT_DISK_SPACE_WARNING_LEVEL_RATIO = 0.90  # clamped upstream to [0.35, 0.90]
DEFAULT_MAPPED_FILE_SIZE_COMMITLOG = 1024 * 1024 * 1024
DEFAULT_MAPPED_FILE_SIZE_CONSUMEQUEUE = 300_000 * 20
DEFAULT_MAX_HASH_SLOT_NUM = 5_000_000
DEFAULT_MAX_INDEX_NUM = 5_000_000 * 4

# A reload may not change which store this is, nor the names its records are filed under.
RESTART_KEYS = frozenset({"storePathRootDir", "brokerName", "brokerClusterName"})
MS = "ms"


# --- the value types only RocketMQ's keys have ------------------------------------------------


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
            if DECIMAL.fullmatch(text):
                hint = f"; did you mean {round(float(text) * 100)}?"
            raise Invalid(
                f"must be a whole percent between {lo_p} and {hi_p} in broker.conf (the broker "
                f"reads this key as an int and would silently ignore {text!r}){hint}"
            )
        if not lo_p <= percent <= hi_p:
            clamp = lo_p if percent < lo_p else hi_p
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
    span = f"{format_number(lo)} and {format_number(hi)}"
    if value > 1:
        if lo <= value / 100 <= hi:
            raise Invalid(f"must be a fraction between {span}; did you mean {value / 100:.2f}?")
        raise Invalid(f"must be a fraction between {span} (broker.yaml takes 0.85, not 85)")
    if not lo <= value <= hi:
        bound = lo if value < lo else hi
        raise Invalid(
            f"must be a fraction between {span} "
            f"(the broker would silently clamp it to {format_number(bound)})"
        )
    return value


def _fraction_allowed(spec: ConfigKey) -> str:
    lo, hi = spec.minimum, spec.maximum
    assert lo is not None and hi is not None
    return (
        f"{format_number(lo)} – {format_number(hi)} "
        f"(broker.conf: {round(lo * 100)} – {round(hi * 100)} percent)"
    )


def _fixed(text: str) -> Callable[[ConfigKey], str]:
    def allowed(spec: ConfigKey) -> str:
        return text

    return allowed


def _coerce_paths(spec: ConfigKey, raw: object, fmt: Format) -> tuple[Path, ...]:
    """MultiPathMappedFileQueue.getPaths: the whole string trimmed, split on ',', trailing
    empty elements dropped (Java's String.split), elements themselves NOT trimmed."""
    text = string_value(spec, raw, fmt)
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
        path = absolute_path(spec, part, fmt, what=f"element {number} {part!r} is not")
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


FRACTION = ValueType("fraction", _coerce_fraction, _fraction_allowed)
PATHS = ValueType("path list", _coerce_paths, _fixed("absolute paths joined by `,`"))
HOURS = ValueType("hour list", _coerce_hours, _fixed("hours `0`–`23` joined by `;`, no spaces"))


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
    import socket  # here: a command on a Kafka configuration never asks (start-up time)

    try:
        name = socket.gethostname()
    except OSError:
        name = ""
    return name or "DEFAULT_BROKER"


ROCKETMQ_KEYS: tuple[ConfigKey, ...] = (
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
        PATHS,
        "CommitLog directory; several joined by `,` make a multi-path CommitLog.",
        default_factory=_default_commitlog,
        default_doc="`<storePathRootDir>/commitlog`",
    ),
    ConfigKey(
        "fileReservedTime",
        "file_reserved_time_hours",
        Kind.INT,
        "A CommitLog file is expired this long after its last modification.",
        default=DEFAULT_FILE_RESERVED_TIME_HOURS,
        unit="hours",
        minimum=0,
    ),
    ConfigKey(
        "deleteWhen",
        "delete_when",
        HOURS,
        "Hours of the day (in `retentiond.timezone`) during which expired files are deleted.",
        default=DEFAULT_DELETE_WHEN,
        default_doc='`"04"`',
        unit="hour of day",
        as_written=True,
    ),
    ConfigKey(
        "diskMaxUsedSpaceRatio",
        "disk_max_used_space_ratio",
        Kind.PERCENT,
        "Above this disk usage, expired files are deleted at any hour.",
        default=DEFAULT_DISK_MAX_USED_SPACE_RATIO,
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
        default=DEFAULT_CLEAN_RESOURCE_INTERVAL_MS,
        unit=MS,
        minimum=1,
    ),
    ConfigKey(
        "deleteCommitLogFilesInterval",
        "delete_commitlog_files_interval_ms",
        Kind.INT,
        "Pause between two CommitLog deletions within a round.",
        default=DEFAULT_DELETE_COMMITLOG_FILES_INTERVAL_MS,
        unit=MS,
        minimum=0,
    ),
    ConfigKey(
        "deleteConsumeQueueFilesInterval",
        "delete_consumequeue_files_interval_ms",
        Kind.INT,
        "Pause after each queue that had files deleted.",
        default=DEFAULT_DELETE_CONSUMEQUEUE_FILES_INTERVAL_MS,
        unit=MS,
        minimum=0,
    ),
    ConfigKey(
        "destroyMapedFileIntervalForcibly",
        "destroy_mapped_file_interval_forcibly_ms",
        Kind.INT,
        "Grace period for a file another process holds before it is deleted anyway "
        "(upstream spells it `Maped`).",
        default=DEFAULT_DESTROY_MAPPED_FILE_INTERVAL_FORCIBLY_MS,
        unit=MS,
        minimum=0,
    ),
    ConfigKey(
        "redeleteHangedFileInterval",
        "redelete_hanged_file_interval_ms",
        Kind.INT,
        "How often a first CommitLog file that could not be deleted is retried.",
        default=DEFAULT_REDELETE_HANGED_FILE_INTERVAL_MS,
        unit=MS,
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
        default=DEFAULT_DELETE_FILE_BATCH_MAX,
        unit="files",
        minimum=1,
    ),
    ConfigKey(
        "diskSpaceCleanForciblyRatio",
        "disk_space_clean_forcibly_ratio",
        FRACTION,
        "Above this disk usage, files are deleted regardless of age (oldest first).",
        default=DEFAULT_DISK_SPACE_CLEAN_FORCIBLY_RATIO,
        unit="fraction of disk",
        minimum=0.30,
        maximum=0.85,
        upstream_note="broker.conf gives it in percent (85); the broker clamps; we refuse",
    ),
    ConfigKey(
        "diskSpaceWarningLevelRatio",
        "disk_space_warning_level_ratio",
        FRACTION,
        "Above this disk usage the broker rejects writes; we force-clean and warn.",
        default=DEFAULT_DISK_SPACE_WARNING_LEVEL_RATIO,
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
        default=DEFAULT_MAPPED_FILE_SIZE_COMMITLOG,
        unit="bytes",
        minimum=1,
    ),
    ConfigKey(
        "mappedFileSizeConsumeQueue",
        "mapped_file_size_consumequeue",
        Kind.INT,
        "Size of every ConsumeQueue file, rounded up to whole 20-byte units as upstream does.",
        default=DEFAULT_MAPPED_FILE_SIZE_CONSUMEQUEUE,
        unit="bytes",
        minimum=1,
        maximum=INT32_MAX - INT32_MAX % CQ_UNIT_SIZE,
        round_to=CQ_UNIT_SIZE,
    ),
    ConfigKey(
        "maxHashSlotNum",
        "max_hash_slot_num",
        Kind.INT,
        "Hash slots per index file; with `maxIndexNum` it fixes the index file size.",
        default=DEFAULT_MAX_HASH_SLOT_NUM,
        unit="slots",
        minimum=1,
    ),
    ConfigKey(
        "maxIndexNum",
        "max_index_num",
        Kind.INT,
        "Entries per index file (entry 0 is reserved, hence at least 2).",
        default=DEFAULT_MAX_INDEX_NUM,
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
)

_TIMEZONE = ConfigKey(
    "retentiond.timezone",
    "daemon.timezone",
    Kind.ZONE,
    "Zone in which `deleteWhen` hours are read; the broker uses the JVM's default zone.",
    default=None,
    default_doc="the machine's local zone",
    nullable=True,
)
# The daemon's keys as a RocketMQ file has them (the time zone is the one of deleteWhen).
_DAEMON_KEYS = tuple(_TIMEZONE if k.key == _TIMEZONE.key else k for k in DAEMON_KEYS)
# Every key of a RocketMQ file, in reference order.
KEYS: tuple[ConfigKey, ...] = ROCKETMQ_KEYS + _DAEMON_KEYS
BY_KEY: dict[str, ConfigKey] = {k.key: k for k in KEYS}

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


# --- cross-checks ---------------------------------------------------------------------------


def _index_size_check(values: Mapping[str, object]) -> list[tuple[str, object, str]]:
    found: list[tuple[str, object, str]] = []
    slots, entries = values.get("maxHashSlotNum"), values.get("maxIndexNum")
    if isinstance(slots, int) and isinstance(entries, int):
        size = INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE + entries * INDEX_ENTRY_SIZE
        if size > INT32_MAX:
            found.append(
                (
                    "maxIndexNum",
                    entries,
                    f"with maxHashSlotNum={slots} an index file would be {size} bytes "
                    f"(40 + 4×maxHashSlotNum + 20×maxIndexNum); the broker computes it as a "
                    f"Java int, so it must be at most {INT32_MAX}",
                )
            )
    return found


def _commitlog_paths_check(values: Mapping[str, object]) -> list[tuple[str, object, str]]:
    found: list[tuple[str, object, str]] = []
    root, commitlog = values.get("storePathRootDir"), values.get("storePathCommitLog")
    if isinstance(root, Path) and isinstance(commitlog, tuple):
        special = {
            root: "the store root itself",
            root / "consumequeue": "the ConsumeQueue directory",
            root / "index": "the index directory",
            root / "config": "the broker's config directory",
            Path("/"): "the filesystem root",
        }
        for path in commitlog:
            if path in special:
                message = f"path {str(path)!r} is {special[path]}, not a CommitLog directory"
                found.append(("storePathCommitLog", str(path), message))
    return found


TABLE = KeyTable(
    keys=KEYS,
    yaml_name=YAML_NAME,
    legacy=LEGACY_KEYS,
    unsupported=UNSUPPORTED_KEYS,
    lookalikes=UPSTREAM_LOOKALIKES,
    cross_checks=(_index_size_check, cross_checks, _commitlog_paths_check),
)
# The keys that name RocketMQ (a file with these and another kind's keys is ambiguous).
IDENTIFYING_KEYS = frozenset(k.key for k in ROCKETMQ_KEYS)


# --- the section of the settings --------------------------------------------------------------


@dataclass(frozen=True)
class RocketMQStore:
    """The RocketMQ section of ``Settings`` (``Settings[RocketMQStore]``). Field names are
    snake_case versions of RocketMQ's own keys; units are in the names."""

    store_path_root_dir: Path
    store_path_commitlog: tuple[Path, ...]  # in configured order; several = multi-path
    file_reserved_time_hours: int = DEFAULT_FILE_RESERVED_TIME_HOURS
    delete_when: str = DEFAULT_DELETE_WHEN  # raw, validated; see delete_hours
    delete_hours: tuple[int, ...] = (4,)
    disk_max_used_space_ratio: int = DEFAULT_DISK_MAX_USED_SPACE_RATIO  # percent
    clean_resource_interval_ms: int = DEFAULT_CLEAN_RESOURCE_INTERVAL_MS
    delete_commitlog_files_interval_ms: int = DEFAULT_DELETE_COMMITLOG_FILES_INTERVAL_MS
    delete_consumequeue_files_interval_ms: int = DEFAULT_DELETE_CONSUMEQUEUE_FILES_INTERVAL_MS
    destroy_mapped_file_interval_forcibly_ms: int = DEFAULT_DESTROY_MAPPED_FILE_INTERVAL_FORCIBLY_MS
    redelete_hanged_file_interval_ms: int = DEFAULT_REDELETE_HANGED_FILE_INTERVAL_MS
    clean_file_forcibly_enable: bool = True
    delete_file_batch_max: int = DEFAULT_DELETE_FILE_BATCH_MAX
    disk_space_clean_forcibly_ratio: float = DEFAULT_DISK_SPACE_CLEAN_FORCIBLY_RATIO
    disk_space_warning_level_ratio: float = DEFAULT_DISK_SPACE_WARNING_LEVEL_RATIO
    mapped_file_size_commitlog: int = DEFAULT_MAPPED_FILE_SIZE_COMMITLOG
    mapped_file_size_consumequeue: int = DEFAULT_MAPPED_FILE_SIZE_CONSUMEQUEUE  # multiple of 20
    max_hash_slot_num: int = DEFAULT_MAX_HASH_SLOT_NUM
    max_index_num: int = DEFAULT_MAX_INDEX_NUM
    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"

    @property
    def kind_name(self) -> str:
        return KIND_NAME

    @property
    def store_dirs(self) -> tuple[str, ...]:
        return (str(self.store_path_root_dir),)

    @property
    def round_interval_ms(self) -> int:
        """cleanResourceInterval."""
        return self.clean_resource_interval_ms

    @property
    def retry_interval_ms(self) -> int:
        """redeleteHangedFileInterval: also the longest wait of a refused unlink's backoff."""
        return self.redelete_hanged_file_interval_ms

    @property
    def restart_keys(self) -> frozenset[str]:
        return RESTART_KEYS

    @property
    def consumequeue_dir(self) -> Path:
        return self.store_path_root_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.store_path_root_dir / "index"

    @property
    def timerlog_dir(self) -> Path:
        """The timer store's log (TimerMessageStore.getTimerLogPath): ``<root>/timerlog``."""
        return self.store_path_root_dir / "timerlog"

    @property
    def index_file_size(self) -> int:
        return (
            INDEX_HEADER_SIZE
            + self.max_hash_slot_num * INDEX_SLOT_SIZE
            + self.max_index_num * INDEX_ENTRY_SIZE
        )

    @property
    def disk_max_used_ratio_fraction(self) -> float:
        """``diskMaxUsedSpaceRatio / 100.0`` exactly as upstream compares it."""
        return self.disk_max_used_space_ratio / 100.0

    def as_dict(self) -> dict[str, object]:
        """Its part of the canonical form: every field, paths as strings."""
        return {k: plain(v) for k, v in dataclasses.asdict(self).items()}

    def key_values(self) -> dict[str, object]:
        return {spec.key: plain(getattr(self, spec.field)) for spec in ROCKETMQ_KEYS}


def rocketmq_settings(
    *, daemon: DaemonSettings | None = None, source: Path | None = None, **fields: object
) -> Settings[RocketMQStore]:
    """Settings of a RocketMQ store built in code (tests, benches): ``fields`` are those of
    ``RocketMQStore``."""
    store = RocketMQStore(**cast(dict[str, Any], fields))
    return Settings(store=store, daemon=daemon or DaemonSettings(), source=source)


# --- the file ---------------------------------------------------------------------------------


def claim(file: ConfigFile) -> Claim:
    """A broker.conf is full of keys that are none of ours and may set none of them (an empty
    file is a store with every default), so RocketMQ reads any file no other kind claims."""
    return Claim.FALLBACK


def _settings_from(values: Mapping[str, object], source: Path) -> Settings[RocketMQStore]:
    store = {spec.field: values[spec.key] for spec in ROCKETMQ_KEYS}
    delete_when = values["deleteWhen"]
    assert isinstance(delete_when, str)
    store["delete_hours"] = delete_hours(delete_when)
    daemon = daemon_settings(values, _DAEMON_KEYS)
    return Settings(
        store=RocketMQStore(**cast(dict[str, Any], store)), daemon=daemon, source=source
    )


def read(file: ConfigFile, foreign: Mapping[str, str]) -> Draft[RocketMQStore]:
    """broker.yaml or broker.conf into settings, or every problem. Keys of other kinds are
    the broker's business in broker.conf and unknown keys in broker.yaml, as any other."""
    reader = read_yaml if file.format is Format.YAML else read_properties
    entries, problems = reader(file.data, file.file, TABLE)
    # A file that could not be read as a whole (a YAML syntax error, a document that is not a
    # mapping) names no store: the defaults would be checked in its place, inventing errors.
    unreadable = file.format is Format.YAML and any(not p.key for p in problems)
    values, more = TABLE.build(entries, file.format, file.file)
    settings = None if more else _settings_from(values, file.source)
    problems += more
    root, commitlog = values.get("storePathRootDir"), values.get("storePathCommitLog")
    to_check = None
    if not unreadable and isinstance(root, Path) and isinstance(commitlog, tuple):
        # Checked even when other keys were refused: all problems are reported in one go.
        store = RocketMQStore(store_path_root_dir=root, store_path_commitlog=commitlog)
        to_check = Settings(store=store, source=file.source)
    return Draft(settings, problems, to_check)


def shown_keys(file: ConfigFile, settings: Settings[RocketMQStore]) -> list[ShownKey]:
    """Every key of a RocketMQ file, its effective value and its source (the file or the
    default), in reference order. RocketMQ has no synonyms; in broker.conf the two
    ``diskSpace…Ratio`` percents are shown as the fractions they stand for, as broker.yaml
    writes them."""
    lines = file.key_lines()
    store = settings.store
    rows = [shown(spec, getattr(store, spec.field), lines) for spec in ROCKETMQ_KEYS]
    return rows + daemon_rows(settings.daemon, _DAEMON_KEYS, lines)


def render_reference_markdown() -> str:
    """The README's key reference, from the same table the loader validates with."""
    return render_reference(
        KEYS,
        "In `broker.yaml` the `retentiond.*` keys are nested (`retentiond:` → `journal:` → "
        "`dir:`); in `broker.conf` they are written dotted. In `broker.conf` the two "
        "`diskSpace…Ratio` keys are integer percents as upstream (85, 90). Unknown keys are "
        "refused in `broker.yaml`; in `broker.conf` they are ignored (the broker owns that "
        "file) unless they look like a misspelling of a key above or are one of the keys "
        "RocketMQ silently ignores: " + ", ".join(f"`{k}`" for k in LEGACY_KEYS) + ". A leading "
        "`~` in a path is expanded in `broker.yaml` only: the broker does not expand it.",
    )


def rocketmq_of(settings: Settings[StoreSection]) -> Settings[RocketMQStore]:
    """``settings`` as RocketMQ's (a kind is handed its own; anything else is a bug)."""
    if not isinstance(settings.store, RocketMQStore):
        raise TypeError(f"not a RocketMQ configuration: {settings.store.kind_name}")
    return cast(Settings[RocketMQStore], settings)
