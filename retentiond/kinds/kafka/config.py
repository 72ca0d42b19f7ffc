"""A Kafka ``server.properties`` read as the broker reads it (spec §5.1), plus retentiond's own
dotted ``retentiond.*`` keys, and the effective config of a topic (§10.3).

Kafka's own parsing decides what a value means: ``java.util.Properties`` syntax (``=``, ``:``
or whitespace separators, ``#``/``!`` comments, backslash continuations and escapes), the
synonym precedence ``log.retention.ms`` > ``.minutes`` > ``.hours`` with any negative result
meaning unlimited, ``ConfigDef``'s number and boolean parsing. Where Kafka would refuse a value
(and not start), we refuse too, naming the file, the key and the value, all problems at once:
a retention daemon must never guess what an operator meant.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import yaml

from retentiond.kinds.kafka.policy import DEFAULT_RETENTION_MS, TopicConfig

UNKNOWN_TOPICS_KEEP = "keep"
UNKNOWN_TOPICS_BROKER_DEFAULTS = "brokerDefaults"
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_T = TypeVar("_T")
# keys only a RocketMQ broker.conf has: a file with these and log.dirs is ambiguous
ROCKETMQ_MARKERS = ("storePathRootDir", "storePathCommitLog", "brokerClusterName", "brokerName")


class KafkaConfigError(ValueError):
    """Every problem found, one per line, each naming file, key and value."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


# ---- java.util.Properties ---------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\" or i + 1 >= len(s):
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u":
            digits = s[i + 2 : i + 6]
            if len(digits) != 4 or any(ch not in "0123456789abcdefABCDEF" for ch in digits):
                raise ValueError(f"malformed \\uxxxx encoding {s[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Physical lines joined where a line ends in an odd number of backslashes; leading
    whitespace of a continuation line dropped; comment and blank lines skipped."""
    out: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i <= len(lines):
            line = line[:-1]
            if i == len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        out.append((start + 1, line))
    return out


def parse_properties(text: str, path: str = "<properties>") -> dict[str, str]:
    """``Properties.load``: the last occurrence of a key wins."""
    props: dict[str, str] = {}
    problems: list[str] = []
    for lineno, line in _logical_lines(text):
        # the key ends at the first unescaped '=', ':' or whitespace
        j = 0
        while j < len(line):
            if line[j] == "\\":
                j += 2
                continue
            if line[j] in "=: \t\f":
                break
            j += 1
        key_raw, rest = line[:j], line[j:]
        rest = rest.lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        try:
            props[_unescape(key_raw)] = _unescape(rest)
        except ValueError as e:
            problems.append(f"{path}: line {lineno}: {e}")
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


# ---- broker keys → topic keys (ServerTopicConfigSynonyms, KafkaConfig) ------------------

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


def broker_topic_defaults(props: Mapping[str, str], path: str) -> TopicConfig:
    """The topic config a topic without overrides gets from these broker properties."""
    return TopicConfig(
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
            props.get("log.segment.delete.delay.ms", "60000"),
            _LONG_MIN,
            _LONG_MAX,
            0,
        ),
    )


def apply_topic_overrides(
    base: TopicConfig, overrides: Mapping[str, str], source: str
) -> TopicConfig:
    """Topic-level keys over the broker's values (LogConfig validators: retention.ms
    atLeast(-1), retention.bytes unvalidated, file.delete.delay.ms atLeast(0))."""
    cfg = base
    for key, raw in overrides.items():
        raw = str(raw)
        if key == "cleanup.policy":
            cfg = _replace(cfg, cleanup_policy=_policy(source, key, raw))
        elif key == "retention.ms":
            cfg = _replace(cfg, retention_ms=_num(source, key, raw, _LONG_MIN, _LONG_MAX, -1))
        elif key == "retention.bytes":
            cfg = _replace(cfg, retention_bytes=_num(source, key, raw, _LONG_MIN, _LONG_MAX, None))
        elif key == "file.delete.delay.ms":
            cfg = _replace(
                cfg, file_delete_delay_ms=_num(source, key, raw, _LONG_MIN, _LONG_MAX, 0)
            )
        elif key == "remote.storage.enable":
            cfg = _replace(cfg, remote_storage_enable=_bool(source, key, raw))
        # other topic keys (segment.bytes, ...) do not change what retention deletes
    return cfg


def _replace(cfg: TopicConfig, **kw: object) -> TopicConfig:
    return dataclasses.replace(cfg, **kw)  # type: ignore[arg-type]


# ---- server.properties ------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaServerConfig:
    """What retentiond needs of one broker's ``server.properties``."""

    path: str
    log_dirs: tuple[str, ...]
    metadata_log_dir: str | None
    node_id: int | None
    broker_props: Mapping[str, str]  # the retention-relevant broker keys as written
    defaults: TopicConfig  # from server.properties alone
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
            base = broker_topic_defaults(props, self.path)
            if metadata_overrides is not None and topic in metadata_overrides:
                return apply_topic_overrides(base, metadata_overrides[topic], "metadata log")
            if topic in self.topic_overrides:
                source = self.retentiond.get("kafka.topicOverrides", "overrides")
                return apply_topic_overrides(base, self.topic_overrides[topic], source)
        except ValueError:
            return None
        return base if self.unknown_topics == UNKNOWN_TOPICS_BROKER_DEFAULTS else None


