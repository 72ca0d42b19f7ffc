"""RocketMQ as the registry of kinds sees it (``retentiond.kinds``): which files it claims,
how it reads one, how it checks the store on disk, and the kind a configuration makes."""

from __future__ import annotations

from collections.abc import Mapping

from retentiond.config.loader import Claim, ConfigFile, Draft
from retentiond.config.problems import ConfigProblem
from retentiond.config.settings import Settings, StoreSection
from retentiond.config.show import ShownKey
from retentiond.engine.kind import AnyKind, StoreKind
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
        return storecheck.check_store(config.rocketmq_of(settings))

    def show(self, file: ConfigFile, settings: Settings[StoreSection]) -> list[ShownKey]:
        return config.shown_keys(file, config.rocketmq_of(settings))

    def make(self, settings: Settings[StoreSection]) -> AnyKind:
        from retentiond.kinds.rocketmq.kind import RocketMQ
        from retentiond.kinds.rocketmq.plan import Plan
        from retentiond.kinds.rocketmq.snapshot import Snapshot

        kind: StoreKind[Snapshot, Plan] = RocketMQ(config.rocketmq_of(settings))
        return kind


PLUGIN = RocketMQPlugin()
