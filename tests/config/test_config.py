"""The loader refuses what the broker would silently misread, on real files.

Every refusal must name the file, the key and the value, because the operator reading the
message has only that to go on.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retentiond.config.diff import diff_settings
from retentiond.config.keys import ConfigKey, Format, Invalid
from retentiond.config.problems import ConfigError, ConfigProblem
from retentiond.config.properties import parse_properties
from retentiond.config.settings import Settings
from retentiond.config.zones import is_zone_name, local_zone_name
from retentiond.kinds import load_settings
from retentiond.kinds.rocketmq.config import (
    BY_KEY,
    KEYS,
    LEGACY_KEYS,
    render_reference_markdown,
    rocketmq_settings,
)
from retentiond.kinds.rocketmq.storecheck import check_store as check_rocketmq_store

REPO = Path(__file__).resolve().parents[2]


# --- helpers -------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A minimal RocketMQ store: the markers and an empty CommitLog directory."""
    root = tmp_path / "store"
    for name in ("commitlog", "consumequeue", "index", "config"):
        (root / name).mkdir(parents=True)
    (root / "checkpoint").write_bytes(bytes(4096))
    return root


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return _write


def refusals(path: Path, *, check_store: bool = False) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as info:
        load_settings(path, check_store=check_store)
    assert info.value.problems, "a ConfigError always carries at least one problem"
    return info.value.problems


def only_refusal(path: Path, key: str, *, check_store: bool = False) -> ConfigProblem:
    problems = refusals(path, check_store=check_store)
    assert [p.key for p in problems] == [key], problems
    problem = problems[0]
    assert problem.file == str(path)
    text = str(problem)
    assert text.startswith(f"{path}: key '{key}' = ")
    return problem


def yaml_refusal(write: Callable[[str, str], Path], key: str, line: str) -> ConfigProblem:
    return only_refusal(write("broker.yaml", line + "\n"), key)


def conf_refusal(write: Callable[[str, str], Path], key: str, line: str) -> ConfigProblem:
    return only_refusal(write("broker.conf", line + "\n"), key)


def load_yaml(write: Callable[[str, str], Path], text: str) -> Settings:
    return load_settings(write("broker.yaml", text), check_store=False)


def load_conf(write: Callable[[str, str], Path], text: str) -> Settings:
    return load_settings(write("broker.conf", text), check_store=False)


# --- defaults and the example --------------------------------------------------------------


def test_defaults_follow_rocketmq(write, store: Path) -> None:
    path = write("broker.yaml", f"storePathRootDir: {store}\n")
    got = load_settings(path)
    assert got.store.store_path_root_dir == store
    assert got.store.store_path_commitlog == (store / "commitlog",)
    assert got.store.file_reserved_time_hours == 72
    assert (got.store.delete_when, got.store.delete_hours) == ("04", (4,))
    assert got.store.disk_max_used_space_ratio == 75
    assert got.store.clean_resource_interval_ms == 10_000
    assert got.store.delete_commitlog_files_interval_ms == 100
    assert got.store.delete_consumequeue_files_interval_ms == 100
    assert got.store.destroy_mapped_file_interval_forcibly_ms == 120_000
    assert got.store.redelete_hanged_file_interval_ms == 120_000
    assert got.store.clean_file_forcibly_enable is True
    assert got.store.delete_file_batch_max == 10
    assert got.store.disk_space_clean_forcibly_ratio == 0.85
    assert got.store.disk_space_warning_level_ratio == 0.90
    assert got.store.mapped_file_size_commitlog == 1 << 30
    assert got.store.mapped_file_size_consumequeue == 6_000_000
    assert got.store.max_hash_slot_num == 5_000_000
    assert got.store.max_index_num == 20_000_000
    assert got.broker_name == (socket.gethostname() or "DEFAULT_BROKER")
    assert got.broker_cluster_name == "DefaultCluster"
    assert got.daemon.timezone is None
    assert got.daemon.dry_run is False
    assert got.daemon.journal_dir is None
    assert got.daemon.initial_delay_ms == 60_000
    assert got.source == path


