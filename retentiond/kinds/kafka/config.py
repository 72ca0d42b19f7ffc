"""A Kafka broker's configuration: its ``server.properties`` (or the same keys in YAML) read and
validated as the broker reads it (spec §5.1), retentiond's own ``retentiond.kafka.*`` keys, and
the effective retention config of a topic (spec §10.3).

Kafka's own parsing rules apply (``java.util.Properties`` syntax, ``ConfigDef`` numbers and
booleans, the synonym precedence ``log.retention.ms`` > ``.minutes`` > ``.hours``). Where Kafka
would refuse a value (and not start), we refuse too, naming the file, the key and the value,
all problems at once: a retention daemon must never guess what an operator meant.

A topic's config is its overrides (the KRaft metadata log, else the overrides file) over the
dynamic broker layers over ``server.properties``; when none of the sources knows the topic
and ``retentiond.kafka.unknownTopics`` is ``keep``, it cannot be established and the topic is
never deleted from.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from retentiond.config import properties
from retentiond.config.daemon import DAEMON_KEYS, DAEMON_NAMESPACE, cross_checks, daemon_settings
from retentiond.config.keys import (
    ConfigKey,
    Format,
    Invalid,
    Kind,
    ValueType,
    closest_key,
    java_trim,
    squash,
)
from retentiond.config.loader import Claim, ConfigFile, Draft
from retentiond.config.problems import ConfigError, ConfigProblem
from retentiond.config.reference import render_reference
from retentiond.config.settings import Settings, StoreSection, plain
from retentiond.config.show import ShownKey, Source, daemon_rows, shown
from retentiond.config.table import Entry, KeyTable
from retentiond.kinds.kafka.brokerkeys import (
    is_broker_key,
    unknown_broker_key_message,
    unknown_log_key_message,
)
from retentiond.kinds.kafka.policy import TopicConfig

__all__ = [
    "BROKER_KEYS",
    "TOPIC_KEYS",
    "UNKNOWN_TOPICS_BROKER_DEFAULTS",
    "UNKNOWN_TOPICS_KEEP",
    "KafkaServer",
    "KafkaServerConfig",
    "apply_topic_overrides",
    "broker_retention",
    "broker_retention_ms",
    "broker_topic_defaults",
    "claim",
    "load_server_properties",
    "load_topic_overrides",
    "parse_properties",
    "read",
    "read_server",
]

KIND_NAME = "kafka"
TITLE = "Kafka"
# The keys that make a file a Kafka broker's.
IDENTIFYING_KEYS = frozenset({"log.dirs", "log.dir"})
UNKNOWN_TOPICS_KEEP = "keep"
UNKNOWN_TOPICS_BROKER_DEFAULTS = "brokerDefaults"
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000  # log.retention.hours=168
DEFAULT_CHECK_INTERVAL_MS = 300_000  # log.retention.check.interval.ms
DEFAULT_SEGMENT_DELETE_DELAY_MS = 60_000  # log.segment.delete.delay.ms
DEFAULT_LOG_DIR = "/tmp/kafka-logs"  # Kafka's log.dir default
# The used ratio of a log dir's filesystem above which its disk is at the warning level
# (retentiond.kafka.diskWarningRatio). Kafka has no such setting of its own: a broker writes
# until the disk is full and then takes the log dir offline.
DEFAULT_DISK_WARNING_RATIO = 0.90
# `retentiond rescue --beyond-retention` never takes a segment holding the newest hour
DEFAULT_RESCUE_MIN_RETENTION_MS = 3_600_000
_TOPIC_GLOB = re.compile(r"[a-zA-Z0-9._*-]+")
# How long a refused unlink waits at most before it is tried again (the engine's backoff).
RETRY_INTERVAL_MS = 120_000
# A reload may not change which log dirs (their locks are taken once) nor which broker (the
# labels of the journal and the metrics).
RESTART_KEYS = frozenset({"log.dirs", "metadata.log.dir", "node.id"})
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_T = TypeVar("_T")
_FRACTION = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def _coerce_overrides(spec: ConfigKey, raw: object, fmt: Format) -> str:
    """The overrides file as written; ``read_server`` resolves and reads it."""
    return java_trim(str(raw))


def _coerce_unknown_topics(spec: ConfigKey, raw: object, fmt: Format) -> str:
    text = str(raw)
    if text not in (UNKNOWN_TOPICS_KEEP, UNKNOWN_TOPICS_BROKER_DEFAULTS):
        raise Invalid(f"expected {UNKNOWN_TOPICS_KEEP} or {UNKNOWN_TOPICS_BROKER_DEFAULTS}")
    return text


def _coerce_bool(spec: ConfigKey, raw: object, fmt: Format) -> bool:
    try:
        return _bool(spec.key, str(raw))
    except _Refused as e:
        raise Invalid(e.message) from None


def _coerce_ratio(spec: ConfigKey, raw: object, fmt: Format) -> float:
    """A used-disk ratio in (0, 1]; a percent (90) is refused with the fraction it means."""
    text = java_trim(str(raw))
    if not _FRACTION.fullmatch(text):
        raise Invalid("must be a fraction greater than 0 and at most 1, like 0.90")
    value = float(text)
    if math.isfinite(value) and 0 < value <= 1:
        return value
    percent = text.isdigit() and 1 < value <= 100  # 90 written for 0.90
    hint = f"; did you mean {value / 100:.2f}?" if percent else ""
    raise Invalid(f"must be a fraction greater than 0 and at most 1{hint}")


def _fixed(text: str) -> Callable[[ConfigKey], str]:
    def allowed(spec: ConfigKey) -> str:
        return text

    return allowed


OVERRIDES_FILE = ValueType(
    "file path", _coerce_overrides, _fixed("absolute, or relative to the config file")
)
UNKNOWN_TOPICS = ValueType(
    "word",
    _coerce_unknown_topics,
    _fixed(f"`{UNKNOWN_TOPICS_KEEP}` / `{UNKNOWN_TOPICS_BROKER_DEFAULTS}`"),
)
BOOL = ValueType("boolean", _coerce_bool, _fixed("`true` / `false`"))


def _coerce_topic_list(spec: ConfigKey, raw: object, fmt: Format) -> tuple[str, ...]:
    try:
        return _topic_list(spec.key, str(raw))
    except _Refused as e:
        raise Invalid(e.message) from None


TOPIC_LIST = ValueType(
    "list of topics",
    _coerce_topic_list,
    _fixed("comma-separated (a YAML list in YAML); exact names or `*` globs"),
)
RATIO = ValueType("fraction", _coerce_ratio, _fixed("greater than 0, at most 1"))

# retentiond's own Kafka keys (written dotted in server.properties, nested in YAML).
KAFKA_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "retentiond.kafka.topicOverrides",
        "retentiond.kafka.topicOverrides",
        OVERRIDES_FILE,
        "A YAML file `topic: {retention.ms: 86400000, cleanup.policy: [compact, delete]}` of "
        "per-topic configs, for clusters whose topics are not in a KRaft metadata log.",
        default=None,
        default_doc="none",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.kafka.unknownTopics",
        "unknown_topics",
        UNKNOWN_TOPICS,
        "A topic whose config is found nowhere: `keep` never deletes from it, "
        "`brokerDefaults` judges it by the broker's defaults.",
        default=UNKNOWN_TOPICS_KEEP,
    ),
    ConfigKey(
        "retentiond.kafka.timeIndexCompat",
        "time_index_compat",
        BOOL,
        "Take a segment's largest timestamp from its last time-index entry, as a broker that "
        "loaded the segment without recovering it does, instead of the largest batch "
        "timestamp.",
        default=False,
    ),
    ConfigKey(
        "retentiond.kafka.diskWarningRatio",
        "disk_warning_ratio",
        RATIO,
        "Used ratio of a log dir's filesystem above which `retentiond_disk_state` says "
        "`warning_level` (Kafka itself has no such limit: a full disk takes the log dir "
        "offline).",
        default=DEFAULT_DISK_WARNING_RATIO,
        unit="fraction of disk",
    ),
    ConfigKey(
        "retentiond.kafka.removeOrphans",
        "remove_orphans",
        BOOL,
        "Remove a partition dir whose topic id (its `partition.metadata`) the metadata log no "
        "longer has; otherwise it is reported with its bytes (`orphan_partition`) and kept.",
        default=False,
    ),
    ConfigKey(
        "retentiond.kafka.removeStray",
        "remove_stray",
        BOOL,
        "Remove `-stray` dirs (Kafka renames stray replicas and never deletes them); otherwise "
        "they are reported with their bytes (`stray_partition`) and kept.",
        default=False,
    ),
    ConfigKey(
        "retentiond.kafka.rescue.minRetentionMs",
        "rescue_min_retention_ms",
        Kind.INT,
        "`rescue --beyond-retention` never takes a segment holding a record younger than this.",
        default=DEFAULT_RESCUE_MIN_RETENTION_MS,
        unit="ms",
        minimum=0,
        java_type="long",
    ),
    ConfigKey(
        "retentiond.kafka.rescue.protectTopics",
        "rescue_protect_topics",
        TOPIC_LIST,
        "Topics `rescue --beyond-retention` never takes from (exact names or `*` globs).",
        default=(),
        default_doc="none",
    ),
)
_KAFKA_KEY = {spec.key: spec for spec in KAFKA_KEYS}
# retentiond's own Kafka keys (dotted, prefix ``retentiond.``)
OWN_KEYS = tuple(spec.key.removeprefix("retentiond.") for spec in KAFKA_KEYS)


def is_kafka_keys(keys: object) -> bool:
    """A configuration is a Kafka broker's when it sets ``log.dirs`` or ``log.dir``."""
    return isinstance(keys, Mapping) and ("log.dirs" in keys or "log.dir" in keys)


