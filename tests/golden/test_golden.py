"""Golden files: retentiond's observable outputs, frozen byte for byte (see README.md here).

Every output is produced by the real thing on real generated stores: ``python -m retentiond``
as a separate process (``plan --json``, ``once``, ``check-config``, ``status --json``) and a
real ``retentiond run`` daemon (``status --json``, ``/metrics``). ``normalise`` replaces only
what varies from run to run (times, temporary paths, pids, ids, host figures); everything else
is compared byte for byte with the file in this directory. ``RETENTIOND_UPDATE_GOLDEN=1``
rewrites the files instead of comparing.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from retentiond.config.zones import local_zone_name
from retentiond.kinds import load_settings
from tests.conftest import Tmpfs
from tests.helpers.cli import CliResult, run_cli
from tests.helpers.daemons import Daemon, spawn_run
from tests.helpers.stores import ALL_HOURS, expired_spec, make_store
from tests.kinds.kafka.kafkalog import KafkaLog, set_checkpoint

GOLDEN = Path(__file__).parent
UPDATE = os.environ.get("RETENTIOND_UPDATE_GOLDEN") == "1"
DAY_MS = 86_400_000

# ---- normalisation ------------------------------------------------------------------------

# JSON keys (and metric labels) whose values come from the clock, the host, the process or
# the temporary paths, never from the store or the configuration: each value is replaced by
# "<key>" wherever it appears (plans, journal records, status documents, metric labels).
VARYING_KEYS = (
    # the clock
    "now_ms",
    "time_ms",
    "mtime_ms",  # generated files are aged relative to the clock
    "age_ms",
    "duration_ms",
    "started_ms",
    "last_scan_ms",
    "next_ms",
    "expires_ms",  # plans: mtime (or largest timestamp) + retention
    "next_window_ms",  # plans: the next delete hour, from the clock
    "next_delete_window_ms",
    "read_at_s",
    "read_ms",
    "hour",  # the local hour of the round
    # the process and the host
    "pid",
    "ino",
    "writer",  # the journal writer: boot id, pid, counter
    "host",
    "vm_max_map_count",  # the kernel's setting
    "proc_view_complete",  # whether every process's open files can be looked into
    "python_version",
    # hashes of the effective settings, which hold the temporary paths (config_hash/ freezes
    # config_hash on files at fixed paths)
    "config_hash",
    "hash",  # status: config.hash
)
# Disk figures of the host filesystem (Kafka's log dirs live there; RocketMQ's stores are on
# a tmpfs of their own, whose figures are the same everywhere and are kept).
HOST_DISK_KEYS = ("used_bytes", "avail_bytes", "total_bytes", "free_bytes", "ratio")
# python_info's labels: the interpreter running the tests
_PYTHON_INFO = re.compile(r"^python_info\{.*\}$", re.M)

_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_EPOCH_MS = re.compile(r"\b1[5-9]\d{11}\b")  # a millisecond timestamp (2017..2033)
_AGE = re.compile(r"\bage -?\d+ ms\b")
# a human age in a text table (text.units.human_age)
_AGE_CELL = re.compile(r"(?<= )-?\d+(?:d\d\dh|h\d\dm|m\d\ds)(?= )")
_CONFIG_TEXT = re.compile(r"\bconfig [0-9a-f]{12}\b")
_ROUND_TIME = re.compile(r"\bround done in \d+(?:\.\d+)?s\b")
_HOUR_TEXT = re.compile(r"\(hour \d+\)")
# a time in a plan's zone (text.units.human_time), and an age after "age" in a text
_DATE_TEXT = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d [A-Za-z0-9+-]+")
_AGE_WORD = re.compile(r"\bage -?\d+(?:d\d\dh|h\d\dm|m\d\ds)\b")
_INDEX_NAME = re.compile(r"(?<=/index/)\d{17}\b")  # yyyyMMddHHmmssSSS of its creation
_HEX_ID = re.compile(r'("id":\s*)"([0-9a-f]{32})"')


def normalise(
    text: str, paths: dict[Path, str], *, host_disk: bool = False, table: bool = False
) -> str:
    """``text`` with only its varying parts replaced, in this order:

    1. each temporary directory in ``paths`` (longest first) by its placeholder (``<tmp>``);
    2. the values of ``VARYING_KEYS`` (and, with ``host_disk``, ``HOST_DISK_KEYS``) by
       ``"<key>"``, as JSON members and as metric labels; ``python_info``'s labels;
    3. record ids (uuid hex) by ``<id-N>``, numbered in order of first appearance, so that an
       intent and its outcome still visibly share one; likewise the names of RocketMQ index
       files (their creation time, ``yyyyMMddHHmmssSSS``) by ``<index-N>``;
    4. the machine's zone where a plan names it (``"timezone"``, ``timezone X``) by
       ``<local-zone>``; ISO times by ``<iso>``, millisecond timestamps inside texts by
       ``<ts>``, and ``age N ms`` inside texts by ``age <age> ms``;
    5. with ``table`` (the text output of ``plan`` and ``once``): the ages of the file tables
       (``4d01h``) and after ``age`` by ``<age>``, the dates in the plan's zone
       (``2026-01-02 04:00 UTC``) by ``<date>``, the round's duration
       (``round done in <s>s``), the local hour (``(hour <hour>)``), the config hash
       (``config <config_hash>``), and every run of two or more spaces after a word by two
       spaces (indentation is kept): the columns are padded to the widest cell, and the
       widest path is a temporary one.
    """
    for path, placeholder in sorted(paths.items(), key=lambda kv: -len(str(kv[0]))):
        text = text.replace(str(path), placeholder)
    keys = VARYING_KEYS + (HOST_DISK_KEYS if host_disk else ())
    names = "|".join(keys)
    pattern = re.compile(r'("(' + names + r')":\s*)(' + _NUMBER + r'|"[^"]*"|true|false)')
    text = pattern.sub(lambda m: f'{m.group(1)}"<{m.group(2)}>"', text)
    label = re.compile(r"([{,](" + names + r')=)"[^"]*"')
    text = label.sub(lambda m: f'{m.group(1)}"<{m.group(2)}>"', text)
    text = _PYTHON_INFO.sub("python_info{<the interpreter>}", text)
    ids: dict[str, str] = {}
    text = _HEX_ID.sub(
        lambda m: f'{m.group(1)}"{ids.setdefault(m.group(2), f"<id-{len(ids) + 1}>")}"', text
    )
    names_seen: dict[str, str] = {}
    text = _INDEX_NAME.sub(
        lambda m: names_seen.setdefault(m.group(0), f"<index-{len(names_seen) + 1}>"), text
    )
    zone = local_zone_name()  # the machine's zone, which a plan names
    if zone:
        text = text.replace(f'"timezone": "{zone}"', '"timezone": "<local-zone>"')
        text = text.replace(f"timezone {zone} ", "timezone <local-zone> ")
    text = _ISO.sub("<iso>", text)
    text = _EPOCH_MS.sub("<ts>", text)
    text = _AGE.sub("age <age> ms", text)
    if table:
        text = _AGE_CELL.sub("<age>", text)
        text = _DATE_TEXT.sub("<date>", text)
        text = _AGE_WORD.sub("age <age>", text)
        text = _ROUND_TIME.sub("round done in <s>s", text)
        text = _HOUR_TEXT.sub("(hour <hour>)", text)
        text = _CONFIG_TEXT.sub("config <config_hash>", text)
        text = re.sub(r"(?<=\S) {2,}", "  ", text)
    return text


def check(name: str, text: str) -> None:
    """Compare ``text`` with ``tests/golden/<name>`` byte for byte (or rewrite the file)."""
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        return
    assert path.exists(), f"{path}: no golden file; run with RETENTIOND_UPDATE_GOLDEN=1"
    expected = path.read_text()
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"golden/{name}",
                "now",
            )
        )
        pytest.fail(f"{name} differs from its golden file:\n{diff}", pytrace=False)


def with_code(result: CliResult, stdout: str) -> str:
    return f"exit {result.code}\n{stdout}" + ("" if stdout.endswith("\n") else "\n")


def journal_text(journal: Path) -> str:
    """Every journal segment's lines, in segment order, as the journal wrote them."""
    if not journal.exists():
        return ""
    return "".join(p.read_text() for p in sorted(journal.glob("journal-*.jsonl")))


