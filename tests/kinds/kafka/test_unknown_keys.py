"""Kafka's own keys in ``server.properties`` (or its YAML form) checked against the broker's key
set (``kinds/kafka/brokerkeys.py``), through the real CLI: an unknown ``log.*`` key is refused
with the key it most likely meant (the broker would ignore it and keep its default), any other
unknown key is one warning, as Kafka logs "supplied but isn't a known config"."""

from __future__ import annotations

from pathlib import Path

import pytest

from retentiond.kinds.kafka import config
from retentiond.kinds.kafka.brokerkeys import BROKER_KEYS, is_broker_key
from retentiond.storegen.kafka import KafkaStoreSpec, generate_kafka_store
from tests.conftest import run_cli


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    spec = KafkaStoreSpec(topics={"orders": 1}, records_per_partition=20)
    return generate_kafka_store(tmp_path / "kafka-logs", spec).log_dir


def test_a_misspelled_retention_key_is_refused_with_did_you_mean(
    tmp_path: Path, log_dir: Path
) -> None:
    cfg = tmp_path / "server.properties"
    cfg.write_text(f"log.dirs={log_dir}\nlog.retention.hourz=12\n")
    result = run_cli("check-config", str(cfg))
    assert result.code == 3, (result.out, result.err)
    assert (
        f"error: {cfg}: key 'log.retention.hourz' = '12': not a Kafka broker config" in result.err
    )
    assert "did you mean 'log.retention.hours'?" in result.err
    yml = tmp_path / "server.yaml"
    yml.write_text(f"log.dirs: [{log_dir}]\nlog.retention.msec: 1000\n")
    result = run_cli("check-config", str(yml))
    assert result.code == 3 and "did you mean 'log.retention.ms'?" in result.err, result.err


def test_another_unknown_key_is_one_warning(tmp_path: Path, log_dir: Path) -> None:
    cfg = tmp_path / "server.properties"
    cfg.write_text(
        f"log.dirs={log_dir}\nnum.partitonz=3\nretention.ms=1000\n"
        "listeners=PLAINTEXT://:9092\nlistener.name.internal.ssl.keystore.location=/ks\n"
        "process.roles=broker\nnode.id=1\ncontroller.quorum.voters=1@localhost:9093\n"
    )
    result = run_cli("check-config", str(cfg))
    assert result.code == 0, result.err
    warnings = [line for line in result.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, result.err  # the known keys and the listener prefix: silent
    [typo] = [w for w in warnings if "'num.partitonz'" in w]
    assert "supplied but isn't a known config" in typo and "'num.partitions'" in typo
    [topic] = [w for w in warnings if "'retention.ms'" in w]
    assert "a topic-level key: the broker's own is 'log.retention.ms'" in topic
    plan = run_cli("plan", "--config", str(cfg))
    assert plan.code == 0 and plan.err.count("warning: ") == 2, plan.err


def test_the_keys_retentiond_reads_are_broker_keys() -> None:
    for key in (*config.BROKER_KEYS, *config.RESTART_KEYS, "log.dir", "log.cleaner.enable"):
        assert is_broker_key(key), key
    assert "log.retention.check.interval.ms" in BROKER_KEYS
    assert not any(is_broker_key(k) for k in config.TOPIC_KEYS)  # topic-level, not broker
