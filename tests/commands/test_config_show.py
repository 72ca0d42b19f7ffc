"""`retentiond config show` on real configuration files of both kinds (broker.yaml,
broker.conf, server.properties and a Kafka YAML), through the real command line: every
effective key, its value and its source (the file with its line, the default, or a broker
synonym), and never a secret."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from retentiond.config.daemon import DAEMON_KEYS
from retentiond.kinds.kafka.config import KAFKA_KEYS, NOT_FOR_KAFKA
from retentiond.kinds.rocketmq.config import ROCKETMQ_KEYS
from tests.conftest import run_cli

SECRET = "s3cret-Pa55word"  # the metrics password: its file's path is shown, never this


def show(config: Path, *args: str) -> dict[str, dict[str, Any]]:
    result = run_cli("config", "show", "--config", str(config), "--json", *args)
    assert result.code == 0, result.err
    assert SECRET not in result.out
    rows = json.loads(result.out)
    assert all(set(r) == {"key", "value", "source", "line", "synonym"} for r in rows)
    by_key = {r["key"]: r for r in rows}
    assert len(by_key) == len(rows)
    return by_key


def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "metrics.password"
    path.write_text(SECRET + "\n")
    return path


def test_broker_yaml_every_key_with_its_line_or_default(tmp_path: Path) -> None:
    secret = password_file(tmp_path)
    config = tmp_path / "broker.yaml"
    config.write_text(
        f"storePathRootDir: {tmp_path / 'store'}\n"  # line 1
        "fileReservedTime: 48\n"  # line 2
        "# a comment\n"
        "diskSpaceCleanForciblyRatio: 0.8\n"  # line 4
        "brokerClusterName: orders\n"  # line 5
        "retentiond:\n"
        "  cluster: payments\n"  # line 7
        "  journal:\n"
        f"    dir: {tmp_path / 'journal'}\n"  # line 9
        "  metrics:\n"
        "    basicAuthUsername: prometheus\n"
        f"    basicAuthPasswordFile: {secret}\n"  # line 12
    )
    rows = show(config)
    # every key of the kind's table and the daemon's, none else (the store is not checked:
    # it does not exist here)
    assert list(rows) == [k.key for k in ROCKETMQ_KEYS] + [k.key for k in DAEMON_KEYS]
    assert rows["storePathRootDir"] == {
        "key": "storePathRootDir",
        "value": str(tmp_path / "store"),
        "source": "file",
        "line": 1,
        "synonym": None,
    }
    assert (rows["fileReservedTime"]["value"], rows["fileReservedTime"]["line"]) == (48, 2)
    assert rows["diskSpaceCleanForciblyRatio"]["value"] == 0.8
    assert rows["retentiond.cluster"] == {
        "key": "retentiond.cluster",
        "value": "payments",
        "source": "file",
        "line": 7,
        "synonym": None,
    }
    assert rows["retentiond.journal.dir"]["line"] == 9
    assert rows["retentiond.metrics.basicAuthPasswordFile"]["value"] == str(secret)
    assert rows["retentiond.metrics.basicAuthPasswordFile"]["line"] == 12
    # absent keys: their defaults, derived ones included
    assert rows["deleteWhen"] == {
        "key": "deleteWhen",
        "value": "04",
        "source": "default",
        "line": None,
        "synonym": None,
    }
    assert rows["storePathCommitLog"]["value"] == [str(tmp_path / "store" / "commitlog")]
    assert rows["storePathCommitLog"]["source"] == "default"
    assert rows["retentiond.ship.target"]["value"] is None


def test_broker_conf_percents_are_the_fractions_they_stand_for(tmp_path: Path) -> None:
    secret = password_file(tmp_path)
    config = tmp_path / "broker.conf"
    config.write_text(
        "brokerClusterName=DefaultCluster\n"  # line 1
        "brokerRole=ASYNC_MASTER\n"  # the broker's own business
        "accessKey=AK-not-ours\n"
        f"storePathRootDir={tmp_path / 'store'}\n"  # line 4
        "diskSpaceWarningLevelRatio=88\n"  # line 5
        "deleteWhen=03;04\n"  # line 6
        "retentiond.metrics.basicAuthUsername=prometheus\n"
        f"retentiond.metrics.basicAuthPasswordFile={secret}\n"  # line 8
    )
    rows = show(config)
    assert "brokerRole" not in rows and "accessKey" not in rows
    assert rows["diskSpaceWarningLevelRatio"]["value"] == 0.88
    assert rows["diskSpaceWarningLevelRatio"]["line"] == 5
    assert (rows["deleteWhen"]["value"], rows["deleteWhen"]["line"]) == ("03;04", 6)
    assert rows["brokerClusterName"]["source"] == "file"
    assert rows["retentiond.metrics.basicAuthPasswordFile"]["line"] == 8
    assert rows["retentiond.cluster"]["source"] == "default"

    text = run_cli("config", "show", "--config", str(config))
    assert text.code == 0, text.err
    assert SECRET not in text.out and "AK-not-ours" not in text.out
    first, header, *lines = text.out.splitlines()
    assert first.startswith(f"# {config}: RocketMQ, cluster DefaultCluster, broker ")
    assert ", config " in first
    assert header.split() == ["KEY", "SOURCE", "VALUE"]
    assert any(line.split() == ["deleteWhen", "file", "(line", "6)", "03;04"] for line in lines)
    assert any(line.split() == ["fileReservedTime", "default", "72"] for line in lines)


def kafka_log_dir(tmp_path: Path) -> Path:
    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    (log_dir / "meta.properties").write_text("version=1\ncluster.id=q1Sh-9_ISia_zwGINzRvyQ\n")
    return log_dir


def test_server_properties_synonyms_stand_for_the_keys_kafka_reads(tmp_path: Path) -> None:
    log_dir = kafka_log_dir(tmp_path)
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=broker\n"  # line 1
        "broker.id=7\n"  # line 2: node.id's synonym
        f"log.dir={log_dir}\n"  # line 3: log.dirs' synonym
        "log.retention.hours=168\n"  # line 4: overridden by the next
        "log.retention.minutes=90\n"  # line 5: log.retention.ms's synonym
        "ssl.keystore.password=hunter2-keystore\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="admin" password="hunter2-sasl";\n'
        "log.retention.bytes=1073741824\n"  # line 8
        "retentiond.kafka.diskWarningRatio=0.8\n"  # line 9
        "retentiond.cluster=payments\n"  # line 10
    )
    result = run_cli("config", "show", "--config", str(config), "--json")
    assert result.code == 0, result.err
    assert "hunter2" not in result.out
    rows = {r["key"]: r for r in json.loads(result.out)}
    assert rows["log.retention.ms"] == {
        "key": "log.retention.ms",
        "value": 90 * 60_000,
        "source": "broker synonym",
        "line": 5,
        "synonym": "log.retention.minutes",
    }
    assert rows["log.dirs"] == {
        "key": "log.dirs",
        "value": [str(log_dir)],
        "source": "broker synonym",
        "line": 3,
        "synonym": "log.dir",
    }
    assert (rows["node.id"]["value"], rows["node.id"]["synonym"]) == (7, "broker.id")
    assert (rows["log.retention.bytes"]["source"], rows["log.retention.bytes"]["line"]) == (
        "file",
        8,
    )
    assert rows["log.cleanup.policy"]["value"] == "delete"
    assert rows["log.cleanup.policy"]["source"] == "default"
    assert rows["retentiond.kafka.diskWarningRatio"]["value"] == 0.8
    assert rows["retentiond.kafka.diskWarningRatio"]["line"] == 9
    assert rows["retentiond.kafka.unknownTopics"]["value"] == "keep"
    assert rows["retentiond.cluster"]["value"] == "payments"
    assert not {"process.roles", "ssl.keystore.password", "sasl.jaas.config"} & set(rows)
    # every daemon key but those refused in a Kafka file (retentiond.guard.timers)
    own = [k.key for k in KAFKA_KEYS] + [k.key for k in DAEMON_KEYS if k.key not in NOT_FOR_KAFKA]
    assert list(rows)[-len(own) :] == own

    text = run_cli("config", "show", "--config", str(config))
    assert text.code == 0, text.err
    assert "hunter2" not in text.out
    assert text.out.splitlines()[0].startswith(
        f"# {config}: Kafka, cluster payments, broker kafka-7"
    )
    line = next(x for x in text.out.splitlines() if x.startswith("log.retention.ms "))
    assert line.split() == [
        "log.retention.ms",
        "broker",
        "synonym",
        "(log.retention.minutes,",
        "line",
        "5)",
        "5400000",
    ]


def test_kafka_yaml_the_retention_ms_default_and_nested_keys(tmp_path: Path) -> None:
    log_dir = kafka_log_dir(tmp_path)
    config = tmp_path / "kafka.yaml"
    config.write_text(
        f"log.dirs: [{log_dir}]\n"  # line 1
        "log.retention.ms: 3600000\n"  # line 2
        "log.retention.hours: 1000\n"  # line 3: ms wins, as in Kafka
        "retentiond:\n"
        "  kafka:\n"
        "    diskWarningRatio: 0.5\n"  # line 6
        "  dryRun: true\n"  # line 7
    )
    rows = show(config)
    assert rows["log.retention.ms"]["value"] == 3_600_000
    assert (rows["log.retention.ms"]["source"], rows["log.retention.ms"]["line"]) == ("file", 2)
    assert rows["log.dirs"]["source"] == "file"
    assert rows["retentiond.kafka.diskWarningRatio"]["line"] == 6
    assert rows["retentiond.dryRun"] == {
        "key": "retentiond.dryRun",
        "value": True,
        "source": "file",
        "line": 7,
        "synonym": None,
    }
    assert rows["node.id"]["value"] is None and rows["node.id"]["source"] == "default"
    assert rows["retentiond.cluster"]["source"] == "default"

    config.write_text(f"log.dirs: {log_dir}\n")
    rows = show(config)
    assert rows["log.retention.ms"]["value"] == 7 * 24 * 3_600_000  # log.retention.hours=168
    assert rows["log.retention.ms"]["source"] == "default"


def test_a_config_that_does_not_validate_exits_3_with_check_configs_problems(
    tmp_path: Path,
) -> None:
    config = tmp_path / "server.properties"
    config.write_text(
        f"log.dirs={tmp_path}\n"
        "retentiond.kafka.diskWarningRatio=90\n"
        "retentiond.cluster=a/b\n"
        "retentiond.clustr=x\n"
    )
    result = run_cli("config", "show", "--config", str(config))
    assert result.code == 3
    assert result.out == ""
    check = run_cli("check-config", str(config))
    problems = [line for line in result.err.splitlines() if line.startswith("error: ")]
    assert problems == [line for line in check.err.splitlines() if line.startswith("error: ")]
    assert len(problems) == 3
    assert any("diskWarningRatio='90'" in p and "did you mean 0.90?" in p for p in problems)
    assert any("'retentiond.cluster' = 'a/b'" in p for p in problems)
    assert any("did you mean 'retentiond.cluster'?" in p for p in problems)

    missing = run_cli("config", "show", "--config", str(tmp_path / "absent.yaml"))
    assert missing.code == 3 and "cannot read" in missing.err