class _Refused(ValueError):
    """One value refused: the entry as Kafka's own messages write it, and why."""

    def __init__(self, key: str, value: object, message: str, written: str | None = None):
        self.key = key
        self.value = value
        self.message = message
        self.written = written if written is not None else f"{key}={value!r}"
        super().__init__(f"{self.written}: {message}")

    def problem(self, file: str) -> ConfigProblem:
        return ConfigProblem(file, self.key, self.value, self.message, written=self.written)


# ---- java.util.Properties ---------------------------------------------------------------


def _read_properties(text: str, path: str) -> tuple[dict[str, str], list[ConfigProblem]]:
    """``Properties.load`` as a mapping: the last occurrence of a key wins, and an entry that
    cannot be decoded (a malformed ``\\uXXXX``) is refused, as the broker refuses to start."""
    props: dict[str, str] = {}
    problems: list[ConfigProblem] = []
    for entry in properties.parse_properties(text):
        if entry.error is not None or entry.key is None:
            problems.append(ConfigProblem(path, "", None, f"line {entry.line}: {entry.error}"))
            continue
        props[entry.key] = entry.value
    return props, problems


def parse_properties(text: str, path: str = "<properties>") -> dict[str, str]:
    """``Properties.load`` as a mapping; raises ConfigError for an entry Kafka would refuse."""
    props, problems = _read_properties(text, path)
    if problems:
        raise ConfigError(problems)
    return props


