"""Synthetic fleet records in the journal schema, written straight to the shipped layout.

For the benchmark (millions of records in minutes), the demo report (``make demo-report``) and
the report's tests; the end-to-end test of the tables uses the real engine instead
(``tests/analytics/fleet_sim.py``). Plain Python: no pyspark.

A mixed fleet: every ``kafka_every``-th cluster is Kafka, the others RocketMQ. Each broker has
a story, so that every table and every section of the report has something to say:

- ``healthy``: a flat disk; deletions in the delete hour (RocketMQ) or at retention (Kafka);
- ``rising``: a disk that climbs towards its warning level (reached some weeks after the
  window);
- ``crossing``: a disk that crosses its warning level during the window, with forced
  deletions (RocketMQ) once over the clean-forcibly ratio;
- ``losing``: deletions that take messages a protected consumer group had not consumed
  (``loss.groups``, schema 3 and up);
- ``rescue`` (Kafka): a stopped broker whose disk filled up, got running again by
  ``retentiond rescue`` on the last day (``"rescue": true`` deletions, schema 5).

Brokers of the ``legacy`` story write schema version 2 (no ``loss``, no ``rescue``), as a
daemon not yet upgraded would: the job reads both. Records are written in any shipped layout
(``journal.ship``): 1, a directory per record type; 2, every type of a broker's day in one
file (``v2/``); 3, the daemon's default, one file per record family (``v3/deletions``:
intents and deletions; ``v3/rounds``: rounds and round summaries).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from retentiond.journal.rollup import IdleView, RoundFolder
from retentiond.journal.ship import LAYOUTS, layout_dir

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
FILE_BYTES = 1 << 30
DISK_BYTES = 4 << 40
SEGMENT_BYTES = 512 << 20
REFERENCE_ROUNDS = 144  # deletion rates are per round at this many rounds a day
NEW_SCHEMA = 5  # the version with both shared fields (loss: 3, rescue: 5)
OLD_SCHEMA = 2
GROUPS = {
    "rocketmq": [("billing-consumer", "orders"), ("audit-sink", "payments")],
    "kafka": [("analytics-etl", "clickstream"), ("fraud-scorer", "payments")],
}


@dataclass(frozen=True)
class Plan:
    clusters: int = 3
    brokers_per_cluster: int = 5
    days: int = 7
    rounds_per_day: int = 144  # every 10 minutes
    summary_interval_ms: int = 300_000  # retentiond.journal.roundSummaryInterval's default
    start_ms: int = 1_709_510_400_000  # 2024-03-04T00:00:00Z
    seed: int = 7
    kafka_every: int = 3  # every third cluster is Kafka (0: none)
    layout: int = 1  # 1: a directory per record type; 2: all types in one file (v2/); 3: v3/

    @property
    def brokers(self) -> int:
        return self.clusters * self.brokers_per_cluster


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def _dump(record: dict[str, object]) -> bytes:
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode() + b"\n"


def is_kafka(plan: Plan, cluster: int) -> bool:
    return plan.kafka_every > 0 and cluster % plan.kafka_every == plan.kafka_every - 1


def story(plan: Plan, cluster: int, broker: int) -> str:
    """Each cluster's brokers, in order: a crossing (or rescued) one, a losing one, a rising
    one, then healthy ones; every fifth broker runs an old daemon (schema 2)."""
    kafka = is_kafka(plan, cluster)
    i = broker % 5
    if i == 0:
        return "rescue" if kafka else ("crossing" if cluster % 2 == 0 else "rising")
    if i == 1:
        return "losing"
    if i == 2:
        return "rising"
    if i == 4:
        return "legacy"
    return "healthy"


@dataclass
class _Broker:
    plan: Plan
    cluster: int
    broker: int
    rng: random.Random
    story: str
    kafka: bool
    origin: dict[str, str]
    version: int
    reserved: int

    def base(self, now: int) -> dict[str, Any]:
        return {**self.origin, "schema_version": self.version, "time_ms": now}


def _loss(b: _Broker, deleted: int) -> dict[str, Any] | None:
    """The ``loss`` of one deletion: what protected groups had not consumed of it."""
    if b.version < 3:
        return None
    empty = {"progress": "known", "messages": 0, "groups": [], "timers": 0,
             "delay_levels": [], "half_messages": 0}  # fmt: skip
    if b.story != "losing" or b.rng.random() < 0.5:
        return empty
    groups = [
        {"group": g, "topic": t, "messages": b.rng.randint(200, 4000) * deleted, "state": "active"}
        for g, t in GROUPS["kafka" if b.kafka else "rocketmq"][: b.rng.choice((1, 1, 2))]
    ]
    return {**empty, "messages": sum(g["messages"] for g in groups), "groups": groups}


def _trend(b: _Broker) -> tuple[float, float]:
    """(ratio at the start, growth per day) of the broker's disk."""
    days = max(1, b.plan.days)
    rng = b.rng
    if b.story in ("crossing", "rescue"):
        start = rng.uniform(0.80, 0.84)
        return start, (rng.uniform(0.94, 0.97) - start) / days  # over 0.90 before the end
    if b.story == "rising":
        start = rng.uniform(0.55, 0.65)
        return start, rng.uniform(0.08, 0.14) / days + 0.003
    return rng.uniform(0.35, 0.62), rng.uniform(-0.004, 0.003)


