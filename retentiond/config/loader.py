"""Reads broker.yaml or broker.conf into one immutable ``Settings``, or refuses with every
problem at once.

Why so strict: RocketMQ itself swallows bad values (a typo'd key, ``fileReservedTime=0.1``, a
``deleteWhen`` of ``"04; 05"``) and carries on with defaults, which is how disks fill up
unnoticed (spec §3, §6). A daemon that deletes data refuses instead, naming the file, the key
and the value, and lists all problems in one go so a fix is one edit, not one per restart.

Two formats because two audiences: ``broker.yaml`` is ours (strict, typed, fractions for
ratios), while ``broker.conf`` is the broker's own properties file, full of keys that are none
of our business, so there only keys that look like ours are checked. Nothing here writes or
deletes anything.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from retentiond.config import kafka as kafka_config
from retentiond.config import metrics as metrics_config
from retentiond.config import schema
from retentiond.config.properties import parse_properties
from retentiond.config.schema import BY_KEY, KEYS, ConfigKey, Format, Invalid
from retentiond.config.settings import (
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SLOT_SIZE,
    DaemonSettings,
    Settings,
)

__all__ = [
    "ConfigError",
    "ConfigProblem",
    "diff_settings",
    "load_settings",
    "local_zone_name",
    "validate_store_root",
]

YAML_SUFFIXES = (".yaml", ".yml")
STORE_MARKER_FILES = ("checkpoint", "lock", "abort")
STORE_MARKER_DIRS = ("consumequeue", "index", "config")
_MARKERS_TEXT = ", ".join([*STORE_MARKER_FILES, *(f"{d}/" for d in STORE_MARKER_DIRS)])
_SHOWN_CHARS = 120


def _show(value: object) -> str:
    """A value as it appears in a message: short, and never expensive to compute (a YAML alias
    bomb or a 4000-digit int must not turn an error message into a hang or a crash)."""
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        if len(value) > _SHOWN_CHARS:
            return repr(value[:_SHOWN_CHARS]) + "…"
        return repr(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value.bit_length() > 256:
            return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
        return repr(value)
    if isinstance(value, float):
        return repr(value)
    return f"<{schema.type_name(value)}>"


class ConfigProblem(NamedTuple):
    file: str
    key: str  # "" for problems with the file as a whole
    value: object
    message: str

    def __str__(self) -> str:
        if not self.key:
            return f"{self.file}: {self.message}"
        return f"{self.file}: key {self.key!r} = {_show(self.value)}: {self.message}"


class ConfigError(Exception):
    """Every problem found in one configuration file; ``str()`` gives one line per problem."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


@dataclass(frozen=True)
class _Entry:
    """One of our keys as found in a file, before coercion."""

    value: object
    line: int


# --- YAML ----------------------------------------------------------------------------------

_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"


