"""Benchmark: `retentiond plan` on a store with 100,000 consume queues, beside `find`.

Issue 11's goals: `retentiond plan` (text) <= 1.5x `find` and `plan --json` <= 2x `find`,
both end to end (a CLI subprocess, its output read through a pipe). Measured in one run on one
machine, interleaved (find, text, JSON, ... once per repeat) so that a change in load hits every
row alike; medians.

Two situations: the scan cache file a daemon leaves beside its journal is present (written here
by one dry-run round, as `bench_round.py` does), or there is none (no daemon ever ran here).

The in-process split tells the scan from the rest, so the figures for start-up, rendering and
writing do not depend on how fast the scan is:
  - start-up: `retentiond plan` on the 16-queue demo store (interpreter, imports, settings)
  - scan: listing every queue directory (`Snapshot.list_queues`)
  - plan: reading the queues' values and deciding (`Cleaner.plan` minus the listing)
  - render: the text, and the JSON document streamed to /dev/null

The CLI runs without PYTHONDONTWRITEBYTECODE and PYTHONUNBUFFERED, as from an operator's
shell with the package's bytecode compiled (a warm-up run writes it).

Usage: python bench/bench_plan.py [--dir DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine import load, machine

from retentiond.engine.cleaner import Cleaner
from retentiond.engine.round import Mode
from retentiond.kinds import kind_for, load_settings
from retentiond.storegen.rocketmq import PRESETS, generate_store, write_config
from retentiond.text import jsonstream

HOURS = ";".join(f"{h:02d}" for h in range(24))


def config_for(base: Path, root: Path, name: str) -> Path:
    """A config whose plan deletes 10 expired CommitLog files and so examines every queue;
    its journal directory (where the scan cache file lives) is ``base/<name>-journal``."""
    journal = base / f"{name}-journal"
    journal.mkdir(exist_ok=True)
    return write_config(
        root, PRESETS["bench-100k"], base / f"{name}.yaml",
        fileReservedTime=1, deleteWhen=HOURS, deleteFileBatchMax=10, diskMaxUsedSpaceRatio=95,
        retentiond={"journal": {"dir": str(journal)}},
    )  # fmt: skip


# An operator's shell: compiled modules are used and written, stdout is buffered (harnesses
# often set these two; an installed package has its bytecode and a shell sets neither).
CLI_ENV = {
    k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")
}


Sample = tuple[float, float]  # (wall seconds, CPU seconds of the process: user + system)


def timed_process(argv: list[str], **popen: Any) -> Sample:
    """Run ``argv`` to its end, reading its stdout if piped; its wall and CPU time."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL, **popen)
    size = 0
    if proc.stdout is not None:
        while chunk := proc.stdout.read(1 << 20):
            size += len(chunk)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, argv
    assert proc.stdout is None or size > 0, argv
    return wall, usage.ru_utime + usage.ru_stime


def cli(config: Path, *extra: str) -> Callable[[], Sample]:
    """`retentiond plan` as an operator runs it, its stdout read through a pipe."""
    argv = [sys.executable, "-m", "retentiond", "plan", "--config", str(config), *extra]
    return lambda: timed_process(argv, stdout=subprocess.PIPE, env=CLI_ENV)


def interpreter() -> Sample:
    return timed_process([sys.executable, "-c", "pass"], env=CLI_ENV)


def find(root: Path) -> Callable[[], Sample]:
    return lambda: timed_process(["find", str(root)], stdout=subprocess.DEVNULL)


def split(config: Path) -> dict[str, list[float]]:
    """The stages of one plan, timed in a fresh process of their own (``--split``): in this
    one, whose heap holds the set-up round's state, the same work runs slower than the CLI."""
    argv = [sys.executable, __file__, "--split", str(config)]
    out = subprocess.run(argv, capture_output=True, text=True, env=CLI_ENV, check=True).stdout
    return json.loads(out.splitlines()[-1])


