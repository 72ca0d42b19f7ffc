"""docs/journal.md is the contract: every field the engine writes is documented there, the
fields it promises on every record are present, and the Spark job reads only documented
fields. Records come from real rounds over a generated store (expired, forced and queue
deletions), not from hand-written dicts."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

import pytest

from retentiond.engine.cleaner import Cleaner
from retentiond.journal.writer import Journal, Origin, read_records
from retentiond.kinds import kind_for, load_settings
from retentiond.reasons import DELETE_REASONS
from retentiond.storegen.rocketmq import StoreSpec, generate_store, write_config
from tests.conftest import need

DOC = Path(__file__).resolve().parents[2] / "docs" / "journal.md"
NOW = 1_790_000_000_000
HOUR = 3_600_000
COMMON = {"schema_version", "type", "time_ms", "cluster", "broker", "host", "store"}
_ROW = re.compile(r"^\| `([^`]+)` \|")


def documented() -> dict[str, set[str]]:
    """Field names per record type, from the tables under the record headings."""
    sections: dict[str, set[str]] = {}
    current: str | None = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:]
            current = None
            if heading == "Fields on every record":
                current = "common"
            elif heading.startswith("`deletion`"):
                current = "deletion"
            elif heading.startswith("`abort`"):
                current = "abort"
            elif heading.startswith("`round`"):
                current = "round"
            elif heading.startswith("`round_summary`"):
                current = "round_summary"
            continue
        m = _ROW.match(line)
        if m and current:
            sections.setdefault(current, set()).add(m.group(1))
    return sections


def flatten(record: dict[str, Any], prefix: str = "") -> set[str]:
    names: set[str] = set()
    for key, value in record.items():
        name = prefix + key
        if isinstance(value, dict):
            if prefix == "" and key == "deleted":
                for sub in value.values():
                    names |= flatten(sub, "deleted.<kind>.")
            else:
                names |= flatten(value, name + ".")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for item in value:
                names |= flatten(item, name + "[].")
        else:
            names.add(name)
    return names


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("contract")
    spec = StoreSpec(
        commitlog_file_size=8 * 1024,
        cq_file_size=20 * 20,
        messages=7 * 40,
        message_size=1000,
        topics=1,
        queues_per_topic=2,
        oldest_age_hours=40,
        now_ms=NOW,
    )
    store = generate_store(tmp / "store", spec)
    out = []
    full = os.statvfs_result((4096, 4096, 1000, 50, 50, 100, 50, 50, 0, 255))  # 95 % used
    real = os.statvfs
    for ratio, reserved in ((95, 24), (10, 200)):  # an expiry round, then a forced one
        config = write_config(
            store.root, spec, tmp / f"b{ratio}.yaml",
            fileReservedTime=reserved, diskMaxUsedSpaceRatio=ratio,
            diskSpaceCleanForciblyRatio=0.30, diskSpaceWarningLevelRatio=0.90,
            deleteWhen=f"{(NOW // HOUR) % 24:02d}", deleteFileBatchMax=10,
            deleteCommitLogFilesInterval=0, deleteConsumeQueueFilesInterval=0,
            retentiond={"timezone": "UTC", "journal": {"dir": str(tmp / "j")}},
        )  # fmt: skip
        journal = Journal(tmp / "j", Origin("c", "b", "h", str(store.root)))
        proc = tmp / "proc"
        proc.mkdir(exist_ok=True)
        (proc / "locks").write_text("")
        cleaner = Cleaner(
            kind_for(load_settings(config)),
            journal=journal,
            clock_ms=lambda: NOW,
            proc_root=str(proc),
        )
        if reserved == 200:  # a disk over the clean-forcibly ratio, whatever this host has
            os.statvfs = lambda path: full if str(path).startswith(str(store.root)) else real(path)
        try:
            cleaner.run_round()
        finally:
            os.statvfs = real
        journal.close()
    out = list(read_records(tmp / "j"))
    return out


def test_the_engine_wrote_every_record_kind_it_should(records) -> None:
    reasons = {r.get("reason") for r in records if r["type"] == "deletion"}
    assert {"expired", "forced_over_clean_forcibly_ratio", "below_commitlog_min_offset"} <= reasons
    assert {r["type"] for r in records} >= {"intent", "deletion", "round"}


def test_every_written_field_is_documented(records) -> None:
    doc = documented()
    for r in records:
        kind = "deletion" if r["type"] in ("deletion", "intent") else r["type"]
        allowed = doc["common"] | doc[kind] | {"config_hash"}
        extra = flatten(r) - allowed
        assert not extra, f"{r['type']} fields missing from docs/journal.md: {sorted(extra)}"
        assert r.keys() >= COMMON


def test_promised_fields_are_present(records) -> None:
    for r in records:
        if r["type"] == "deletion":
            assert {
                "id", "kind", "file", "reason", "forced", "dry_run", "disk_ratio_before",
                "config_hash", "file_reserved_time_hours", "bytes", "mtime_ms", "age_ms",
                "start_offset", "end_offset", "duration_ms",
            } <= r.keys()  # fmt: skip
            assert r["age_ms"] == r["time_ms"] - r["mtime_ms"]
            if r["kind"] == "consumequeue":
                assert {"topic", "queue_id"} <= r.keys()
        if r["type"] == "round":
            names = flatten(r)
            assert {
                "triggers.physic_ratio", "triggers.disk_state", "deleted.<kind>.files",
                "deleted.<kind>.bytes", "expired_pending", "duration_ms", "interval_ms",
                "file_reserved_time_hours", "thresholds.warning_level_ratio", "disk[].ratio",
                "disk[].path",
            } <= names  # fmt: skip
            assert [d["role"] for d in r["disk"]] == ["commitlog", "consumequeue"]


def test_documented_reasons_are_the_reason_enum() -> None:
    text = DOC.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `reason` |"))
    assert set(re.findall(r"`([a-z_]+)`", row)) - {"reason"} == {str(r) for r in DELETE_REASONS}


def test_the_spark_schema_reads_only_documented_fields() -> None:
    need(importlib.util.find_spec("pyspark") is not None, "pyspark is not installed")
    from pyspark.sql.types import ArrayType, StructType

    from retentiond.analytics.schema import SCHEMAS

    def names(schema: StructType, prefix: str = "") -> set[str]:
        out: set[str] = set()
        for f in schema.fields:
            t = f.dataType
            if isinstance(t, StructType):
                sub = "deleted.<kind>." if f.name == "deleted" else f"{prefix}{f.name}."
                if f.name == "deleted":
                    out |= names(t.fields[0].dataType, sub)  # type: ignore[arg-type]
                else:
                    out |= names(t, sub)
            elif isinstance(t, ArrayType) and isinstance(t.elementType, StructType):
                out |= names(t.elementType, f"{prefix}{f.name}[].")
            else:
                out.add(prefix + f.name)
        return out

    doc = documented()
    for kind, schema in SCHEMAS.items():
        allowed = doc["common"] | doc[kind] | {"config_hash", "dt"}
        if kind == "round_summary":  # it carries objects of the round record, documented there
            allowed |= {n for n in doc["round"] if n.split(".")[0] in doc[kind]}
        unknown = names(schema) - allowed
        assert not unknown, f"{kind}: the job reads undocumented fields {sorted(unknown)}"
