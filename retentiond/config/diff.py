"""What a reload changed, in the operator's vocabulary: the file's key names, old and new."""

from __future__ import annotations

from collections.abc import Mapping

from retentiond.config.daemon import DAEMON_KEYS, RESTART_KEYS
from retentiond.config.settings import Settings, StoreSection, plain

__all__ = ["diff_settings", "restart_keys"]


def _daemon_values(settings: Settings[StoreSection]) -> dict[str, object]:
    return {
        spec.key: plain(getattr(settings.daemon, spec.field.removeprefix("daemon.")))
        for spec in DAEMON_KEYS
    }


def _deep(value: object) -> object:
    if isinstance(value, list | tuple):
        return [_deep(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _deep(v) for k, v in value.items()}
    return plain(value)


def diff_settings(
    old: Settings[StoreSection], new: Settings[StoreSection]
) -> list[tuple[str, object, object]]:
    """(key, old, new) for every key whose value changed, the kind's keys in reference order
    then the daemon's; a switch between store kinds shows first as ``store.kind``."""
    changes: list[tuple[str, object, object]] = []
    if old.store.kind_name != new.store.kind_name:
        changes.append(("store.kind", old.store.kind_name, new.store.kind_name))
    before, after = old.store.key_values(), new.store.key_values()
    for key in dict.fromkeys([*before, *after]):
        a, b = _deep(before.get(key)), _deep(after.get(key))
        if a != b:
            changes.append((key, a, b))
    before, after = _daemon_values(old), _daemon_values(new)
    for key in before:
        if before[key] != after[key]:
            changes.append((key, before[key], after[key]))
    return changes


def restart_keys(*settings: Settings[StoreSection]) -> frozenset[str]:
    """The keys a reload from one of ``settings`` to another may not change."""
    keys = set(RESTART_KEYS)
    for s in settings:
        keys |= s.store.restart_keys
    return frozenset(keys)
