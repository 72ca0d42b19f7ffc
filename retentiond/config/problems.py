"""One error model for every configuration: a problem names the file, the key and the value.

A daemon that deletes data refuses a configuration it cannot use, and says why in one line per
problem, all problems at once, so a fix is one edit and not one per restart. Every reader (the
YAML and properties readers here, each store kind's own checks) reports through these two
types; the commands print them and exit 3 (4 when every problem is a store error).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

__all__ = ["ConfigError", "ConfigProblem", "show", "type_name"]

_SHOWN_CHARS = 120


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


def show(value: object) -> str:
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
    return f"<{type_name(value)}>"


class ConfigProblem(NamedTuple):
    """One refusal. ``key`` is "" for a problem with the file as a whole. ``written`` is set
    when the entry is shown as the file's own format writes it (``key='value'``, as a broker
    that reads Java properties would log it) rather than as ``key 'k' = value``.
    ``store_error``: the configuration is right in itself, but the store it names cannot be
    used now (a path missing, unmounted, unreadable, without the broker's marker files): a
    store error (exit 4), which the rounds report and retry, not a refusal (exit 3)."""

    file: str
    key: str
    value: object
    message: str
    written: str | None = None
    store_error: bool = False

    def __str__(self) -> str:
        if self.written is not None:
            return f"{self.file}: {self.written}: {self.message}"
        if not self.key:
            return f"{self.file}: {self.message}"
        return f"{self.file}: key {self.key!r} = {show(self.value)}: {self.message}"


class ConfigError(Exception):
    """Every problem found in one configuration file; ``str()`` gives one line per problem."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)
