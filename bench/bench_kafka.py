"""Time the Kafka ``plan`` over a log dir of 10,000 partitions x 20 segments, beside ``find``.

    .venv/bin/python bench/bench_kafka.py [--dir DIR] [--repeat 5] [--partitions 10000]

Issue 10's goal: planning takes at most 2x ``find`` over the same tree, measured in one run.

1. generates the log dir under ``DIR/logs`` with ``retentiond.storegen.kafka`` (or reuses it
   when ``DIR/bench-spec.json`` says it was built with the same parameters): a mix of topics
   with their overrides in the KRaft metadata log, so that the plan deletes prefixes by time
   and by size, keeps compacted topics, and meets future timestamps. Each topic has 8
   distinct partitions; the others are byte copies (generation is the slow part, not what is
   measured);
2. warms the page cache with one run of each, then alternates ``find DIR/logs`` (a
   subprocess, output to /dev/null) and the plan in-process as ``retentiond plan`` does it:
   read ``server.properties``, scan the log dir and the metadata log, plan every partition
   and render the plan text; medians of ``--repeat`` runs;
3. prints each figure, the ratio, the machine and the load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from retentiond.engine.execute import RoundContext
from retentiond.engine.guard import Guard
from retentiond.engine.round import Mode, Round
from retentiond.kinds.kafka.config import load_server_properties
from retentiond.kinds.kafka.kind import Kafka
from retentiond.storegen.kafka import KafkaStoreSpec, generate_kafka_store, write_server_properties

DAY_MS = 86_400_000
SEGMENTS = 20

# share of the partitions, topic-level overrides (KRaft ConfigRecords)
TOPICS: dict[str, tuple[float, dict[str, str]]] = {
    "events": (0.30, {}),  # broker default 168 h of a 10-day span: ~6 expired segments
    "orders": (0.25, {"retention.ms": str(30 * DAY_MS)}),  # nothing expired
    "metrics": (0.20, {"retention.ms": str(30 * DAY_MS), "retention.bytes": "13000"}),  # size
    "logs": (0.15, {"retention.ms": str(DAY_MS)}),  # most of it expired
    "audit-log": (0.05, {"cleanup.policy": "compact"}),
    "clicks": (0.05, {}),  # one partition in 8 pinned by a future timestamp
}


def bench_spec(partitions: int, now_ms: int) -> KafkaStoreSpec:
    counts = {t: max(1, round(share * partitions)) for t, (share, _) in TOPICS.items()}
    counts["events"] += partitions - sum(counts.values())
    return KafkaStoreSpec(
        topics=counts,
        now_ms=now_ms,
        span_ms=10 * DAY_MS,
        records_per_partition=400,  # 4-record batches of ~215 bytes, 1 KiB segments: 20
        records_per_batch=4,
        value_bytes=16,
        segment_bytes=1024,
        index_interval_bytes=256,
        overrides={t: o for t, (_, o) in TOPICS.items() if o},
        future_topic="clicks",
        distinct_partitions=8,
    )


def prepare(root: Path, partitions: int) -> tuple[Path, Path, int, float | None]:
    """(log dir, server.properties, now_ms of the store, generation seconds or None)."""
    marker = root / "bench-spec.json"
    wanted = {"partitions": partitions, "segments": SEGMENTS, "topics": TOPICS, "version": 1}
    if marker.exists():
        saved = json.loads(marker.read_text())
        if saved.get("wanted") == json.loads(json.dumps(wanted)):
            return root / "logs", root / "server.properties", saved["now_ms"], None
        print(f"{root}: built with other parameters, regenerating", flush=True)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    now_ms = time.time_ns() // 1_000_000
    print(f"generating {partitions} partitions x {SEGMENTS} segments under {root} ...", flush=True)
    t0 = time.perf_counter()
    store = generate_kafka_store(root / "logs", bench_spec(partitions, now_ms))
    took = time.perf_counter() - t0
    counts = Counter(len(s) for s in store.partitions.values())
    if set(counts) != {SEGMENTS}:
        raise SystemExit(f"generated segment counts {dict(counts)}, wanted {SEGMENTS} each")
    props = write_server_properties(root / "server.properties", [store.log_dir])
    marker.write_text(json.dumps({"wanted": wanted, "now_ms": now_ms}))
    return store.log_dir, props, now_ms, took


def plan_text(props: Path, now_ms: int) -> tuple[str, Counter[str]]:
    """What ``retentiond plan --config server.properties`` prints, in-process: the config
    read, one plan round (scan, metadata, every partition planned) and the text rendered."""
    server = load_server_properties(str(props))
    kind = Kafka(SimpleNamespace(config_hash="bench"), server)  # type: ignore[arg-type]
    rnd = Round(
        kind,  # type: ignore[arg-type]
        Guard(),
        now_ms=now_ms,
        manual=False,
        mode=Mode.PLAN,
        held=dict,
        remember_held=lambda _h: None,
        executor=None,
        context=RoundContext("bench", True, None, lambda: now_ms),
    )
    plan = kind.plan_round(kind.scan(now_ms), rnd)
    text = kind.render_plan(plan)
    if plan.errors:
        raise SystemExit(f"the plan has errors: {plan.errors[:3]}")
    return text, Counter(f"{d.verdict}:{d.reason}" for d in plan.decisions())


def time_find(log_dir: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(["find", str(log_dir)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def time_plan(props: Path, now_ms: int) -> float:
    t0 = time.perf_counter()
    plan_text(props, now_ms)
    return time.perf_counter() - t0


def machine() -> str:
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if "Model name" in ln), "")
    return (
        f"{model}, {os.cpu_count()} CPUs, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/retentiond-bench-kafka", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=10_000)
    args = ap.parse_args(argv)

    log_dir, props, now_ms, took = prepare(args.dir, args.partitions)
    if took is not None:
        print(f"generated in {took:.1f} s")
    files = sum(len(f) for _, _, f in os.walk(log_dir))
    print(f"machine: {machine()}")
    print(f"store: {log_dir}: {args.partitions} partitions x {SEGMENTS} segments, {files} files")
    print(f"load before: {load()}", flush=True)

    text, reasons = plan_text(props, now_ms)  # warm-up, and what the plan says
    time_find(log_dir)
    lines = text.count("\n")
    print(
        f"plan: {lines} lines; verdicts: "
        + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))
    )
    finds, plans = [], []
    for _ in range(args.repeat):
        finds.append(time_find(log_dir))
        plans.append(time_plan(props, now_ms))
    f, p = statistics.median(finds), statistics.median(plans)
    print(
        f"find {log_dir}: median {f * 1000:.0f} ms  ({', '.join(f'{x * 1000:.0f}' for x in finds)})"
    )
    print(
        f"plan, in-process:  median {p * 1000:.0f} ms  ({', '.join(f'{x * 1000:.0f}' for x in plans)})"
    )
    ratio = p / f
    verdict = "met" if ratio <= 2 else "NOT met"
    print(f"plan / find: {ratio:.2f}x (goal <= 2x: {verdict})")
    print(f"load after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