# ---- ConfigDef-style values -------------------------------------------------------------


def _num(key: str, raw: str, lo: int, hi: int, at_least: int | None) -> int:
    try:
        v = int(raw.strip())
    except ValueError:
        raise _Refused(key, raw, "not an integer") from None
    if not lo <= v <= hi:
        raise _Refused(key, raw, "out of range")
    if at_least is not None and v < at_least:
        raise _Refused(key, raw, f"must be at least {at_least}")
    return v


def _bool(key: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v not in ("true", "false"):
        raise _Refused(key, raw, "expected true or false")
    return v == "true"


def _policy(key: str, raw: str) -> frozenset[str]:
    items = [p.strip().lower() for p in raw.split(",") if p.strip()]
    bad = [p for p in items if p not in ("compact", "delete")]
    if bad:
        raise _Refused(key, raw, f"{bad[0]!r} is not compact or delete")
    return frozenset(items)


# ---- broker keys and topic keys (ServerTopicConfigSynonyms, KafkaConfig, LogConfig) -------

BROKER_KEYS = (
    "log.cleanup.policy",
    "log.retention.ms",
    "log.retention.minutes",
    "log.retention.hours",
    "log.retention.bytes",
    "log.segment.delete.delay.ms",
)
TOPIC_KEYS = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "file.delete.delay.ms",
    "remote.storage.enable",
)


def _retention_ms(props: Mapping[str, str]) -> int:
    if "log.retention.ms" in props:
        ms = _num("log.retention.ms", props["log.retention.ms"], _LONG_MIN, _LONG_MAX, None)
    elif "log.retention.minutes" in props:
        raw = props["log.retention.minutes"]
        ms = _num("log.retention.minutes", raw, _INT_MIN, _INT_MAX, None) * 60_000
    elif "log.retention.hours" in props:
        raw = props["log.retention.hours"]
        ms = _num("log.retention.hours", raw, _INT_MIN, _INT_MAX, None) * 3_600_000
    else:
        ms = DEFAULT_RETENTION_MS
    return -1 if ms < 0 else ms


def _in(where: str, fn: Callable[[], _T]) -> _T:
    """``fn()``, its refusal raised as a ValueError naming ``where`` first."""
    try:
        return fn()
    except _Refused as e:
        raise ValueError(f"{where}: {e}") from None


def broker_retention_ms(props: Mapping[str, str], path: str) -> int:
    """KafkaConfig.logRetentionTimeMillis: ms > minutes > hours; any negative → -1."""
    return _in(path, lambda: _retention_ms(props))


@dataclass(frozen=True)
class BrokerRetention:
    """The retention values a topic without overrides gets from broker properties."""

    cleanup_policy: frozenset[str]
    retention_ms: int
    retention_bytes: int
    file_delete_delay_ms: int


def _broker_retention(props: Mapping[str, str]) -> BrokerRetention:
    return BrokerRetention(
        cleanup_policy=_policy("log.cleanup.policy", props.get("log.cleanup.policy", "delete")),
        retention_ms=_retention_ms(props),
        retention_bytes=_num(
            "log.retention.bytes",
            props.get("log.retention.bytes", "-1"),
            _LONG_MIN,
            _LONG_MAX,
            None,
        ),
        file_delete_delay_ms=_num(
            "log.segment.delete.delay.ms",
            props.get("log.segment.delete.delay.ms", str(DEFAULT_SEGMENT_DELETE_DELAY_MS)),
            _LONG_MIN,
            _LONG_MAX,
            0,
        ),
    )


def broker_retention(props: Mapping[str, str], path: str) -> BrokerRetention:
    """``props`` (server.properties, then dynamic broker layers) as Kafka resolves them;
    raises ValueError naming file, key and value."""
    return _in(path, lambda: _broker_retention(props))


def _topic_value(key: str, raw: str) -> object | None:
    if key == "cleanup.policy":
        return _policy(key, raw)
    if key == "retention.ms":
        return _num(key, raw, _LONG_MIN, _LONG_MAX, -1)
    if key == "retention.bytes":
        return _num(key, raw, _LONG_MIN, _LONG_MAX, None)
    if key == "file.delete.delay.ms":
        return _num(key, raw, _LONG_MIN, _LONG_MAX, 0)
    if key == "remote.storage.enable":
        return _bool(key, raw)
    return None


def topic_value(key: str, raw: str, source: str) -> object | None:
    """One topic-level value as Kafka's LogConfig validates it (retention.ms atLeast(-1),
    retention.bytes unvalidated, file.delete.delay.ms atLeast(0)); None for a key that does
    not change what retention deletes (segment.bytes, ...). Raises ValueError."""
    return _in(source, lambda: _topic_value(key, raw))


def broker_topic_defaults(props: Mapping[str, str], path: str) -> TopicConfig:
    """The topic config a topic without overrides gets from these broker properties."""
    r = broker_retention(props, path)
    return TopicConfig(
        cleanup_policy=r.cleanup_policy,
        retention_ms=r.retention_ms,
        retention_bytes=r.retention_bytes,
        file_delete_delay_ms=r.file_delete_delay_ms,
    )


_FIELDS = {
    "cleanup.policy": "cleanup_policy",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "remote.storage.enable": "remote_storage_enable",
}


def apply_topic_overrides(
    base: TopicConfig, overrides: Mapping[str, str], source: str
) -> TopicConfig:
    """Topic-level keys over the broker's values; other topic keys (segment.bytes, ...) do
    not change what retention deletes. Raises ValueError naming source, key and value."""
    changes: dict[str, Any] = {}  # (values of the fields' own types: topic_value's)
    for key, raw in overrides.items():
        value = topic_value(key, str(raw), source)
        if value is not None:
            changes[_FIELDS[key]] = value
    return dataclasses.replace(base, **changes) if changes else base


