"""Reload decisions on real files: what counts as a change, what is refused, what is said."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from retentiond.config.settings import Settings
from retentiond.daemon.reload import ConfigWatcher, check_reload, describe_change
from retentiond.kinds import load_settings
from retentiond.storegen.rocketmq import PRESETS
from tests.conftest import Store


@pytest.fixture
def config(store: Callable[..., Store]) -> Path:
    return store(PRESETS["upstream-test"], defaults={}, fileReservedTime=72).config


def _rewrite(config: Path, old: str, new: str) -> None:
    config.write_text(config.read_text().replace(old, new))


def test_watcher_ignores_a_touch_and_sees_an_edit(config: Path) -> None:
    watcher = ConfigWatcher(config)
    assert not watcher.changed()
    os.utime(config, (1, 1))  # new mtime, same bytes
    assert not watcher.changed()
    _rewrite(config, "fileReservedTime: 72", "fileReservedTime: 24")
    assert watcher.changed()
    assert not watcher.changed()  # reported once


def test_watcher_sees_a_file_replaced_by_rename(config: Path) -> None:
    watcher = ConfigWatcher(config)
    tmp = config.with_name("new.yaml")
    tmp.write_text(config.read_text().replace("72", "48"))
    os.replace(tmp, config)
    assert watcher.changed()


def test_valid_change_lists_each_key_with_old_and_new(config: Path) -> None:
    current = load_settings(config)
    _rewrite(config, "fileReservedTime: 72", "fileReservedTime: 24\ndeleteFileBatchMax: 3")
    result = check_reload(config, current, "SIGHUP")
    assert not result.refused
    assert isinstance(result.settings, Settings)
    assert result.change_lines() == ["fileReservedTime: 72 -> 24", "deleteFileBatchMax: 10 -> 3"]


def test_invalid_file_is_refused_with_every_problem(config: Path) -> None:
    current = load_settings(config)
    _rewrite(config, "fileReservedTime: 72", "fileReservedTime: -1\ndeleteWhen: '25'")
    result = check_reload(config, current, "file changed")
    assert result.refused
    text = "\n".join(result.problems)
    assert "fileReservedTime" in text and "deleteWhen" in text


def test_identity_keys_need_a_restart(config: Path, tmp_path: Path) -> None:
    current = load_settings(config)
    config.write_text(config.read_text() + "brokerName: broker-b\n")
    result = check_reload(config, current, "SIGHUP")
    assert result.refused
    assert "brokerName" in result.problems[0] and "restart" in result.problems[0]


def test_the_cluster_name_needs_a_restart(config: Path) -> None:
    """``retentiond.cluster`` labels the journal and the metrics, as ``brokerClusterName``."""
    current = load_settings(config)
    text = config.read_text()
    assert "retentiond:" in text
    config.write_text(text.replace("retentiond:\n", "retentiond:\n  cluster: payments\n", 1))
    assert load_settings(config).broker_cluster_name == "payments"
    result = check_reload(config, current, "SIGHUP")
    assert result.refused
    assert result.problems[0].endswith(
        "retentiond.cluster: (default) -> payments: this key cannot change while running; "
        "restart the service to apply it"
    )


def test_a_loader_crash_is_a_refusal_not_a_crash(config: Path) -> None:
    current = load_settings(config)

    def broken(path: Path) -> Settings:
        raise RuntimeError("bug")

    result = check_reload(config, current, "SIGHUP", load=broken)
    assert result.refused and "bug" in result.problems[0]


def test_describe_change_shows_defaults_and_lists() -> None:
    assert describe_change("retentiond.timezone", None, "UTC") == (
        "retentiond.timezone: (default) -> UTC"
    )
    assert describe_change("storePathCommitLog", ["/a"], ["/a", "/b"]) == (
        "storePathCommitLog: /a -> /a,/b"
    )
