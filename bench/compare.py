"""Two commits side by side on the same bench stores, in one run: is a change free?

    .venv/bin/python bench/compare.py --base REF [--head REF] [--dir DIR] [--repeat 5]
        [--partitions 10000]

A refactor that must not cost anything (the store-kind seam, say) is measured here: both
commits are checked out as detached worktrees beside this one, and every figure is taken
alternately for the base and the head on the very same stores, so the machine's load touches
both alike. Only the command line is timed (a fresh interpreter, as an operator runs it), so
the script works for any two commits whose ``retentiond`` accepts the same flags:

- RocketMQ, the ``bench-100k`` store of ``make bench`` (1,000 topics x 100 queues, 200,000
  ConsumeQueue files): ``retentiond plan`` (text), ``plan --json``, and ``once`` as a dry run
  (a whole round, the scan cache file an earlier round left loaded and re-checked);
- Kafka, the ``make bench-kafka`` log dir (10,000 partitions x 20 segments): ``plan``.

Prints the medians, the head/base ratio per figure, the machine and the load before and after.
The stores are built once (by the head's generators) and reused when ``--dir`` already holds
them.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import load, machine

HERE = Path(__file__).resolve().parent.parent
ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))


def checkout(ref: str, where: Path) -> Path:
    """A detached worktree of ``ref`` at ``where`` (made again if it is there)."""
    if where.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=HERE, check=False)
        shutil.rmtree(where, ignore_errors=True)
    subprocess.run(
        ["git", "worktree", "add", "-q", "--detach", str(where), ref], cwd=HERE, check=True
    )
    return where


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cli(tree: Path, *args: str, out: int | None = subprocess.DEVNULL) -> tuple[float, float]:
    """(wall, CPU) seconds of ``python -m retentiond ARGS`` from ``tree``; fails loudly. On a
    shared machine the CPU time (user + system) depends far less on the other jobs."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    c0 = _children_cpu()
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "retentiond", "--log-format", "json", "--log-level", "error",
         *args],
        cwd=tree, env=env, stdout=out, stderr=subprocess.DEVNULL, check=True,
    )  # fmt: skip
    return time.perf_counter() - t0, _children_cpu() - c0


def rocketmq_store(base: Path, tree: Path, preset: str) -> tuple[Path, Path]:
    """(config for plan, dry-run config for once) over the bench-100k store."""
    root = base / "store"
    gen = base / "broker.yaml.gen"
    if not root.exists():
        print(f"generating the {preset} RocketMQ store ...", flush=True)
        cli(tree, "gen-store", str(root), "--preset", preset, "--config-out", str(gen))
    body = gen.read_text()
    common = (
        f'fileReservedTime: 1\ndeleteWhen: "{ALL_HOURS}"\ndiskMaxUsedSpaceRatio: 95\n'
        "deleteCommitLogFilesInterval: 0\ndeleteConsumeQueueFilesInterval: 0\n"
    )
    plan_cfg = base / "plan.yaml"
    plan_cfg.write_text(body + common + f"retentiond:\n  journal:\n    dir: {base / 'journal'}\n")
    dry_cfg = base / "dry.yaml"
    dry_cfg.write_text(
        body
        + common
        + f"retentiond:\n  dryRun: true\n  journal:\n    dir: {base / 'journal-dry'}\n"
    )
    return plan_cfg, dry_cfg


def kafka_store(base: Path, tree: Path, partitions: int) -> Path:
    """server.properties of the bench-kafka log dir (built by the head's bench_kafka)."""
    sys.path.insert(0, str(tree / "bench"))
    sys.path.insert(0, str(tree))
    import bench_kafka  # the head's generator

    _, props, _, _ = bench_kafka.prepare(base / "kafka", partitions, "moderate")
    return props


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the commit to compare against")
    ap.add_argument("--head", default="HEAD")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "retentiond-cmp")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--preset", default="bench-100k", help="the RocketMQ store's gen-store preset")
    args = ap.parse_args()

    args.dir.mkdir(parents=True, exist_ok=True)
    try:
        return compare(args)
    finally:
        for name in ("base", "head"):
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(args.dir / f"tree-{name}")],
                cwd=HERE,
                check=False,
                capture_output=True,
            )


def compare(args: argparse.Namespace) -> int:
    trees = {
        "base": checkout(args.base, args.dir / "tree-base"),
        "head": checkout(args.head, args.dir / "tree-head"),
    }
    for name, tree in trees.items():
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True
        ).stdout.strip()
        print(f"{name}: {rev}")
    print(f"machine: {machine()}")
    print(f"load before: {load()}")

    plan_cfg, dry_cfg = rocketmq_store(args.dir, trees["head"], args.preset)
    # One real round first: the expired CommitLog files go, and the scan cache file is written
    # beside each journal, so every timed run does the same work.
    cli(trees["head"], "once", "--config", str(plan_cfg))
    cli(trees["head"], "once", "--config", str(dry_cfg))
    props = kafka_store(args.dir, trees["head"], args.partitions)

    figures = {
        "rocketmq plan (text)": ("plan", "--config", str(plan_cfg)),
        "rocketmq plan --json": ("plan", "--json", "--config", str(plan_cfg)),
        "rocketmq once (dry run)": ("once", "--config", str(dry_cfg)),
        "kafka plan (text)": ("plan", "--config", str(props)),
    }
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for what, argv in figures.items():
        for tree in trees.values():  # warm the page cache for both
            cli(tree, *argv)
        for _ in range(args.repeat):
            for name, tree in trees.items():
                samples.setdefault((what, name), []).append(cli(tree, *argv))
    print(f"load after: {load()}")
    print(f"\nmedians of {args.repeat} alternating runs (seconds; CPU = user + system):\n")
    print(
        "| figure | base wall | head wall | wall head/base | base CPU | head CPU "
        "| CPU head/base |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    worst_wall = worst_cpu = 0.0
    for what in figures:
        bw, bc = (statistics.median(x) for x in zip(*samples[(what, "base")], strict=True))
        hw, hc = (statistics.median(x) for x in zip(*samples[(what, "head")], strict=True))
        worst_wall, worst_cpu = max(worst_wall, hw / bw), max(worst_cpu, hc / bc)
        print(
            f"| {what} | {bw:.3f} | {hw:.3f} | {hw / bw:.3f} | {bc:.3f} | {hc:.3f} "
            f"| {hc / bc:.3f} |"
        )
    for name, worst in (("wall", worst_wall), ("CPU", worst_cpu)):
        verdict = "within" if worst <= 1.05 else "NOT within"
        print(f"worst head/base, {name}: {worst:.3f} ({verdict} 5 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