@pytest.mark.parametrize("name", ["broker.yaml", "broker.conf"])
def test_empty_file_is_all_defaults(write, name: str, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    got = load_settings(write(name, ""), check_store=False)
    assert got.store.store_path_root_dir == tmp_path / "home" / "store"
    assert got.store.store_path_commitlog == (tmp_path / "home" / "store" / "commitlog",)


@pytest.mark.parametrize("name", ["broker.yaml", "broker.conf"])
def test_empty_file_still_checks_the_store(write, name: str, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = write(name, "")
    problems = refusals(path, check_store=True)
    assert ("storePathRootDir", str(tmp_path / "home" / "store")) in {
        (p.key, p.value) for p in problems
    }


def test_example_config_loads_and_documents_every_key(write) -> None:
    path = REPO / "config" / "broker.yaml"
    got = load_settings(path, check_store=False)
    assert got.store.store_path_root_dir == Path("/var/lib/rocketmq/store")
    text = path.read_text()
    for spec in KEYS:
        leaf = spec.key.rsplit(".", 1)[-1]
        assert f"{leaf}:" in text, f"{spec.key} is not shown in config/broker.yaml"
    defaults = load_settings(write("defaults.yaml", ""), check_store=False)
    changed = [key for key, _, _ in diff_settings(defaults, got)]
    assert set(changed) <= {"storePathRootDir", "storePathCommitLog", "brokerName"}, (
        "the example shows the defaults"
    )


def test_retentiond_cluster_names_the_cluster_over_broker_cluster_name(write) -> None:
    plain = load_yaml(write, "brokerClusterName: orders\n")
    assert plain.broker_cluster_name == "orders"
    named = load_yaml(write, "brokerClusterName: orders\nretentiond:\n  cluster: payments\n")
    assert named.broker_cluster_name == "payments"
    assert named.store.broker_cluster_name == "orders"  # the broker's own key, as written
    conf = load_conf(write, "retentiond.cluster=payments\n")
    assert conf.broker_cluster_name == "payments"
    # unset, the canonical form is the one before the key existed: the same hash
    daemon = plain.as_dict()["daemon"]
    assert isinstance(daemon, dict) and "cluster" not in daemon
    assert named.config_hash != plain.config_hash
    bad = write("bad.yaml", "retentiond:\n  cluster: a/b\n")
    assert [str(p) for p in refusals(bad)] == [
        f"{bad}: key 'retentiond.cluster' = 'a/b': must not contain '/' or "
        "control characters, nor be '.' or '..'"
    ]


def test_source_is_absolute_not_symlink_resolved(write, tmp_path: Path, monkeypatch) -> None:
    real = write("real.yaml", "fileReservedTime: 1\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    monkeypatch.chdir(tmp_path)
    assert load_settings("link.yaml", check_store=False).source == link


def test_loading_is_read_only(write, store: Path) -> None:
    (store / "commitlog" / f"{0:020d}").write_bytes(b"x")
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    load_settings(write("broker.yaml", f"storePathRootDir: {store}\nfileReservedTime: 0\n"))
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before


# --- problem shape -------------------------------------------------------------------------


def test_problem_message_names_file_key_and_value(write) -> None:
    path = write("broker.yaml", "deleteWhen: '25'\n")
    problem = only_refusal(path, "deleteWhen")
    assert str(problem) == f"{path}: key 'deleteWhen' = '25': each hour must be 0..23"


def test_all_problems_are_reported_together(write) -> None:
    path = write(
        "broker.yaml",
        "fileReservedTime: -1\ndeleteWhen: '04; 05'\ndiskMaxUsedSpaceRatio: 99\nbogus: 1\n",
    )
    with pytest.raises(ConfigError) as info:
        load_settings(path, check_store=False)
    keys = {p.key for p in info.value.problems}
    assert keys == {"fileReservedTime", "deleteWhen", "diskMaxUsedSpaceRatio", "bogus"}
    lines = str(info.value).splitlines()
    assert len(lines) == 4
    assert all(line.startswith(f"{path}: key ") for line in lines)


def test_config_problems_are_reported_with_store_problems(write, tmp_path: Path) -> None:
    path = write("broker.yaml", f"storePathRootDir: {tmp_path / 'nope'}\nfileReservedTime: x\n")
    keys = [p.key for p in refusals(path, check_store=True)]
    assert sorted(keys) == ["fileReservedTime", "storePathCommitLog", "storePathRootDir"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("a: [1, 2\n", "line 2"),
        ("- 1\n- 2\n", "must be a mapping"),
        ("a: 1\n---\nb: 2\n", "not valid YAML"),
        ("when: 2001-13-01\n", "not valid YAML"),
        ("x: !!python/object:os.system ls\n", "not valid YAML"),
        ("\x00", "not valid YAML"),
    ],
)
def test_unparsable_yaml_is_a_config_error(write, content: str, expected: str) -> None:
    problems = refusals(write("broker.yaml", content))
    assert any(expected in str(p) for p in problems), problems


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    [problem] = refusals(missing)
    assert str(problem).startswith(f"{missing}: cannot read")
    [problem] = refusals(tmp_path)  # a directory
    assert "cannot read" in problem.message


def test_yaml_alias_bomb_does_not_explode_messages(write) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    for name, prev in zip("bcdefgh", "abcdefg", strict=True):
        bomb += f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    bomb += "fileReservedTime: *h\n"
    problems = refusals(write("broker.yaml", bomb))
    text = "\n".join(map(str, problems))
    assert len(text) < 5000
    assert "fileReservedTime' = <a list>: must be a whole number, not a list" in text


# --- deleteWhen ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "raw", "hours"),
    [
        ('deleteWhen: "04"', "04", (4,)),
        ("deleteWhen: 04", "04", (4,)),  # YAML 1.1 octal 4; taken as written
        ("deleteWhen: 010", "010", (10,)),  # octal 8 in YAML; Integer.parseInt gives 10
        ("deleteWhen: 4", "4", (4,)),
        ("deleteWhen: 09", "09", (9,)),
        ("deleteWhen: +4", "+4", (4,)),
        ("deleteWhen: '04;'", "04;", (4,)),
        ("deleteWhen: '05;04'", "05;04", (4, 5)),
        ("deleteWhen: '04;04;05'", "04;04;05", (4, 5)),
        ("deleteWhen: ' 04 '", "04", (4,)),  # the whole string is trimmed, as a String setter
        ("deleteWhen: '-0'", "-0", (0,)),
        (
            "deleteWhen: '" + ";".join(f"{h:02d}" for h in range(24)) + ";'",
            ";".join(f"{h:02d}" for h in range(24)) + ";",
            tuple(range(24)),
        ),
    ],
)
def test_delete_when_accepted(write, line: str, raw: str, hours: tuple[int, ...]) -> None:
    got = load_yaml(write, line + "\n")
    assert (got.store.delete_when, got.store.delete_hours) == (raw, hours)


@pytest.mark.parametrize(
    ("line", "value", "message"),
    [
        ("deleteWhen: '04; 05'", "04; 05", "' 05' is not a whole hour (no spaces allowed"),
        ("deleteWhen: '25'", "25", "each hour must be 0..23"),
        ("deleteWhen: 24", "24", "each hour must be 0..23"),
        ("deleteWhen: '-1'", "-1", "each hour must be 0..23"),
        ("deleteWhen: '03;25;26'", "03;25;26", "each hour must be 0..23 (got '25', '26')"),
        ("deleteWhen: ''", "", "must list at least one hour"),
        ("deleteWhen: '04;;05'", "04;;05", "an element is empty"),
        ("deleteWhen: ';04'", ";04", "an element is empty"),
        ("deleteWhen: ';'", ";", "lists no hour"),
        ("deleteWhen: '03;x'", "03;x", "'x' is not a whole hour"),
        ("deleteWhen: 4.0", "4.0", "'4.0' is not a whole hour"),
        ("deleteWhen: 0x4", "0x4", "'0x4' is not a whole hour"),
        ("deleteWhen: 4_0", "4_0", "'4_0' is not a whole hour"),
        ("deleteWhen: '٤'", "٤", "is not a whole hour"),  # Java takes Arabic-Indic digits
        ("deleteWhen: '99999999999999999999999'", "99999999999999999999999", "0..23"),
        ("deleteWhen: true", True, "not a boolean"),
        ("deleteWhen: [4]", [4], "not a list"),
        ("deleteWhen: null", None, "must not be null"),
    ],
)
def test_delete_when_refused(write, line: str, value: object, message: str) -> None:
    problem = yaml_refusal(write, "deleteWhen", line)
    assert problem.value == value
    assert message in problem.message


def test_delete_when_says_what_the_broker_would_do(write) -> None:
    problem = yaml_refusal(write, "deleteWhen", "deleteWhen: '04; 05'")
    assert "NumberFormatException" in problem.message


# --- numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("fileReservedTime", "-1", "must be at least 0"),
        ("fileReservedTime", "2147483648", "must be at most 2147483647 (a Java int)"),
        ("fileReservedTime", "0.1", "not a float"),
        ("fileReservedTime", "'72'", "not a string; remove the quotes"),
        ("fileReservedTime", "true", "not a boolean"),
        ("fileReservedTime", "null", "must not be null"),
        ("cleanResourceInterval", "0", "must be at least 1"),
        ("deleteCommitLogFilesInterval", "-1", "must be at least 0"),
        ("deleteConsumeQueueFilesInterval", "-100", "must be at least 0"),
        ("destroyMapedFileIntervalForcibly", "-1", "must be at least 0"),
        ("redeleteHangedFileInterval", "-1", "must be at least 0"),
        ("deleteFileBatchMax", "0", "must be at least 1"),
        ("mappedFileSizeCommitLog", "0", "must be at least 1"),
        ("mappedFileSizeCommitLog", "4294967296", "a Java int"),
        ("mappedFileSizeConsumeQueue", "0", "must be at least 1"),
        ("mappedFileSizeConsumeQueue", "2147483641", "multiple of 20 it must still fit"),
        ("maxHashSlotNum", "0", "must be at least 1"),
        ("maxIndexNum", "1", "must be at least 2"),
        ("diskMaxUsedSpaceRatio", "9", "between 10 and 95 (the broker would silently clamp"),
        ("diskMaxUsedSpaceRatio", "96", "clamp it to 95"),
        ("diskMaxUsedSpaceRatio", "0.75", "did you mean 75?"),
        ("diskMaxUsedSpaceRatio", "9223372036854775808", "between 10 and 95"),
        ("retentiond.initialDelay", "-1", "must be at least 0"),
    ],
)
def test_numbers_refused_in_yaml(write, key: str, value: str, message: str) -> None:
    text = f"{key}: {value}"
    if key.startswith("retentiond."):
        text = f"retentiond:\n  {key.split('.', 1)[1]}: {value}"
    problem = yaml_refusal(write, key, text)
    assert message in problem.message
    assert str(problem).startswith(f"{problem.file}: key '{key}' = ")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("fileReservedTime", "0.1", "would silently ignore it and keep 72"),
        ("fileReservedTime", "72h", "must be a whole number"),
        ("fileReservedTime", "", "must be a whole number"),
        ("fileReservedTime", "-5", "must be at least 0"),
        ("cleanResourceInterval", "1e4", "must be a whole number"),
        ("diskMaxUsedSpaceRatio", "100", "clamp it to 95"),
        ("maxIndexNum", "+1", "must be at least 2"),
        ("retentiond.initialDelay", "soon", "must be a whole number"),
    ],
)
def test_numbers_refused_in_conf(write, key: str, value: str, message: str) -> None:
    problem = conf_refusal(write, key, f"{key}={value}")
    assert problem.value == value
    assert message in problem.message


