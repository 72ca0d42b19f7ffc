"""A Kafka broker's ``server.properties`` (or the same keys in YAML) read and validated as the
broker reads it (spec §5.1), plus retentiond's own dotted ``retentiond.*`` keys.

This is the configuration layer's half of the Kafka kind: what the file says, checked with
Kafka's own parsing rules (``java.util.Properties`` syntax, ``ConfigDef`` numbers and
booleans, the synonym precedence ``log.retention.ms`` > ``.minutes`` > ``.hours``). What a
topic's effective retention is (a ``TopicConfig``) is the kind's business
(``kinds/kafka/config.py``), built from the values validated here. Where Kafka would refuse a
value (and not start), we refuse too, naming the file, the key and the value, all problems at
once: a retention daemon must never guess what an operator meant.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import yaml

from retentiond.config import properties

UNKNOWN_TOPICS_KEEP = "keep"
UNKNOWN_TOPICS_BROKER_DEFAULTS = "brokerDefaults"
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000  # log.retention.hours=168
DEFAULT_CHECK_INTERVAL_MS = 300_000  # log.retention.check.interval.ms
DEFAULT_SEGMENT_DELETE_DELAY_MS = 60_000  # log.segment.delete.delay.ms
DEFAULT_LOG_DIR = "/tmp/kafka-logs"  # Kafka's log.dir default
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_T = TypeVar("_T")
# keys only a RocketMQ broker.conf has: a file with these and log.dirs is ambiguous
ROCKETMQ_MARKERS = ("storePathRootDir", "storePathCommitLog", "brokerClusterName", "brokerName")
# retentiond's own Kafka keys (dotted, prefix ``retentiond.``)
OWN_KEYS = ("kafka.topicOverrides", "kafka.unknownTopics", "kafka.timeIndexCompat")


def is_kafka_keys(keys: object) -> bool:
    """A configuration is a Kafka broker's when it sets ``log.dirs`` or ``log.dir``."""
    return isinstance(keys, Mapping) and ("log.dirs" in keys or "log.dir" in keys)


class KafkaConfigError(ValueError):
    """Every problem found, one per line, each naming file, key and value."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


# ---- java.util.Properties ---------------------------------------------------------------


def parse_properties(text: str, path: str = "<properties>") -> dict[str, str]:
    """``Properties.load`` as a mapping: the last occurrence of a key wins, and an entry that
    cannot be decoded (a malformed ``\\uXXXX``) is refused, as the broker refuses to start."""
    props: dict[str, str] = {}
    problems: list[str] = []
    for entry in properties.parse_properties(text):
        if entry.error is not None or entry.key is None:
            problems.append(f"{path}: line {entry.line}: {entry.error}")
            continue
        props[entry.key] = entry.value
    if problems:
        raise KafkaConfigError(problems)
    return props


# ---- ConfigDef-style values -------------------------------------------------------------


def _num(path: str, key: str, raw: str, lo: int, hi: int, at_least: int | None) -> int:
    try:
        v = int(raw.strip())
    except ValueError:
        raise ValueError(f"{path}: {key}={raw!r}: not an integer") from None
    if not lo <= v <= hi:
        raise ValueError(f"{path}: {key}={raw!r}: out of range")
    if at_least is not None and v < at_least:
        raise ValueError(f"{path}: {key}={raw!r}: must be at least {at_least}")
    return v


def _bool(path: str, key: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v not in ("true", "false"):
        raise ValueError(f"{path}: {key}={raw!r}: expected true or false")
    return v == "true"


def _policy(path: str, key: str, raw: str) -> frozenset[str]:
    items = [p.strip().lower() for p in raw.split(",") if p.strip()]
    bad = [p for p in items if p not in ("compact", "delete")]
    if bad:
        raise ValueError(f"{path}: {key}={raw!r}: {bad[0]!r} is not compact or delete")
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


def broker_retention_ms(props: Mapping[str, str], path: str) -> int:
    """KafkaConfig.logRetentionTimeMillis: ms > minutes > hours; any negative → -1."""
    if "log.retention.ms" in props:
        ms = _num(path, "log.retention.ms", props["log.retention.ms"], _LONG_MIN, _LONG_MAX, None)
    elif "log.retention.minutes" in props:
        raw = props["log.retention.minutes"]
        ms = _num(path, "log.retention.minutes", raw, _INT_MIN, _INT_MAX, None) * 60_000
    elif "log.retention.hours" in props:
        raw = props["log.retention.hours"]
        ms = _num(path, "log.retention.hours", raw, _INT_MIN, _INT_MAX, None) * 3_600_000
    else:
        ms = DEFAULT_RETENTION_MS
    return -1 if ms < 0 else ms


@dataclass(frozen=True)
class BrokerRetention:
    """The retention values a topic without overrides gets from broker properties."""

    cleanup_policy: frozenset[str]
    retention_ms: int
    retention_bytes: int
    file_delete_delay_ms: int


def broker_retention(props: Mapping[str, str], path: str) -> BrokerRetention:
    """``props`` (server.properties, then dynamic broker layers) as Kafka resolves them;
    raises ValueError naming file, key and value."""
    return BrokerRetention(
        cleanup_policy=_policy(
            path, "log.cleanup.policy", props.get("log.cleanup.policy", "delete")
        ),
        retention_ms=broker_retention_ms(props, path),
        retention_bytes=_num(
            path,
            "log.retention.bytes",
            props.get("log.retention.bytes", "-1"),
            _LONG_MIN,
            _LONG_MAX,
            None,
        ),
        file_delete_delay_ms=_num(
            path,
            "log.segment.delete.delay.ms",
            props.get("log.segment.delete.delay.ms", str(DEFAULT_SEGMENT_DELETE_DELAY_MS)),
            _LONG_MIN,
            _LONG_MAX,
            0,
        ),
    )


def topic_value(key: str, raw: str, source: str) -> object | None:
    """One topic-level value as Kafka's LogConfig validates it (retention.ms atLeast(-1),
    retention.bytes unvalidated, file.delete.delay.ms atLeast(0)); None for a key that does
    not change what retention deletes (segment.bytes, ...). Raises ValueError."""
    if key == "cleanup.policy":
        return _policy(source, key, raw)
    if key == "retention.ms":
        return _num(source, key, raw, _LONG_MIN, _LONG_MAX, -1)
    if key == "retention.bytes":
        return _num(source, key, raw, _LONG_MIN, _LONG_MAX, None)
    if key == "file.delete.delay.ms":
        return _num(source, key, raw, _LONG_MIN, _LONG_MAX, 0)
    if key == "remote.storage.enable":
        return _bool(source, key, raw)
    return None


# ---- server.properties ------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaServer:
    """What retentiond needs of one broker's ``server.properties``, validated."""

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

    @property
    def metadata_dir(self) -> str:
        """Where ``__cluster_metadata-0`` lives: metadata.log.dir, else the first log dir."""
        return self.metadata_log_dir or self.log_dirs[0]

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready view in Kafka's own key names (plans, status, the config hash)."""
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
        }


