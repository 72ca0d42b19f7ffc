"""``docs/plan.schema.json`` describes what ``plan --json`` (and ``once --json``) really write,
for both store kinds: one envelope, each kind's body. Real generated stores, the real command
line."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import jsonschema  # the test extra's: a missing one fails here, never skips
import pytest

from retentiond.reasons import SCHEMA_VERSION, Kind, Reason, Verdict
from tests.conftest import expired_spec, make_store, run_cli

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "plan.schema.json").read_text())
ENVELOPE = SCHEMA["required"]


def validate(doc: object) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)


def plan_json(config: Path, *args: str, code: int = 0) -> dict:
    result = run_cli("plan", "--config", str(config), "--json", *args)
    assert result.code == code, result.err
    return json.loads(result.out)


def test_the_schema_knows_every_reason_kind_and_verdict() -> None:
    props = SCHEMA["$defs"]["file"]["properties"]
    assert props["reason"]["enum"] == [r.value for r in Reason]
    assert props["kind"]["enum"] == [k.value for k in Kind]
    assert props["verdict"]["enum"] == [v.value for v in Verdict]
    assert SCHEMA["properties"]["schema_version"]["const"] == SCHEMA_VERSION


@pytest.mark.parametrize("case", ["delete-hour", "outside", "batch-limit"])
def test_rocketmq_plans_validate(tmp_path: Path, case: str) -> None:
    keys = {
        "outside": {"deleteWhen": f"{(datetime.now().hour + 12) % 24:02d}"},  # local hours
        "batch-limit": {"deleteFileBatchMax": 2},
    }.get(case, {})
    store = make_store(tmp_path, expired_spec(queues_per_topic=3), **keys)
    (store.root / "commitlog" / "notes.txt").write_text("not ours")  # a problem, foreign
    for args in ((), ("--all",), ("--manual",)):
        doc = plan_json(store.config, *args)
        validate(doc)
        assert doc["kind"] == "rocketmq" and doc["type"] == "plan"
        assert doc["store"] == [str(store.root)] and doc["problems"]
    files = [f["path"] for f in doc["consumequeue"]["files"]]
    order = [(p.split("/")[-3], int(p.split("/")[-2]), p.split("/")[-1]) for p in files]
    assert order == sorted(order)  # topic, queue id, file


def test_a_rocketmq_store_error_and_a_round_validate(tmp_path: Path) -> None:
    store = make_store(tmp_path, expired_spec())
    doc = plan_json(store.config)
    assert doc["totals"]["delete_files"] > 0
    result = run_cli("once", "--config", str(store.config), "--json")
    assert result.code == 0, result.err
    round_doc = json.loads(result.out)
    validate(round_doc)
    assert round_doc["type"] == "round"
    (tmp_path / "elsewhere").mkdir()
    for f in (store.root / "commitlog").iterdir():
        f.rename(tmp_path / "elsewhere" / f.name)
    doc = plan_json(store.config, code=4)
    validate(doc)
    assert doc["errors"]


def test_a_rocketmq_plan_with_a_timer_log_validates(tmp_path: Path) -> None:
    """The ``timerlog`` section (a store with ``timerlog/``), in a plan and in a round."""
    store = make_store(tmp_path, expired_spec())
    (store.root / "timerlog").mkdir()
    for name in ("00000000000000000000", "00000000000000001024"):
        (store.root / "timerlog" / name).write_bytes(bytes(1024))  # no unit: kept, a problem
    doc = plan_json(store.config, "--all")
    validate(doc)
    assert [f["reason"] for f in doc["timerlog"]["files"]] == ["unreadable", "newest_file"]
    result = run_cli("once", "--config", str(store.config), "--json")
    assert result.code == 0, result.err
    validate(json.loads(result.out))


def kafka_store(tmp_path: Path) -> Path:
    config = tmp_path / "server.properties"
    result = run_cli(
        "gen-store", "--kind", "kafka", "--oldest-hours", "300", "--config-out", str(config),
        str(tmp_path / "kafka"),
    )  # fmt: skip
    assert result.code == 0, result.err
    return config


def test_kafka_plans_validate(tmp_path: Path) -> None:
    config = kafka_store(tmp_path)
    for args in ((), ("--all",)):
        doc = plan_json(config, *args)
        validate(doc)
        assert doc["kind"] == "kafka" and doc["type"] == "plan"
        assert doc["store"] == [str(tmp_path / "kafka")]
        segments = [s for ld in doc["log_dirs"] for p in ld["partitions"] for s in p["segments"]]
        assert segments and all("partition" in s and "queue_id" not in s for s in segments)
        assert any("expires_ms" in s for s in segments)
        parts = [(p["topic"], p["partition"]) for p in doc["log_dirs"][0]["partitions"]]
        assert parts == sorted(parts)
        assert doc["totals"]["files"] == len(segments) or not args
    result = run_cli("once", "--config", str(config), "--json", "--dry-run")
    assert result.code == 0, result.err
    validate(json.loads(result.out))


def test_both_kinds_share_the_envelope(tmp_path: Path) -> None:
    rocketmq = plan_json(make_store(tmp_path / "r", expired_spec()).config)
    kafka = plan_json(kafka_store(tmp_path / "k"))
    assert list(rocketmq)[: len(ENVELOPE)] == ENVELOPE == list(kafka)[: len(ENVELOPE)]
    for doc in (rocketmq, kafka):
        assert doc["timezone"] != "local"


def test_the_schema_refuses_the_old_shapes(tmp_path: Path) -> None:
    """What version 2 wrote does not pass: an unnamed zone, Kafka's queue_id, no envelope."""
    kafka = plan_json(kafka_store(tmp_path))
    segment = kafka["log_dirs"][0]["partitions"][0]["segments"][0]
    segment["queue_id"] = segment.pop("partition")
    rocketmq = plan_json(make_store(tmp_path / "r", expired_spec()).config)
    for bad in (
        kafka,
        {**rocketmq, "timezone": "local"},
        {k: v for k, v in rocketmq.items() if k != "totals"},
        {**rocketmq, "schema_version": 2},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validate(bad)