def test_numbers_accepted_at_their_bounds(write) -> None:
    got = load_yaml(
        write,
        "fileReservedTime: 0\ncleanResourceInterval: 1\ndeleteCommitLogFilesInterval: 0\n"
        "deleteFileBatchMax: 1\ndiskMaxUsedSpaceRatio: 95\nmaxIndexNum: 2\n"
        "mappedFileSizeCommitLog: 2147483647\nredeleteHangedFileInterval: 2147483647\n",
    )
    assert got.store.file_reserved_time_hours == 0
    assert got.store.clean_resource_interval_ms == 1
    assert got.store.delete_file_batch_max == 1
    assert got.store.disk_max_used_space_ratio == 95
    assert got.store.max_index_num == 2
    assert got.store.mapped_file_size_commitlog == 2147483647
    assert load_conf(write, "diskMaxUsedSpaceRatio=10\n").store.disk_max_used_space_ratio == 10


def test_conf_numbers_are_trimmed_and_take_a_sign(write) -> None:
    got = load_conf(write, "fileReservedTime = 48   \ndeleteFileBatchMax=+0007\n")
    assert (got.store.file_reserved_time_hours, got.store.delete_file_batch_max) == (48, 7)


@pytest.mark.parametrize(
    ("given", "rounded"),
    [(128, 140), (1, 20), (20, 20), (21, 40), (6_000_000, 6_000_000), (2147483640, 2147483640)],
)
def test_consume_queue_size_rounds_up_to_whole_units(write, given: int, rounded: int) -> None:
    got = load_yaml(write, f"mappedFileSizeConsumeQueue: {given}\n")
    assert got.store.mapped_file_size_consumequeue == rounded
    assert load_conf(
        write, f"mappedFileSizeConsumeQueue={given}\n"
    ).store.mapped_file_size_consumequeue == (rounded)


def test_index_file_size_must_fit_a_java_int(write) -> None:
    problem = yaml_refusal(write, "maxIndexNum", "maxHashSlotNum: 5000000\nmaxIndexNum: 107000000")
    assert problem.value == 107_000_000
    assert "at most 2147483647" in problem.message
    got = load_yaml(write, "maxHashSlotNum: 1\nmaxIndexNum: 107374180\n")
    assert got.store.index_file_size == 40 + 4 + 20 * 107_374_180


# --- ratios --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("diskSpaceCleanForciblyRatio", "85", "between 0.30 and 0.85; did you mean 0.85?"),
        ("diskSpaceCleanForciblyRatio", "90", "(broker.yaml takes 0.85, not 85)"),
        ("diskSpaceCleanForciblyRatio", "0.2", "clamp it to 0.30"),
        ("diskSpaceCleanForciblyRatio", "0.86", "clamp it to 0.85"),
        ("diskSpaceCleanForciblyRatio", ".nan", "finite"),
        ("diskSpaceCleanForciblyRatio", ".inf", "finite"),
        ("diskSpaceCleanForciblyRatio", "'0.8'", "not a string"),
        ("diskSpaceCleanForciblyRatio", "true", "not a boolean"),
        ("diskSpaceWarningLevelRatio", "90", "between 0.35 and 0.90; did you mean 0.90?"),
        ("diskSpaceWarningLevelRatio", "0.95", "clamp it to 0.90"),
        ("diskSpaceWarningLevelRatio", "0.3", "clamp it to 0.35"),
        ("diskSpaceWarningLevelRatio", "1", "clamp it to 0.90"),
    ],
)
def test_ratios_in_yaml_are_fractions(write, key: str, value: str, message: str) -> None:
    problem = yaml_refusal(write, key, f"{key}: {value}")
    assert message in problem.message


