"""A Kafka ``server.properties`` (or the same keys in YAML) through ``load_settings``: the
``Settings`` carry the server config, ``kind_for`` picks the Kafka kind, the round period is
``log.retention.check.interval.ms``, and every refusal names the file, the key and the value,
including a file that looks like both a Kafka and a RocketMQ config."""

from __future__ import annotations

from pathlib import Path

import pytest

from retentiond.config.diff import diff_settings
from retentiond.config.problems import ConfigError
from retentiond.config.settings import Settings, StoreSection
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.kafka.config import KafkaServer
from retentiond.kinds.kafka.kind import Kafka
from retentiond.storegen.kafka import KafkaStoreSpec, generate_kafka_store
from tests.conftest import run_cli


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    spec = KafkaStoreSpec(topics={"orders": 1}, records_per_partition=50)
    return generate_kafka_store(tmp_path / "kafka-logs", spec).log_dir


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    return [str(p) for p in e.value.problems]


def test_server_properties_become_kafka_settings(tmp_path: Path, log_dir: Path) -> None:
    cfg = write(
        tmp_path / "server.properties",
        f"process.roles=broker\nnode.id=4\nlog.dirs={log_dir}\nlog.retention.minutes=30\n"
        "log.retention.check.interval.ms=15000\nnum.network.threads=3\n"
        "retentiond.dryRun=true\nretentiond.kafka.unknownTopics=brokerDefaults\n",
    )
    s = load_settings(cfg)
    assert isinstance(s.store, KafkaServer) and s.store.kind_name == "kafka"
    assert s.store.log_dirs == (str(log_dir),) and s.store.node_id == 4
    assert s.store.broker_props["log.retention.minutes"] == "30"
    assert s.round_interval_ms == 15000  # the round period
    assert s.daemon.dry_run and s.store.unknown_topics == "brokerDefaults"
    assert s.broker_name == "kafka-4" and s.broker_cluster_name != "kafka"  # meta.properties
    assert s.store_dirs == (str(log_dir),) and s.store_label == str(log_dir)
    kind = kind_for(s)
    assert isinstance(kind, Kafka) and kind.server.defaults.retention_ms == 30 * 60_000
    assert kind.directories()[0] == str(log_dir)
    assert s.as_dict()["kind"] == "kafka" and "fileReservedTime" not in str(s.as_dict())


def test_yaml_with_the_same_keys(tmp_path: Path, log_dir: Path) -> None:
    props = load_settings(
        write(
            tmp_path / "server.properties",
            f"log.dirs={log_dir}\nlog.retention.hours=24\nlog.cleanup.policy=compact,delete\n"
            "retentiond.dryRun=true\nretentiond.journal.dir=/var/tmp/j\n"
            "retentiond.kafka.timeIndexCompat=true\n",
        )
    )
    yml = load_settings(
        write(
            tmp_path / "kafka.yaml",
            f"log.dirs: [{log_dir}]\nlog.retention.hours: 24\n"
            "log.cleanup.policy: [compact, delete]\n"
            "retentiond:\n  dryRun: true\n  journal:\n    dir: /var/tmp/j\n"
            "  kafka:\n    timeIndexCompat: true\n",
        )
    )
    assert isinstance(yml.store, KafkaServer) and isinstance(props.store, KafkaServer)
    assert yml.store.key_values() == props.store.key_values()
    assert yml.daemon == props.daemon and yml.config_hash == props.config_hash
    assert yml.store.time_index_compat


def test_refusals_name_file_key_and_value(tmp_path: Path, log_dir: Path) -> None:
    cfg = write(
        tmp_path / "server.properties",
        f"log.dirs={log_dir},relative/dir\nlog.retention.ms=7d\n"
        "log.retention.check.interval.ms=0\nretentiond.dryRun=maybe\n"
        "retentiond.journal.dirr=/x\nretentiond.kafka.unknownTopics=guess\n",
    )
    found = problems(cfg)
    text = "\n".join(found)
    for fragment in (
        "log.dirs='relative/dir': not an absolute path",
        "log.retention.ms='7d': not an integer",
        "log.retention.check.interval.ms='0': must be at least 1",
        "key 'retentiond.dryRun' = 'maybe'",
        "key 'retentiond.journal.dirr' = '/x': unknown key",
        "retentiond.kafka.unknownTopics='guess'",
    ):
        assert any(p.startswith(f"{cfg}: ") and fragment in p for p in found), (fragment, text)


