"""Store kinds: one package per broker format, each behind ``engine.kind.StoreKind``.

``kind_for`` is the one place that maps a configuration to its kind; the commands and the
daemon call it, the engine never does. ``voice_named`` finds a kind's voice
(``engine.kind.KindVoice``) by the name a document carries, for the clients that render one.
"""

from __future__ import annotations

from retentiond.config.settings import Settings
from retentiond.engine.kind import AnyKind, KindVoice, StoreKind
from retentiond.kinds.kafka.voice import KafkaVoice
from retentiond.kinds.rocketmq.voice import RocketMQVoice

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


def kind_for(settings: Settings) -> AnyKind:
    """The store kind a validated configuration describes: a Kafka broker's log dirs when it
    carries a ``server.properties`` (``Settings.kafka``), else a RocketMQ store. Each is
    checked against ``StoreKind`` with its own snapshot and plan types."""
    if settings.kafka is not None:
        from retentiond.kinds.kafka.config import for_server
        from retentiond.kinds.kafka.kind import Kafka, KafkaSnapshot
        from retentiond.kinds.kafka.plan import KafkaPlan

        kafka: StoreKind[KafkaSnapshot, KafkaPlan] = Kafka(settings, for_server(settings.kafka))
        return kafka
    from retentiond.kinds.rocketmq.kind import RocketMQ
    from retentiond.kinds.rocketmq.plan import Plan
    from retentiond.kinds.rocketmq.snapshot import Snapshot

    rocketmq: StoreKind[Snapshot, Plan] = RocketMQ(settings)
    return rocketmq