class _Duplicate(NamedTuple):
    mapping: Node
    key: object
    first_line: int
    line: int
    value: object


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader silently keeps the last of two equal keys (as the broker does with
    properties); this one remembers every duplicate, with its lines, so it can be refused."""

    def __init__(self, stream: bytes) -> None:
        super().__init__(stream)
        self.duplicates: list[_Duplicate] = []

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[object, object]:
        if isinstance(node, MappingNode):
            seen: dict[object, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, ScalarNode):
                    continue
                key = self.construct_object(key_node)
                try:
                    hash(key)
                except TypeError:
                    continue
                line = key_node.start_mark.line + 1
                if key in seen:
                    shown = value_node.value if isinstance(value_node, ScalarNode) else None
                    self.duplicates.append(_Duplicate(node, key, seen[key], line, shown))
                else:
                    seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _child(node: Node | None, key: str) -> Node | None:
    """The value node of ``key`` in a mapping node (the last one, as construction keeps)."""
    found = None
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.value == key:
                found = value_node
    return found


def _yaml_error_text(exc: Exception) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        what = exc.problem or exc.context or "syntax error"
        return f"not valid YAML: {what} (line {mark.line + 1}, column {mark.column + 1})"
    first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"not valid YAML: {first_line}"


def _read_yaml(data: bytes, file: str) -> tuple[dict[str, _Entry], list[ConfigProblem]]:
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(data)  # already reads (and may reject) the first characters
        root = loader.get_single_node()
        document = loader.construct_document(root) if root is not None else None
    except Exception as exc:
        # PyYAML raises more than YAMLError on hostile input (ValueError for 2001-13-01,
        # RecursionError for deep nesting); all of them mean "this file is not usable".
        return {}, [ConfigProblem(file, "", None, _yaml_error_text(exc))]
    finally:
        if loader is not None:
            loader.dispose()

    problems: list[ConfigProblem] = []
    daemon_node = _child(root, schema.DAEMON_NAMESPACE)
    journal_node = _child(daemon_node, "journal")
    prefixes = {id(root): ""}
    if daemon_node is not None:
        prefixes[id(daemon_node)] = "retentiond."
    if journal_node is not None:
        prefixes[id(journal_node)] = "retentiond.journal."
    for namespace in _NAMESPACES - {"retentiond", "retentiond.journal"}:
        node = _child(daemon_node, namespace.removeprefix("retentiond."))
        if node is not None:
            prefixes[id(node)] = namespace + "."
    for dup in loader.duplicates:
        prefix = prefixes.get(id(dup.mapping), "")
        problems.append(
            ConfigProblem(
                file,
                f"{prefix}{dup.key}",
                dup.value,
                f"duplicate key: first at line {dup.first_line}, again at line {dup.line} "
                "(YAML would silently keep the last one)",
            )
        )

    if document is None:
        return {}, problems
    if not isinstance(document, dict):
        message = f"must be a mapping of keys to values, not {schema.type_name(document)}"
        return {}, [*problems, ConfigProblem(file, "", None, message)]

    entries: dict[str, _Entry] = {}
    for key, value in _flatten_yaml(document, file, problems):
        spec = BY_KEY.get(key)
        if spec is None:
            problems.append(ConfigProblem(file, key, value, _unknown_key_message(key, Format.YAML)))
            continue
        if spec.key == "deleteWhen":
            value = _raw_scalar(_child(root, "deleteWhen"), value)
        entries[key] = _Entry(value, 0)  # duplicates were reported by the loader already
    return entries, problems


def _raw_scalar(node: Node | None, value: object) -> object:
    """``deleteWhen: 04`` is the YAML 1.1 octal int 4 and ``010`` is 8, but the broker reads
    the text with Integer.parseInt. So for an unquoted number we take the text as written."""
    if (
        isinstance(node, ScalarNode)
        and node.style is None
        and node.tag in (_INT_TAG, _FLOAT_TAG)
        and not isinstance(value, bool)
    ):
        return node.value
    return value


# Nested mappings in broker.yaml: every dotted prefix of a key ("retentiond", "retentiond.journal",
# "retentiond.metrics", ...), so a new group of keys needs no change here.
_NAMESPACES = frozenset(
    key.rsplit(".", n)[0] for key in BY_KEY for n in range(1, key.count(".") + 1)
)


def _flatten_yaml(
    document: dict[object, object], file: str, problems: list[ConfigProblem]
) -> Iterator[tuple[str, object]]:
    """Yields (dotted key, value); the nested ``retentiond:`` / ``journal:`` mappings become
    ``retentiond.x`` / ``retentiond.journal.x`` so both formats share one key space."""

    def walk(mapping: dict[object, object], prefix: str) -> Iterator[tuple[str, object]]:
        for key, value in mapping.items():
            if not isinstance(key, str):
                shown = f"{prefix}{_show(key)}"
                problems.append(ConfigProblem(file, shown, value, "keys must be strings"))
                continue
            dotted = f"{prefix}{key}"
            if "." in key:
                message = _unknown_key_message(dotted, Format.YAML)
                if dotted in BY_KEY or dotted in _NAMESPACES:
                    message = "in broker.yaml the retentiond keys are nested mappings, not dotted"
                problems.append(ConfigProblem(file, dotted, value, message))
                continue
            if dotted in _NAMESPACES:
                if value is None:
                    continue
                if not isinstance(value, dict):
                    message = f"must be a mapping, not {schema.type_name(value)}"
                    problems.append(ConfigProblem(file, dotted, value, message))
                    continue
                yield from walk(value, dotted + ".")
                continue
            yield dotted, value

    yield from walk(document, "")


# --- Java properties (broker.conf) ---------------------------------------------------------


def _read_properties(data: bytes, file: str) -> tuple[dict[str, _Entry], list[ConfigProblem]]:
    # Properties.load(InputStream) reads ISO-8859-1, and so does the broker: decoding the same
    # way gives the very path strings (and so the same bytes on disk) the broker uses.
    text = data.decode("iso-8859-1")
    problems: list[ConfigProblem] = []
    entries: dict[str, _Entry] = {}
    for number, raw_key, raw_value, error in parse_properties(text):
        if raw_key is None:
            problems.append(ConfigProblem(file, "", None, f"line {number}: {error}"))
            continue
        key = schema.java_trim(raw_key)
        value = schema.java_trim(raw_value)
        if error is not None:
            problems.append(ConfigProblem(file, key, value, f"line {number}: {error}"))
            continue
        if key in BY_KEY:
            if key in entries:
                problems.append(
                    ConfigProblem(
                        file,
                        key,
                        value,
                        f"duplicate key: first at line {entries[key].line}, again at line "
                        f"{number} (the broker would silently keep the last one)",
                    )
                )
            else:
                entries[key] = _Entry(value, number)
            continue
        if key in schema.UNSUPPORTED_KEYS:
            if value:
                problems.append(ConfigProblem(file, key, value, schema.UNSUPPORTED_KEYS[key]))
            continue
        message = _conf_unknown_key_message(key)
        if message is not None:
            problems.append(ConfigProblem(file, key, value, message))
    return entries, problems


def _conf_unknown_key_message(key: str) -> str | None:
    """None if an unknown broker.conf key is simply the broker's business."""
    if key in schema.LEGACY_KEYS or key == schema.DAEMON_NAMESPACE:
        return _unknown_key_message(key, Format.CONF)
    if key.startswith(schema.DAEMON_NAMESPACE + ".") or schema.squash(key) in _DAEMON_LEAVES:
        return _unknown_key_message(key, Format.CONF)
    if key in schema.UPSTREAM_LOOKALIKES:
        return None
    near = schema.closest_key(key, list(BY_KEY), cutoff=schema.NEAR_MISS_RATIO)
    if near is None:
        return None
    return f"unknown to the broker, which would silently ignore it; did you mean {near!r}?"


