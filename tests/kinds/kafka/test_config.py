"""server.properties read as Kafka reads it (spec §5.1), and the strict refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from retentiond.config.problems import ConfigError
from retentiond.kinds import load_settings
from retentiond.kinds.kafka.config import (
    load_server_properties,
    parse_properties,
)
from retentiond.kinds.kafka.policy import DEFAULT_RETENTION_MS, TopicConfig


def write(tmp_path: Path, text: str, name: str = "server.properties") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_java_properties_syntax() -> None:
    text = (
        "# comment\n! also a comment\n"
        "a=1\nb : 2\nc 3\n  d\t=\t4  \n"
        "e=one,\\\n    two\n"
        "f\\=g=5\nh=\\u0041\\tB\n"
        "a=last\n"
    )
    assert parse_properties(text) == {
        "a": "last",
        "b": "2",
        "c": "3",
        "d": "4  ",
        "e": "one,two",
        "f=g": "5",
        "h": "A\tB",
    }


def test_lines_end_where_java_ends_them() -> None:
    """Only CR, LF and CRLF end a line (``Properties.load``), not the other characters
    ``str.splitlines`` breaks on: the same reader as broker.conf's (``config/properties.py``)."""
    text = "log.dirs=/data/a\x85b\r\nlog.retention.ms=5\rnum=1\x0bx\n"
    assert parse_properties(text) == {
        "log.dirs": "/data/a\x85b",
        "log.retention.ms": "5",
        "num": "1\x0bx",
    }


def test_defaults_and_synonyms(tmp_path: Path) -> None:
    c = load_server_properties(write(tmp_path, "log.dirs=/a, /b\nnode.id=3\n"))
    assert c.log_dirs == ("/a", "/b") and c.node_id == 3
    assert c.defaults == TopicConfig(retention_ms=DEFAULT_RETENTION_MS)
    assert c.cleaner_enable and c.retention_check_interval_ms == 300000
    assert c.segment_delete_delay_ms == 60000 and c.metadata_dir == "/a"

    c = load_server_properties(write(tmp_path, "log.dir=/x\nlog.retention.hours=1\n"))
    assert c.log_dirs == ("/x",) and c.defaults.retention_ms == 3_600_000
    text = "log.dir=/x\nlog.retention.hours=1\nlog.retention.minutes=2\n"
    assert load_server_properties(write(tmp_path, text)).defaults.retention_ms == 120_000
    text += "log.retention.ms=5\n"
    assert load_server_properties(write(tmp_path, text)).defaults.retention_ms == 5
    neg = "log.dir=/x\nlog.retention.minutes=-3\nlog.retention.bytes=1000\n"
    c = load_server_properties(write(tmp_path, neg))
    assert c.defaults.retention_ms == -1 and c.defaults.retention_bytes == 1000
    c = load_server_properties(
        write(
            tmp_path,
            "log.dirs=/x\nlog.cleanup.policy=Compact, DELETE\nlog.cleaner.enable=FALSE\n"
            "metadata.log.dir=/m\nbroker.id=7\nlog.segment.delete.delay.ms=0\n",
        )
    )
    assert c.defaults.cleanup_policy == {"compact", "delete"} and not c.cleaner_enable
    assert c.metadata_dir == "/m" and c.node_id == 7 and c.segment_delete_delay_ms == 0


def test_strict_errors_name_file_key_and_value(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "log.dirs=/x\nlog.retention.ms=7d\nlog.cleaner.enable=yes\n"
        "log.retention.check.interval.ms=0\nlog.cleanup.policy=delete,archive\n"
        "retentiond.kafka.unknownTopics=maybe\nretentiond.kafka.timeIndexCompat=1\n",
    )
    with pytest.raises(ConfigError) as e:
        load_server_properties(path)
    text = str(e.value)
    for frag in (
        "log.retention.ms='7d'",
        "log.cleaner.enable='yes'",
        "log.retention.check.interval.ms='0'",
        "log.cleanup.policy='delete,archive'",
        "retentiond.kafka.unknownTopics='maybe'",
        "retentiond.kafka.timeIndexCompat='1'",
    ):
        assert f"{path}: {frag}" in text
    assert len(e.value.problems) == 6


def test_not_kafka_or_ambiguous(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"neither log\.dirs nor log\.dir"):
        load_server_properties(write(tmp_path, "brokerName=a\n"))
    with pytest.raises(ConfigError, match="both a Kafka and a RocketMQ"):
        load_settings(write(tmp_path, "log.dirs=/x\nstorePathRootDir=/s\n"))


def test_topic_overrides_file_and_unknown_topics(tmp_path: Path) -> None:
    (tmp_path / "overrides.yaml").write_text(
        "orders: {retention.ms: 1000, cleanup.policy: [compact, delete]}\n"
        "logs: {retention.bytes: 5}\n"
    )
    base = "log.dirs=/x\nlog.retention.bytes=99\nretentiond.kafka.topicOverrides=overrides.yaml\n"
    c = load_server_properties(write(tmp_path, base))
    orders = c.config_for("orders")
    assert orders is not None and orders.retention_ms == 1000 and orders.compact
    assert orders.retention_bytes == 99
    logs = c.config_for("logs")
    assert logs is not None and logs.retention_bytes == 5
    assert c.config_for("other") is None  # unknown topics are kept
    c = load_server_properties(
        write(tmp_path, base + "retentiond.kafka.unknownTopics=brokerDefaults\n")
    )
    assert c.config_for("other") == c.defaults


def test_bad_override_value_is_refused(tmp_path: Path) -> None:
    (tmp_path / "o.yaml").write_text("orders: {retention.ms: -5}\n")
    path = write(tmp_path, "log.dirs=/x\nretentiond.kafka.topicOverrides=o.yaml\n")
    with pytest.raises(ConfigError, match=r"o\.yaml: orders: retention\.ms='-5'"):
        load_server_properties(path)