def load_server_properties(path: str) -> KafkaServerConfig:
    """Read and validate; raises KafkaConfigError listing every problem."""
    try:
        with open(path, encoding="latin-1") as f:  # Properties.load(InputStream): ISO 8859-1
            props = parse_properties(f.read(), path)
    except OSError as e:
        raise KafkaConfigError([f"{path}: cannot read: {e}"]) from None
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
        dirs = (props.get("log.dir", "/tmp/kafka-logs").strip(),)
    if "log.dirs" not in props and "log.dir" not in props:
        problems.append(f"{path}: neither log.dirs nor log.dir is set: not a Kafka broker config")
    both = [k for k in ROCKETMQ_MARKERS if k in props]
    if both and ("log.dirs" in props or "log.dir" in props):
        problems.append(
            f"{path}: {both[0]}={props[both[0]]!r}: looks like both a Kafka and a RocketMQ config"
        )
    for d in dirs:
        if not os.path.isabs(d):
            problems.append(f"{path}: log.dirs={d!r}: not an absolute path")
    node_id = None
    for key in ("node.id", "broker.id"):
        if key in props:
            node_id = check(_num, path, key, props[key], _INT_MIN, _INT_MAX, -1)
            break
    # each broker key on its own, so that every bad value is reported at once
    check(_policy, path, "log.cleanup.policy", props.get("log.cleanup.policy", "delete"))
    check(broker_retention_ms, props, path)
    for key, at_least in (("log.retention.bytes", None), ("log.segment.delete.delay.ms", 0)):
        if key in props:
            check(_num, path, key, props[key], _LONG_MIN, _LONG_MAX, at_least)
    defaults = None if problems else check(broker_topic_defaults, props, path)
    cleaner = check(_bool, path, "log.cleaner.enable", props.get("log.cleaner.enable", "true"))
    interval = check(
        _num,
        path,
        "log.retention.check.interval.ms",
        props.get("log.retention.check.interval.ms", "300000"),
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
    if problems:
        raise KafkaConfigError(problems)
    assert defaults is not None and cleaner is not None and interval is not None, problems
    return KafkaServerConfig(
        path=path,
        log_dirs=dirs,
        metadata_log_dir=props.get("metadata.log.dir", "").strip() or None,
        node_id=node_id,
        broker_props={k: v for k, v in props.items() if k in BROKER_KEYS},
        defaults=defaults,
        cleaner_enable=cleaner,
        retention_check_interval_ms=interval,
        segment_delete_delay_ms=defaults.file_delete_delay_ms,
        retentiond=own,
        topic_overrides=overrides,
        unknown_topics=unknown,
        time_index_compat=bool(compat),
    )


def load_topic_overrides(path: str, referrer: str) -> dict[str, dict[str, str]]:
    """The overrides file: YAML ``topic: {key: value}``; every value is checked now, so a bad
    one is refused at start-up rather than leaving a topic silently unjudged."""
    where = f"{referrer}: retentiond.kafka.topicOverrides={path!r}"
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
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
            if k not in TOPIC_KEYS and not isinstance(k, str):
                raise ValueError(f"{path}: {topic}: key {k!r} is not a string")
        values = {str(k): _yaml_scalar(v) for k, v in keys.items()}
        apply_topic_overrides(TopicConfig(), values, f"{path}: {topic}")  # validate
        out[str(topic)] = values
    return out


def _yaml_scalar(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return str(v)
