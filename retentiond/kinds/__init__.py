"""Store kinds: one package per broker format, each behind ``engine.kind.StoreKind``, and the
registry that picks the kind a configuration file describes.

``load_settings`` is the one entry point from a file to its ``Settings``: the configuration
layer reads the file once (``config.loader``), every registered kind says whether it claims it
(``Claim.YES``: a key only that kind has; ``Claim.FALLBACK``: it would read any file), the one
claiming kind reads it and checks the store on disk. ``kind_for`` makes the kind of validated
settings. The commands and the daemon call these; the engine never does. ``voice_named``
finds a kind's voice (``engine.kind.KindVoice``) by the name a document carries, for the
clients that render one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from retentiond.config.loader import Claim, ConfigFile, Draft, read_config_file
from retentiond.config.problems import ConfigError, ConfigProblem
from retentiond.config.settings import Settings, StoreSection
from retentiond.config.show import ShownKey
from retentiond.engine.kind import AnyKind, KindVoice
from retentiond.kinds.kafka.voice import KafkaVoice
from retentiond.kinds.rocketmq.voice import RocketMQVoice

__all__ = [
    "DEFAULT_VOICE",
    "VOICES",
    "ConfigError",
    "ConfigProblem",
    "EffectiveConfig",
    "KindPlugin",
    "StoreUnusable",
    "kind_for",
    "load_settings",
    "plugin_named",
    "plugins",
    "show_config",
    "voice_named",
]

# Every kind's voice, in the order their metric labels and names are listed.
VOICES: tuple[KindVoice, ...] = (RocketMQVoice, KafkaVoice)
# A status document that names no kind known here (an older daemon's) is read as RocketMQ's,
# as before Kafka was a kind.
DEFAULT_VOICE: KindVoice = RocketMQVoice


def voice_named(name: object) -> KindVoice | None:
    """The voice of the kind called ``name`` (a status reply's ``store_kind``, the type of
    the process that holds a store's lock); None for a name no kind has."""
    for voice in VOICES:
        if voice.name == name:
            return voice
    return None


class KindPlugin(Protocol):
    """What the registry needs of a kind."""

    @property
    def name(self) -> str:
        """The kind's name (``Settings.store.kind_name``)."""
        ...

    @property
    def title(self) -> str:
        """The kind's name in messages."""
        ...

    @property
    def identifying_keys(self) -> frozenset[str]:
        """Keys only this kind's files have: in another kind's file they make it ambiguous."""
        ...

    def claim(self, file: ConfigFile) -> Claim: ...

    def read(self, file: ConfigFile, foreign: Mapping[str, str]) -> Draft[StoreSection]:
        """The file as this kind's settings; ``foreign`` maps the other kinds' identifying
        keys to their titles."""
        ...

    def owns(self, settings: Settings[StoreSection]) -> bool: ...

    def check_store(self, settings: Settings[StoreSection]) -> list[ConfigProblem]:
        """Whether the store the settings name is there and looks like one of this kind's."""
        ...

    def make(self, settings: Settings[StoreSection]) -> AnyKind:
        """The kind, checked against ``StoreKind`` with its own snapshot and plan types."""
        ...

    def show(self, file: ConfigFile, settings: Settings[StoreSection]) -> list[ShownKey]:
        """Every key the kind reads of ``file`` (the daemon's included), its effective value
        and its source, in the kind's reference order; never a secret."""
        ...


def plugins() -> tuple[KindPlugin, ...]:
    """The registered kinds, in the order their claims are asked."""
    from retentiond.kinds.kafka.plugin import PLUGIN as KAFKA
    from retentiond.kinds.rocketmq.plugin import PLUGIN as ROCKETMQ

    return (ROCKETMQ, KAFKA)


def plugin_named(name: str) -> KindPlugin | None:
    """The registered kind called ``name`` (a status reply names its kind), or None."""
    return next((p for p in plugins() if p.name == name), None)


def _pick(file: ConfigFile) -> KindPlugin:
    """The one kind that claims ``file``: the only one to say YES, else the only fallback. A
    file claimed by no kind, or by two, is refused naming them."""
    claims = [(p, p.claim(file)) for p in plugins()]
    for level in (Claim.YES, Claim.FALLBACK):
        claimants = [p for p, c in claims if c is level]
        if len(claimants) == 1:
            return claimants[0]
        if claimants:
            names = " and ".join(p.title for p in claimants)
            message = (
                f"looks like a configuration of several store kinds ({names}); refused rather "
                "than guessed which store is meant"
            )
            raise ConfigError([ConfigProblem(file.file, "", None, message)])
    names = ", ".join(p.title for p in plugins())
    message = f"is not a configuration of any store kind retentiond knows ({names})"
    raise ConfigError([ConfigProblem(file.file, "", None, message)])


class StoreUnusable(ConfigError):
    """A configuration right in itself whose store cannot be used now (every problem a store
    error: a path missing, unmounted, unreadable, without its marker files). ``settings`` are
    the validated settings: a round reports the store error (exit 4) and the daemon runs and
    retries every round; ``check-config`` says so and exits 4."""

    def __init__(self, problems: list[ConfigProblem], settings: Settings[StoreSection]) -> None:
        super().__init__(problems)
        self.settings = settings


def _read(
    file: ConfigFile, *, check_store: bool = True
) -> tuple[KindPlugin, Settings[StoreSection]]:
    """The kind that claims ``file`` and the settings it made of it, or ``ConfigError``."""
    plugin = _pick(file)
    foreign = {
        key: other.title
        for other in plugins()
        if other is not plugin
        for key in other.identifying_keys
    }
    draft = plugin.read(file, foreign)
    problems = list(draft.problems)
    if check_store and draft.to_check is not None:
        problems += plugin.check_store(draft.to_check)
    if draft.settings is not None and problems and all(p.store_error for p in problems):
        raise StoreUnusable(problems, draft.settings)
    if problems or draft.settings is None:
        raise ConfigError(problems)
    return plugin, draft.settings


def load_settings(
    path: str | os.PathLike[str], *, check_store: bool = True
) -> Settings[StoreSection]:
    """Read, validate and (unless ``check_store`` is false) check the store the file points
    at. Raises ``ConfigError`` carrying every problem found: ``StoreUnusable`` (carrying the
    settings) when every one is a store error."""
    return _read(read_config_file(path), check_store=check_store)[1]


@dataclass(frozen=True)
class EffectiveConfig:
    """A configuration key by key (``retentiond config show``)."""

    title: str  # the kind's name in messages
    settings: Settings[StoreSection]
    keys: list[ShownKey]


def show_config(path: str | os.PathLike[str]) -> EffectiveConfig:
    """Every effective key of the file, its value and its source. The file must validate
    (``ConfigError`` otherwise); its store is not checked: the configuration is shown even
    while a mount is missing."""
    file = read_config_file(path)
    plugin, settings = _read(file, check_store=False)
    return EffectiveConfig(plugin.title, settings, plugin.show(file, settings))


def kind_for(settings: Settings[StoreSection]) -> AnyKind:
    """The store kind validated settings describe."""
    for plugin in plugins():
        if plugin.owns(settings):
            return plugin.make(settings)
    raise TypeError(f"no registered store kind for {settings.store.kind_name!r}")