def test_ratio_fractions_accepted_in_yaml(write) -> None:
    got = load_yaml(write, "diskSpaceCleanForciblyRatio: 0.3\ndiskSpaceWarningLevelRatio: 0.9\n")
    assert got.store.disk_space_clean_forcibly_ratio == 0.30
    assert got.store.disk_space_warning_level_ratio == 0.90


def test_ratios_in_conf_are_integer_percents(write) -> None:
    got = load_conf(write, "diskSpaceCleanForciblyRatio=80\ndiskSpaceWarningLevelRatio=35\n")
    assert got.store.disk_space_clean_forcibly_ratio == 0.80
    assert got.store.disk_space_warning_level_ratio == 0.35
    assert load_conf(
        write, "diskSpaceCleanForciblyRatio=85\n"
    ).store.disk_space_clean_forcibly_ratio == (0.85)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("diskSpaceCleanForciblyRatio", "0.85", "did you mean 85?"),
        ("diskSpaceCleanForciblyRatio", "86", "between 30 and 85 (the broker would silently"),
        ("diskSpaceCleanForciblyRatio", "29", "clamp it to 30"),
        ("diskSpaceWarningLevelRatio", "95", "clamp it to 90"),
        ("diskSpaceWarningLevelRatio", "ninety", "whole percent between 35 and 90"),
    ],
)
def test_ratios_refused_in_conf(write, key: str, value: str, message: str) -> None:
    problem = conf_refusal(write, key, f"{key}={value}")
    assert problem.value == value
    assert message in problem.message


# --- booleans and names --------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [("true", True), ("TRUE", True), ("False", False)])
def test_conf_booleans_ignore_case(write, text: str, expected: bool) -> None:
    got = load_conf(write, f"cleanFileForciblyEnable={text}\nretentiond.dryRun={text}\n")
    assert got.store.clean_file_forcibly_enable is expected
    assert got.daemon.dry_run is expected


def test_conf_boolean_refused_says_broker_reads_false(write) -> None:
    problem = conf_refusal(write, "cleanFileForciblyEnable", "cleanFileForciblyEnable=yes")
    assert "read anything but 'true' as false" in problem.message


@pytest.mark.parametrize("value", ["'true'", "1", "null"])
def test_yaml_booleans_must_be_booleans(write, value: str) -> None:
    yaml_refusal(write, "cleanFileForciblyEnable", f"cleanFileForciblyEnable: {value}")


def test_yaml_one_one_booleans_are_booleans(write) -> None:
    assert load_yaml(write, "retentiond:\n  dryRun: yes\n").daemon.dry_run is True


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("''", "must not be empty"),
        ("a/b", "must not contain '/'"),
        ("'..'", "nor be"),
        ("1234", "must be a string"),
        ('"a\\tb"', "control characters"),
    ],
)
def test_broker_names_refused(write, value: str, message: str) -> None:
    problem = yaml_refusal(write, "brokerName", f"brokerName: {value}")
    assert message in problem.message


def test_names_are_trimmed_like_string_setters(write) -> None:
    got = load_conf(write, "brokerName=  broker-b  \t\nbrokerClusterName=c1\n")
    assert (got.broker_name, got.broker_cluster_name) == ("broker-b", "c1")


# --- paths ---------------------------------------------------------------------------------


def test_commitlog_trailing_comma_is_dropped_like_java_split(write) -> None:
    got = load_yaml(write, "storePathCommitLog: '/a,/b,/c,'\n")
    assert got.store.store_path_commitlog == (Path("/a"), Path("/b"), Path("/c"))
    got = load_conf(write, "storePathCommitLog=/a,/b,/c,,,\n")
    assert got.store.store_path_commitlog == (Path("/a"), Path("/b"), Path("/c"))


def test_commitlog_keeps_configured_order_and_trims_the_whole_string(write) -> None:
    got = load_conf(write, "storePathCommitLog=   /z/cl,/a/cl   \n")
    assert got.store.store_path_commitlog == (Path("/z/cl"), Path("/a/cl"))


def test_commitlog_single_path(write) -> None:
    assert load_yaml(write, "storePathCommitLog: /d/cl\n").store.store_path_commitlog == (
        Path("/d/cl"),
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("/a,,/b", "element 2 is empty"),
        (",/a", "element 1 is empty"),
        ("/a, /b", "element 2 ' /b' has spaces around it"),
        ("/a ,/b", "has spaces around it"),
        ("/a,rel", "element 2 'rel' is not an absolute path"),
        ("rel", "is not an absolute path"),
        ("/a,/a", "listed twice"),
        ("/a,/a/", "listed twice"),
        ("/a,/./a", "listed twice"),
        (",", "lists no path"),
        ("", "must not be empty"),
    ],
)
def test_commitlog_refused(write, value: str, message: str) -> None:
    problem = yaml_refusal(write, "storePathCommitLog", f"storePathCommitLog: '{value}'")
    assert problem.value == value
    assert message in problem.message


def test_commitlog_may_not_be_a_store_directory(write) -> None:
    problem = yaml_refusal(
        write, "storePathCommitLog", "storePathRootDir: /s\nstorePathCommitLog: /s/consumequeue"
    )
    assert "ConsumeQueue directory" in problem.message


def test_commitlog_must_be_a_string(write) -> None:
    problem = yaml_refusal(write, "storePathCommitLog", "storePathCommitLog: [/a, /b]")
    assert "must be a string" in problem.message


def test_root_must_be_absolute(write) -> None:
    problem = yaml_refusal(write, "storePathRootDir", "storePathRootDir: store")
    assert problem.message == "must be an absolute path"
    conf_refusal(write, "storePathRootDir", "storePathRootDir=./store")


