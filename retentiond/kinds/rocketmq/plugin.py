"""RocketMQ as the registry of kinds sees it (``retentiond.kinds``): which files it claims,
how it reads one, how it checks the store on disk, and the kind a configuration makes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from retentiond.config.loader import Claim, ConfigFile, Draft
from retentiond.config.problems import ConfigProblem
from retentiond.config.settings import Settings, StoreSection
from retentiond.engine.kind import StoreKind
from retentiond.kinds.rocketmq import config, storecheck
from retentiond.kinds.rocketmq.config import RocketMQStore


class RocketMQPlugin:
    name = config.KIND_NAME
    title = config.TITLE
    identifying_keys = config.IDENTIFYING_KEYS

    def claim(self, file: ConfigFile) -> Claim:
        return config.claim(file)

    def read(self, file: ConfigFile, foreign: Mapping[str, str]) -> Draft[RocketMQStore]:
        return config.read(file, foreign)

    def owns(self, settings: Settings[StoreSection]) -> bool:
        return isinstance(settings.store, RocketMQStore)

    def check_store(self, settings: Settings[StoreSection]) -> list[ConfigProblem]:
        return storecheck.check_store(_mine(settings))

    def make(self, settings: Settings[StoreSection]) -> StoreKind:
        from retentiond.kinds.rocketmq.kind import RocketMQ

        return RocketMQ(_mine(settings))


def _mine(settings: Settings[StoreSection]) -> Settings[RocketMQStore]:
    if not isinstance(settings.store, RocketMQStore):
        raise TypeError(f"not a RocketMQ configuration: {settings.store.kind_name}")
    return cast(Settings[RocketMQStore], settings)


PLUGIN = RocketMQPlugin()
