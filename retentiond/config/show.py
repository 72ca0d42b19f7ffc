"""The effective configuration, key by key, with where each value came from
(``retentiond config show``).

A store kind lists its own keys (it alone knows its synonyms and derived values); the daemon's
keys are listed here for every kind. Only keys retentiond reads are shown: the rest of a
broker's file (passwords of its listeners included) is the broker's and never printed, and a
key naming a file (the metrics password file) shows the path, never what the file holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from retentiond.config.keys import ConfigKey
from retentiond.config.settings import DaemonSettings, plain

__all__ = ["ShownKey", "Source", "daemon_rows", "render_json", "render_text", "shown"]


class Source(StrEnum):
    """Where an effective value came from."""

    FILE = "file"  # the key is written in the file
    DEFAULT = "default"  # absent: the default (the broker's, or ours)
    SYNONYM = "broker synonym"  # absent, but another spelling of it is written


@dataclass(frozen=True)
class ShownKey:
    """One effective key: its value (JSON-ready), where it came from, and the line of the
    file it (or the synonym standing for it) is written on."""

    key: str
    value: object
    source: Source
    line: int | None = None
    synonym: str | None = None  # the key written instead (Source.SYNONYM)
    default_doc: str | None = None  # the text for a value of None (the default's words)

    def as_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "value": self.value,
            "source": self.source.value,
            "line": self.line,
            "synonym": self.synonym,
        }

    @property
    def value_text(self) -> str:
        if self.value is None:
            return self.default_doc or "none"
        if isinstance(self.value, bool):
            return "true" if self.value else "false"
        if isinstance(self.value, list):
            return ",".join(str(v) for v in self.value)
        if isinstance(self.value, dict):
            return json.dumps(self.value, sort_keys=True)
        return str(self.value)

    @property
    def source_text(self) -> str:
        where = f"line {self.line}" if self.line else ""
        if self.source is Source.SYNONYM:
            where = ", ".join(w for w in (str(self.synonym), where) if w)
        return f"{self.source.value} ({where})" if where else self.source.value


def shown(
    spec: ConfigKey, value: object, lines: Mapping[str, int], written: Iterable[str] = ()
) -> ShownKey:
    """``spec``'s row: from the file when ``lines`` (or ``written``) has its key, else its
    default."""
    key = spec.key
    in_file = key in lines or key in written
    return ShownKey(
        key,
        plain(value),
        Source.FILE if in_file else Source.DEFAULT,
        lines.get(key) if in_file else None,
        default_doc=spec.doc_default.replace("`", ""),
    )


def daemon_rows(
    daemon: DaemonSettings, keys: Iterable[ConfigKey], lines: Mapping[str, int]
) -> list[ShownKey]:
    """The daemon's keys (``keys``: the kind's version of ``DAEMON_KEYS``), in table order."""
    return [
        shown(spec, getattr(daemon, spec.field.removeprefix("daemon.")), lines) for spec in keys
    ]


def render_text(rows: Iterable[ShownKey], header: str) -> str:
    """A table: key, source, value (last: a default's words may be long); ``header`` first."""
    table = [("KEY", "SOURCE", "VALUE")] + [(r.key, r.source_text, r.value_text) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(2)]
    lines = [header]
    for key, source, value in table:
        lines.append(f"{key:<{widths[0]}}  {source:<{widths[1]}}  {value}".rstrip())
    return "\n".join(lines) + "\n"


def render_json(rows: Iterable[ShownKey]) -> str:
    """The rows as a JSON list of ``{key, value, source, line, synonym}``."""
    return json.dumps([r.as_dict() for r in rows], indent=2) + "\n"