def test_yaml_expands_home(write, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    got = load_yaml(write, "storePathRootDir: ~/rmq\nstorePathCommitLog: '~/cl1,~/cl2'\n")
    assert got.store.store_path_root_dir == tmp_path / "rmq"
    assert got.store.store_path_commitlog == (tmp_path / "cl1", tmp_path / "cl2")
    assert got.store.store_path_commitlog[0].parent == tmp_path


def test_conf_refuses_home_because_the_broker_does_not_expand_it(write) -> None:
    problem = conf_refusal(write, "storePathRootDir", "storePathRootDir=~/store")
    assert "does not expand '~'" in problem.message


def test_default_commitlog_follows_the_root(write) -> None:
    got = load_conf(write, "storePathRootDir=/data/rmq\n")
    assert got.store.store_path_commitlog == (Path("/data/rmq/commitlog"),)


def test_path_with_nul_refused(write) -> None:
    problem = yaml_refusal(write, "storePathRootDir", 'storePathRootDir: "/a\\0b"')
    assert "NUL" in problem.message


def test_path_with_lone_surrogate_refused(write) -> None:
    yaml_refusal(write, "storePathRootDir", 'storePathRootDir: "/a\\ud800"')
    conf_refusal(write, "storePathRootDir", "storePathRootDir=/a\\uD800")


# --- the store check -----------------------------------------------------------------------


def test_store_check_accepts_a_store(write, store: Path) -> None:
    load_settings(write("broker.yaml", f"storePathRootDir: {store}\n"))


@pytest.mark.parametrize(
    "marker", ["checkpoint", "lock", "abort", "consumequeue/", "index/", "config/"]
)
def test_any_one_marker_makes_a_store(write, tmp_path: Path, marker: str) -> None:
    root = tmp_path / "root"
    (root / "cl").mkdir(parents=True)
    if marker.endswith("/"):
        (root / marker).mkdir()
    else:
        (root / marker).write_bytes(b"")
    load_settings(
        write("broker.yaml", f"storePathRootDir: {root}\nstorePathCommitLog: {root}/cl\n")
    )


def test_store_without_markers_is_refused(write, tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "commitlog").mkdir(parents=True)
    (root / "index").write_bytes(b"")  # a file named index is not the index directory
    (root / "lock").mkdir()  # nor is a directory named lock the lock file
    path = write("broker.yaml", f"storePathRootDir: {root}\n")
    problem = only_refusal(path, "storePathRootDir", check_store=True)
    assert str(problem) == (
        f"{path}: key 'storePathRootDir' = '{root}': not a RocketMQ store "
        "(none of checkpoint, lock, abort, consumequeue/, index/, config/ found)"
    )


def test_missing_root_is_refused(write, tmp_path: Path) -> None:
    root = tmp_path / "nope"
    path = write("broker.yaml", f"storePathRootDir: {root}\nstorePathCommitLog: {tmp_path}\n")
    problem = only_refusal(path, "storePathRootDir", check_store=True)
    assert (problem.value, problem.message) == (str(root), "does not exist")


def test_root_that_is_a_file_is_refused(write, tmp_path: Path) -> None:
    root = write("file", "")
    path = write("broker.yaml", f"storePathRootDir: {root}\nstorePathCommitLog: {tmp_path}\n")
    problem = only_refusal(path, "storePathRootDir", check_store=True)
    assert problem.message == "is not a directory"


@pytest.mark.parametrize("root", ["/", "/..", "//"])
def test_filesystem_root_is_refused(write, tmp_path: Path, root: str) -> None:
    path = write("broker.yaml", f"storePathRootDir: '{root}'\nstorePathCommitLog: {tmp_path}\n")
    problem = only_refusal(path, "storePathRootDir", check_store=True)
    assert "filesystem root" in problem.message


def test_filesystem_root_via_symlink_is_refused(write, tmp_path: Path) -> None:
    (tmp_path / "slash").symlink_to("/")
    path = write(
        "broker.yaml", f"storePathRootDir: {tmp_path / 'slash'}\nstorePathCommitLog: {tmp_path}\n"
    )
    assert "filesystem root" in only_refusal(path, "storePathRootDir", check_store=True).message


def test_missing_commitlog_paths_are_each_refused(write, store: Path) -> None:
    text = f"storePathRootDir: {store}\nstorePathCommitLog: '{store}/commitlog,/nope1,/nope2'\n"
    problems = refusals(write("broker.yaml", text), check_store=True)
    assert [(p.key, p.value) for p in problems] == [
        ("storePathCommitLog", "/nope1"),
        ("storePathCommitLog", "/nope2"),
    ]
    assert all(p.message == "CommitLog directory does not exist" for p in problems)


def test_default_commitlog_must_exist(write, store: Path) -> None:
    (store / "commitlog").rmdir()
    problem = only_refusal(
        write("broker.yaml", f"storePathRootDir: {store}\n"), "storePathCommitLog", check_store=True
    )
    assert problem.value == str(store / "commitlog")


def test_commitlog_that_is_a_file_is_refused(write, store: Path) -> None:
    (store / "cl").write_bytes(b"")
    path = write("broker.yaml", f"storePathRootDir: {store}\nstorePathCommitLog: {store}/cl\n")
    problem = only_refusal(path, "storePathCommitLog", check_store=True)
    assert problem.message == "CommitLog path is not a directory"


def test_commitlog_listed_twice_through_a_symlink_is_refused(write, store: Path) -> None:
    (store / "alias").symlink_to(store / "commitlog")
    text = f"storePathRootDir: {store}\nstorePathCommitLog: '{store}/commitlog,{store}/alias'\n"
    problem = only_refusal(write("broker.yaml", text), "storePathCommitLog", check_store=True)
    assert "same directory" in problem.message


def test_check_store_false_skips_the_disk(write, tmp_path: Path) -> None:
    load_settings(write("broker.yaml", f"storePathRootDir: {tmp_path}/nope\n"), check_store=False)


def test_validate_store_root_on_settings(store: Path) -> None:
    good = rocketmq_settings(store_path_root_dir=store, store_path_commitlog=(store / "commitlog",))
    assert check_rocketmq_store(good) == []
    bad = rocketmq_settings(
        store_path_root_dir=store / "x", store_path_commitlog=(store / "commitlog",)
    )
    [problem] = check_rocketmq_store(bad)
    assert (problem.file, problem.key, problem.value) == (
        "<settings>",
        "storePathRootDir",
        str(store / "x"),
    )


def test_symlink_loop_is_refused_not_raised(write, tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    path = write("broker.yaml", f"storePathRootDir: {loop}\nstorePathCommitLog: {loop}/cl\n")
    problems = refusals(path, check_store=True)
    assert {p.key for p in problems} == {"storePathRootDir", "storePathCommitLog"}
    assert all("cannot be examined" in p.message for p in problems)


# --- unknown, duplicate and legacy keys ----------------------------------------------------


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("fileReserveTime", "fileReservedTime"),
        ("filereservedtime", "fileReservedTime"),
        ("file_reserved_time", "fileReservedTime"),
        ("deleteWhenn", "deleteWhen"),
        ("storePathRootdir", "storePathRootDir"),
    ],
)
def test_yaml_unknown_key_suggests_the_closest(write, key: str, suggestion: str) -> None:
    problem = yaml_refusal(write, key, f"{key}: 1")
    assert f"did you mean {suggestion!r}?" in problem.message


