"""The effective retention config of a Kafka topic (spec §10.3), on top of the validated
``server.properties`` (``retentiond.config.kafka``: the file, its synonyms and its refusals
live in the configuration layer, so ``Settings`` can carry it).

A topic's config is its overrides (the KRaft metadata log, else the overrides file) over the
dynamic broker layers over ``server.properties``; when none of the sources knows the topic
and ``retentiond.kafka.unknownTopics`` is ``keep``, it cannot be established and the topic is
never deleted from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from retentiond.config.kafka import (
    BROKER_KEYS,
    ROCKETMQ_MARKERS,
    TOPIC_KEYS,
    UNKNOWN_TOPICS_BROKER_DEFAULTS,
    UNKNOWN_TOPICS_KEEP,
    KafkaConfigError,
    KafkaServer,
    broker_retention,
    broker_retention_ms,
    load_topic_overrides,
    parse_properties,
    topic_value,
)
from retentiond.config.kafka import load_server_properties as _load_server
from retentiond.kinds.kafka.policy import TopicConfig

__all__ = [
    "BROKER_KEYS",
    "ROCKETMQ_MARKERS",
    "TOPIC_KEYS",
    "UNKNOWN_TOPICS_BROKER_DEFAULTS",
    "UNKNOWN_TOPICS_KEEP",
    "KafkaConfigError",
    "KafkaServerConfig",
    "apply_topic_overrides",
    "broker_retention_ms",
    "broker_topic_defaults",
    "for_server",
    "load_server_properties",
    "load_topic_overrides",
    "parse_properties",
]


def broker_topic_defaults(props: Mapping[str, str], path: str) -> TopicConfig:
    """The topic config a topic without overrides gets from these broker properties."""
    r = broker_retention(props, path)
    return TopicConfig(
        cleanup_policy=r.cleanup_policy,
        retention_ms=r.retention_ms,
        retention_bytes=r.retention_bytes,
        file_delete_delay_ms=r.file_delete_delay_ms,
    )


_FIELDS = {
    "cleanup.policy": "cleanup_policy",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "remote.storage.enable": "remote_storage_enable",
}


def apply_topic_overrides(
    base: TopicConfig, overrides: Mapping[str, str], source: str
) -> TopicConfig:
    """Topic-level keys over the broker's values; other topic keys (segment.bytes, ...) do
    not change what retention deletes. Raises ValueError naming source, key and value."""
    changes: dict[str, Any] = {}  # (values of the fields' own types: topic_value's)
    for key, raw in overrides.items():
        value = topic_value(key, str(raw), source)
        if value is not None:
            changes[_FIELDS[key]] = value
    return dataclasses.replace(base, **changes) if changes else base


@dataclass(frozen=True)
class KafkaServerConfig(KafkaServer):
    """The validated server config plus the topic defaults it gives (``TopicConfig``)."""

    defaults: TopicConfig = field(default_factory=TopicConfig)

    def config_for(
        self,
        topic: str,
        metadata_overrides: Mapping[str, Mapping[str, str]] | None = None,
        broker_layers: Sequence[Mapping[str, str]] = (),
    ) -> TopicConfig | None:
        """The effective config of ``topic`` (§10.3): its overrides over the dynamic broker
        layers (lowest first) over server.properties. ``metadata_overrides`` lists every
        topic the metadata log knows (no override: an empty mapping); a topic it does not
        know falls to the overrides file. None when the config cannot be established: the
        topic is in neither source and ``unknownTopics`` is ``keep``, or a value is invalid."""
        props = dict(self.broker_props)
        for layer in broker_layers:
            props.update(layer)
        try:
            base = broker_topic_defaults(props, self.path) if broker_layers else self.defaults
            if metadata_overrides is not None and topic in metadata_overrides:
                return apply_topic_overrides(base, metadata_overrides[topic], "metadata log")
            if topic in self.topic_overrides:
                source = self.retentiond.get("kafka.topicOverrides", "overrides")
                return apply_topic_overrides(base, self.topic_overrides[topic], source)
        except ValueError:
            return None
        return base if self.unknown_topics == UNKNOWN_TOPICS_BROKER_DEFAULTS else None


def for_server(server: KafkaServer) -> KafkaServerConfig:
    """The kind's view of a validated server config (``Settings.kafka``)."""
    if isinstance(server, KafkaServerConfig):
        return server
    fields = {f.name: getattr(server, f.name) for f in dataclasses.fields(KafkaServer)}
    return KafkaServerConfig(
        **fields, defaults=broker_topic_defaults(server.broker_props, server.path)
    )


def load_server_properties(path: str) -> KafkaServerConfig:
    """Read and validate; raises KafkaConfigError listing every problem."""
    return for_server(_load_server(path))