# ---- the section of the settings --------------------------------------------------------


@dataclass(frozen=True)
class KafkaServer:
    """What retentiond needs of one broker's ``server.properties``, validated: the Kafka
    section of ``Settings`` (``Settings[KafkaServer]``)."""

    path: str
    log_dirs: tuple[str, ...]
    metadata_log_dir: str | None
    node_id: int | None
    broker_props: Mapping[str, str]  # the retention-relevant broker keys as written
    cleaner_enable: bool
    retention_check_interval_ms: int
    segment_delete_delay_ms: int
    retentiond: Mapping[str, str]  # every retentiond.* key, prefix stripped
    topic_overrides: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    unknown_topics: str = UNKNOWN_TOPICS_KEEP
    time_index_compat: bool = False  # retentiond.kafka.timeIndexCompat (policy, §4.3)
    disk_warning_ratio: float = DEFAULT_DISK_WARNING_RATIO  # retentiond.kafka.diskWarningRatio
    # offsets.topic.num.partitions: how many __consumer_offsets partitions the cluster has
    offsets_topic_partitions: int = 50
    remove_orphans: bool = False  # retentiond.kafka.removeOrphans
    remove_stray: bool = False  # retentiond.kafka.removeStray
    rescue_min_retention_ms: int = DEFAULT_RESCUE_MIN_RETENTION_MS
    rescue_protect_topics: tuple[str, ...] = ()  # exact names or * globs
    defaults: TopicConfig = field(default_factory=TopicConfig)  # a topic without overrides
    log_dirs_key: str = "log.dirs"  # the key the file wrote the log dirs with
    # the journal's and the metrics' labels: ``kafka-<node.id>`` and meta.properties' cluster.id
    broker_name: str = KIND_NAME
    broker_cluster_name: str = KIND_NAME

    @property
    def kind_name(self) -> str:
        return KIND_NAME

    @property
    def store_dirs(self) -> tuple[str, ...]:
        return self.log_dirs

    @property
    def round_interval_ms(self) -> int:
        """log.retention.check.interval.ms, the broker's own period."""
        return self.retention_check_interval_ms

    @property
    def retry_interval_ms(self) -> int:
        return RETRY_INTERVAL_MS

    @property
    def restart_keys(self) -> frozenset[str]:
        return RESTART_KEYS

    @property
    def metadata_dir(self) -> str:
        """Where ``__cluster_metadata-0`` lives: metadata.log.dir, else the first log dir."""
        return self.metadata_log_dir or self.log_dirs[0]

    def key_values(self) -> dict[str, object]:
        """A JSON-ready view in Kafka's own key names (plans, status, reload diffs)."""
        return {
            "log.dirs": list(self.log_dirs),
            "metadata.log.dir": self.metadata_log_dir,
            "node.id": self.node_id,
            **{k: self.broker_props[k] for k in sorted(self.broker_props)},
            "log.cleaner.enable": self.cleaner_enable,
            "log.retention.check.interval.ms": self.retention_check_interval_ms,
            "retentiond.kafka.topicOverrides": self.retentiond.get("kafka.topicOverrides"),
            "retentiond.kafka.topicOverrides (content)": {
                t: dict(v) for t, v in sorted(self.topic_overrides.items())
            },
            "retentiond.kafka.unknownTopics": self.unknown_topics,
            "retentiond.kafka.timeIndexCompat": self.time_index_compat,
            "retentiond.kafka.diskWarningRatio": self.disk_warning_ratio,
            # the leftover and rescue keys only when set otherwise than by default, so that
            # the configuration hash of a file that does not use them stays what it was
            **{k: v for k, v, default in self._leftover_keys() if v != default},
        }

    def _leftover_keys(self) -> list[tuple[str, object, object]]:
        return [
            ("retentiond.kafka.removeOrphans", self.remove_orphans, False),
            ("retentiond.kafka.removeStray", self.remove_stray, False),
            (
                "retentiond.kafka.rescue.minRetentionMs",
                self.rescue_min_retention_ms,
                DEFAULT_RESCUE_MIN_RETENTION_MS,
            ),
            ("retentiond.kafka.rescue.protectTopics", list(self.rescue_protect_topics), []),
        ]

    def protected(self, topic: str) -> bool:
        """``topic`` is named by ``retentiond.kafka.rescue.protectTopics`` (exactly or by a
        ``*`` glob): rescue never takes a segment of it beyond the configured retention."""
        return any(_glob_match(pattern, topic) for pattern in self.rescue_protect_topics)

    def as_dict(self) -> dict[str, object]:
        """Its part of the canonical form (the config hash): the kind, its keys, its names.
        The disk warning ratio counts only when it is not the default, so that a file that
        does not set it keeps the hash it had before the key existed."""
        values = self.key_values()
        if self.disk_warning_ratio == DEFAULT_DISK_WARNING_RATIO:
            del values["retentiond.kafka.diskWarningRatio"]
        return {
            "kind": KIND_NAME,
            "kafka": plain(values),
            "broker_name": self.broker_name,
            "broker_cluster_name": self.broker_cluster_name,
        }

    def config_for(
        self,
        topic: str,
        metadata_overrides: Mapping[str, Mapping[str, str]] | None = None,
        broker_layers: Sequence[Mapping[str, str]] = (),
    ) -> TopicConfig | None:
        """The effective config of ``topic`` (§10.3): its overrides over the dynamic broker
        layers (lowest first) over server.properties. ``metadata_overrides`` lists every
        topic the metadata log knows (no override: an empty mapping); a topic it does not
        know falls to the overrides file. None when the config cannot be established: the
        topic is in neither source and ``unknownTopics`` is ``keep``, or a value is invalid."""
        props = dict(self.broker_props)
        for layer in broker_layers:
            props.update(layer)
        try:
            base = broker_topic_defaults(props, self.path) if broker_layers else self.defaults
            if metadata_overrides is not None and topic in metadata_overrides:
                return apply_topic_overrides(base, metadata_overrides[topic], "metadata log")
            if topic in self.topic_overrides:
                source = self.retentiond.get("kafka.topicOverrides", "overrides")
                return apply_topic_overrides(base, self.topic_overrides[topic], source)
        except ValueError:
            return None
        return base if self.unknown_topics == UNKNOWN_TOPICS_BROKER_DEFAULTS else None