# ---- RocketMQ: plan --json and the journal of `once` ---------------------------------------


def other_hour() -> str:
    """An hour of the day that is not now nor within the next hours of the test."""
    return f"{(time.localtime().tm_hour + 12) % 24:02d}"


def _rocketmq(case: str, tmp: Path, tmpfs: Tmpfs) -> tuple[Path, Path, list[str]]:
    """The store, config and ``once`` arguments of a case; the store on its own tmpfs, so that
    its disk figures are the same on every machine."""
    store_dir = tmpfs.path / "store"
    extra: list[str] = []
    keys: dict[str, Any] = {"brokerName": "broker-a", "brokerClusterName": "golden"}
    spec = expired_spec(4)
    if case == "delete_hour":
        keys["deleteWhen"] = ALL_HOURS
    elif case == "outside_delete_hour":
        keys["deleteWhen"] = other_hour()
    elif case == "disk_over_max":
        keys |= {"deleteWhen": other_hour(), "diskMaxUsedSpaceRatio": 10}
    elif case == "forced":
        # nothing expired, the disk above diskSpaceCleanForciblyRatio: forced deletions
        spec = expired_spec(4, oldest_age_hours=10.0, newest_age_hours=1.0)
        keys |= {"deleteWhen": other_hour(), "diskSpaceCleanForciblyRatio": 0.3}
    elif case == "manual":
        keys["deleteWhen"] = other_hour()
        extra = ["--manual"]
    elif case == "store_error":
        keys["deleteWhen"] = ALL_HOURS
    else:
        raise AssertionError(case)
    store = make_store(tmp, spec, store_dir=store_dir, **keys)
    if case == "store_error":  # an empty CommitLog dir, as an unmounted mount point leaves
        for f in (store.root / "commitlog").iterdir():
            f.unlink()
    if case in ("disk_over_max", "forced"):
        tmpfs.fill_to(0.5)
    return store.config, store.journal, extra