def broker_days(plan: Plan, cluster: int, broker: int) -> list[tuple[str, dict[str, list[bytes]]]]:
    """All of one broker's records, per day and record type, as journal lines."""
    rng = random.Random(plan.seed * 7919 + cluster * 101 + broker)
    kafka = is_kafka(plan, cluster)
    c = f"cluster-{cluster + 1}"
    b_name = f"kafka-{broker}" if kafka else f"broker-{broker}"
    host = f"{b_name}.{c}.example"
    st = story(plan, cluster, broker)
    store = f"/data/{b_name}/kafka-logs" if kafka else f"/data/{b_name}/store"
    b = _Broker(
        plan, cluster, broker, rng, st, kafka,
        {"cluster": c, "broker": b_name, "host": host, "store": store},
        OLD_SCHEMA if st == "legacy" else NEW_SCHEMA, rng.choice([48, 72, 72, 120]),
    )  # fmt: skip
    start, growth = _trend(b)
    interval = DAY_MS // plan.rounds_per_day
    rate = REFERENCE_ROUNDS / plan.rounds_per_day
    days: dict[str, dict[str, list[bytes]]] = {}
    folder = RoundFolder()  # the daemon's own folding of idle rounds into round_summary
    seq = [0]

    def put(record: dict[str, object]) -> None:
        by_type = days.setdefault(_day(int(record["time_ms"])), {})  # type: ignore[call-overload]
        by_type.setdefault(str(record["type"]), []).append(_dump(record))

    def delete(now: int, fields: dict[str, Any]) -> None:
        seq[0] += 1
        record = {**b.base(now), "id": f"{cluster}-{broker}-{seq[0]}", "dry_run": False,
                  "config_hash": "synthetic00", **fields}  # fmt: skip
        put({**record, "type": "intent"})
        put({**record, "type": "deletion", "duration_ms": round(rng.uniform(0.1, 3.0), 3)})

    rescued = False
    for d in range(plan.days):
        for i in range(plan.rounds_per_day):
            now = plan.start_ms + d * DAY_MS + i * interval + rng.randrange(1000)
            t = d + i / plan.rounds_per_day
            ratio = min(0.99, max(0.05, start + growth * t + rng.gauss(0, 0.004)))
            if rescued:
                ratio = min(ratio, 0.72 + rng.gauss(0, 0.004))
            r = round(ratio, 2)
            hour = (now // HOUR_MS) % 24
            if kafka:
                n = 0
                if st == "rescue" and not rescued and d == plan.days - 1 and hour >= 10:
                    n = _rescue(b, now, delete)
                    rescued = True
                elif rng.random() < 0.25 * rate:
                    n = _kafka_deletions(b, now, r, delete)
                record = _kafka_round(b, now, r, n, interval)
                view = _kafka_idle_view(record)
            else:
                state = (
                    "warning_level" if r > 0.90 else "clean_forcibly" if r > 0.85
                    else "over_max_ratio" if r > 0.75 else "ok"
                )  # fmt: skip
                n = _rocketmq_deletions(b, now, r, state, hour, rate, delete)
                record = _rocketmq_round(b, now, r, state, hour, n, interval)
                view = _idle_view(record)
            for rec in folder.offer(record, view, plan.summary_interval_ms):
                put({**b.base(now), **rec})
    for rec in folder.flush():  # the daemon's shutdown
        put({**b.base(int(rec["time_ms"])), **rec})
    return sorted(days.items())


def _rocketmq_deletions(
    b: _Broker, now: int, r: float, state: str, hour: int, rate: float, delete: Any
) -> int:
    rng = b.rng
    forced = state in ("clean_forcibly", "warning_level")
    n = 0
    if forced and rng.random() < 0.6 * rate:
        n = rng.randint(1, 3)
    elif state == "over_max_ratio" and rng.random() < 0.4 * rate:
        n = 1
    elif hour == 4 and rng.random() < 0.5 * rate * 4:
        n = rng.randint(1, 2)
    reserved = b.reserved
    for _ in range(n):
        age = int(
            rng.uniform(0.3, 1.0) * reserved * HOUR_MS
            if forced
            else reserved * HOUR_MS + rng.expovariate(1 / (6 * HOUR_MS))
        )
        reason = (
            "forced_over_clean_forcibly_ratio" if forced
            else "disk_over_max_ratio" if state == "over_max_ratio" else "expired"
        )  # fmt: skip
        offset = rng.randrange(1 << 40) // FILE_BYTES * FILE_BYTES
        fields: dict[str, Any] = {
            "kind": "commitlog",
            "file": f"{b.origin['store']}/commitlog/{offset:020d}",
            "reason": reason,
            "forced": forced,
            "disk_ratio_before": r,
            "file_reserved_time_hours": reserved,
            "bytes": FILE_BYTES,
            "mtime_ms": now - age,
            "age_ms": age,
            "start_offset": offset,
            "end_offset": offset + FILE_BYTES,
        }
        loss = _loss(b, rng.randint(2, 6))
        if loss is not None:
            fields["loss"] = loss
        delete(now, fields)
        for q in range(4):  # the ConsumeQueue files behind it
            cq: dict[str, Any] = {
                "kind": "consumequeue",
                "file": f"{b.origin['store']}/consumequeue/T/{q}/{offset // 20:020d}",
                "reason": "below_commitlog_min_offset",
                "forced": False,
                "disk_ratio_before": r,
                "file_reserved_time_hours": reserved,
                "bytes": 6_000_000,
                "mtime_ms": now - reserved * HOUR_MS,
                "age_ms": reserved * HOUR_MS,
                "topic": "T",
                "queue_id": q,
            }
            delete(now, cq)
    return n


def _rocketmq_round(
    b: _Broker, now: int, r: float, state: str, hour: int, n: int, interval: int
) -> dict[str, Any]:
    return {
        "type": "round",
        "time_ms": now,
        "manual": False,
        "triggers": {
            "time_up": hour == 4,
            "usage_exceeds": state != "ok",
            "manual": False,
            "clean_immediately": state in ("clean_forcibly", "warning_level"),
            "clean_at_once": state in ("clean_forcibly", "warning_level"),
            "physic_ratio": r,
            "logics_ratio": r,
            "disk_state": state,
            "hour": hour,
            "fired": hour == 4 or state != "ok",
            "error": None,
        },
        "hour": hour,
        "queues_examined": n > 0,
        "deleted": {
            "commitlog": {"files": n, "bytes": n * FILE_BYTES},
            "consumequeue": {"files": 4 * n, "bytes": 4 * n * 6_000_000},
            "index": {"files": 0, "bytes": 0},
        },
        "failures": 0,
        # a stuck round: over the max ratio with nothing old enough to delete
        "expired_pending": b.rng.randint(0, 3),
        "errors": [],
        "stopped": False,
        "duration_ms": round(b.rng.uniform(1, 50), 3),
        "config_hash": "synthetic00",
        "file_reserved_time_hours": b.reserved,
        "interval_ms": interval,
        "thresholds": {
            "disk_max_used_ratio": 0.75,
            "clean_forcibly_ratio": 0.85,
            "warning_level_ratio": 0.90,
        },
        "disk": [_disk(b, "commitlog", r)],
    }


def _disk(b: _Broker, role: str, r: float) -> dict[str, Any]:
    path = b.origin["store"] + ("" if b.kafka else "/commitlog")
    return {"role": role, "path": path, "ratio": r, "total_bytes": DISK_BYTES,
            "used_bytes": int(r * DISK_BYTES), "avail_bytes": int((1 - r) * DISK_BYTES),
            "error": None}  # fmt: skip


def _kafka_segment(b: _Broker, now: int, reason: str, age: int, rescue: bool) -> dict[str, Any]:
    rng = b.rng
    topic = rng.choice(["clickstream", "payments", "logs", "metrics"])
    partition = rng.randrange(12)
    base = rng.randrange(1 << 36)
    fields: dict[str, Any] = {
        "kind": "kafka_segment",
        "file": f"{b.origin['store']}/{topic}-{partition}/{base:020d}.log",
        "reason": reason,
        "forced": False,
        "disk_ratio_before": None,
        "bytes": SEGMENT_BYTES,
        "mtime_ms": now - age,
        "age_ms": age,
        "topic": topic,
        "partition": partition,
        "queue_id": partition,
        "base_offset": base,
        "start_offset": base,
        "end_offset": base + 1_000_000,
    }
    if rescue:
        fields["rescue"] = True
    return fields


def _kafka_deletions(b: _Broker, now: int, r: float, delete: Any) -> int:
    rng = b.rng
    n = rng.randint(1, 3)
    for _ in range(n):
        age = int(168 * HOUR_MS + rng.expovariate(1 / (3 * HOUR_MS)))
        fields = _kafka_segment(b, now, "retention_ms_breach", age, False)
        loss = _loss(b, rng.randint(1, 5))
        if loss is not None:
            fields["loss"] = loss
        delete(now, fields)
    return n


def _rescue(b: _Broker, now: int, delete: Any) -> int:
    """``retentiond rescue --beyond-retention`` on a stopped broker whose disk filled up:
    leftovers first, then segments within retention, oldest first."""
    rng = b.rng
    n = 0
    for _ in range(2):
        n += 1
        delete(now, {
            "kind": "partition_dir", "file": f"{b.origin['store']}/logs-{n}.abc-delete",
            "reason": "delete_dir_leftover", "forced": False, "bytes": 3 * SEGMENT_BYTES,
            "rescue": True, "loss": {"progress": "known", "messages": 0, "groups": []},
        })  # fmt: skip
    for _ in range(rng.randint(18, 30)):
        n += 1
        age = int(rng.uniform(60, 160) * HOUR_MS)
        fields = _kafka_segment(b, now, "rescue_beyond_retention", age, True)
        fields["loss"] = {"progress": "known", "messages": 0, "groups": []}
        delete(now, fields)
    return n


def _kafka_round(b: _Broker, now: int, r: float, n: int, interval: int) -> dict[str, Any]:
    return {
        "type": "round",
        "time_ms": now,
        "manual": False,
        "plan_only_log_dirs": [],
        "metadata_source": f"{b.origin['store']}/__cluster_metadata-0",
        "metadata_error": None,
        "reasons": {"delete:retention_ms_breach": n} if n else {"keep:within_retention": 40},
        "interval_ms": interval,
        "deleted": {"kafka_segment": {"files": n, "bytes": n * SEGMENT_BYTES}},
        "failures": 0,
        "errors": [],
        "stopped": False,
        "duration_ms": round(b.rng.uniform(1, 50), 3),
        "config_hash": "synthetic00",
        "owner_running": False,
        "thresholds": {"warning_level_ratio": 0.90},
        "disk": [_disk(b, "log_dir", r)],
    }


def _kafka_idle_view(record: dict[str, Any]) -> IdleView:
    """A Kafka round as the folding reads it, with the disk figures of its log dirs: state
    ``warning_level`` above ``diskWarningRatio``, else ``ok``."""
    ratio = max(d["ratio"] for d in record["disk"])
    warning = record["thresholds"]["warning_level_ratio"]
    state = "warning_level" if ratio > warning else "ok"
    return IdleView(
        state=((), record["metadata_source"], tuple(sorted(record["reasons"])), state),
        disk_state=state,
        ratio=ratio,
        stuck=False,
        interval_ms=record["interval_ms"],
        carried={
            "plan_only_log_dirs": [],
            "metadata_source": record["metadata_source"],
            "interval_ms": record["interval_ms"],
            "reasons": dict(record["reasons"]),
            "thresholds": record["thresholds"],
        },
        maxima={"broker_running_kept": 0},
    )


def _idle_view(record: dict[str, Any]) -> IdleView:
    """The RocketMQ kind's reading of a round record (``RocketMQ.idle_view``), for records
    that never went through a kind: the same state, ratio and stuck rule."""
    t = record["triggers"]
    ratios = [r for r in (t["physic_ratio"], t["logics_ratio"]) if r is not None]
    flags = ("time_up", "usage_exceeds", "manual", "clean_immediately", "clean_at_once")
    return IdleView(
        state=(*(t[f] for f in flags), t["fired"], t["disk_state"]),
        disk_state=t["disk_state"],
        ratio=max(ratios) if ratios else None,
        stuck=bool(t["usage_exceeds"]),
        interval_ms=record["interval_ms"],
        carried={
            "triggers": t,
            "file_reserved_time_hours": record["file_reserved_time_hours"],
            "interval_ms": record["interval_ms"],
            "thresholds": record["thresholds"],
        },
        maxima={"expired_pending": record["expired_pending"]},
    )


def write_broker(target: Path, plan: Plan, cluster: int, broker: int) -> int:
    """Write one broker's files: per day, one file per directory of the plan's layout (a
    record type, ``v2``, or a family under ``v3``), as one shipped segment a day would be."""
    if plan.layout not in LAYOUTS:
        raise ValueError(f"shipped layout {plan.layout!r}: one of {LAYOUTS}")
    count = 0
    kafka = is_kafka(plan, cluster)
    b = f"kafka-{broker}" if kafka else f"broker-{broker}"
    c = f"cluster-{cluster + 1}"
    name = f"{b}.{c}.example-synth0000-000000000001.jsonl.gz"
    for day, by_type in broker_days(plan, cluster, broker):
        groups: dict[str, list[bytes]] = {}
        for kind, lines in by_type.items():
            groups.setdefault(layout_dir(plan.layout, kind), []).extend(lines)
        for kind, lines in groups.items():
            if not lines:
                continue
            d = target / kind / f"dt={day}" / f"cluster={c}" / f"broker={b}"
            d.mkdir(parents=True, exist_ok=True)
            with gzip.open(d / name, "wb", compresslevel=1) as fh:
                fh.writelines(lines)
            count += len(lines)
    return count


def write_fleet(target: Path, plan: Plan, workers: int = 1) -> int:
    """Every broker of the plan; returns the number of records written."""
    jobs = [(c, b) for c in range(plan.clusters) for b in range(plan.brokers_per_cluster)]
    if workers <= 1:
        return sum(write_broker(target, plan, c, b) for c, b in jobs)
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers) as pool:
        futures = [pool.submit(write_broker, target, plan, c, b) for c, b in jobs]
        return sum(f.result() for f in futures)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="write synthetic shipped journal records")
    p.add_argument("target")
    p.add_argument("--clusters", type=int, default=3)
    p.add_argument("--brokers", type=int, default=5, help="per cluster")
    p.add_argument("--days", type=int, default=7)
    p.add_argument("--rounds-per-day", type=int, default=144)
    p.add_argument("--kafka-every", type=int, default=3, help="every Nth cluster is Kafka")
    p.add_argument("--layout", type=int, choices=LAYOUTS, default=3, help="the shipped layout")
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args(argv)
    plan = Plan(
        args.clusters, args.brokers, args.days, args.rounds_per_day,
        kafka_every=args.kafka_every, layout=args.layout,
    )  # fmt: skip
    n = write_fleet(Path(args.target), plan, args.workers)
    print(f"wrote {n} records for {plan.brokers} brokers over {plan.days} days")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