def test_log_dir_must_be_a_kafka_log_dir(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = write(tmp_path / "server.properties", f"log.dir={empty}\n")
    [p] = problems(cfg)
    assert f"key 'log.dir' = '{empty}': log dir is empty (a disk not mounted?)" in p
    assert p.startswith(str(cfg))
    (empty / "notes.txt").write_text("")
    [p] = problems(cfg)
    assert f"key 'log.dir' = '{empty}': not a Kafka log dir" in p and p.startswith(str(cfg))
    cfg = write(tmp_path / "server.properties", f"log.dirs={tmp_path}/missing\n")
    [p] = problems(cfg)
    assert f"key 'log.dirs' = '{tmp_path}/missing': log dir does not exist" in p
    # not checked where the store is not looked at (status, trigger-delete)
    assert isinstance(load_settings(cfg, check_store=False).store, KafkaServer)


def test_kafka_and_rocketmq_at_once_is_refused(tmp_path: Path, log_dir: Path) -> None:
    cfg = write(
        tmp_path / "broker.conf",
        f"log.dirs={log_dir}\nstorePathRootDir=/data/store\nfileReservedTime=48\n",
    )
    # one refusal naming the other kind's keys, not one per key
    [p] = problems(cfg)
    assert p.startswith(f"{cfg}: looks like both a Kafka and a RocketMQ config"), p
    assert "RocketMQ's (storePathRootDir, fileReservedTime)" in p, p
    yml = write(tmp_path / "broker.yaml", f"log.dir: {log_dir}\nbrokerName: broker-a\n")
    [p] = problems(yml)
    assert "looks like both" in p and "this key RocketMQ's (brokerName)" in p, p
    # and through the command line: exit 3, nothing deleted
    result = run_cli("check-config", str(cfg))
    assert result.code == 3 and "looks like both a Kafka and a RocketMQ" in result.err
    assert "nothing was deleted" in result.err


def test_check_config_on_a_kafka_config(tmp_path: Path, log_dir: Path) -> None:
    cfg = write(tmp_path / "server.properties", f"log.dirs={log_dir}\n")
    result = run_cli("check-config", str(cfg))
    assert result.code == 0, result.err
    assert f"kafka store {log_dir}" in result.out


def test_reload_diff_in_kafka_keys(tmp_path: Path, log_dir: Path) -> None:
    old = load_settings(write(tmp_path / "a.properties", f"log.dirs={log_dir}\n"))
    new = load_settings(
        write(
            tmp_path / "b.properties",
            f"log.dirs={log_dir}\nlog.retention.hours=1\nretentiond.dryRun=true\n",
        )
    )
    changes = {k: (a, b) for k, a, b in diff_settings(old, new)}
    assert changes == {"log.retention.hours": (None, "1"), "retentiond.dryRun": (False, True)}


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("a.properties", "log.dirs=/x\0y\n", "log.dirs='/x\\x00y': contains a NUL character"),
        ("b.properties", "log.dir=/x\nmetadata.log.dir=m\n", "metadata.log.dir='m': not an"),
        (
            "c.yaml",
            "log.dirs: /x\nretentiond:\n"
            + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(40))
            + "  " * 41
            + "v: 1\n",
            "nested too deeply",
        ),
        ("d.yaml", "log.dir: /x\nlog.retention.ms: {a: 1}\n", "log.retention.ms=<a mapping>"),
        ("e.yaml", "log.dirs: null\n", "log.dirs=null: remove the key"),
    ],
)
def test_hostile_kafka_configs_are_refused_not_crashed(
    tmp_path: Path, name: str, text: str, fragment: str
) -> None:
    found = problems(write(tmp_path / name, text))
    assert any(fragment in p for p in found), found


def test_leftover_and_rescue_keys(tmp_path: Path, log_dir: Path) -> None:
    """Lists are comma-separated in .properties and a YAML list in YAML, items exact names
    or ``*`` globs; the booleans and the floor are checked as Kafka checks its own."""
    props = load_settings(
        write(
            tmp_path / "server.properties",
            f"log.dirs={log_dir}\nretentiond.kafka.removeOrphans=true\n"
            "retentiond.kafka.removeStray=true\nretentiond.kafka.rescue.minRetentionMs=60000\n"
            "retentiond.kafka.rescue.protectTopics=payments, audit-*\n",
        )
    )
    yml = load_settings(
        write(
            tmp_path / "kafka.yaml",
            f"log.dirs: [{log_dir}]\nretentiond:\n  kafka:\n    removeOrphans: true\n"
            "    removeStray: true\n    rescue:\n      minRetentionMs: 60000\n"
            "      protectTopics: [payments, audit-*]\n",
        )
    )
    for s in (props, yml):
        assert isinstance(s.store, KafkaServer)
        assert s.store.remove_orphans and s.store.remove_stray
        assert s.store.rescue_min_retention_ms == 60000
        assert s.store.rescue_protect_topics == ("payments", "audit-*")
        assert s.store.protected("payments") and s.store.protected("audit-eu")
        assert not s.store.protected("payments-v2") and not s.store.protected("orders")
    assert props.config_hash == yml.config_hash
    # a file that sets none of them keeps the hash it had
    plain = write(tmp_path / "plain.properties", f"log.dirs={log_dir}\n")
    assert "removeOrphans" not in str(load_settings(plain).as_dict())

    bad = write(
        tmp_path / "bad.properties",
        f"log.dirs={log_dir}\nretentiond.kafka.removeOrphans=yes\n"
        "retentiond.kafka.removeStray=1\nretentiond.kafka.rescue.minRetentionMs=-5\n"
        "retentiond.kafka.rescue.protectTopics=ok,bad topic\n",
    )
    found = problems(bad)
    for frag in (
        "retentiond.kafka.removeOrphans='yes'",
        "retentiond.kafka.removeStray='1'",
        "retentiond.kafka.rescue.minRetentionMs='-5'",
        "retentiond.kafka.rescue.protectTopics='ok,bad topic'",
    ):
        assert any(f"{bad}: {frag}" in p for p in found), (frag, found)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "must be a fraction greater than 0 and at most 1"),
        ("1.5", "must be a fraction greater than 0 and at most 1"),
        ("90", "must be a fraction greater than 0 and at most 1; did you mean 0.90?"),
        ("-0.5", "must be a fraction greater than 0 and at most 1, like 0.90"),
        ("nan", "must be a fraction greater than 0 and at most 1, like 0.90"),
        ("0_5", "must be a fraction greater than 0 and at most 1, like 0.90"),
        ("", "must be a fraction greater than 0 and at most 1, like 0.90"),
    ],
)
def test_disk_warning_ratio_is_a_fraction_in_0_1(
    tmp_path: Path, log_dir: Path, value: str, message: str
) -> None:
    cfg = write(
        tmp_path / "server.properties",
        f"log.dirs={log_dir}\nretentiond.kafka.diskWarningRatio={value}\n",
    )
    assert problems(cfg) == [f"{cfg}: retentiond.kafka.diskWarningRatio={value!r}: {message}"]