def read_server_file(path: str) -> dict[str, str]:
    """The properties of ``path``: YAML (``.yaml``/``.yml``: Kafka's keys as written, nested
    ``retentiond:`` mappings flattened to dotted keys) or a Java properties file."""
    try:
        with open(path, encoding="latin-1") as f:  # Properties.load(InputStream): ISO 8859-1
            text = f.read()
    except OSError as e:
        raise KafkaConfigError([f"{path}: cannot read: {e.strerror or e}"]) from None
    if path.lower().endswith((".yaml", ".yml")):
        return yaml_properties(text.encode("latin-1").decode("utf-8", "replace"), path)
    return parse_properties(text, path)


def yaml_properties(text: str, path: str) -> dict[str, str]:
    """A YAML Kafka config as the properties it stands for: top-level keys are Kafka's own
    (``log.dirs: [/a, /b]`` or ``log.dirs: /a,/b``), ``retentiond:`` is nested like
    broker.yaml's; scalars become the text Kafka would read."""
    try:
        doc = yaml.safe_load(text)
    except Exception as e:  # PyYAML raises more than YAMLError on hostile input
        raise KafkaConfigError([f"{path}: not valid YAML: {str(e).splitlines()[0]}"]) from None
    if not isinstance(doc, dict):
        raise KafkaConfigError([f"{path}: must be a mapping of keys to values"])
    out: dict[str, str] = {}
    problems: list[str] = []

    def walk(mapping: Mapping[object, object], prefix: str) -> None:
        if prefix.count(".") > 8:  # retentiond.a.b.c: no key of ours nests deeper
            problems.append(f"{path}: {prefix.rstrip('.')}: nested too deeply")
            return
        for k, v in mapping.items():
            key = f"{prefix}{k}"
            if not isinstance(k, str):
                problems.append(f"{path}: {key}={v!r}: keys must be strings")
            elif isinstance(v, dict):
                if not key.startswith("retentiond"):
                    problems.append(f"{path}: {key}=<a mapping>: Kafka keys take scalar values")
                else:
                    walk(v, key + ".")
            elif v is None:
                problems.append(f"{path}: {key}=null: remove the key to use the default")
            else:
                out[key] = _yaml_scalar(v)

    walk(doc, "")
    if problems:
        raise KafkaConfigError(problems)
    return out