# "dryRun" at the top of a file is a daemon key in the wrong place, not a broker key to ignore:
# silently ignoring it would turn an intended dry run into real deletions.
_DAEMON_LEAVES = {
    schema.squash(k.key.removeprefix("retentiond.")): k.key for k in KEYS if k.is_daemon
}


def _unknown_key_message(key: str, fmt: Format) -> str:
    if key in schema.LEGACY_KEYS:
        return f"refused: {schema.LEGACY_KEYS[key]}"
    if key in schema.UNSUPPORTED_KEYS:
        return schema.UNSUPPORTED_KEYS[key]
    daemon_key = _DAEMON_LEAVES.get(schema.squash(key))
    if daemon_key is not None:
        if fmt is Format.YAML:
            return "unknown key; daemon settings go under 'retentiond:'"
        return f"unknown key; did you mean {daemon_key!r}?"
    candidates = list(BY_KEY)
    if key.startswith("retentiond."):
        candidates = [k for k in candidates if k.startswith("retentiond.")]
    near = schema.closest_key(key, candidates, cutoff=0.6)
    hint = f"; did you mean {near!r}?" if near else ""
    where = "broker.yaml" if fmt is Format.YAML else "the retentiond namespace"
    return f"unknown key (not accepted in {where}){hint}"


# --- building Settings ---------------------------------------------------------------------


def _cross_checks(values: Mapping[str, object]) -> list[tuple[str, object, str]]:
    """Checks that need two keys. Each returns (key to blame, its value, message)."""
    found: list[tuple[str, object, str]] = []
    slots, entries = values.get("maxHashSlotNum"), values.get("maxIndexNum")
    if isinstance(slots, int) and isinstance(entries, int):
        size = INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE + entries * INDEX_ENTRY_SIZE
        if size > schema.INT32_MAX:
            found.append(
                (
                    "maxIndexNum",
                    entries,
                    f"with maxHashSlotNum={slots} an index file would be {size} bytes "
                    f"(40 + 4×maxHashSlotNum + 20×maxIndexNum); the broker computes it as a "
                    f"Java int, so it must be at most {schema.INT32_MAX}",
                )
            )
    found += metrics_config.cross_checks(values)
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


