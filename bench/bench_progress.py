"""Benchmark: what reading consumer progress costs `retentiond plan` (issue 24, item 1).

The goal: `plan` on the 100,000-queue bench store (`bench-100k`) with a `consumerOffset.json`
of 1,000 groups takes at most 1.3x the same plan with progress reading off. Off means what a
store without consumer progress gives: no `config/consumerOffset.json` (nor its `.bak`); the
plan then reads no offsets and says "progress unknown". The bench moves the file aside for
the "off" runs and back for the "on" runs, alternately, medians of `--repeat` (default 5).

The groups are made to look like a broker's: each subscribes to 1 to 8 topics (all of each
topic's queues, as a cluster consumer), about half caught up, a third a few messages behind,
the rest far behind (some from the queue's start), written in the broker's own format
(fastjson pretty output, TAB indents, integer map keys unquoted), with a
`subscriptionGroup.json` naming them. The plan's configuration deletes 10 expired CommitLog
files (as `bench_plan.py`), so the loss of each is counted over every queue the groups read;
the scan cache a daemon leaves is present (one dry-run round writes it first), as on a host
where retentiond runs.

Besides the CLI runs, one in-process split: reading the progress files, and counting the
plan's deletions' losses (`commitlog_losses`), reading every queue and with the frontier
memory the dry-run round left beside the scan cache.

Usage: python bench/bench_progress.py [--dir DIR] [--repeat N] [--groups N]
                                     [--topics N --queues N]   (a smaller store, for a smoke run)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_plan import HOURS, Sample, cli
from machine import load, machine

from retentiond.engine.cleaner import Cleaner
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.rocketmq.frontiers import Frontiers, memory_file
from retentiond.kinds.rocketmq.loss import commitlog_losses
from retentiond.kinds.rocketmq.progress import read_progress
from retentiond.storegen.rocketmq import PRESETS, StoreSpec, generate_store, write_config

GOAL = 1.3
OFFSETS = "consumerOffset.json"


def spec_for(topics: int | None, queues: int | None) -> StoreSpec:
    """``bench-100k``, or the same shape smaller (three messages a queue, as there)."""
    spec = PRESETS["bench-100k"]
    if topics is None and queues is None:
        return spec
    t = topics or spec.topics
    q = queues or spec.queues_per_topic
    messages = 3 * t * q
    # about as many CommitLog files as bench-100k's 75, so the plan has files to delete
    mib = max(1, messages * spec.message_size // 75 >> 20)
    return dataclasses.replace(
        spec, topics=t, queues_per_topic=q, messages=messages, commitlog_file_size=mib << 20
    )


def _data_version(ts: int) -> list[str]:
    return ['\t"dataVersion":{', '\t\t"counter":0,', '\t\t"stateVersion":0,',
            f'\t\t"timestamp":{ts}', "\t},"]  # fmt: skip


def offsets_json(table: dict[str, dict[int, int]], ts: int) -> str:
    """``ConsumerOffsetManager.encode(true)`` as fastjson 1.x writes it."""
    groups: dict[str, list[str]] = {}
    for key in table:
        topic, _, group = key.partition("@")
        groups.setdefault(group, []).append(topic)
    lines = ["{", *_data_version(ts), '\t"groupTopicMap":{']
    lines.append(
        ",\n".join(
            f"\t\t{json.dumps(g)}:[{','.join(json.dumps(t) for t in ts_)}]"
            for g, ts_ in sorted(groups.items())
        )
    )
    lines += ["\t},", '\t"offsetTable":{']
    lines.append(
        ",\n".join(
            f"\t\t{json.dumps(k)}:{{" + ",".join(f"{q}:{o}" for q, o in v.items()) + "\n\t\t}"
            for k, v in table.items()
        )
    )
    lines += ["\t}", "}"]
    return "\n".join(lines)


def groups_json(names: list[str], ts: int) -> str:
    """``SubscriptionGroupManager.encode(true)``, the fields that matter here."""
    entries = [
        f'\t\t{json.dumps(n)}:{{\n\t\t\t"consumeEnable":true,\n\t\t\t"groupName":'
        f"{json.dumps(n)}\n\t\t}}"
        for n in names
    ]
    return "\n".join(
        ["{", *_data_version(ts), '\t"forbiddenTable":{},', '\t"subscriptionGroupTable":{',
         ",\n".join(entries), "\t}", "}"]
    )  # fmt: skip


def write_progress(root: Path, spec: StoreSpec, groups: int, seed: int = 24) -> int:
    """The groups' offsets; returns how many queue offsets were written."""
    rng = random.Random(seed)
    topics = spec.topic_names()
    per_queue = spec.messages // (spec.topics * spec.queues_per_topic)
    table: dict[str, dict[int, int]] = {}
    names = [f"group-{g:04d}" for g in range(groups)]
    for name in names:
        profile = rng.random()
        for topic in rng.sample(topics, min(len(topics), rng.randint(1, 8))):
            queue: dict[int, int] = {}
            for q in range(spec.queues_per_topic):
                if profile < 0.5:
                    queue[q] = per_queue  # caught up
                elif profile < 0.85:
                    queue[q] = max(0, per_queue - rng.randint(0, 2))  # a few behind
                elif profile < 0.95:
                    queue[q] = rng.randint(0, per_queue)  # far behind
                else:
                    queue[q] = 0  # from the start
            table[f"{topic}@{name}"] = queue
    ts = int(time.time() * 1000)
    config = root / "config"
    (config / OFFSETS).write_text(offsets_json(table, ts))
    (config / "subscriptionGroup.json").write_text(groups_json(names, ts))
    return sum(len(v) for v in table.values())


