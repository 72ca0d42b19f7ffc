"""A configuration file read once into a ``ConfigFile``, for the store kinds to claim.

Which kind a file describes is the kinds' decision (``retentiond.kinds.load_settings`` asks
each registered kind whether it claims the file); this module only reads the bytes, tells the
format by the file's suffix and parses the YAML document or the properties entries on first
use, so every kind looking at one file sees the same thing and the file is read once.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from retentiond.config.keys import Format, java_trim
from retentiond.config.problems import ConfigError, ConfigProblem
from retentiond.config.properties import PropertyLine, parse_properties
from retentiond.config.settings import Settings, StoreSection

if TYPE_CHECKING:
    import yaml

__all__ = ["Claim", "ConfigFile", "Draft", "read_config_file"]

YAML_SUFFIXES = (".yaml", ".yml")


class Claim(enum.Enum):
    """A kind's answer to "is this file yours?"."""

    NO = "no"
    FALLBACK = "fallback"  # it would read the file, but nothing in it names the kind
    YES = "yes"  # the file sets a key only this kind has


@dataclass(frozen=True, eq=False)
class ConfigFile:
    """One configuration file's bytes, as every kind sees them."""

    source: Path  # absolute, not symlink-resolved
    data: bytes
    format: Format

    @property
    def file(self) -> str:
        """The file's name as every message gives it."""
        return str(self.source)

    @cached_property
    def document(self) -> object:
        """The YAML document (PyYAML's safe loader), None when it is not valid YAML."""
        import yaml  # only a YAML file needs it: a Kafka command reads none (start-up time)

        try:
            return yaml.safe_load(self.data)
        except Exception:  # PyYAML raises more than YAMLError on hostile input
            return None

    @cached_property
    def properties(self) -> tuple[PropertyLine, ...]:
        """The entries of a properties file as the JVM reads it (ISO-8859-1)."""
        return tuple(parse_properties(self.data.decode("iso-8859-1")))

    def top_level_keys(self) -> frozenset[str]:
        """The keys the file sets at its top level (undecodable entries left out)."""
        if self.format is Format.YAML:
            doc = self.document
            if not isinstance(doc, dict):
                return frozenset()
            return frozenset(k for k in doc if isinstance(k, str))
        return frozenset(p.key for p in self.properties if p.key is not None and p.error is None)

    def key_lines(self) -> dict[str, int]:
        """The line each key is written on (1-based): a properties entry's last occurrence
        (the one ``Properties.load`` keeps); in YAML the dotted path of every scalar key
        (``retentiond:`` → ``journal:`` → ``dir:`` is ``retentiond.journal.dir``). Empty for
        a file that cannot be read."""
        if self.format is Format.CONF:
            return {java_trim(p.key): p.line for p in self.properties if p.key is not None}
        import yaml

        try:
            root = yaml.compose(self.data, Loader=yaml.SafeLoader)
        except Exception:  # PyYAML raises more than YAMLError on hostile input
            return {}
        lines: dict[str, int] = {}

        def walk(node: yaml.Node | None, prefix: str, depth: int) -> None:
            if not isinstance(node, yaml.MappingNode) or depth > 8:
                return
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    key = prefix + key_node.value
                    lines[key] = key_node.start_mark.line + 1
                    walk(value_node, key + ".", depth + 1)

        walk(root, "", 0)
        return lines


S_co = TypeVar("S_co", bound=StoreSection, covariant=True)


@dataclass(frozen=True)
class Draft(Generic[S_co]):
    """What a kind made of a file: its settings (None if anything was refused), every problem
    found, and the settings whose store on disk the kind is to check (``to_check``: enough of
    them to find the store even when another key was refused; None when the keys naming the
    store were themselves refused)."""

    settings: Settings[S_co] | None
    problems: list[ConfigProblem] = field(default_factory=list)
    to_check: Settings[S_co] | None = None


def read_config_file(path: str | os.PathLike[str]) -> ConfigFile:
    """Read ``path``: ``.yaml``/``.yml`` files are YAML, anything else a Java properties file.
    Raises ``ConfigError`` when it cannot be read."""
    # Absolute but not symlink-resolved: a reload must re-read the path the operator gave
    # (Kubernetes swaps ConfigMap contents by re-pointing a symlink).
    source = Path(os.path.abspath(os.fspath(path)))
    try:
        data = source.read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(
            [ConfigProblem(str(source), "", None, f"cannot read: {reason}")]
        ) from None
    fmt = Format.YAML if source.suffix.lower() in YAML_SUFFIXES else Format.CONF
    return ConfigFile(source, data, fmt)
