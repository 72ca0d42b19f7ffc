"""Store kinds: one package per broker format, each behind ``engine.kind.StoreKind``.

``kind_for`` is the one place that maps a configuration to its kind; the commands and the
daemon call it, the engine never does.
"""

from __future__ import annotations

from retentiond.config.settings import Settings
from retentiond.engine.kind import StoreKind


def kind_for(settings: Settings) -> StoreKind:
    """The store kind a validated configuration describes: a Kafka broker's log dirs when it
    carries a ``server.properties`` (``Settings.kafka``), else a RocketMQ store."""
    if settings.kafka is not None:
        from retentiond.kinds.kafka.config import for_server
        from retentiond.kinds.kafka.kind import Kafka

        return Kafka(settings, for_server(settings.kafka))
    from retentiond.kinds.rocketmq.kind import RocketMQ

    return RocketMQ(settings)
