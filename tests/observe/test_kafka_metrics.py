"""A Kafka log dir's figures on ``/metrics``: the disk series the shared disk alerts read
(used ratio, the warning threshold, the state among ``ok`` and ``warning_level`` only) on a
real tmpfs filled to a known ratio, and the verdict counts `status` shows, after a real round;
`status` (``--json`` and text) shows each log dir's disk as the last round found it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from retentiond.daemon.state import DaemonState
from retentiond.daemon.statustext import render
from retentiond.engine.cleaner import Cleaner
from retentiond.journal.writer import Journal, Origin
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.kafka.config import kafka_of
from retentiond.kinds.kafka.kind import DISK_WARNING_RATIO
from retentiond.observe.metrics import RetentionMetrics
from tests.conftest import Tmpfs
from tests.e2e.test_kafka_cli import build_log_dir, write_config

BASE = {"cluster": "kafkawire-test", "broker": "3"}


class KafkaRig:
    def __init__(self, tmp: Path, log_dir: Path, *more_dirs: Path, **keys: str) -> None:
        for d in (log_dir, *more_dirs):
            build_log_dir(d, int(time.time() * 1000))
        config = write_config(tmp, [log_dir, *more_dirs], **keys)
        self.settings = load_settings(config)
        kind = kind_for(self.settings)
        self.journal = Journal(tmp / "journal", Origin("c", "b", "host", str(log_dir)))
        self.state = DaemonState(config, self.settings, kind)
        self.cleaner = Cleaner(kind, journal=self.journal)
        self.cleaner.add_listener(self.state)
        self.registry = CollectorRegistry()
        self.metrics = RetentionMetrics(self.settings, registry=self.registry, status=self.status)
        self.metrics.watch(self.cleaner)
        labels = (self.settings.broker_cluster_name, self.settings.broker_name)
        self.base = dict(zip(("cluster", "broker"), labels, strict=True))

    def status(self) -> dict[str, Any]:
        return self.state.snapshot()

    def round(self) -> None:
        result = self.cleaner.run_round()
        self.state.round_done(result, self.cleaner.kind)
        self.metrics.round_done(result)

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        out = {}
        for family in self.registry.collect():
            for s in family.samples:
                if s.name == name:
                    assert {k: s.labels[k] for k in self.base} == self.base
                    rest = {k: v for k, v in s.labels.items() if k not in self.base}
                    out[tuple(sorted(rest.items()))] = s.value
        return out


def test_a_log_dir_exports_its_ratio_the_warning_threshold_and_two_states(
    tmp_path: Path, tmpfs: Tmpfs
) -> None:
    log_dir = tmpfs.path / "kafka-logs"
    rig = KafkaRig(tmp_path, log_dir)
    try:
        tmpfs.fill_to(0.5)
        ratio = rig.samples("retentiond_disk_used_ratio")
        assert list(ratio) == [(("kind", "log_dir"), ("path", str(log_dir)))]
        assert 0.5 <= next(iter(ratio.values())) < 0.6
        assert rig.samples("retentiond_disk_threshold_ratio") == {
            (("state", "warning_level"),): DISK_WARNING_RATIO
        }
        assert DISK_WARNING_RATIO == 0.90
        ok = {(("state", "ok"),): 1.0, (("state", "warning_level"),): 0.0}
        assert rig.samples("retentiond_disk_state") == ok

        tmpfs.fill_to(0.95)
        assert next(iter(rig.samples("retentiond_disk_used_ratio").values())) > 0.9
        at_warning = {(("state", "ok"),): 0.0, (("state", "warning_level"),): 1.0}
        assert rig.samples("retentiond_disk_state") == at_warning
    finally:
        rig.journal.close()


def test_the_warning_level_is_retentiond_kafka_disk_warning_ratio(
    tmp_path: Path, tmpfs: Tmpfs
) -> None:
    log_dir = tmpfs.path / "kafka-logs"
    rig = KafkaRig(tmp_path, log_dir, **{"retentiond.kafka.diskWarningRatio": "0.4"})
    try:
        assert kafka_of(rig.settings).store.disk_warning_ratio == 0.4
        tmpfs.fill_to(0.5)
        assert 0.5 <= next(iter(rig.samples("retentiond_disk_used_ratio").values())) < 0.6
        assert rig.samples("retentiond_disk_threshold_ratio") == {
            (("state", "warning_level"),): 0.4
        }
        at_warning = {(("state", "ok"),): 0.0, (("state", "warning_level"),): 1.0}
        assert rig.samples("retentiond_disk_state") == at_warning
    finally:
        rig.journal.close()


def test_an_unmeasurable_log_dir_is_never_called_ok(tmp_path: Path) -> None:
    log_dir = tmp_path / "kafka-logs"
    rig = KafkaRig(tmp_path, log_dir)
    try:
        log_dir.rename(tmp_path / "elsewhere")  # gone after the configuration was loaded
        assert rig.samples("retentiond_disk_used_ratio") == {}
        assert set(rig.samples("retentiond_disk_state").values()) == {0.0}
    finally:
        rig.journal.close()


def test_the_verdict_counts_of_status_are_exported(tmp_path: Path) -> None:
    rig = KafkaRig(tmp_path, tmp_path / "kafka-logs")
    try:
        assert rig.samples("retentiond_scan_files") == {}
        rig.round()
        reasons = rig.status()["scan"]["reasons"]
        assert reasons and any(k.startswith("delete:") for k in reasons)
        expected = {}
        for key, n in reasons.items():
            verdict, reason = key.split(":")
            expected[(("reason", reason), ("verdict", verdict))] = float(n)
        assert rig.samples("retentiond_scan_files") == expected
    finally:
        rig.journal.close()


def test_status_shows_each_log_dirs_disk_against_the_warning_level(
    tmp_path: Path, tmpfs: Tmpfs
) -> None:
    log_dir = tmpfs.path / "kafka-logs"
    rig = KafkaRig(tmp_path, log_dir)
    try:
        assert rig.status()["disk"] == {
            "log_dirs": None,
            "state": None,
            "warning_level_ratio": DISK_WARNING_RATIO,
        }
        assert "disk      not measured yet (warning level above 0.90)" in render(rig.status())
        tmpfs.fill_to(0.5)
        rig.round()
        doc = rig.status()
        disk = doc["disk"]
        [entry] = disk["log_dirs"]
        assert entry.keys() == {
            "path", "ratio", "total_bytes", "used_bytes", "avail_bytes", "error"
        }  # fmt: skip
        assert entry["path"] == str(log_dir) and entry["error"] is None
        assert 0.5 <= entry["ratio"] < 0.6
        total, used, avail = entry["total_bytes"], entry["used_bytes"], entry["avail_bytes"]
        assert total == tmpfs.usage()[1] and 0.5 * total <= used <= total - avail
        assert disk["state"] == "ok" and disk["warning_level_ratio"] == DISK_WARNING_RATIO
        assert "disk" not in doc["scan"]  # shown once, under "disk"
        text = render(doc)
        assert "disk      ok (warning level above 0.90)" in text
        assert f"          {log_dir}: used {entry['ratio']:.2f}, " in text

        tmpfs.fill_to(0.95)
        rig.round()
        disk = rig.status()["disk"]
        assert disk["log_dirs"][0]["ratio"] > DISK_WARNING_RATIO
        assert disk["state"] == "warning_level"  # as retentiond_disk_state
        assert "disk      warning_level (warning level above 0.90)" in render(rig.status())
    finally:
        rig.journal.close()


def test_a_log_dir_that_cannot_be_measured_is_named_in_status(tmp_path: Path) -> None:
    """One of two log dirs gone after the configuration was loaded: status names it with why
    it has no figures, shows the other's, and never calls the disk ok."""
    here, gone = tmp_path / "logs-a", tmp_path / "logs-b"
    rig = KafkaRig(tmp_path, here, gone)
    try:
        gone.rename(tmp_path / "elsewhere")
        rig.round()
        disk = rig.status()["disk"]
        measured, missing = disk["log_dirs"]
        assert measured["path"] == str(here) and measured["ratio"] is not None
        assert missing["path"] == str(gone) and missing["ratio"] is None
        assert missing["error"] == "path does not exist"
        assert disk["state"] is None
        text = render(rig.status())
        assert "disk      unknown (warning level above 0.90)" in text
        assert f"          {gone}: not measured: path does not exist" in text
    finally:
        rig.journal.close()