def read_server(props: Mapping[str, str], path: str) -> KafkaServer:
    """Validate the properties of one broker; raises KafkaConfigError listing every problem.
    Unknown ``retentiond.*`` keys are the caller's to judge (the daemon's keys live in the
    common schema); here only ``retentiond.kafka.*`` are read."""
    problems: list[str] = []

    def check(fn: Callable[..., _T], *args: object) -> _T | None:
        try:
            return fn(*args)
        except ValueError as e:
            problems.append(str(e))
            return None

    if props.get("log.dirs", "").strip():
        dirs = tuple(d.strip() for d in props["log.dirs"].split(",") if d.strip())
    else:
        dirs = (props.get("log.dir", DEFAULT_LOG_DIR).strip(),)
    if not is_kafka_keys(props):
        problems.append(f"{path}: neither log.dirs nor log.dir is set: not a Kafka broker config")
    both = [k for k in ROCKETMQ_MARKERS if k in props]
    if both and is_kafka_keys(props):
        problems.append(
            f"{path}: {both[0]}={props[both[0]]!r}: looks like both a Kafka and a RocketMQ config"
            " (log.dirs/log.dir is Kafka's, this key RocketMQ's); refused rather than guessed"
        )
    key = "log.dirs" if props.get("log.dirs", "").strip() else "log.dir"
    for d in dirs:
        if not os.path.isabs(d):
            problems.append(f"{path}: {key}={d!r}: not an absolute path")
        elif "\x00" in d:
            problems.append(f"{path}: {key}={d!r}: contains a NUL character")
    if len(set(map(os.path.normpath, dirs))) != len(dirs):
        problems.append(f"{path}: {key}={props.get(key)!r}: a log dir is listed twice")
    node_id = None
    for k in ("node.id", "broker.id"):
        if k in props:
            node_id = check(_num, path, k, props[k], _INT_MIN, _INT_MAX, -1)
            break
    # each broker key on its own, so that every bad value is reported at once
    check(_policy, path, "log.cleanup.policy", props.get("log.cleanup.policy", "delete"))
    check(broker_retention_ms, props, path)
    for k, at_least in (("log.retention.bytes", None), ("log.segment.delete.delay.ms", 0)):
        if k in props:
            check(_num, path, k, props[k], _LONG_MIN, _LONG_MAX, at_least)
    retention = None if problems else check(broker_retention, props, path)
    cleaner = check(_bool, path, "log.cleaner.enable", props.get("log.cleaner.enable", "true"))
    interval = check(
        _num,
        path,
        "log.retention.check.interval.ms",
        props.get("log.retention.check.interval.ms", str(DEFAULT_CHECK_INTERVAL_MS)),
        _LONG_MIN,
        _LONG_MAX,
        1,
    )
    own = {k[len("retentiond.") :]: v for k, v in props.items() if k.startswith("retentiond.")}
    unknown = own.get("kafka.unknownTopics", UNKNOWN_TOPICS_KEEP)
    if unknown not in (UNKNOWN_TOPICS_KEEP, UNKNOWN_TOPICS_BROKER_DEFAULTS):
        problems.append(
            f"{path}: retentiond.kafka.unknownTopics={unknown!r}: expected keep or brokerDefaults"
        )
    compat = check(
        _bool, path, "retentiond.kafka.timeIndexCompat", own.get("kafka.timeIndexCompat", "false")
    )
    overrides: dict[str, dict[str, str]] = {}
    if "kafka.topicOverrides" in own:
        ov_path = own["kafka.topicOverrides"]
        if not os.path.isabs(ov_path):
            ov_path = os.path.join(os.path.dirname(os.path.abspath(path)), ov_path)
        overrides = check(load_topic_overrides, ov_path, path) or {}
    meta = props.get("metadata.log.dir", "").strip() or None
    if meta is not None and not os.path.isabs(meta):
        problems.append(f"{path}: metadata.log.dir={meta!r}: not an absolute path")
    elif meta is not None and "\x00" in meta:
        problems.append(f"{path}: metadata.log.dir={meta!r}: contains a NUL character")
    if problems:
        raise KafkaConfigError(problems)
    assert retention is not None and cleaner is not None and interval is not None, problems
    return KafkaServer(
        path=path,
        log_dirs=dirs,
        metadata_log_dir=meta,
        node_id=node_id,
        broker_props={k: v for k, v in props.items() if k in BROKER_KEYS},
        cleaner_enable=cleaner,
        retention_check_interval_ms=interval,
        segment_delete_delay_ms=retention.file_delete_delay_ms,
        retentiond=own,
        topic_overrides=overrides,
        unknown_topics=unknown,
        time_index_compat=bool(compat),
    )


def load_server_properties(path: str) -> KafkaServer:
    """Read and validate ``path``; raises KafkaConfigError listing every problem."""
    return read_server(read_server_file(path), path)


def load_topic_overrides(path: str, referrer: str) -> dict[str, dict[str, str]]:
    """The overrides file: YAML ``topic: {key: value}``; every value is checked now, so a bad
    one is refused at start-up rather than leaving a topic silently unjudged."""
    where = f"{referrer}: retentiond.kafka.topicOverrides={path!r}"
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, ValueError, yaml.YAMLError) as e:  # ValueError: a NUL in the path
        raise ValueError(f"{where}: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping topic: {{key: value}}")
    out: dict[str, dict[str, str]] = {}
    for topic, keys in data.items():
        if not isinstance(keys, dict):
            raise ValueError(f"{path}: {topic}={keys!r}: expected a mapping of topic keys")
        for k in keys:
            if not isinstance(k, str):
                raise ValueError(f"{path}: {topic}: key {k!r} is not a string")
        values = {str(k): _yaml_scalar(v) for k, v in keys.items()}
        for k, v in values.items():
            topic_value(k, v, f"{path}: {topic}")  # validate
        out[str(topic)] = values
    return out


def _yaml_scalar(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return str(v)