def _glob_match(pattern: str, topic: str) -> bool:
    """An item of a topic list: an exact name, or ``*`` standing for any run of characters
    (``?`` and brackets cannot occur in a topic name and mean nothing here)."""
    if "*" not in pattern:
        return pattern == topic
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, topic) is not None


def _topic_list(key: str, raw: str) -> tuple[str, ...]:
    """A list of topics: comma-separated (a YAML list arrives joined the same way), each an
    exact name or a ``*`` glob of the characters a topic name may hold."""
    items = tuple(item.strip() for item in raw.split(",") if item.strip())
    for item in items:
        if not _TOPIC_GLOB.fullmatch(item):
            raise _Refused(
                key, raw, f"{item!r} is neither a topic name nor a * glob of one ([a-zA-Z0-9._-])"
            )
    return items


KafkaServerConfig = KafkaServer  # the name the kind's modules and tests know it by


# ---- reading one broker's keys ----------------------------------------------------------


def _yaml_scalar(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return str(v)


def _yaml_properties(doc: object, path: str) -> tuple[dict[str, str], list[ConfigProblem]]:
    """A YAML Kafka config as the properties it stands for: top-level keys are Kafka's own
    (``log.dirs: [/a, /b]`` or ``log.dirs: /a,/b``), ``retentiond:`` is nested like the
    daemon's keys in every kind's YAML; scalars become the text Kafka would read."""
    if not isinstance(doc, dict):
        return {}, [ConfigProblem(path, "", None, "must be a mapping of keys to values")]
    out: dict[str, str] = {}
    problems: list[ConfigProblem] = []

    def refuse(key: str, value: object, message: str, written: str) -> None:
        problems.append(ConfigProblem(path, key, value, message, written=written))

    def walk(mapping: Mapping[object, object], prefix: str) -> None:
        if prefix.count(".") > 8:  # retentiond.a.b.c: no key of ours nests deeper
            name = prefix.rstrip(".")
            refuse(name, None, "nested too deeply", name)
            return
        for k, v in mapping.items():
            key = f"{prefix}{k}"
            if not isinstance(k, str):
                refuse(key, v, "keys must be strings", f"{key}={v!r}")
            elif isinstance(v, dict):
                if not key.startswith("retentiond"):
                    refuse(key, v, "Kafka keys take scalar values", f"{key}=<a mapping>")
                else:
                    walk(v, key + ".")
            elif v is None:
                refuse(key, v, "remove the key to use the default", f"{key}=null")
            else:
                out[key] = _yaml_scalar(v)

    walk(doc, "")
    return out, problems


def yaml_properties(text: str, path: str) -> dict[str, str]:
    """The properties a YAML Kafka config stands for; raises ConfigError."""
    import yaml  # only for a YAML file (the start-up of a command on server.properties)

    try:
        doc = yaml.safe_load(text)
    except Exception as e:  # PyYAML raises more than YAMLError on hostile input
        message = f"not valid YAML: {str(e).splitlines()[0]}"
        raise ConfigError([ConfigProblem(path, "", None, message)]) from None
    props, problems = _yaml_properties(doc, path)
    if problems:
        raise ConfigError(problems)
    return props


def read_server_file(path: str) -> dict[str, str]:
    """The properties of ``path``: YAML (``.yaml``/``.yml``: Kafka's keys as written, nested
    ``retentiond:`` mappings flattened to dotted keys) or a Java properties file."""
    try:
        with open(path, encoding="latin-1") as f:  # Properties.load(InputStream): ISO 8859-1
            text = f.read()
    except OSError as e:
        raise ConfigError(
            [ConfigProblem(path, "", None, f"cannot read: {e.strerror or e}")]
        ) from None
    if path.lower().endswith((".yaml", ".yml")):
        return yaml_properties(text.encode("latin-1").decode("utf-8", "replace"), path)
    return parse_properties(text, path)


def read_server(props: Mapping[str, str], path: str) -> KafkaServer:
    """Validate the properties of one broker; raises ConfigError listing every problem.
    Unknown ``retentiond.*`` keys are the caller's to judge (the daemon's keys live in the
    common table); here only ``retentiond.kafka.*`` are read."""
    problems: list[ConfigProblem] = []

    def check(fn: Callable[..., _T], *args: object) -> _T | None:
        try:
            return fn(*args)
        except _Refused as e:
            problems.append(e.problem(path))
            return None

    def refuse(key: str, value: object, message: str) -> None:
        problems.append(ConfigProblem(path, key, value, message, written=f"{key}={value!r}"))

    if props.get("log.dirs", "").strip():
        dirs = tuple(d.strip() for d in props["log.dirs"].split(",") if d.strip())
    else:
        dirs = (props.get("log.dir", DEFAULT_LOG_DIR).strip(),)
    if not is_kafka_keys(props):
        message = "neither log.dirs nor log.dir is set: not a Kafka broker config"
        problems.append(ConfigProblem(path, "", None, message))
    key = "log.dirs" if props.get("log.dirs", "").strip() else "log.dir"
    for d in dirs:
        if not os.path.isabs(d):
            refuse(key, d, "not an absolute path")
        elif "\x00" in d:
            refuse(key, d, "contains a NUL character")
    if len(set(map(os.path.normpath, dirs))) != len(dirs):
        refuse(key, props.get(key), "a log dir is listed twice")
    node_id = None
    for k in ("node.id", "broker.id"):
        if k in props:
            node_id = check(_num, k, props[k], _INT_MIN, _INT_MAX, -1)
            break
    # each broker key on its own, so that every bad value is reported at once
    check(_policy, "log.cleanup.policy", props.get("log.cleanup.policy", "delete"))
    check(_retention_ms, props)
    for k, at_least in (("log.retention.bytes", None), ("log.segment.delete.delay.ms", 0)):
        if k in props:
            check(_num, k, props[k], _LONG_MIN, _LONG_MAX, at_least)
    retention = None if problems else check(_broker_retention, props)
    offsets_partitions = check(
        _num,
        "offsets.topic.num.partitions",
        props.get("offsets.topic.num.partitions", "50"),
        1,
        _INT_MAX,
        1,
    )
    cleaner = check(_bool, "log.cleaner.enable", props.get("log.cleaner.enable", "true"))
    interval = check(
        _num,
        "log.retention.check.interval.ms",
        props.get("log.retention.check.interval.ms", str(DEFAULT_CHECK_INTERVAL_MS)),
        _LONG_MIN,
        _LONG_MAX,
        1,
    )
    own = {k[len("retentiond.") :]: v for k, v in props.items() if k.startswith("retentiond.")}

    def own_value(key: str) -> object:
        spec = _KAFKA_KEY[key]
        raw = own.get(key.removeprefix("retentiond."))
        if raw is None:
            return spec.default
        try:
            return spec.coerce(raw, Format.CONF)
        except Invalid as e:
            refuse(key, raw, str(e))
            return spec.default

    unknown = str(own_value("retentiond.kafka.unknownTopics"))
    compat = own_value("retentiond.kafka.timeIndexCompat")
    warning_ratio = own_value("retentiond.kafka.diskWarningRatio")
    remove_orphans = own_value("retentiond.kafka.removeOrphans")
    remove_stray = own_value("retentiond.kafka.removeStray")
    floor = own_value("retentiond.kafka.rescue.minRetentionMs")
    protect = own_value("retentiond.kafka.rescue.protectTopics")
    overrides: dict[str, dict[str, str]] = {}
    if "kafka.topicOverrides" in own:
        ov_path = own["kafka.topicOverrides"]
        if not os.path.isabs(ov_path):
            ov_path = os.path.join(os.path.dirname(os.path.abspath(path)), ov_path)
        overrides = check(_topic_overrides, ov_path) or {}
    meta = props.get("metadata.log.dir", "").strip() or None
    if meta is not None and not os.path.isabs(meta):
        refuse("metadata.log.dir", meta, "not an absolute path")
    elif meta is not None and "\x00" in meta:
        refuse("metadata.log.dir", meta, "contains a NUL character")
    if problems:
        raise ConfigError(problems)
    assert retention is not None and cleaner is not None and interval is not None, problems
    broker_props = {k: v for k, v in props.items() if k in BROKER_KEYS}
    return KafkaServer(
        path=path,
        log_dirs=dirs,
        metadata_log_dir=meta,
        node_id=node_id,
        broker_props=broker_props,
        cleaner_enable=cleaner,
        retention_check_interval_ms=interval,
        segment_delete_delay_ms=retention.file_delete_delay_ms,
        retentiond=own,
        topic_overrides=overrides,
        unknown_topics=unknown,
        time_index_compat=bool(compat),
        disk_warning_ratio=cast(float, warning_ratio),
        offsets_topic_partitions=offsets_partitions or 50,
        remove_orphans=bool(remove_orphans),
        remove_stray=bool(remove_stray),
        rescue_min_retention_ms=cast(int, floor),
        rescue_protect_topics=cast(tuple[str, ...], protect),
        defaults=broker_topic_defaults(broker_props, path),
        log_dirs_key=key,
    )


def load_server_properties(path: str) -> KafkaServer:
    """Read and validate ``path``; raises ConfigError listing every problem."""
    return read_server(read_server_file(path), path)


def _topic_overrides(path: str) -> dict[str, dict[str, str]]:
    """The overrides file: YAML ``topic: {key: value}``; every value is checked now, so a bad
    one is refused at start-up rather than leaving a topic silently unjudged."""
    key = "retentiond.kafka.topicOverrides"
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, ValueError, yaml.YAMLError) as e:  # ValueError: a NUL in the path
        raise _Refused(key, path, str(e)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _Refused(key, path, "expected a mapping topic: {key: value}")
    out: dict[str, dict[str, str]] = {}
    for topic, keys in data.items():
        if not isinstance(keys, dict):
            written = f"{path}: {topic}={keys!r}"
            raise _Refused(key, path, "expected a mapping of topic keys", written)
        for k in keys:
            if not isinstance(k, str):
                raise _Refused(key, path, f"key {k!r} is not a string", f"{path}: {topic}")
        values = {str(k): _yaml_scalar(v) for k, v in keys.items()}
        for k, v in values.items():
            try:
                _topic_value(k, v)  # validate
            except _Refused as e:
                raise _Refused(key, path, e.message, f"{path}: {topic}: {e.written}") from None
        out[str(topic)] = values
    return out


def load_topic_overrides(path: str, referrer: str) -> dict[str, dict[str, str]]:
    """The overrides file ``path`` named by the config ``referrer``; raises ValueError."""
    return _in(referrer, lambda: _topic_overrides(path))


# ---- the configuration file as a whole ------------------------------------------------

# Daemon keys that make no sense for Kafka: refused in a Kafka file, with the reason.
NOT_FOR_KAFKA = {
    "retentiond.guard.timers": "refused: Kafka has no timer messages (nor delay levels or "
    "half messages); retentiond.guard.unconsumed is the guard for Kafka",
}
# retentiond's daemon keys, dotted in a Kafka file (``retentiond.dryRun``)
TABLE = KeyTable(
    keys=tuple(k for k in DAEMON_KEYS if k.key not in NOT_FOR_KAFKA),
    yaml_name="a Kafka YAML config",
    unsupported=NOT_FOR_KAFKA,
    cross_checks=(cross_checks,),
)


def claim(file: ConfigFile) -> Claim:
    """A file is a Kafka broker's when it sets ``log.dirs`` or ``log.dir`` at its top."""
    return Claim.YES if file.top_level_keys() & IDENTIFYING_KEYS else Claim.NO


def _unknown_message(key: str) -> str:
    candidates = [k for k in TABLE.by_key if k.startswith("retentiond.")]
    candidates += [f"retentiond.{k}" for k in OWN_KEYS]
    near = closest_key(key, candidates, cutoff=0.6)
    hint = f"; did you mean {near!r}?" if near else ""
    return f"unknown key (not accepted in the retentiond namespace){hint}"


def _cluster_id(server: KafkaServer) -> str | None:
    """``cluster.id`` from the first log dir's ``meta.properties`` (written by ``kafka-storage
    format`` or the first start): the cluster label of the journal and the metrics."""
    for d in server.log_dirs:
        try:
            with open(os.path.join(d, "meta.properties"), encoding="latin-1") as fh:
                props, problems = _read_properties(fh.read(), d)
        except OSError:
            continue
        if problems:
            continue
        cluster = props.get("cluster.id", "").strip()
        if cluster:
            return cluster
    return None


def _file_properties(
    file: ConfigFile,
) -> tuple[dict[str, str], dict[str, list[int]], list[ConfigProblem]]:
    """The file's properties, where each was written (properties files) and the entries that
    could not be read."""
    if file.format is Format.YAML:
        props, problems = _yaml_properties(file.document, file.file)
        return props, {}, problems
    props = {}
    lines: dict[str, list[int]] = {}
    problems = []
    for number, key, value, error in file.properties:
        if key is None:
            problems.append(ConfigProblem(file.file, "", None, f"line {number}: {error}"))
            continue
        if error is not None:
            problems.append(ConfigProblem(file.file, key, value, f"line {number}: {error}"))
            continue
        props[key] = value  # Properties.load: the last one wins
        lines.setdefault(key, []).append(number)
    return props, lines, problems


def read(file: ConfigFile, foreign: Mapping[str, str]) -> Draft[KafkaServer]:
    """A Kafka broker's config: Kafka's keys read as the broker reads them, retentiond's
    daemon keys dotted (``retentiond.dryRun``) checked by the daemon's table, and a key that
    names another kind (``foreign``: key → that kind's title) refused: the file would
    describe two stores."""
    path = file.file
    found, lines, problems = _file_properties(file)
    if problems and file.format is Format.YAML:
        return Draft(None, problems)  # a YAML file that could not be read as properties
    entries: dict[str, Entry] = {}
    kafka_props: dict[str, str] = {}
    foreign_found: dict[str, list[str]] = {}  # another kind's title → its keys in this file
    warnings: list[ConfigProblem] = []  # keys the broker would warn about and ignore
    for key, raw in found.items():
        value = java_trim(raw)
        where = lines.get(key, [0])
        if key in foreign:
            foreign_found.setdefault(foreign[key], []).append(key)
            continue
        if key.startswith(DAEMON_NAMESPACE + "."):
            if len(where) > 1:
                problems.append(
                    ConfigProblem(
                        path,
                        key,
                        value,
                        f"duplicate key: first at line {where[0]}, again at line {where[-1]} "
                        "(Kafka would silently keep the last one)",
                    )
                )
            own = key.removeprefix("retentiond.")
            if key in NOT_FOR_KAFKA:
                problems.append(ConfigProblem(path, key, value, NOT_FOR_KAFKA[key]))
            elif own in OWN_KEYS:
                kafka_props[key] = value
            elif key in TABLE.by_key:
                entries[key] = Entry(value, where[-1])
            else:
                problems.append(ConfigProblem(path, key, value, _unknown_message(key)))
            continue
        if key == DAEMON_NAMESPACE or squash(key) in TABLE.daemon_leaves:
            message = TABLE.unknown_key_message(key, Format.CONF)
            problems.append(ConfigProblem(path, key, value, message))
            continue
        if not is_broker_key(key):
            if key.startswith("log."):
                # a log.* key decides what the broker keeps: a misspelling would leave the
                # broker default in force without a word (Kafka itself only warns)
                problems.append(ConfigProblem(path, key, value, unknown_log_key_message(key)))
                continue
            warnings.append(ConfigProblem(path, key, value, unknown_broker_key_message(key)))
        kafka_props[key] = raw
    for other, keys in foreign_found.items():
        # one refusal naming the keys: the file as a whole is the problem, not each key
        named = ", ".join(keys)
        their = "this key" if len(keys) == 1 else "these keys"
        message = (
            f"looks like both a {TITLE} and a {other} config: log.dirs/log.dir is "
            f"{TITLE}'s, {their} {other}'s ({named}); refused rather than guessed which "
            "store is meant"
        )
        problems.append(ConfigProblem(path, "", None, message))
    server = None
    try:
        server = read_server(kafka_props, path)
    except ConfigError as exc:
        problems += exc.problems
    values, more = TABLE.build(entries, Format.CONF, path)
    problems += more
    if server is None:
        return Draft(None, problems)
    server = dataclasses.replace(
        server,
        broker_name=f"kafka-{server.node_id}" if server.node_id is not None else KIND_NAME,
        broker_cluster_name=_cluster_id(server) or KIND_NAME,
    )
    if foreign_found:  # which store is meant is unknown: none is checked
        return Draft(None, problems)
    if problems:
        return Draft(None, problems, to_check=Settings(store=server, source=file.source))
    daemon = daemon_settings(values, TABLE.keys)
    settings = Settings(
        store=server, daemon=daemon, source=Path(file.source), warnings=tuple(warnings)
    )
    return Draft(settings, problems, to_check=settings)


def kafka_of(settings: Settings[StoreSection]) -> Settings[KafkaServer]:
    """``settings`` as Kafka's (a kind is handed its own; anything else is a bug)."""
    if not isinstance(settings.store, KafkaServer):
        raise TypeError(f"not a Kafka configuration: {settings.store.kind_name}")
    return cast(Settings[KafkaServer], settings)


# ---- the effective configuration, key by key (``retentiond config show``) ---------------

# A broker key retentiond reads, and the synonyms Kafka accepts for it (highest precedence
# first; KafkaConfig); its default is Kafka's, as ``read_server`` applies it.
_SHOWN_BROKER_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("log.dirs", ("log.dir",)),
    ("metadata.log.dir", ()),
    ("node.id", ("broker.id",)),
    ("log.cleanup.policy", ()),
    ("log.retention.ms", ("log.retention.minutes", "log.retention.hours")),
    ("log.retention.bytes", ()),
    ("log.segment.delete.delay.ms", ()),
    ("log.cleaner.enable", ()),
    ("log.retention.check.interval.ms", ()),
)
# How ``config show`` words a default that is no value.
_DEFAULT_WORDS = {"metadata.log.dir": "the first log dir", "node.id": "none"}


