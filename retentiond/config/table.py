"""A key table: the keys one kind of file accepts, and what to say about the keys it does not.

A kind builds its table from its own ``ConfigKey`` entries plus the daemon's
(``config.daemon.DAEMON_KEYS``); the readers (``config.readers``) find the table's keys in a
file, and ``build`` coerces them (or takes their defaults) and runs the cross-checks, collecting
every problem rather than stopping at the first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from retentiond.config.daemon import DAEMON_NAMESPACE
from retentiond.config.keys import ConfigKey, Format, Invalid, closest_key, squash
from retentiond.config.problems import ConfigProblem

__all__ = ["CrossCheck", "Entry", "KeyTable"]

# A check that needs several keys: given the valid values (by key), (key, value, message) each.
CrossCheck = Callable[[Mapping[str, object]], list[tuple[str, object, str]]]

NEAR_MISS_RATIO = 0.85


@dataclass(frozen=True)
class Entry:
    """One of the table's keys as found in a file, before coercion."""

    value: object
    line: int


@dataclass(frozen=True)
class KeyTable:
    """The keys of one file format of one kind, in reference order."""

    keys: tuple[ConfigKey, ...]
    yaml_name: str  # how messages name the kind's YAML file
    legacy: Mapping[str, str] = field(default_factory=dict)  # refused, with what to write
    unsupported: Mapping[str, str] = field(default_factory=dict)  # refused when set
    lookalikes: frozenset[str] = frozenset()  # the broker's own keys that look like ours
    cross_checks: tuple[CrossCheck, ...] = ()

    @cached_property
    def by_key(self) -> dict[str, ConfigKey]:
        return {k.key: k for k in self.keys}

    @cached_property
    def namespaces(self) -> frozenset[str]:
        """Every dotted prefix of a key ("retentiond", "retentiond.journal", ...): the nested
        mappings of a YAML file, so a new group of keys needs no change in the reader."""
        return frozenset(
            key.rsplit(".", n)[0] for key in self.by_key for n in range(1, key.count(".") + 1)
        )

    @cached_property
    def daemon_leaves(self) -> dict[str, str]:
        """ "dryRun" at the top of a file is a daemon key in the wrong place, not a broker key
        to ignore: silently ignoring it would turn an intended dry run into real deletions."""
        return {squash(k.key.removeprefix("retentiond.")): k.key for k in self.keys if k.is_daemon}

    def unknown_key_message(self, key: str, fmt: Format) -> str:
        if key in self.legacy:
            return f"refused: {self.legacy[key]}"
        if key in self.unsupported:
            return self.unsupported[key]
        daemon_key = self.daemon_leaves.get(squash(key))
        if daemon_key is not None:
            if fmt is Format.YAML:
                return "unknown key; daemon settings go under 'retentiond:'"
            return f"unknown key; did you mean {daemon_key!r}?"
        candidates = list(self.by_key)
        if key.startswith("retentiond."):
            candidates = [k for k in candidates if k.startswith("retentiond.")]
        near = closest_key(key, candidates, cutoff=0.6)
        hint = f"; did you mean {near!r}?" if near else ""
        where = self.yaml_name if fmt is Format.YAML else "the retentiond namespace"
        return f"unknown key (not accepted in {where}){hint}"

    def foreign_key_message(self, key: str) -> str | None:
        """What to say about a key of the broker's own properties file that is not ours: None
        if it is simply the broker's business."""
        if key in self.legacy or key == DAEMON_NAMESPACE:
            return self.unknown_key_message(key, Format.CONF)
        if key.startswith(DAEMON_NAMESPACE + ".") or squash(key) in self.daemon_leaves:
            return self.unknown_key_message(key, Format.CONF)
        if key in self.lookalikes:
            return None
        near = closest_key(key, list(self.by_key), cutoff=NEAR_MISS_RATIO)
        if near is None:
            return None
        return f"unknown to the broker, which would silently ignore it; did you mean {near!r}?"

    def build(
        self, entries: Mapping[str, Entry], fmt: Format, file: str
    ) -> tuple[dict[str, object], list[ConfigProblem]]:
        """Coerces every key (or takes its default); the values that were valid, keyed by
        config key, and every problem (a value refused, then the cross-checks)."""
        problems: list[ConfigProblem] = []
        values: dict[str, object] = {}
        for spec in self.keys:
            entry = entries.get(spec.key)
            try:
                if entry is None:
                    value = spec.default_value(values)
                else:
                    value = spec.coerce(entry.value, fmt)
            except Invalid as exc:
                shown = entry.value if entry is not None else spec.doc_default.replace("`", "")
                problems.append(ConfigProblem(file, spec.key, shown, str(exc)))
                continue
            if value is None and spec.default_factory is not None:
                continue  # the default depends on a key that was itself refused
            values[spec.key] = value
        for check in self.cross_checks:
            for key, value, message in check(values):
                problems.append(ConfigProblem(file, key, value, message))
        return values, problems