def test_yaml_unknown_key_without_a_close_match(write) -> None:
    problem = yaml_refusal(write, "namesrvAddr", "namesrvAddr: 127.0.0.1:9876")
    assert problem.message == "unknown key (not accepted in broker.yaml)"


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("dryRun: true", "dryRun", "under 'retentiond:'"),
        ("retentiond.dryRun: true", "retentiond.dryRun", "nested mappings, not dotted"),
        ("retentiond:\n  dry_run: true", "retentiond.dry_run", "'retentiond.dryRun'"),
        ("retentiond:\n  journal:\n    path: /j", "retentiond.journal.path", "unknown key"),
        ("retentiond: 1", "retentiond", "must be a mapping"),
        ("retentiond:\n  journal: /j", "retentiond.journal", "must be a mapping"),
        ("1: x", "1", "keys must be strings"),
        ("retentiond:\n  null: x", "retentiond.null", "keys must be strings"),
    ],
)
def test_yaml_daemon_keys_in_the_wrong_place(write, text: str, key: str, message: str) -> None:
    assert message in yaml_refusal(write, key, text).message


@pytest.mark.parametrize("key", sorted(LEGACY_KEYS))
@pytest.mark.parametrize("name", ["broker.yaml", "broker.conf"])
def test_legacy_keys_are_refused_with_an_explanation(write, key: str, name: str) -> None:
    line = f"{key}: 1" if name.endswith("yaml") else f"{key}=1"
    problem = only_refusal(write(name, line + "\n"), key)
    assert "silently ignores" in problem.message


def test_legacy_key_message_points_at_the_issue(write) -> None:
    problem = conf_refusal(write, "maxCommitLogFilesNumber", "maxCommitLogFilesNumber=10")
    assert "apache/rocketmq#2260" in problem.message


def test_yaml_duplicates_report_both_lines(write) -> None:
    path = write("broker.yaml", "fileReservedTime: 48\ndeleteWhen: '04'\nfileReservedTime: 72\n")
    problem = only_refusal(path, "fileReservedTime")
    assert problem.message.startswith("duplicate key: first at line 1, again at line 3")
    assert problem.value == "72"


def test_yaml_nested_duplicates_report_the_dotted_key(write) -> None:
    text = "retentiond:\n  dryRun: true\n  journal:\n    dir: /a\n    dir: /b\n  dryRun: false\n"
    problems = refusals(write("broker.yaml", text))
    got = {(p.key, p.message.split(" (")[0]) for p in problems}
    assert got == {
        ("retentiond.dryRun", "duplicate key: first at line 2, again at line 6"),
        ("retentiond.journal.dir", "duplicate key: first at line 4, again at line 5"),
    }


def test_yaml_quoted_and_plain_keys_are_the_same_key(write) -> None:
    problem = only_refusal(write("broker.yaml", "brokerName: a\n'brokerName': b\n"), "brokerName")
    assert "line 1, again at line 2" in problem.message


def test_conf_duplicates_report_both_lines(write) -> None:
    path = write("broker.conf", "deleteWhen=04\n# c\nbrokerRole=SLAVE\ndeleteWhen = 05\n")
    problem = only_refusal(path, "deleteWhen")
    assert problem.message.startswith("duplicate key: first at line 1, again at line 4")
    assert problem.value == "05"


def test_conf_duplicate_broker_keys_are_not_our_business(write) -> None:
    load_conf(write, "namesrvAddr=a:9876\nnamesrvAddr=b:9876\n")


def test_conf_ignores_the_brokers_own_keys(write) -> None:
    got = load_conf(
        write,
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\n"
        "brokerRole=ASYNC_MASTER\nflushDiskType=ASYNC_FLUSH\nnamesrvAddr=127.0.0.1:9876\n"
        "listenPort=10911\nbrokerIP1=10.0.0.1\nstorePathDLedgerCommitLog=/x\n"
        "mappedFileSizeConsumeQueueExt=1\nmapperFileSizeBatchConsumeQueue=2\n"
        "mappedFileSizeTimerLog=3\nreadOnlyCommitLogStorePaths=\ndeleteWhen=04\n"
        "fileReservedTime=48\n",
    )
    assert got.store.file_reserved_time_hours == 48
    assert got.broker_name == "broker-a"


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("fileReserveTime", "fileReservedTime"),
        ("filereservedtime", "fileReservedTime"),
        ("FileReservedTime", "fileReservedTime"),
        ("deleteWhem", "deleteWhen"),
        ("diskMaxUsedSpaceRation", "diskMaxUsedSpaceRatio"),
        ("mappedFileSizeCommitlog", "mappedFileSizeCommitLog"),
        ("dryRun", "retentiond.dryRun"),
        ("retentiond.dryrun", "retentiond.dryRun"),
        ("retentiond.timeZone", "retentiond.timezone"),
    ],
)
def test_conf_near_miss_keys_are_refused(write, key: str, suggestion: str) -> None:
    problem = conf_refusal(write, key, f"{key}=1")
    assert f"did you mean {suggestion!r}?" in problem.message


def test_conf_unknown_daemon_key_is_refused(write) -> None:
    problem = conf_refusal(write, "retentiond.colour", "retentiond.colour=blue")
    assert "unknown key" in problem.message


def test_conf_read_only_commitlog_paths_are_refused_when_set(write) -> None:
    problem = conf_refusal(
        write, "readOnlyCommitLogStorePaths", "readOnlyCommitLogStorePaths=/old/commitlog"
    )
    assert "not supported" in problem.message


# --- the properties format -----------------------------------------------------------------