def _effective(server: KafkaServer) -> dict[str, object]:
    """The broker keys' effective values (JSON-ready)."""
    defaults = server.defaults
    return {
        "log.dirs": list(server.log_dirs),
        "metadata.log.dir": server.metadata_log_dir,
        "node.id": server.node_id,
        "log.cleanup.policy": ",".join(sorted(defaults.cleanup_policy)),
        "log.retention.ms": defaults.retention_ms,
        "log.retention.bytes": defaults.retention_bytes,
        "log.segment.delete.delay.ms": server.segment_delete_delay_ms,
        "log.cleaner.enable": server.cleaner_enable,
        "log.retention.check.interval.ms": server.retention_check_interval_ms,
    }


def shown_keys(file: ConfigFile, settings: Settings[KafkaServer]) -> list[ShownKey]:
    """Every key retentiond reads of a Kafka broker's file, its effective value and its
    source: the file, Kafka's default, or a synonym standing for it (``log.retention.hours``
    for ``log.retention.ms``, ``log.dir`` for ``log.dirs``, ``broker.id`` for ``node.id``),
    as ``kafka-configs --describe --all`` shows them. The broker's other keys (its
    listeners' passwords among them) are not retentiond's and never shown."""
    server = settings.store
    lines = file.key_lines()
    written = {k for k in lines if not k.startswith(DAEMON_NAMESPACE + ".")}
    if file.format is Format.YAML:  # nested mappings: only the top level is Kafka's
        written = {k for k in written if k in file.top_level_keys()}
    if server.log_dirs_key != "log.dirs":  # written blank: Kafka falls back to log.dir
        written.discard("log.dirs")
    effective = _effective(server)
    rows: list[ShownKey] = []
    for key, synonyms in _SHOWN_BROKER_KEYS:
        value = effective[key]
        synonym = next((k for k in synonyms if k in written), None)
        if key in written:
            rows.append(ShownKey(key, value, Source.FILE, lines.get(key)))
        elif synonym is not None:
            row = ShownKey(key, value, Source.SYNONYM, lines.get(synonym), synonym=synonym)
            rows.append(row)
        else:
            rows.append(ShownKey(key, value, Source.DEFAULT, default_doc=_DEFAULT_WORDS.get(key)))
    own = {
        "retentiond.kafka.topicOverrides": server.retentiond.get("kafka.topicOverrides"),
        "retentiond.kafka.unknownTopics": server.unknown_topics,
        "retentiond.kafka.timeIndexCompat": server.time_index_compat,
        "retentiond.kafka.diskWarningRatio": server.disk_warning_ratio,
        "retentiond.kafka.removeOrphans": server.remove_orphans,
        "retentiond.kafka.removeStray": server.remove_stray,
        "retentiond.kafka.rescue.minRetentionMs": server.rescue_min_retention_ms,
        "retentiond.kafka.rescue.protectTopics": list(server.rescue_protect_topics),
    }
    rows += [shown(spec, own[spec.key], lines) for spec in KAFKA_KEYS]
    return rows + daemon_rows(settings.daemon, TABLE.keys, lines)


def render_reference_markdown() -> str:
    """The README's reference of retentiond's own Kafka keys, from the table they are read by."""
    return render_reference(
        KAFKA_KEYS,
        "Written dotted in `server.properties` (`retentiond.kafka.diskWarningRatio=0.85`), "
        "nested under `retentiond:` → `kafka:` in a YAML file.",
    )
