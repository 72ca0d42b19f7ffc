"""The YAML reader of a key table (``readers.read_yaml``): which of its keys a YAML file sets.

YAML is read strictly (a duplicate key is refused, not silently overwritten; the daemon's keys
are nested mappings). A module of its own, imported when a YAML file is read: PyYAML is not
imported by a command whose configuration is a properties file (start-up time).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from retentiond.config.daemon import DAEMON_NAMESPACE
from retentiond.config.keys import Format
from retentiond.config.problems import ConfigProblem, show, type_name
from retentiond.config.table import Entry, KeyTable

__all__ = ["read_yaml"]

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


def read_yaml(
    data: bytes, file: str, table: KeyTable
) -> tuple[dict[str, Entry], list[ConfigProblem]]:
    """The table's keys in a YAML file (nested ``retentiond:`` mappings flattened to dotted
    keys), and every problem: a syntax error, a duplicate key, a key the table does not have."""
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
    daemon_node = _child(root, DAEMON_NAMESPACE)
    journal_node = _child(daemon_node, "journal")
    prefixes = {id(root): ""}
    if daemon_node is not None:
        prefixes[id(daemon_node)] = "retentiond."
    if journal_node is not None:
        prefixes[id(journal_node)] = "retentiond.journal."
    for namespace in table.namespaces - {"retentiond", "retentiond.journal"}:
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
        message = f"must be a mapping of keys to values, not {type_name(document)}"
        return {}, [*problems, ConfigProblem(file, "", None, message)]

    entries: dict[str, Entry] = {}
    for key, value in _flatten_yaml(document, file, problems, table):
        spec = table.by_key.get(key)
        if spec is None:
            problems.append(
                ConfigProblem(file, key, value, table.unknown_key_message(key, Format.YAML))
            )
            continue
        if spec.as_written:
            value = _raw_scalar(_node_of(root, key), value)
        entries[key] = Entry(value, 0)  # duplicates were reported by the loader already
    return entries, problems


def _raw_scalar(node: Node | None, value: object) -> object:
    """``04`` is the YAML 1.1 octal int 4 and ``010`` is 8, but a broker that reads the text
    with Integer.parseInt sees 4 and 10. So for an unquoted number we take the text as written."""
    if (
        isinstance(node, ScalarNode)
        and node.style is None
        and node.tag in (_INT_TAG, _FLOAT_TAG)
        and not isinstance(value, bool)
    ):
        return node.value
    return value


def _flatten_yaml(
    document: dict[object, object], file: str, problems: list[ConfigProblem], table: KeyTable
) -> Iterator[tuple[str, object]]:
    """Yields (dotted key, value); the nested ``retentiond:`` / ``journal:`` mappings become
    ``retentiond.x`` / ``retentiond.journal.x`` so both formats share one key space."""

    def walk(mapping: dict[object, object], prefix: str) -> Iterator[tuple[str, object]]:
        for key, value in mapping.items():
            if not isinstance(key, str):
                shown = f"{prefix}{show(key)}"
                problems.append(ConfigProblem(file, shown, value, "keys must be strings"))
                continue
            dotted = f"{prefix}{key}"
            if "." in key:
                message = table.unknown_key_message(dotted, Format.YAML)
                if dotted in table.by_key or dotted in table.namespaces:
                    message = (
                        f"in {table.yaml_name} the retentiond keys are nested mappings, not dotted"
                    )
                problems.append(ConfigProblem(file, dotted, value, message))
                continue
            if dotted in table.namespaces:
                if value is None:
                    continue
                if not isinstance(value, dict):
                    message = f"must be a mapping, not {type_name(value)}"
                    problems.append(ConfigProblem(file, dotted, value, message))
                    continue
                yield from walk(value, dotted + ".")
                continue
            yield dotted, value

    yield from walk(document, "")


def _node_of(root: Node | None, key: str) -> Node | None:
    """The value node of a dotted ``key`` (nested mappings), as construction keeps it."""
    node = root
    for part in key.split("."):
        node = _child(node, part)
    return node


# --- Java properties -----------------------------------------------------------------------