def warning_ratio(settings: Settings[StoreSection]) -> float:
    kind = kind_for(settings)
    assert isinstance(kind, Kafka)
    return kind.disk_warning_ratio


def test_disk_warning_ratio_reaches_the_kind_and_reloads(tmp_path: Path, log_dir: Path) -> None:
    default = load_settings(write(tmp_path / "a.properties", f"log.dirs={log_dir}\n"))
    assert warning_ratio(default) == 0.90
    for text in (".4", "0.4", "1"):
        s = load_settings(
            write(
                tmp_path / "b.properties",
                f"log.dirs={log_dir}\nretentiond.kafka.diskWarningRatio={text}\n",
            )
        )
        assert warning_ratio(s) == float(text)
    yaml = load_settings(
        write(
            tmp_path / "c.yaml",
            f"log.dirs: [{log_dir}]\nretentiond:\n  kafka:\n    diskWarningRatio: 0.75\n",
        )
    )
    assert warning_ratio(yaml) == 0.75
    changes = {k: (a, b) for k, a, b in diff_settings(default, yaml)}
    assert changes == {"retentiond.kafka.diskWarningRatio": (0.90, 0.75)}
    assert yaml.config_hash != default.config_hash
    # at its default the key leaves the hash as it was before the key existed
    explicit = load_settings(
        write(
            tmp_path / "d.properties",
            f"log.dirs={log_dir}\nretentiond.kafka.diskWarningRatio=0.90\n",
        )
    )
    assert explicit.config_hash == default.config_hash


def test_retentiond_cluster_replaces_the_cluster_id(tmp_path: Path, log_dir: Path) -> None:
    plain = load_settings(write(tmp_path / "a.properties", f"log.dirs={log_dir}\n"))
    named = load_settings(
        write(tmp_path / "b.properties", f"log.dirs={log_dir}\nretentiond.cluster=payments\n")
    )
    cluster_id = (log_dir / "meta.properties").read_text().split("cluster.id=")[1].split()[0]
    assert plain.broker_cluster_name == cluster_id
    assert named.broker_cluster_name == "payments"
    assert named.broker_name == plain.broker_name
    assert named.config_hash != plain.config_hash


def test_the_timer_guard_is_refused_in_a_kafka_file(tmp_path: Path, log_dir: Path) -> None:
    cfg = write(
        tmp_path / "server.properties",
        f"log.dirs={log_dir}\nretentiond.guard.timers=keep\nretentiond.guard.unconsumed=keep\n",
    )
    [p] = problems(cfg)
    assert p.startswith(f"{cfg}: key 'retentiond.guard.timers' = 'keep'"), p
    assert "Kafka has no timer messages" in p
    yml = write(
        tmp_path / "server.yaml",
        f"log.dirs: {log_dir}\nretentiond:\n  guard:\n    timers: report\n",
    )
    [p] = problems(yml)
    assert "key 'retentiond.guard.timers'" in p and "Kafka has no timer messages" in p
    result = run_cli("check-config", str(cfg))
    assert result.code == 3 and "Kafka has no timer messages" in result.err, result.err
    # the guard Kafka has is accepted
    ok = write(
        tmp_path / "ok.properties", f"log.dirs={log_dir}\nretentiond.guard.unconsumed=keep\n"
    )
    assert load_settings(ok).daemon.guard_unconsumed == "keep"