ROCKETMQ_CASES = ["delete_hour", "outside_delete_hour", "disk_over_max", "forced", "manual"]


@pytest.mark.parametrize("case", [*ROCKETMQ_CASES, "store_error"])
def test_rocketmq_round(case: str, tmp_path: Path, tmpfs: Tmpfs) -> None:
    config, journal, extra = _rocketmq(case, tmp_path, tmpfs)
    paths = {tmpfs.path: "<tmpfs>", tmp_path: "<tmp>"}
    plan = run_cli("plan", "--json", *extra, "--config", str(config))
    text = run_cli("plan", *extra, "--config", str(config))
    once = run_cli("once", *extra, "--config", str(config))
    check(f"rocketmq/{case}.plan.json", normalise(with_code(plan, plan.out), paths))
    check(f"rocketmq/{case}.plan.txt", normalise(with_code(text, text.out), paths, table=True))
    check(f"rocketmq/{case}.once.txt", normalise(with_code(once, once.out), paths, table=True))
    check(
        f"rocketmq/{case}.journal.jsonl",
        normalise(with_code(once, journal_text(journal)), paths),
    )


# ---- Kafka: plan --json and the journal of `once` -----------------------------------------

HOLDER = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
    "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)


@contextmanager
def broker_holding(log_dir: Path) -> Iterator[None]:
    """A process holding ``<log_dir>/.lock`` as a live Kafka broker does (a POSIX lock)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(log_dir / ".lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield
    finally:
        proc.kill()
        proc.wait()


def kafka_log_dir(tmp: Path, case: str, now: int) -> tuple[Path, Path]:
    """A log dir for ``case`` and its server.properties: ``orders`` (2 partitions, 10 days of
    data: expired by the 7-day default), ``fresh`` (a minute old) and, for ``unknown_topic``,
    ``mystery`` (no config anywhere)."""
    log_dir = tmp / "kafka-logs"
    overrides: dict[str, dict[str, Any]] = {"orders": {}, "fresh": {}}
    for topic, partition, days in (("orders", 0, 10), ("orders", 1, 10), ("fresh", 0, 0)):
        log = KafkaLog(log_dir, topic, partition, segment_bytes=5 * 72, epochs=[(0, 0), (2, 12)])
        for i in range(30):
            ts = now - days * DAY_MS + i * 1000 if days else now - 60_000 + i
            log.append_records(1, ts)
        log.write(hw=log.leo)
    if case == "retention_ms":
        overrides["orders"] = {"retention.ms": 604_800_000}
    elif case == "retention_bytes":
        overrides["orders"] = {"retention.ms": -1, "retention.bytes": 1000}
        overrides["fresh"] = {"retention.bytes": 1000}
    elif case == "log_start_breach":
        overrides["orders"] = {"retention.ms": -1}
        overrides["fresh"] = {"retention.ms": -1}
        set_checkpoint(log_dir / "log-start-offset-checkpoint", ("orders", 0), 12)
        set_checkpoint(log_dir / "log-start-offset-checkpoint", ("fresh", 0), 17)
    elif case == "unknown_topic":
        mystery = KafkaLog(log_dir, "mystery", 0, segment_bytes=5 * 72)
        mystery.append_records(30, now - 30 * DAY_MS)
        mystery.write(hw=mystery.leo)
    elif case != "broker_running":
        raise AssertionError(case)
    (log_dir / "meta.properties").write_text("version=1\nnode.id=3\ncluster.id=golden-test\n")
    topics = tmp / "topics.yaml"
    topics.write_text(
        "".join(
            f"{t}: {{{', '.join(f'{k}: {v}' for k, v in keys.items())}}}\n"
            for t, keys in overrides.items()
        )
    )
    config = write_kafka_config(tmp, log_dir, topics)
    return log_dir, config


def write_kafka_config(tmp: Path, log_dir: Path, topics: Path, *extra: str) -> Path:
    path = tmp / "server.properties"
    lines = [
        "process.roles=broker",
        "node.id=3",
        f"log.dirs={log_dir}",
        "log.retention.hours=168",
        f"retentiond.kafka.topicOverrides={topics}",
        f"retentiond.journal.dir={tmp / 'journal'}",
        *extra,
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


KAFKA_CASES = [
    "retention_ms",
    "retention_bytes",
    "log_start_breach",
    "broker_running",
    "unknown_topic",
]


@pytest.mark.parametrize("case", KAFKA_CASES)
def test_kafka_round(case: str, tmp_path: Path) -> None:
    log_dir, config = kafka_log_dir(tmp_path, case, int(time.time() * 1000))
    paths = {tmp_path: "<tmp>"}
    if case == "broker_running":
        with broker_holding(log_dir):
            plan = run_cli("plan", "--json", "--config", str(config))
            text = run_cli("plan", "--config", str(config))
            once = run_cli("once", "--config", str(config))
    else:
        plan = run_cli("plan", "--json", "--config", str(config))
        text = run_cli("plan", "--config", str(config))
        once = run_cli("once", "--config", str(config))
    check(f"kafka/{case}.plan.json", normalise(with_code(plan, plan.out), paths, host_disk=True))
    check(f"kafka/{case}.plan.txt", normalise(with_code(text, text.out), paths, table=True))
    check(f"kafka/{case}.once.txt", normalise(with_code(once, once.out), paths, table=True))
    check(
        f"kafka/{case}.journal.jsonl",
        normalise(with_code(once, journal_text(tmp_path / "journal")), paths, host_disk=True),
    )


# ---- check-config: the error text of bad configurations -----------------------------------

# (case, file name, content): ``{store}`` is a generated RocketMQ store, ``{logdir}`` a
# generated Kafka log dir, ``{tmp}`` the directory both live in.
_ROCKETMQ_OK = "storePathRootDir: {store}\n"
_KAFKA_OK = "log.dirs={logdir}\n"
BAD_CONFIGS: list[tuple[str, str, str]] = [
    # RocketMQ, broker.yaml
    ("yaml_typo_did_you_mean", "broker.yaml", _ROCKETMQ_OK + "fileReserveTime: 48\n"),
    ("yaml_unknown_key", "broker.yaml", _ROCKETMQ_OK + "namesrvAddr: 127.0.0.1:9876\n"),
    ("yaml_syntax", "broker.yaml", _ROCKETMQ_OK + "a: [1, 2\n"),
    ("yaml_not_a_mapping", "broker.yaml", "- 1\n- 2\n"),
    ("yaml_delete_when_out_of_range", "broker.yaml", _ROCKETMQ_OK + "deleteWhen: '03;25;26'\n"),
    ("yaml_delete_when_spaces", "broker.yaml", _ROCKETMQ_OK + "deleteWhen: '04; 05'\n"),
    ("yaml_delete_when_empty", "broker.yaml", _ROCKETMQ_OK + "deleteWhen: ''\n"),
    ("yaml_reserved_time_negative", "broker.yaml", _ROCKETMQ_OK + "fileReservedTime: -1\n"),
    ("yaml_reserved_time_quoted", "broker.yaml", _ROCKETMQ_OK + "fileReservedTime: '72'\n"),
    ("yaml_reserved_time_float", "broker.yaml", _ROCKETMQ_OK + "fileReservedTime: 0.1\n"),
    ("yaml_disk_max_ratio_fraction", "broker.yaml", _ROCKETMQ_OK + "diskMaxUsedSpaceRatio: 0.75\n"),
    (
        "yaml_forcibly_ratio_percent",
        "broker.yaml",
        _ROCKETMQ_OK + "diskSpaceCleanForciblyRatio: 85\n",
    ),
    ("yaml_bool_quoted", "broker.yaml", _ROCKETMQ_OK + "cleanFileForciblyEnable: 'true'\n"),
    ("yaml_broker_name_slash", "broker.yaml", _ROCKETMQ_OK + "brokerName: a/b\n"),
    ("yaml_commitlog_relative", "broker.yaml", _ROCKETMQ_OK + "storePathCommitLog: '/a,rel'\n"),
    ("yaml_commitlog_is_store_root", "broker.yaml", _ROCKETMQ_OK + "storePathCommitLog: {store}\n"),
    ("yaml_missing_store", "broker.yaml", "storePathRootDir: {tmp}/missing\n"),
    ("yaml_store_without_markers", "broker.yaml", "storePathRootDir: {tmp}\n"),
    (
        "yaml_retentiond_typo",
        "broker.yaml",
        _ROCKETMQ_OK + "retentiond:\n  initialDelay: -1\n  journal:\n    dirr: /x\n",
    ),
    (
        "yaml_many_problems",
        "broker.yaml",
        _ROCKETMQ_OK + "fileReservedTime: true\ndeleteFileBatchMax: 0\nmaxIndexNum: 1\n",
    ),
    # RocketMQ, broker.conf
    ("conf_reserved_time_unit", "broker.conf", "storePathRootDir={store}\nfileReservedTime=72h\n"),
    (
        "conf_ratio_fraction",
        "broker.conf",
        "storePathRootDir={store}\ndiskSpaceCleanForciblyRatio=0.85\n",
    ),
    (
        "conf_disk_max_ratio_clamped",
        "broker.conf",
        "storePathRootDir={store}\ndiskMaxUsedSpaceRatio=100\n",
    ),
    ("conf_home_not_expanded", "broker.conf", "storePathRootDir=~/store\n"),
    (
        "conf_initial_delay_word",
        "broker.conf",
        "storePathRootDir={store}\nretentiond.initialDelay=soon\n",
    ),
    # Kafka, server.properties
    (
        "kafka_many_problems",
        "server.properties",
        "log.dirs={logdir},relative/dir\nlog.retention.ms=7d\n"
        "log.retention.check.interval.ms=0\nretentiond.dryRun=maybe\n"
        "retentiond.journal.dirr=/x\nretentiond.kafka.unknownTopics=guess\n",
    ),
    ("kafka_log_dir_not_kafka", "server.properties", "log.dir={tmp}/empty\n"),
    ("kafka_log_dir_missing", "server.properties", "log.dirs={tmp}/missing\n"),
    (
        "kafka_and_rocketmq",
        "broker.conf",
        "log.dirs={logdir}\nstorePathRootDir=/data/store\nfileReservedTime=48\n",
    ),
    ("kafka_and_rocketmq_yaml", "broker.yaml", "log.dir: {logdir}\nbrokerName: broker-a\n"),
    (
        "kafka_strict_values",
        "server.properties",
        _KAFKA_OK + "log.cleaner.enable=yes\nlog.cleanup.policy=delete,archive\n"
        "retentiond.kafka.timeIndexCompat=1\n",
    ),
    ("kafka_metadata_dir_relative", "server.properties", _KAFKA_OK + "metadata.log.dir=m\n"),
    ("kafka_log_dirs_null_yaml", "kafka.yaml", "log.dirs: null\n"),
    (
        "kafka_bad_topic_override",
        "server.properties",
        _KAFKA_OK + "retentiond.kafka.topicOverrides={tmp}/bad-overrides.yaml\n",
    ),
    (
        "kafka_missing_topic_overrides",
        "server.properties",
        _KAFKA_OK + "retentiond.kafka.topicOverrides={tmp}/none.yaml\n",
    ),
]


@pytest.fixture(scope="module")
def config_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One RocketMQ store and one Kafka log dir that every check-config case points at."""
    from retentiond.storegen.kafka import KafkaStoreSpec, generate_kafka_store

    tmp = tmp_path_factory.mktemp("configs")
    store = make_store(tmp, expired_spec(2), config=tmp / "unused.yaml")
    spec = KafkaStoreSpec(topics={"orders": 1}, records_per_partition=50)
    log_dir = generate_kafka_store(tmp / "kafka-logs", spec).log_dir
    (tmp / "empty").mkdir()
    (tmp / "bad-overrides.yaml").write_text("orders: {retention.ms: -5}\n")
    return {"tmp": tmp, "store": store.root, "logdir": log_dir}