def config_for(base: Path, root: Path, spec: StoreSpec) -> Path:
    """Deletes 10 expired CommitLog files (so every queue a group reads is counted); the
    journal directory (the scan cache's place) is ``base/journal``."""
    journal = base / "journal"
    journal.mkdir(exist_ok=True)
    return write_config(
        root, spec, base / "broker.yaml",
        fileReservedTime=1, deleteWhen=HOURS, deleteFileBatchMax=10, diskMaxUsedSpaceRatio=95,
        retentiond={"journal": {"dir": str(journal)}},
    )  # fmt: skip


def split(config: Path) -> tuple[float, float, float, int]:
    """In process: reading the progress files, counting the deletions' losses reading every
    queue, and counting them with the frontier memory the round left (s)."""
    settings = load_settings(config)
    kind = kind_for(settings)
    cleaner = Cleaner(kind)
    plan = cleaner.plan()
    store = settings.store
    t0 = time.perf_counter()
    progress = read_progress(store.store_path_root_dir)  # type: ignore[attr-defined]
    t1 = time.perf_counter()
    files = [
        (d.start_offset or 0, d.end_offset or 0)
        for d in plan.commitlog.decisions  # type: ignore[attr-defined]
        if d.delete
    ]
    cq = store.consumequeue_dir  # type: ignore[attr-defined]
    cq_size = store.mapped_file_size_consumequeue  # type: ignore[attr-defined]
    commitlog_losses(progress, cq, cq_size, files)
    t2 = time.perf_counter()
    journal = Path(settings.daemon.journal_dir or "")
    memory = Frontiers.load(memory_file(journal, str(cq)), str(cq), cq_size, recording=False)
    commitlog_losses(progress, cq, cq_size, files, memory=memory)
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, len(files)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", help="where to build (or find) the store; default a temp dir")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--topics", type=int, help="fewer topics than bench-100k (a smoke run)")
    ap.add_argument("--queues", type=int, help="queues per topic (bench-100k: 100)")
    args = ap.parse_args()

    spec = spec_for(args.topics, args.queues)
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="retentiond-progress-"))
    base.mkdir(parents=True, exist_ok=True)
    shape = f"{spec.topics}x{spec.queues_per_topic}"
    root = base / f"store-{shape}"
    print(f"machine: {machine()}")
    if not root.exists():
        t0 = time.perf_counter()
        generate_store(root, spec)
        print(f"generated the {shape} store in {time.perf_counter() - t0:.1f} s")
    main_file, aside = root / "config" / OFFSETS, root / "config" / (OFFSETS + ".off")
    if aside.exists():
        aside.rename(main_file)  # an interrupted run left it aside
    marker = root / "config" / f"bench-groups-{args.groups}"
    if not marker.exists():
        n = write_progress(root, spec, args.groups)
        for old in (root / "config").glob("bench-groups-*"):
            old.unlink()
        marker.touch()
        size = main_file.stat().st_size
        print(f"wrote {args.groups} groups, {n:,} queue offsets ({size / 1e6:.1f} MB)")
    config = config_for(base, root, spec)
    kind = kind_for(load_settings(config))
    Cleaner(kind).run_round(dry_run=True)  # a daemon's dry-run round writes the scan cache

    on_text, on_json = cli(config), cli(config, "--json")

    def off(fn):  # type: ignore[no-untyped-def]
        def run() -> Sample:
            main_file.rename(aside)
            try:
                return fn()  # type: ignore[no-any-return]
            finally:
                aside.rename(main_file)

        return run

    rows = [
        ("`plan` (text), progress on", on_text),
        ("`plan` (text), progress off", off(on_text)),
        ("`plan --json`, progress on", on_json),
        ("`plan --json`, progress off", off(on_json)),
    ]
    samples: dict[str, list[Sample]] = {name: [] for name, _ in rows}
    for _, fn in rows:
        fn()  # warm the page cache and compile the modules
    print(f"load before: {load()}")
    for i in range(args.repeat):
        for name, fn in rows:
            samples[name].append(fn())
        print(f"  run {i + 1}/{args.repeat} done, load {load()}", flush=True)
    print(f"load after: {load()}")

    def med(name: str) -> Sample:
        runs = samples[name]
        return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)

    print()
    print(f"Medians of {args.repeat} alternating runs; wall time decides the goal, CPU time")
    print("(user + system of the process) beside it.")
    print()
    print("| What | On: wall | Off: wall | Ratio | On: CPU | Off: CPU | CPU ratio | Goal |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for what in ("`plan` (text)", "`plan --json`"):
        (ow, oc), (fw, fc) = med(f"{what}, progress on"), med(f"{what}, progress off")
        ratio = ow / fw
        goal = f"≤ {GOAL}x: {'met' if ratio <= GOAL else 'NOT met'}"
        print(f"| {what} | {ow * 1000:.0f} ms | {fw * 1000:.0f} ms | {ratio:.2f}x "
              f"| {oc * 1000:.0f} ms | {fc * 1000:.0f} ms | {oc / fc:.2f}x | {goal} |")  # fmt: skip
    print()
    for name, runs in samples.items():
        print(f"  {name}: wall {', '.join(f'{w * 1000:.0f}' for w, _ in runs)} ms")
    read_s, loss_s, memory_s, files = split(config)
    print()
    print(f"in process, once: reading the progress files {read_s * 1000:.0f} ms; counting the "
          f"losses of {files} deleted CommitLog files {loss_s * 1000:.0f} ms reading every "
          f"queue, {memory_s * 1000:.0f} ms with the frontier memory")  # fmt: skip
    if not args.dir:
        shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
