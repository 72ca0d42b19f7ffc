"""Synthetic fleet records in the journal schema, written straight to the shipped layout.

For the benchmark (millions of records in minutes) and quick demos of the job; the end-to-end
test uses the real engine instead (``tests/analytics/fleet_sim.py``). Plain Python: no pyspark.

Each broker gets a disk that fills at its own rate, rounds at a fixed interval, CommitLog
deletions in the delete hour or under pressure (forced above the clean-forcibly ratio), and
ConsumeQueue deletions behind them, so every table of the job has something to say.
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

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
FILE_BYTES = 1 << 30


@dataclass(frozen=True)
class Plan:
    clusters: int = 3
    brokers_per_cluster: int = 4
    days: int = 7
    rounds_per_day: int = 144  # every 10 minutes
    summary_interval_ms: int = 300_000  # retentiond.journal.roundSummaryInterval's default
    start_ms: int = 1_709_510_400_000  # 2024-03-04T00:00:00Z
    seed: int = 7

    @property
    def brokers(self) -> int:
        return self.clusters * self.brokers_per_cluster


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def _dump(record: dict[str, object]) -> bytes:
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode() + b"\n"


def broker_days(plan: Plan, cluster: int, broker: int) -> list[tuple[str, dict[str, list[bytes]]]]:
    """All of one broker's records, per day and record type, as journal lines."""
    rng = random.Random(plan.seed * 7919 + cluster * 101 + broker)
    c, b = f"cluster-{cluster + 1}", f"broker-{broker}"
    host = f"{b}.{c}.example"
    origin = {"cluster": c, "broker": b, "host": host, "store": f"/data/{b}/store"}
    reserved = rng.choice([48, 72, 72, 120])
    ratio = rng.uniform(0.40, 0.80)
    growth = rng.uniform(-0.002, 0.012)  # per day
    interval = DAY_MS // plan.rounds_per_day
    thresholds = {
        "disk_max_used_ratio": 0.75,
        "clean_forcibly_ratio": 0.85,
        "warning_level_ratio": 0.90,
    }
    days: dict[str, dict[str, list[bytes]]] = {}
    folder = RoundFolder()  # the daemon's own folding of idle rounds into round_summary

    def put(record: dict[str, object]) -> None:
        by_type = days.setdefault(_day(int(record["time_ms"])), {})  # type: ignore[call-overload]
        by_type.setdefault(str(record["type"]), []).append(_dump(record))

    seq = 0
    for d in range(plan.days):
        lines: dict[str, list[bytes]] = days.setdefault(_day(plan.start_ms + d * DAY_MS), {})
        lines.setdefault("deletion", [])
        lines.setdefault("intent", [])
        for i in range(plan.rounds_per_day):
            now = plan.start_ms + d * DAY_MS + i * interval + rng.randrange(1000)
            ratio = min(0.99, max(0.05, ratio + growth / plan.rounds_per_day + rng.gauss(0, 0.002)))
            r = round(ratio, 2)
            state = (
                "warning_level"
                if r > 0.90
                else "clean_forcibly"
                if r > 0.85
                else "over_max_ratio"
                if r > 0.75
                else "ok"
            )
            hour = (now // HOUR_MS) % 24
            time_up = hour == 4
            deletes = 0
            if state in ("clean_forcibly", "warning_level"):
                deletes = rng.randint(0, 3)
            elif state == "over_max_ratio" or time_up:
                deletes = rng.randint(0, 2)
            cl_bytes = 0
            for _ in range(deletes):
                seq += 1
                forced = state in ("clean_forcibly", "warning_level")
                age = int(
                    rng.uniform(0.3, 1.0) * reserved * HOUR_MS
                    if forced
                    else reserved * HOUR_MS + rng.expovariate(1 / (6 * HOUR_MS))
                )
                reason = (
                    "forced_over_clean_forcibly_ratio"
                    if forced
                    else "disk_over_max_ratio"
                    if state == "over_max_ratio"
                    else "expired"
                )
                base = {
                    **origin,
                    "schema_version": 2,
                    "id": f"{cluster}-{broker}-{seq}",
                    "time_ms": now,
                    "kind": "commitlog",
                    "file": f"/data/{b}/store/commitlog/{seq * FILE_BYTES:020d}",
                    "reason": reason,
                    "forced": forced,
                    "dry_run": False,
                    "disk_ratio_before": r,
                    "config_hash": "synthetic00",
                    "file_reserved_time_hours": reserved,
                    "bytes": FILE_BYTES,
                    "mtime_ms": now - age,
                    "age_ms": age,
                    "start_offset": seq * FILE_BYTES,
                    "end_offset": (seq + 1) * FILE_BYTES,
                }
                lines["intent"].append(_dump({**base, "type": "intent"}))
                lines["deletion"].append(
                    _dump({**base, "type": "deletion", "duration_ms": rng.uniform(0.1, 3.0)})
                )
                cl_bytes += FILE_BYTES
                ratio = max(0.05, ratio - 0.01)
            cq = deletes * 4
            for q in range(cq):
                lines["deletion"].append(
                    _dump(
                        {
                            **origin,
                            "schema_version": 2,
                            "type": "deletion",
                            "id": f"{cluster}-{broker}-{seq}-cq{q}",
                            "time_ms": now,
                            "kind": "consumequeue",
                            "file": f"/data/{b}/store/consumequeue/T/{q}/{seq:020d}",
                            "reason": "below_commitlog_min_offset",
                            "forced": False,
                            "dry_run": False,
                            "disk_ratio_before": r,
                            "config_hash": "synthetic00",
                            "file_reserved_time_hours": reserved,
                            "bytes": 6_000_000,
                            "mtime_ms": now - reserved * HOUR_MS,
                            "age_ms": reserved * HOUR_MS,
                            "topic": "T",
                            "queue_id": q,
                            "duration_ms": 0.2,
                        }
                    )
                )
            record = {
                **origin,
                "schema_version": 2,
                "type": "round",
                "time_ms": now,
                "manual": False,
                "triggers": {
                    "time_up": time_up,
                    "usage_exceeds": state != "ok",
                    "manual": False,
                    "clean_immediately": state in ("clean_forcibly", "warning_level"),
                    "clean_at_once": state in ("clean_forcibly", "warning_level"),
                    "physic_ratio": r,
                    "logics_ratio": r,
                    "disk_state": state,
                    "hour": hour,
                    "fired": time_up or state != "ok",
                    "error": None,
                },
                "hour": hour,
                "min_offset_before": seq * FILE_BYTES,
                "min_offset_after": (seq + 1) * FILE_BYTES,
                "queues_examined": deletes > 0,
                "deleted": {
                    "commitlog": {"files": deletes, "bytes": cl_bytes},
                    "consumequeue": {"files": cq, "bytes": cq * 6_000_000},
                    "index": {"files": 0, "bytes": 0},
                },
                "failures": 0,
                "expired_pending": rng.randint(0, 3),
                "errors": [],
                "stopped": False,
                "duration_ms": rng.uniform(1, 50),
                "config_hash": "synthetic00",
                "file_reserved_time_hours": reserved,
                "interval_ms": interval,
                "thresholds": thresholds,
                "disk": [
                    {
                        "role": "commitlog",
                        "path": f"/data/{b}/store/commitlog",
                        "ratio": r,
                        "total_bytes": 4 << 40,
                        "used_bytes": int(r * (4 << 40)),
                        "avail_bytes": int((1 - r) * (4 << 40)),
                        "error": None,
                    }
                ],
            }
            for rec in folder.offer(record, _idle_view(record), plan.summary_interval_ms):
                put({**origin, "schema_version": 2, **rec})
    for rec in folder.flush():  # the daemon's shutdown
        put({**origin, "schema_version": 2, **rec})
    return sorted(days.items())


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
    """Write one broker's files (one per day and type, as one shipped segment would be)."""
    count = 0
    for day, by_type in broker_days(plan, cluster, broker):
        for kind, lines in by_type.items():
            if not lines:
                continue
            d = (
                target
                / kind
                / f"dt={day}"
                / f"cluster=cluster-{cluster + 1}"
                / f"broker=broker-{broker}"
            )
            d.mkdir(parents=True, exist_ok=True)
            name = f"broker-{broker}.cluster-{cluster + 1}.example-synth0000-000000000001.jsonl.gz"
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
    p.add_argument("--brokers", type=int, default=4, help="per cluster")
    p.add_argument("--days", type=int, default=7)
    p.add_argument("--rounds-per-day", type=int, default=144)
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args(argv)
    plan = Plan(args.clusters, args.brokers, args.days, args.rounds_per_day)
    n = write_fleet(Path(args.target), plan, args.workers)
    print(f"wrote {n} records for {plan.brokers} brokers over {plan.days} days")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