def _build(
    entries: Mapping[str, _Entry], fmt: Format, file: str, source: Path
) -> tuple[Settings | None, dict[str, object], list[ConfigProblem]]:
    """Coerces every key (or takes its default); returns the Settings if nothing was refused,
    and in any case the values that were valid, keyed by config key."""
    problems: list[ConfigProblem] = []
    values: dict[str, object] = {}
    for spec in KEYS:
        entry = entries.get(spec.key)
        try:
            value = spec.default_value(values) if entry is None else spec.coerce(entry.value, fmt)
        except Invalid as exc:
            shown = entry.value if entry is not None else spec.doc_default.replace("`", "")
            problems.append(ConfigProblem(file, spec.key, shown, str(exc)))
            continue
        if value is None and spec.default_factory is not None:
            continue  # the default depends on a key that was itself refused
        values[spec.key] = value
    for key, value, message in _cross_checks(values):
        problems.append(ConfigProblem(file, key, value, message))
    if problems:
        return None, values, problems
    return _settings_from(values, source), values, problems


def _settings_from(values: Mapping[str, object], source: Path) -> Settings:
    top: dict[str, object] = {}
    daemon: dict[str, object] = {}
    for spec in KEYS:
        target, _, name = spec.field.rpartition(".")
        (daemon if target == "daemon" else top)[name] = values[spec.key]
    delete_when = values["deleteWhen"]
    assert isinstance(delete_when, str)
    top["delete_hours"] = schema.delete_hours(delete_when)
    return Settings(**top, daemon=DaemonSettings(**daemon), source=source)  # type: ignore[arg-type]


def load_settings(path: str | os.PathLike[str], *, check_store: bool = True) -> Settings:
    """Read, validate and (unless ``check_store`` is false) check the store the file points at.

    ``.yaml``/``.yml`` files are broker.yaml; anything else is read as the broker's own
    properties file. Raises ``ConfigError`` carrying every problem found.
    """
    # Absolute but not symlink-resolved: a reload must re-read the path the operator gave
    # (Kubernetes swaps ConfigMap contents by re-pointing a symlink).
    source = Path(os.path.abspath(os.fspath(path)))
    file = str(source)
    try:
        data = source.read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError([ConfigProblem(file, "", None, f"cannot read: {reason}")]) from None
    fmt = Format.YAML if source.suffix.lower() in YAML_SUFFIXES else Format.CONF
    kafka_props = _kafka_properties(data, fmt, file)
    if kafka_props is not None:
        return _load_kafka(kafka_props, file, source, check_store=check_store)
    reader = _read_yaml if fmt is Format.YAML else _read_properties
    entries, problems = reader(data, file)
    settings, values, more = _build(entries, fmt, file, source)
    problems += more
    root, commitlog = values.get("storePathRootDir"), values.get("storePathCommitLog")
    if check_store and isinstance(root, Path) and isinstance(commitlog, tuple):
        # Run even when other keys were refused: all problems are reported in one go.
        problems += _store_problems(file, root, commitlog)
    if problems or settings is None:
        raise ConfigError(problems)
    return settings


# --- Kafka's server.properties ------------------------------------------------------------

KAFKA_MARKER_FILES = (
    "meta.properties",
    ".lock",
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
)
# RocketMQ's keys that no Kafka config has: with log.dirs in the same file, the file is
# ambiguous (which broker's store is it?) and refused.
_ROCKETMQ_ONLY = frozenset(
    {k.key for k in KEYS if not k.is_daemon} | set(kafka_config.ROCKETMQ_MARKERS)
)


class _KafkaProps(NamedTuple):
    props: dict[str, str]
    lines: dict[str, list[int]]  # where each key was written (properties files)
    problems: list[ConfigProblem]