@pytest.mark.parametrize(("case", "name", "content"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_check_config_refusals(
    case: str, name: str, content: str, config_stores: dict[str, Path], tmp_path: Path
) -> None:
    text = content.format(**{k: str(v) for k, v in config_stores.items()})
    path = tmp_path / name
    path.write_text(text)
    result = run_cli("check-config", str(path))
    paths = {config_stores["tmp"]: "<tmp>", tmp_path: "<dir>"}
    if Path.home() != Path("/"):  # the default storePathRootDir is ~/store
        paths[Path.home()] = "<home>"
    shown = f"# {name}\n{text}# exit {result.code}\n# stdout\n{result.out}# stderr\n{result.err}"
    check(f"check_config/{case}.txt", normalise(shown, paths))


# ---- config_hash: fixed config files and their hashes ---------------------------------------

CONFIG_HASH_FILES = (
    "rocketmq_minimal.yaml",
    "rocketmq_full.yaml",
    "rocketmq_broker.conf",
    "kafka_server.properties",
    "kafka_minimal.properties",
    "kafka.yaml",
)


def test_config_hash() -> None:
    """``config_hash`` of the files in ``config_hash/`` (fixed paths that need not exist, so
    the store is not checked; every RocketMQ file names its broker, whose default is the host
    name). The hash covers the effective settings, so it is the same wherever the file is."""
    lines = []
    for name in CONFIG_HASH_FILES:
        settings = load_settings(GOLDEN / "config_hash" / name, check_store=False)
        lines.append(f"{settings.config_hash}  {name}\n")
    check("config_hash/hashes.txt", "".join(lines))


# ---- the daemon: status --json and /metrics names and labels -----------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+\S+(\s+\S+)?$")


def metric_names_and_labels(exposition: str) -> str:
    """The exposition's HELP and TYPE lines and each sample's name and labels, in the order
    the daemon serves them; the sample values are dropped."""
    out = []
    for line in exposition.splitlines():
        if line.startswith("#") or not line.strip():
            out.append(line)
            continue
        m = _SAMPLE.match(line)
        assert m, line
        out.append(m.group(1) + (m.group(2) or ""))
    return "\n".join(out) + "\n"


# The first round's delay. Not 0: the scheduler's interval trigger then starts at a moment
# already past when the job is added, and the first round comes one whole interval later.
# The interval is an hour, so that exactly one round runs while the outputs are read.
FIRST_ROUND_MS = 2000


def run_daemon(config: Path, journal: Path, log: Path) -> Daemon:
    return Daemon(spawn_run(config, log), config, None, journal, log)  # type: ignore[arg-type]


def daemon_outputs(daemon: Daemon) -> tuple[str, str]:
    """``status --json`` and ``/metrics`` once the daemon has logged its first round as done
    (it logs that after updating its state and its metrics)."""
    url = daemon.wait_until("the metrics listener", daemon.metrics_url)
    daemon.wait_until("a round done", lambda: '"event": "round done"' in daemon.log.read_text())
    result = daemon.cli("status", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["ready"] and doc["rounds"]["count"] == 1, doc
    with urllib.request.urlopen(url, timeout=10) as resp:
        metrics = resp.read().decode()
    return result.out, metrics


def test_rocketmq_daemon(tmp_path: Path, tmpfs: Tmpfs, short_dir: Path) -> None:
    store = make_store(
        tmp_path,
        expired_spec(4),
        store_dir=tmpfs.path / "store",
        brokerName="broker-a",
        brokerClusterName="golden",
        cleanResourceInterval=3_600_000,
        retentiond={
            "initialDelay": FIRST_ROUND_MS,
            "controlSocket": str(short_dir / "control.sock"),
        },
    )
    daemon = run_daemon(store.config, store.journal, tmp_path / "daemon.log")
    try:
        status, metrics = daemon_outputs(daemon)
    finally:
        daemon.kill()
    paths = {tmpfs.path: "<tmpfs>", tmp_path: "<tmp>", short_dir: "<sockdir>"}
    check("daemon/rocketmq.status.json", normalise(status, paths))
    check("daemon/rocketmq.metrics.txt", normalise(metric_names_and_labels(metrics), paths))


def test_kafka_daemon(tmp_path: Path, tmpfs: Tmpfs, short_dir: Path) -> None:
    # on the small tmpfs: its disk state is the test's, not the host's
    log_dir, _ = kafka_log_dir(tmpfs.path, "retention_ms", int(time.time() * 1000))
    config = write_kafka_config(
        tmp_path,
        log_dir,
        tmpfs.path / "topics.yaml",
        "log.retention.check.interval.ms=3600000",
        f"retentiond.initialDelay={FIRST_ROUND_MS}",
        "retentiond.metrics.listen=127.0.0.1:0",
        f"retentiond.controlSocket={short_dir / 'control.sock'}",
    )
    daemon = run_daemon(config, tmp_path / "journal", tmp_path / "daemon.log")
    try:
        status, metrics = daemon_outputs(daemon)
    finally:
        daemon.kill()
    paths = {tmpfs.path: "<tmpfs>", tmp_path: "<tmp>", short_dir: "<sockdir>"}
    check("daemon/kafka.status.json", normalise(status, paths, host_disk=True))
    check(
        "daemon/kafka.metrics.txt",
        normalise(metric_names_and_labels(metrics), paths, host_disk=True),
    )