def test_conf_syntax_like_java_properties(write) -> None:
    got = load_conf(
        write,
        "# a comment\n"
        "   ! another comment\n"
        "\n"
        "brokerName : broker-x\n"
        "brokerClusterName\tc\\u0031\n"
        "deleteWhen 04;\\\n"
        "    05\n"
        "storePathRootDir=/data/\\\n"
        "   rmq\r\n"
        "fileReservedTime: 1\r"
        "retentiond.timezone=UTC\n",
    )
    assert got.broker_name == "broker-x"
    assert got.broker_cluster_name == "c1"
    assert got.store.delete_when == "04;05"
    assert got.store.store_path_root_dir == Path("/data/rmq")
    assert got.store.file_reserved_time_hours == 1
    assert got.daemon.timezone == "UTC"


def test_conf_value_with_separator_then_equals_is_kept(write) -> None:
    problem = conf_refusal(write, "fileReservedTime", "fileReservedTime:=1")
    assert problem.value == "=1"


def test_conf_comment_line_does_not_continue(write) -> None:
    got = load_conf(write, "# comment \\\nfileReservedTime=5\n")
    assert got.store.file_reserved_time_hours == 5


def test_conf_escaped_separator_belongs_to_the_key() -> None:
    got = [(e.line, e.key, e.value) for e in parse_properties("a\\=b=c\nx\\ y z\nkey\n")]
    assert got == [(1, "a=b", "c"), (2, "x y", "z"), (3, "key", "")]


def test_conf_is_read_as_latin1_like_java(write, tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_bytes("brokerName=br\u00f6ker\n".encode())
    got = load_settings(path, check_store=False)
    assert got.broker_name == "br\u00c3\u00b6ker"  # what the broker itself gets


def test_conf_malformed_unicode_escape_is_refused(write) -> None:
    [problem] = refusals(write("broker.conf", "ok=1\nbrokerName=a\\u00zz\n"))
    assert problem.key == "brokerName"
    assert "line 2: malformed \\uxxxx escape" in str(problem)
    [problem] = refusals(write("broker.conf", "bad\\u12=1\n"))
    assert problem.key == ""


def test_conf_surrogate_pairs_are_joined() -> None:
    [entry] = parse_properties("brokerName=\\uD83D\\uDE00\n")
    assert entry.value == "\U0001f600"


def test_conf_empty_daemon_values_mean_default(write) -> None:
    got = load_conf(write, "retentiond.timezone=\nretentiond.journal.dir=\n")
    assert (got.daemon.timezone, got.daemon.journal_dir) == (None, None)


def test_conf_daemon_keys(write) -> None:
    got = load_conf(
        write,
        "retentiond.timezone=Asia/Shanghai\nretentiond.dryRun=true\n"
        "retentiond.journal.dir=/var/lib/retentiond\nretentiond.initialDelay=0\n",
    )
    assert got.daemon.timezone == "Asia/Shanghai"
    assert got.daemon.dry_run is True
    assert got.daemon.journal_dir == Path("/var/lib/retentiond")
    assert got.daemon.initial_delay_ms == 0


# --- daemon settings in YAML ---------------------------------------------------------------


def test_yaml_daemon_section(write) -> None:
    got = load_yaml(
        write,
        "retentiond:\n  timezone: Europe/Paris\n  dryRun: true\n"
        "  journal:\n    dir: /var/lib/retentiond/journal\n  initialDelay: 1500\n",
    )
    assert got.daemon.timezone == "Europe/Paris"
    assert got.daemon.dry_run is True
    assert got.daemon.journal_dir == Path("/var/lib/retentiond/journal")
    assert got.daemon.initial_delay_ms == 1500


@pytest.mark.parametrize("section", ["retentiond:", "retentiond:\n  journal:", "retentiond: {}"])
def test_yaml_empty_daemon_sections_are_defaults(write, section: str) -> None:
    assert (
        load_yaml(write, section + "\n").daemon
        == rocketmq_settings(store_path_root_dir=Path("/"), store_path_commitlog=()).daemon
    )


def test_yaml_null_timezone_is_local(write) -> None:
    assert load_yaml(write, "retentiond:\n  timezone: null\n").daemon.timezone is None
    assert load_yaml(write, "retentiond:\n  timezone: UTC\n").daemon.timezone == "UTC"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("Mars/Olympus_Mons", "unknown time zone"),
        ("Europe/Pariss", "did you mean 'Europe/Paris'?"),
        ("/etc/localtime", "unknown time zone"),
        ("../../etc/passwd", "unknown time zone"),
        ("America", "unknown time zone"),
        ("''", "leave it out (or null)"),
        ("5", "must be a string"),
    ],
)
def test_timezone_refused(write, value: str, message: str) -> None:
    problem = yaml_refusal(write, "retentiond.timezone", f"retentiond:\n  timezone: {value}")
    assert message in problem.message
    assert problem.file.endswith("broker.yaml")


def test_conf_timezone_refused(write) -> None:
    problem = conf_refusal(write, "retentiond.timezone", "retentiond.timezone=Nowhere/Land")
    assert problem.value == "Nowhere/Land"


@pytest.mark.parametrize(
    ("value", "message"), [("journal", "absolute path"), ("7", "must be a string")]
)
def test_journal_dir_refused(write, value: str, message: str) -> None:
    problem = yaml_refusal(
        write, "retentiond.journal.dir", f"retentiond:\n  journal:\n    dir: {value}"
    )
    assert message in problem.message


# --- reloads -------------------------------------------------------------------------------


def test_diff_settings_lists_changed_keys_by_their_file_names(write) -> None:
    old = load_yaml(write, "fileReservedTime: 72\n")
    new = load_yaml(
        write,
        "fileReservedTime: 48\nstorePathCommitLog: '/a,/b'\ndeleteWhen: '04;05'\n"
        "retentiond:\n  timezone: UTC\n",
    )
    assert diff_settings(old, new) == [
        ("storePathCommitLog", [str(old.store.store_path_root_dir / "commitlog")], ["/a", "/b"]),
        ("fileReservedTime", 72, 48),
        ("deleteWhen", "04", "04;05"),
        ("retentiond.timezone", None, "UTC"),
    ]
    assert diff_settings(new, new) == []