def _kafka_properties(data: bytes, fmt: Format, file: str) -> _KafkaProps | None:
    """The file's properties if it is a Kafka broker config (``log.dirs`` or ``log.dir``
    set), else None (a RocketMQ file, read by the code above)."""
    if fmt is Format.YAML:
        try:
            doc = yaml.safe_load(data)
        except Exception:
            return None  # not valid YAML: the broker.yaml reader names the problem
        if not kafka_config.is_kafka_keys(doc):
            return None
        try:
            props = kafka_config.yaml_properties(data.decode("utf-8", "replace"), file)
        except kafka_config.KafkaConfigError as exc:
            return _KafkaProps({}, {}, [_kafka_problem(file, p) for p in exc.problems])
        return _KafkaProps(props, {}, [])
    text = data.decode("iso-8859-1")
    props = {}
    lines: dict[str, list[int]] = {}
    problems: list[ConfigProblem] = []
    for number, key, value, error in parse_properties(text):
        if key is None:
            problems.append(ConfigProblem(file, "", None, f"line {number}: {error}"))
            continue
        if error is not None:
            problems.append(ConfigProblem(file, key, value, f"line {number}: {error}"))
            continue
        props[key] = value  # Properties.load: the last one wins
        lines.setdefault(key, []).append(number)
    if not kafka_config.is_kafka_keys(props):
        return None
    return _KafkaProps(props, lines, problems)


def _kafka_problem(file: str, text: str) -> ConfigProblem:
    """A message of config/kafka.py (``<file>: <key>=<value>: why``) as a ConfigProblem."""
    prefix = f"{file}: "
    return ConfigProblem(file, "", None, text[len(prefix) :] if text.startswith(prefix) else text)


def _load_kafka(found: _KafkaProps, file: str, source: Path, *, check_store: bool) -> Settings:
    """A Kafka broker's config: Kafka's keys read as the broker reads them (config/kafka.py),
    retentiond's daemon keys dotted (``retentiond.dryRun``) checked by the common schema,
    RocketMQ's keys refused (the file would describe two stores)."""
    if not found.props and found.problems:
        raise ConfigError(found.problems)  # a YAML file that could not be read as properties
    problems = list(found.problems)
    entries: dict[str, _Entry] = {}
    kafka_props: dict[str, str] = {}
    for key, raw in found.props.items():
        value = schema.java_trim(raw)
        where = found.lines.get(key, [0])
        if key in _ROCKETMQ_ONLY:
            problems.append(
                ConfigProblem(
                    file,
                    key,
                    value,
                    "looks like both a Kafka and a RocketMQ config: log.dirs/log.dir is "
                    "Kafka's, this key RocketMQ's; refused rather than guessed which store "
                    "is meant",
                )
            )
            continue
        if key.startswith(schema.DAEMON_NAMESPACE + "."):
            if len(where) > 1:
                problems.append(
                    ConfigProblem(
                        file,
                        key,
                        value,
                        f"duplicate key: first at line {where[0]}, again at line {where[-1]} "
                        "(Kafka would silently keep the last one)",
                    )
                )
            own = key.removeprefix("retentiond.")
            if own in kafka_config.OWN_KEYS:
                kafka_props[key] = value
            elif key in BY_KEY:
                entries[key] = _Entry(value, where[-1])
            else:
                problems.append(ConfigProblem(file, key, value, _kafka_unknown_message(key)))
            continue
        if key == schema.DAEMON_NAMESPACE or schema.squash(key) in _DAEMON_LEAVES:
            problems.append(ConfigProblem(file, key, value, _unknown_key_message(key, Format.CONF)))
            continue
        kafka_props[key] = raw
    server = None
    try:
        server = kafka_config.read_server(kafka_props, file)
    except kafka_config.KafkaConfigError as exc:
        problems += [_kafka_problem(file, p) for p in exc.problems]
    settings, _values, more = _build(entries, Format.CONF, file, source)
    problems += more
    if check_store and server is not None:
        written = "log.dirs" if found.props.get("log.dirs", "").strip() else "log.dir"
        problems += _kafka_store_problems(file, server, written)
    if problems or settings is None or server is None:
        raise ConfigError(problems)
    interval = server.retention_check_interval_ms
    return dataclasses.replace(
        settings,
        kafka=server,
        store_path_root_dir=Path(server.log_dirs[0]),
        store_path_commitlog=(),
        clean_resource_interval_ms=interval,
        broker_name=f"kafka-{server.node_id}" if server.node_id is not None else "kafka",
        broker_cluster_name=_kafka_cluster_id(server) or "kafka",
    )