def split_here(config: Path) -> dict[str, tuple[float, float]]:
    """One in-process plan, timed by stage (wall, CPU), with the cyclic GC off as in the CLI."""
    clocks = (time.perf_counter, time.process_time)
    marks: list[tuple[float, float]] = []

    def mark() -> None:
        marks.append((clocks[0](), clocks[1]()))

    gc.collect()
    gc.disable()
    try:
        mark()
        cleaner = Cleaner(kind_for(load_settings(config)))
        mark()
        now = cleaner.clock_ms()
        snap = cleaner.kind.scan(now)
        listings = list(snap.list_queues())  # the queue listing, done here rather than lazily
        snap = dataclasses.replace(snap, list_queues=lambda: iter(listings))
        mark()
        plan = cleaner.kind.plan_round(snap, cleaner._round(Mode.PLAN, False, now))
        mark()
        text = cleaner.kind.render_plan(plan)
        mark()
        with open(os.devnull, "w") as out:
            out.write(text)
            jsonstream.dump(plan.as_document(), out)
        mark()
        assert plan.queues.examined and plan.queues.queue_count >= 100_000
    finally:
        gc.enable()
    names = ("settings", "scan", "plan", "text", "json")
    return {
        name: (b[0] - a[0], b[1] - a[1])
        for name, a, b in zip(names, marks[:-1], marks[1:], strict=True)
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", help="where to build the store (default: a temp dir, removed)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--split", metavar="CONFIG", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.split:
        print(json.dumps(split_here(Path(args.split))))
        return 0

    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="retentiond-plan-"))
    base.mkdir(parents=True, exist_ok=True)
    root = base / "store"
    print(f"machine: {machine()}")
    if not root.exists():
        t0 = time.perf_counter()
        generate_store(root, PRESETS["bench-100k"])
        print(f"generated the bench-100k store in {time.perf_counter() - t0:.1f} s")
    demo = base / "demo"
    if not demo.exists():
        generate_store(demo / "store", PRESETS["demo"])
    demo_config = write_config(demo / "store", PRESETS["demo"], demo / "broker.yaml")

    cached = config_for(base, root, "cached")
    uncached = config_for(base, root, "uncached")
    for stale in (base / "uncached-journal").iterdir():
        stale.unlink()  # no cache file: as on a host where no daemon ever ran
    kind = kind_for(load_settings(cached))
    Cleaner(kind).run_round(dry_run=True)  # a daemon's dry-run round writes the cache file
    cache_file = kind._scan_cache_path()
    assert cache_file is not None and cache_file.exists(), "the dry-run round wrote no cache"

    rows: list[tuple[str, Callable[[], Sample], float | None]] = [
        ("find <store>", find(root), None),
        ("`plan` (text), CLI, scan cache present", cli(cached), 1.5),
        ("`plan --json`, CLI, scan cache present", cli(cached, "--json"), 2.0),
        ("`plan` (text), CLI, no scan cache", cli(uncached), 1.5),
        ("`plan --json`, CLI, no scan cache", cli(uncached, "--json"), 2.0),
        ("CLI start-up: `plan` on the 16-queue demo store", cli(demo_config), None),
        ("the interpreter alone: `python -c pass`", interpreter, None),
    ]
    samples: dict[str, list[Sample]] = {name: [] for name, _, _ in rows}
    stages: dict[str, list[Sample]] = {}
    find(root)()  # warm the page cache for everyone
    cli(demo_config)()  # and compile the modules once, as an installed package has them
    print(f"load before: {load()}")
    for i in range(args.repeat):
        for name, fn, _ in rows:
            samples[name].append(fn())
        for stage, sample in split(cached).items():
            stages.setdefault(stage, []).append((sample[0], sample[1]))
        print(f"  run {i + 1}/{args.repeat} done, load {load()}", flush=True)
    print(f"load after: {load()}")

    def medians(runs: list[Sample]) -> Sample:
        return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)

    med = {name: medians(s) for name, s in samples.items()}
    fw, fc = med["find <store>"]
    print()
    print(f"Medians of {args.repeat}; wall time decides the goals, CPU time (user + system of")
    print("the process) is printed beside it as it depends less on the other jobs' load.")
    print()
    print("| What | Wall | vs `find` | CPU | vs `find`'s CPU | Target (wall) |")
    print("|---|---:|---:|---:|---:|---|")
    for name, _, target in rows:
        (w, c), ratio = med[name], med[name][0] / fw
        goal = "–" if target is None else f"≤ {target}x: {'met' if ratio <= target else 'NOT met'}"
        print(f"| {name} | {w * 1000:.0f} ms | {ratio:.2f}x | {c * 1000:.0f} ms | {c / fc:.2f}x "
              f"| {goal} |")  # fmt: skip
    print()
    for name, runs in samples.items():
        print(f"  {name}: wall {', '.join(f'{w * 1000:.0f}' for w, _ in runs)} ms")
    print()
    print("Stages, in a fresh process per run, scan cache present, GC off as in the CLI:")
    print()
    print("| Stage | Wall | vs `find` | CPU | vs `find`'s CPU |")
    print("|---|---:|---:|---:|---:|")
    labels = {
        "settings": "settings loaded, kind made",
        "scan": "scan: CommitLog, index, every queue directory listed",
        "plan": "plan: queue values read, decisions made",
        "text": "render the text",
        "json": "encode and write the JSON document (to /dev/null)",
    }
    stage_med = {stage: medians(stages[stage]) for stage in labels}
    for stage, label in labels.items():
        w, c = stage_med[stage]
        print(
            f"| {label} | {w * 1000:.0f} ms | {w / fw:.2f}x | {c * 1000:.0f} ms | {c / fc:.2f}x |"
        )
    print()
    sw, sc = med["CLI start-up: `plan` on the 16-queue demo store"]
    for what, stage in (("text", "text"), ("--json", "json")):
        w, c = sw + stage_med[stage][0], sc + stage_med[stage][1]
        print(
            f"plan {what}: what is not the scan (start-up + {stage}) = {w * 1000:.0f} ms wall "
            f"= {w / fw:.2f}x find, {c * 1000:.0f} ms CPU = {c / fc:.2f}x find's CPU"
        )
    if not args.dir:
        shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