def test_diff_ignores_the_source_path(write, tmp_path: Path) -> None:
    a = load_settings(write("a.yaml", "fileReservedTime: 1\n"), check_store=False)
    b = load_settings(write("b.conf", "fileReservedTime=1\n"), check_store=False)
    assert a.source != b.source
    assert diff_settings(a, b) == []
    assert a.config_hash == b.config_hash


def _changed_value(spec: ConfigKey) -> str:
    return {
        "storePathRootDir": "/other",
        "storePathCommitLog": "'/x,/y'",
        "deleteWhen": "'05'",
        "diskSpaceCleanForciblyRatio": "0.5",
        "diskSpaceWarningLevelRatio": "0.5",
        "cleanFileForciblyEnable": "false",
        "brokerName": "other",
        "brokerClusterName": "other",
        "retentiond.cluster": "payments",
        "retentiond.timezone": "UTC",
        "retentiond.dryRun": "true",
        "retentiond.journal.dir": "/j",
        "retentiond.controlSocket": "/run/x.sock",
        "diskMaxUsedSpaceRatio": "50",
        "mappedFileSizeConsumeQueue": "2000",
        "retentiond.metrics.listen": "'127.0.0.1:9999'",
        "retentiond.journal.maxSegmentBytes": "8192",
        "retentiond.journal.maxSegmentAge": "60000",
        "retentiond.ship.target": "/fleet",
        "retentiond.ship.interval": "60000",
        "retentiond.ship.layout": "1",
        "retentiond.guard.unconsumed": "keep",
        "retentiond.guard.timers": "keep",
        "retentiond.guard.ignoreGroups": "[g1]",
        "retentiond.guard.staleAfter": "1d",
    }.get(spec.key, "3")


# Keys that are only valid in pairs (TLS cert + key, basic-auth user + password file);
# tests/config/test_metrics_config.py changes them pairwise.
_PAIRED_KEYS = frozenset(
    {
        "retentiond.metrics.tlsCertFile",
        "retentiond.metrics.tlsKeyFile",
        "retentiond.metrics.basicAuthUsername",
        "retentiond.metrics.basicAuthPasswordFile",
    }
)


@pytest.mark.parametrize(
    "spec", [k for k in KEYS if k.key not in _PAIRED_KEYS], ids=lambda s: s.key
)
def test_every_key_changes_the_hash(write, spec: ConfigKey) -> None:
    base = load_yaml(write, "")
    parts = spec.key.split(".")
    text = ""
    for depth, part in enumerate(parts[:-1]):
        text += "  " * depth + f"{part}:\n"
    text += "  " * (len(parts) - 1) + f"{parts[-1]}: {_changed_value(spec)}\n"
    changed = load_yaml(write, text)
    assert changed.config_hash != base.config_hash
    assert spec.key in [key for key, _, _ in diff_settings(base, changed)]


# --- display -------------------------------------------------------------------------------


def test_reference_markdown_lists_every_key() -> None:
    text = render_reference_markdown()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [spec.key for spec in KEYS]
    header = text.splitlines()[0]
    assert all(row.count(" | ") == header.count(" | ") for row in rows)
    assert "`0.85`" in text and "30 – 85 percent" in text
    assert '| `deleteWhen` | hour list | `"04"` |' in text


def test_local_zone_name_honours_tz(monkeypatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Paris")
    assert local_zone_name() == "Europe/Paris"
    monkeypatch.setenv("TZ", ":Asia/Tokyo")
    assert local_zone_name() == "Asia/Tokyo"
    monkeypatch.setenv("TZ", "/usr/share/zoneinfo/America/New_York")
    assert local_zone_name() == "America/New_York"
    monkeypatch.setenv("TZ", "CET-1CEST")
    assert local_zone_name() is None
    monkeypatch.setenv("TZ", "")
    assert local_zone_name() == "UTC"


def test_local_zone_name_without_tz_is_a_zone_or_none(monkeypatch) -> None:
    monkeypatch.delenv("TZ", raising=False)
    name = local_zone_name()
    assert name is None or is_zone_name(name)


# --- never anything but Settings or ConfigError --------------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["04", "04;05", "/tmp", "/a,/b,", "~/x", "UTC", "85", "0.85", "true"]),
)
_KEYS = st.one_of(
    st.sampled_from([spec.key for spec in KEYS] + sorted(LEGACY_KEYS)),
    st.text(max_size=20),
)


def _check_total(fuzz_dir: Path, name: str, data: bytes) -> None:
    path = fuzz_dir / name
    path.write_bytes(data)
    for check_store in (False, True):
        try:
            result = load_settings(path, check_store=check_store)
        except ConfigError as exc:
            assert exc.problems
            assert all(isinstance(p, ConfigProblem) for p in exc.problems)
            str(exc)
        else:
            assert isinstance(result, Settings)
            result.config_hash  # noqa: B018 - must not raise either


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(text=st.text(max_size=400))
def test_any_yaml_text_loads_or_is_refused(fuzz_dir: Path, text: str) -> None:
    _check_total(fuzz_dir, "fuzz.yaml", text.encode("utf-8", "surrogatepass"))


@_FUZZ
@given(text=st.text(max_size=400))
def test_any_properties_text_loads_or_is_refused(fuzz_dir: Path, text: str) -> None:
    _check_total(fuzz_dir, "fuzz.conf", text.encode("utf-8", "surrogatepass"))


@_FUZZ
@given(data=st.binary(max_size=300))
def test_any_bytes_load_or_are_refused(fuzz_dir: Path, data: bytes) -> None:
    _check_total(fuzz_dir, "bytes.yaml", data)
    _check_total(fuzz_dir, "bytes.conf", data)


@_FUZZ
@given(entries=st.dictionaries(_KEYS, _SCALARS, max_size=8))
def test_any_mapping_of_keys_loads_or_is_refused(fuzz_dir: Path, entries: dict) -> None:
    _check_total(fuzz_dir, "keys.yaml", yaml.safe_dump(entries).encode())
    lines = "".join(f"{k}={'' if v is None else v}\n" for k, v in entries.items())
    _check_total(fuzz_dir, "keys.conf", lines.encode("utf-8", "surrogatepass"))


def test_fraction_bounds_are_exact() -> None:
    spec = BY_KEY["diskSpaceCleanForciblyRatio"]
    assert spec.coerce(0.85, Format.YAML) == 0.85
    assert spec.coerce("85", Format.CONF) == 0.85
    with pytest.raises(Invalid):
        spec.coerce(math.nextafter(0.85, 1), Format.YAML)