def _kafka_unknown_message(key: str) -> str:
    candidates = [k for k in BY_KEY if k.startswith("retentiond.")]
    candidates += [f"retentiond.{k}" for k in kafka_config.OWN_KEYS]
    near = schema.closest_key(key, candidates, cutoff=0.6)
    hint = f"; did you mean {near!r}?" if near else ""
    return f"unknown key (not accepted in the retentiond namespace){hint}"


def _kafka_cluster_id(server: kafka_config.KafkaServer) -> str | None:
    """``cluster.id`` from the first log dir's ``meta.properties`` (written by ``kafka-storage
    format`` or the first start): the cluster label of the journal and the metrics."""
    for d in server.log_dirs:
        try:
            with open(os.path.join(d, "meta.properties"), encoding="latin-1") as fh:
                props = kafka_config.parse_properties(fh.read(), d)
        except (OSError, kafka_config.KafkaConfigError):
            continue
        cluster = props.get("cluster.id", "").strip()
        if cluster:
            return cluster
    return None


def _kafka_store_problems(
    file: str, server: kafka_config.KafkaServer, key: str
) -> list[ConfigProblem]:
    """Each log dir must exist and look like one a Kafka broker has run on, and no two may
    be one directory: a wrong ``log.dirs`` is the mistake that turns retention into an
    accident, as a wrong storePathRootDir is for RocketMQ. Read-only."""
    problems: list[ConfigProblem] = []
    seen: dict[tuple[int, int], str] = {}
    for d in server.log_dirs:
        path = Path(d)
        try:
            if os.path.realpath(path) == "/":
                problems.append(ConfigProblem(file, key, d, "is the filesystem root"))
                continue
            kind = _stat_kind(path)
            if kind is None:
                problems.append(ConfigProblem(file, key, d, "log dir does not exist"))
                continue
            if kind != "dir":
                problems.append(ConfigProblem(file, key, d, "log dir is not a directory"))
                continue
            os.listdir(path)
            if not any(_stat_kind(path / m) == "file" for m in KAFKA_MARKER_FILES):
                markers = ", ".join(KAFKA_MARKER_FILES)
                problems.append(
                    ConfigProblem(file, key, d, f"not a Kafka log dir (none of {markers} found)")
                )
                continue
            st = os.stat(path)
            if (st.st_dev, st.st_ino) in seen:
                other = seen[(st.st_dev, st.st_ino)]
                problems.append(ConfigProblem(file, key, d, f"is the same directory as {other!r}"))
            seen[(st.st_dev, st.st_ino)] = d
        except OSError as exc:
            problems.append(ConfigProblem(file, key, d, f"cannot be examined: {exc.strerror}"))
    return problems


# --- the store on disk ---------------------------------------------------------------------


