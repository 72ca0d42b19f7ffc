"""Benchmark: cleaning rounds on a store with 100,000 consume queues, beside `find`.

Measures, in one run on one machine:
  (a) a round in which the CommitLog minimum offset moved, so every queue is examined
      - cold: a fresh Cleaner (as after a daemon start): every first ConsumeQueue file is read
      - warm: the daemon's own Cleaner on a later round: values of full files come from cache
  (b) a round in which the minimum did not move (must stay under 50 ms whatever the queues)
  (c) `plan` on that store: in-process, and the CLI end to end (`retentiond plan --json`)
next to `find <store>` over the same tree (median of several runs, page cache warm for both).

Usage: python bench/bench_round.py [--dir DIR] [--repeat N] [--keep]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from retentiond.config.loader import load_settings
from retentiond.engine.cleaner import Cleaner
from retentiond.journal.writer import Journal, Origin
from retentiond.kinds import kind_for
from retentiond.storegen.rocketmq import PRESETS, generate_store, write_config


def timed(fn, repeat: int) -> tuple[float, list[float]]:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), samples


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {system}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", help="where to build the store (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="retentiond-bench-"))
    root = base / "store"
    spec = PRESETS["bench-100k"]
    print(f"machine: {machine()}")
    if not root.exists():
        t0 = time.perf_counter()
        store = generate_store(root, spec)
        print(
            f"generated {len(store.queues)} queues, {store.cq_file_count} CQ files, "
            f"{len(store.commitlog_files)} CommitLog files in {time.perf_counter() - t0:.1f}s"
        )
    config = write_config(
        root, spec, base / "broker.yaml",
        fileReservedTime=1, deleteWhen="00;01;02;03;04;05;06;07;08;09;10;11;12;13;14;15;16;17;"
        "18;19;20;21;22;23", deleteFileBatchMax=10, diskMaxUsedSpaceRatio=95,
        deleteCommitLogFilesInterval=0, deleteConsumeQueueFilesInterval=0,
        retentiond={"journal": {"dir": str(base / "journal")}},
    )  # fmt: skip
    settings = load_settings(config)
    journal = Journal(base / "journal", Origin("bench", "bench", "bench", str(root)))

    # Move the CommitLog minimum once (deletes up to 10 expired files), then keep rounds idle
    # on the CommitLog side so every timed round does the same work.
    first = Cleaner(kind_for(settings), journal=journal).run_round()
    print(
        f"setup round deleted {len(first.deleted)} files; min offset now "
        f"{first.plan.queues.min_offset}"
    )
    idle = dataclasses.replace(settings, delete_hours=((time.gmtime().tm_hour + 12) % 24,),
                               delete_when="never-now", daemon=dataclasses.replace(
                                   settings.daemon, timezone="UTC"))  # fmt: skip

    def find() -> None:
        subprocess.run(["find", str(root)], stdout=subprocess.DEVNULL, check=True)

    def round_cold() -> None:
        result = Cleaner(kind_for(idle), journal=journal).run_round()
        assert result.plan.queues.examined and result.plan.queues.queue_count >= 100_000

    warm = Cleaner(kind_for(idle), journal=journal)
    warm.run_round()

    def round_warm() -> None:
        warm.kind.last_physical_min_offset = 0  # the minimum "moved" again: every queue
        assert warm.run_round().plan.queues.examined

    def round_unmoved() -> None:
        assert not warm.run_round().plan.queues.examined

    def plan_inproc() -> None:
        Cleaner(kind_for(idle)).plan()

    def plan_cli() -> None:
        subprocess.run([sys.executable, "-m", "retentiond", "plan", "--config", str(config),
                        "--json"], stdout=subprocess.DEVNULL, check=True)  # fmt: skip

    find()  # warm the page cache for everyone
    rows = [
        ("find <store>", find),
        ("(a) round, min moved, cold Cleaner", round_cold),
        ("(a) round, min moved, warm Cleaner", round_warm),
        ("(b) round, min unchanged", round_unmoved),
        ("(c) plan, in-process", plan_inproc),
        ("(c) plan --json, CLI end to end", plan_cli),
    ]
    results = {}
    for name, fn in rows:
        med, samples = timed(fn, args.repeat)
        results[name] = med
        print(
            f"{name:40s} median {med * 1000:9.1f} ms   "
            f"(runs: {', '.join(f'{s * 1000:.0f}' for s in samples)})"
        )
    f = results["find <store>"]
    print()
    for name in rows[1:]:
        print(f"{name[0]:40s} {results[name[0]] / f:5.2f}x find")
    journal.close()
    if not args.keep and not args.dir:
        shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