def _stat_kind(path: Path) -> str | None:
    """'dir', 'file', 'other', or None if missing; other OSErrors are raised."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "other"


def validate_store_root(settings: Settings) -> list[ConfigProblem]:
    """Refuse to run against something that is not a RocketMQ store.

    A wrong ``storePathRootDir`` is the one mistake that turns a retention daemon into a
    deletion accident, so before anything else we insist on seeing the broker's own marker
    files, and on every CommitLog directory existing. Read-only: this only stats and lists.
    """
    file = str(settings.source) if settings.source is not None else "<settings>"
    return _store_problems(file, settings.store_path_root_dir, settings.store_path_commitlog)


def _store_problems(file: str, root: Path, commitlog: tuple[Path, ...]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []

    def refuse(key: str, value: object, message: str) -> None:
        problems.append(ConfigProblem(file, key, str(value), message))

    root_key = "storePathRootDir"
    try:
        if os.path.realpath(root) == "/":
            refuse(root_key, root, "is the filesystem root; point it at the broker's store")
        else:
            kind = _stat_kind(root)
            if kind is None:
                refuse(root_key, root, "does not exist")
            elif kind != "dir":
                refuse(root_key, root, "is not a directory")
            else:
                os.listdir(root)  # fails early and clearly if we may not look inside
                files = [m for m in STORE_MARKER_FILES if _stat_kind(root / m) == "file"]
                dirs = [m for m in STORE_MARKER_DIRS if _stat_kind(root / m) == "dir"]
                if not files and not dirs:
                    refuse(root_key, root, f"not a RocketMQ store (none of {_MARKERS_TEXT} found)")
    except OSError as exc:
        refuse(root_key, root, f"cannot be examined: {exc.strerror or exc}")

    seen: dict[tuple[int, int], Path] = {}
    for path in commitlog:
        try:
            kind = _stat_kind(path)
            if kind is None:
                refuse("storePathCommitLog", path, "CommitLog directory does not exist")
            elif kind != "dir":
                refuse("storePathCommitLog", path, "CommitLog path is not a directory")
            else:
                st = os.stat(path)
                identity = (st.st_dev, st.st_ino)
                if identity in seen:
                    refuse(
                        "storePathCommitLog",
                        path,
                        f"is the same directory as {str(seen[identity])!r}; the broker would "
                        "load every file twice",
                    )
                seen[identity] = path
        except OSError as exc:
            refuse("storePathCommitLog", path, f"cannot be examined: {exc.strerror or exc}")
    return problems


# --- reloads and display -------------------------------------------------------------------


def _plain(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _field(settings: Settings, spec: ConfigKey) -> object:
    target: object = settings
    for part in spec.field.split("."):
        target = getattr(target, part)
    return _plain(target)


def diff_settings(old: Settings, new: Settings) -> list[tuple[str, object, object]]:
    """What a reload changed, as (key, old, new) in the operator's vocabulary (the file's key
    names, paths as strings), in reference order."""
    changes: list[tuple[str, object, object]] = []
    if old.kafka is not None or new.kafka is not None:
        return _diff_kafka(old, new)
    for spec in KEYS:
        before, after = _field(old, spec), _field(new, spec)
        if before != after:
            changes.append((spec.key, before, after))
    return changes


def _diff_kafka(old: Settings, new: Settings) -> list[tuple[str, object, object]]:
    """A reload of a Kafka config: Kafka's keys as written, then the daemon's keys. A switch
    between store kinds shows as ``store.kind`` (a restart key)."""
    changes: list[tuple[str, object, object]] = []
    if old.store_kind != new.store_kind:
        changes.append(("store.kind", old.store_kind, new.store_kind))
    before = old.kafka.as_dict() if old.kafka is not None else {}
    after = new.kafka.as_dict() if new.kafka is not None else {}
    for key in dict.fromkeys([*before, *after]):
        a, b = _plain_deep(before.get(key)), _plain_deep(after.get(key))
        if a != b:
            changes.append((key, a, b))
    for spec in KEYS:
        if spec.is_daemon:
            a, b = _field(old, spec), _field(new, spec)
            if a != b:
                changes.append((spec.key, a, b))
    return changes


def _plain_deep(value: object) -> object:
    if isinstance(value, list | tuple):
        return [_plain_deep(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain_deep(v) for k, v in value.items()}
    return _plain(value)


_ZONEINFO_DIR = re.compile(r"/zoneinfo/(?:posix/|right/)?(.+)$")


def local_zone_name() -> str | None:
    """Best-effort IANA name of the zone the machine (and so a broker's JVM) uses.

    Only for display ("deleteWhen hours are in Europe/Paris"): the daemon itself computes local
    time through the C library whatever this returns. None when it cannot be told.
    """
    tz = os.environ.get("TZ")
    if tz is not None:
        name = tz[1:] if tz.startswith(":") else tz
        if name == "":
            return "UTC"  # glibc: an empty TZ means UTC
        if schema.is_zone_name(name):
            return name
        match = _ZONEINFO_DIR.search(name)
        if match and schema.is_zone_name(match.group(1)):
            return match.group(1)
        return None  # a POSIX rule string such as "CET-1CEST": no IANA name to give
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        target = ""
    match = _ZONEINFO_DIR.search(target)
    if match and schema.is_zone_name(match.group(1)):
        return match.group(1)
    try:
        with open("/etc/timezone", encoding="utf-8") as handle:
            name = handle.readline().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if name and schema.is_zone_name(name) else None
