"""Time the Kafka ``plan`` over a log dir of 10,000 partitions x 20 segments, beside ``find``.

    .venv/bin/python bench/bench_kafka.py [--dir DIR] [--repeat 5] [--partitions 10000]
        [--mix moderate|heavy] [--plan-round]

Issue 10's goal: planning takes at most 2x ``find`` over the same tree, measured in one run.

1. generates the log dir under ``DIR/logs`` with ``retentiond.storegen.kafka`` (or reuses it
   when ``DIR/bench-spec.json`` says it was built with the same parameters): a mix of topics
   with their overrides in the KRaft metadata log, so that the plan deletes prefixes by time
   and by size, keeps compacted topics, and meets future timestamps (``--mix``: a few
   expired segments per partition, or a quarter of them; switching rewrites only the
   metadata log). Each topic has 8
   distinct partitions; the others are byte copies (generation is the slow part, not what is
   measured);
2. byte-compiles the package (as ``pip install`` does: no timed run compiles its modules
   from source), warms the page cache with one run of each, then alternates ``find DIR/logs`` (a
   subprocess, output to /dev/null), ``retentiond plan`` as a subprocess (output to
   /dev/null; the headline figure) and the plan in-process as ``retentiond plan`` does it:
   read ``server.properties``, scan the log dir and the metadata log, plan every partition
   and render the plan text; medians of ``--repeat`` runs;
3. with ``--io-floor``: the I/O the plan cannot skip, alone, alternating with the CLI ``plan``
   and the CLI ``rescue --free <available + what the log dir holds> --dry-run`` (a target
   it cannot meet, exit 9: it takes the whole of the configured retention), each one's
   ratio to that floor (issue 25's goal: within 2x, CPU and wall);
4. prints each figure (wall time, and the CPU time, user + system, of the two subprocesses:
   on a shared machine the CPU ratio is the steadier one), the ratios, the machine and the
   load before and after.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from retentiond.engine.cleaner import Cleaner
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.kafka.config import KafkaServer
from retentiond.kinds.kafka.formats import LogSummary
from retentiond.kinds.kafka.kind import Kafka
from retentiond.kinds.kafka.plan import KafkaPlan, LogDirPlan
from retentiond.kinds.kafka.policy import plan_partition
from retentiond.storegen.kafka import (
    KafkaStoreSpec,
    generate_kafka_store,
    write_metadata_log,
    write_server_properties,
)

DAY_MS = 86_400_000
SEGMENTS = 20
SPAN_MS = 10 * DAY_MS

# share of the partitions; topic-level overrides (KRaft ConfigRecords) per mix. The data is
# the same for every mix (10 days of records); only the metadata log changes.
SHARES = {"events": 0.30, "orders": 0.25, "metrics": 0.20, "logs": 0.15, "audit-log": 0.05}
SHARES["clicks"] = 1 - sum(SHARES.values())  # one partition in 8 pinned by a future record
MIXES: dict[str, dict[str, dict[str, str]]] = {
    # a broker that was down a day or so: a few expired segments in most partitions
    "moderate": {
        "events": {"retention.ms": str(9 * DAY_MS)},  # 2 of 20 segments expired
        "orders": {"retention.ms": str(30 * DAY_MS)},  # none
        "metrics": {"retention.ms": str(30 * DAY_MS), "retention.bytes": "15700"},  # 2 by size
        "logs": {},  # the broker default, 168 h: 6 expired
        "audit-log": {"cleanup.policy": "compact"},
        "clicks": {},  # 168 h
    },
    # a disk that filled up: a quarter of all segments expired
    "heavy": {
        "events": {},  # 168 h: 6 expired
        "orders": {"retention.ms": str(30 * DAY_MS)},
        "metrics": {"retention.ms": str(30 * DAY_MS), "retention.bytes": "13000"},  # 5 by size
        "logs": {"retention.ms": str(DAY_MS)},  # 18 expired
        "audit-log": {"cleanup.policy": "compact"},
        "clicks": {},
    },
}


def bench_spec(partitions: int, now_ms: int, mix: str) -> KafkaStoreSpec:
    counts = {t: max(1, round(share * partitions)) for t, share in SHARES.items()}
    counts["events"] += partitions - sum(counts.values())
    return KafkaStoreSpec(
        topics=counts,
        now_ms=now_ms,
        span_ms=SPAN_MS,
        records_per_partition=400,  # 4-record batches of ~215 bytes, 1 KiB segments: 20
        records_per_batch=4,
        value_bytes=16,
        segment_bytes=1024,
        index_interval_bytes=256,
        overrides={t: o for t, o in MIXES[mix].items() if o},
        future_topic="clicks",
        distinct_partitions=8,
    )


def prepare(root: Path, partitions: int, mix: str) -> tuple[Path, Path, int, float | None]:
    """(log dir, server.properties, now_ms of the store, generation seconds or None). A store
    built for another mix only gets a new metadata log."""
    marker = root / "bench-spec.json"
    wanted = {"partitions": partitions, "segments": SEGMENTS, "version": 2}
    if marker.exists():
        saved = json.loads(marker.read_text())
        if saved.get("wanted") == wanted:
            now_ms = saved["now_ms"]
            if saved.get("mix") != mix:
                spec = bench_spec(partitions, now_ms, mix)
                meta = root / "logs" / "__cluster_metadata-0"
                shutil.rmtree(meta)
                ids = {t: uuid.uuid5(uuid.NAMESPACE_DNS, t).bytes for t in spec.topics}
                write_metadata_log(meta, spec, ids)
                marker.write_text(json.dumps({**saved, "mix": mix}))
            return root / "logs", root / "server.properties", now_ms, None
        print(f"{root}: built with other parameters, regenerating", flush=True)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    now_ms = time.time_ns() // 1_000_000
    print(f"generating {partitions} partitions x {SEGMENTS} segments under {root} ...", flush=True)
    t0 = time.perf_counter()
    store = generate_kafka_store(root / "logs", bench_spec(partitions, now_ms, mix))
    took = time.perf_counter() - t0
    counts = Counter(len(s) for s in store.partitions.values())
    if set(counts) != {SEGMENTS}:
        raise SystemExit(f"generated segment counts {dict(counts)}, wanted {SEGMENTS} each")
    props = write_server_properties(root / "server.properties", [store.log_dir])
    marker.write_text(json.dumps({"wanted": wanted, "now_ms": now_ms, "mix": mix}))
    return store.log_dir, props, now_ms, took


def kafka_kind(props: Path) -> tuple[Kafka, KafkaServer]:
    """The Kafka kind of ``server.properties`` and its server section, made as ``retentiond
    plan`` makes it: the file read, validated and its log dir checked (``load_settings``),
    then the registry's kind for those settings (``kind_for``)."""
    kind = kind_for(load_settings(props))
    if not isinstance(kind, Kafka):
        raise SystemExit(f"{props}: not a Kafka configuration ({type(kind).__name__})")
    return kind, kind.server


def plan_text(
    props: Path, now_ms: int, gc_paused: bool = False, verdicts: bool = False
) -> tuple[str, Counter[str], list[float]]:
    """What ``retentiond plan --config server.properties`` prints, in-process: the config
    read, the scan (log dir and metadata log), every partition planned, the text rendered.
    Returns the text, the verdicts (counted over every segment only when ``verdicts``: that
    expands every partition's decisions, which the text plan does not) and the seconds of
    (scan, plan, render).

    The partitions are planned here with ``policy.plan_partition`` as ``Kafka.plan_round``
    plans them (each topic's config worked out once), without the engine's round
    (``--plan-round`` times ``plan_round`` itself). ``gc_paused``: the cyclic garbage
    collector off for the whole plan, as the engine runs a scan and plan."""
    paused = gc_paused and gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _plan_text(props, now_ms, verdicts)
    finally:
        if paused:
            gc.enable()


def _plan_text(
    props: Path, now_ms: int, count_verdicts: bool
) -> tuple[str, Counter[str], list[float]]:
    t0 = time.perf_counter()
    kind, server = kafka_kind(props)
    snap = kind.scan(now_ms)
    t1 = time.perf_counter()
    configs: dict[str, object] = {}
    try:
        planned = []
        for ld, locked in snap.log_dirs:
            parts = []
            for p in ld.partitions:
                if p.topic not in configs:
                    configs[p.topic] = server.config_for(
                        p.topic, snap.overrides, snap.broker_layers
                    )
                parts.append(
                    plan_partition(
                        p,
                        configs[p.topic],  # type: ignore[arg-type]
                        now_ms=now_ms,
                        high_watermarks=ld.high_watermarks,
                        log_start_offsets=ld.log_start_offsets,
                        cleaner_enabled=server.cleaner_enable,
                        broker_running=not locked,
                        time_index_compat=server.time_index_compat,
                    )
                )
            planned.append(LogDirPlan(ld.path, locked, tuple(parts), ld, ld.errors))
    finally:
        for lock in kind.locks.values():
            lock.release()
    plan = KafkaPlan(
        now_ms, kind.settings.config_hash, tuple(planned), snap.metadata_source, snap.metadata_error
    )
    t2 = time.perf_counter()
    text = kind.render_plan(plan)
    t3 = time.perf_counter()
    errors = [*snap.errors, *(e for ld in planned for e in ld.errors)]
    if errors or snap.metadata_error:
        raise SystemExit(f"the plan has errors: {errors[:3]} {snap.metadata_error}")
    verdicts: Counter[str] = Counter()
    if count_verdicts:
        verdicts.update(f"{d.verdict}:{d.reason}" for d in plan.decisions())
    return text, verdicts, [t1 - t0, t2 - t1, t3 - t2]


def plan_round_text(props: Path, now_ms: int) -> str:
    """``Kafka.plan_round`` in a plan round, made by the engine's ``Cleaner.plan`` as the CLI
    runs it (cyclic GC paused, no hold look-ups in plan mode), then rendered."""
    kind, _server = kafka_kind(props)
    plan = Cleaner(kind, clock_ms=lambda: now_ms).plan()
    return kind.render_plan(plan)  # type: ignore[arg-type]


def children_cpu() -> float:
    """User + system seconds of the finished child processes so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


HERE = Path(__file__).resolve().parent.parent  # the checkout this bench belongs to


def time_cli(props: Path, checkout: Path = HERE) -> tuple[float, float]:
    """``retentiond plan --config server.properties`` as an operator runs it: a fresh
    interpreter, the whole plan printed (to /dev/null). The headline figure: (wall, CPU).
    ``checkout``: whose ``retentiond`` (``--compare`` times another one beside it)."""
    c0, t0 = children_cpu(), time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "retentiond", "plan", "--config", str(props)],
        stdout=subprocess.DEVNULL,
        check=True,
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout)},
    )
    return time.perf_counter() - t0, children_cpu() - c0


def rescue_free_bytes(log_dir: Path) -> int:
    """``rescue --free``'s figure: what the filesystem has available now plus everything the
    log dir holds (its files' blocks). The target cannot be met (exit 9), so the rescue takes
    the whole of what the configured retention frees, leftovers included, and looks past it
    (what ``--beyond-retention`` could take), whatever else frees space on a shared disk
    meanwhile."""
    st = os.statvfs(log_dir)
    held = sum(
        os.lstat(os.path.join(d, n)).st_blocks * 512
        for d, _, names in os.walk(log_dir)
        for n in names
    )
    return st.f_bavail * st.f_frsize + held


def time_rescue(props: Path, free: int, checkout: Path = HERE) -> tuple[float, float]:
    """``retentiond rescue --config server.properties --free FREE --dry-run`` as an operator
    runs it (output to /dev/null): (wall, CPU). Exit 9 (target not reached) is expected."""
    c0, t0 = children_cpu(), time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "retentiond",
            "rescue",
            "--config",
            str(props),
            "--free",
            str(free),
            "--dry-run",
        ],
        stdout=subprocess.DEVNULL,
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout)},
    )
    if done.returncode not in (0, 9):
        raise SystemExit(f"rescue --dry-run exited {done.returncode}")
    return time.perf_counter() - t0, children_cpu() - c0


def time_find(log_dir: Path) -> tuple[float, float]:
    c0, t0 = children_cpu(), time.perf_counter()
    subprocess.run(["find", str(log_dir)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0, children_cpu() - c0


def timed(fn: object, *args: object) -> float:
    t0 = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return time.perf_counter() - t0


def io_floor(props: Path, now_ms: int) -> tuple[float, float, str]:
    """The I/O the plan cannot avoid, with no parsing and no planning: ``scandir`` of every
    partition dir, then the ``.log`` reads (open, fstat, pread, close) and the ``lstat``s
    the plan did (learnt from one plan first). (wall s, CPU s, what was done)."""
    kind, server = kafka_kind(props)
    snap = kind.scan(now_ms, executes=False)
    for ld, _locked in snap.log_dirs:
        for p in ld.partitions:
            plan_partition(
                p,
                server.config_for(p.topic, snap.overrides, snap.broker_layers),
                now_ms=now_ms,
                high_watermarks=ld.high_watermarks,
                log_start_offsets=ld.log_start_offsets,
            )
    segs = [s for ld, _ in snap.log_dirs for p in ld.partitions for s in p.made if s]
    read = [s.log_path for s in segs if isinstance(s._summary, LogSummary)]
    was_read = set(read)
    stat_only = [s.log_path for s in segs if s.known_identity and s.log_path not in was_read]
    dirs = [p.path for ld, _ in snap.log_dirs for p in ld.partitions]
    del snap, segs
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    dflags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for d in dirs:
        fd = os.open(d, dflags)
        with os.scandir(fd) as it:
            list(it)
        os.close(fd)
    for path in read:
        fd = os.open(path, flags)
        os.pread(fd, os.fstat(fd).st_size, 0)
        os.close(fd)
    for path in stat_only:
        os.lstat(path)
    c1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    cpu = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
    return t1 - t0, cpu, f"{len(dirs)} dirs listed, {len(read)} reads, {len(stat_only)} lstats"


def machine() -> str:
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if "Model name" in ln), "")
    return (
        f"{model}, {os.cpu_count()} CPUs, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _ms(xs: list[float]) -> str:
    return (
        f"median {statistics.median(xs) * 1000:.0f} ms ({', '.join(f'{x * 1000:.0f}' for x in xs)})"
    )


def byte_compile() -> str:
    """Write the package's bytecode files, as ``pip install`` does for an installed package.

    Every CLI run timed here is a new interpreter: where the environment says
    ``PYTHONDONTWRITEBYTECODE`` (or the checkout is fresh) and no ``__pycache__`` exists yet,
    each run would compile every module it imports from source first (about 90 ms for
    ``plan`` and ``rescue``), which an installed daemon never does. ``compileall`` writes them
    whatever that variable says, and a run reads them whatever it says."""
    import compileall

    import retentiond

    root = Path(retentiond.__file__).parent
    ok = compileall.compile_dir(str(root), quiet=1)
    return f"{root} ({'ok' if ok else 'some modules failed to compile'})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/tmp/retentiond-bench-kafka", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--mix", choices=sorted(MIXES), default="moderate")
    ap.add_argument("--plan-round", action="store_true", help="also time Kafka.plan_round")
    ap.add_argument(
        "--io-floor",
        action="store_true",
        help="also time the plan's unavoidable I/O alone (listing, reads, stats)",
    )
    ap.add_argument(
        "--compare",
        type=Path,
        help="another checkout (e.g. an export of the previous commit) whose CLI plan is "
        "timed in the same runs",
    )
    args = ap.parse_args(argv)

    log_dir, props, now_ms, took = prepare(args.dir, args.partitions, args.mix)
    if took is not None:
        print(f"generated in {took:.1f} s")
    files = sum(len(f) for _, _, f in os.walk(log_dir))
    print(f"machine: {machine()}")
    print(f"store: {log_dir}: {args.partitions} partitions x {SEGMENTS} segments, {files} files")
    print(
        f"mix: {args.mix}: "
        + "; ".join(f"{t} {SHARES[t]:.0%} {o or 'defaults'}" for t, o in MIXES[args.mix].items())
    )
    print(f"load before: {load()}", flush=True)
    print(f"byte-compiled: {byte_compile()}", flush=True)

    text, verdicts, _ = plan_text(props, now_ms, verdicts=True)  # warm-up, what it says
    time_find(log_dir)
    print(f"plan: {text.count(chr(10))} lines; verdicts: ")
    for k, v in sorted(verdicts.items()):
        print(f"  {k}: {v}")
    finds: list[tuple[float, float]] = []
    clis: list[tuple[float, float]] = []
    plans: list[float] = []
    parts: list[list[float]] = []
    rounds: list[float] = []
    no_gc: list[float] = []
    others: list[tuple[float, float]] = []
    time_cli(props)  # warm-up
    if args.compare:
        time_cli(props, args.compare)
    for _ in range(args.repeat):
        finds.append(time_find(log_dir))
        clis.append(time_cli(props))
        if args.compare:
            others.append(time_cli(props, args.compare))
        t0 = time.perf_counter()
        parts.append(plan_text(props, now_ms)[2])
        plans.append(time.perf_counter() - t0)
        no_gc.append(timed(plan_text, props, now_ms, True))
        if args.plan_round:
            rounds.append(timed(plan_round_text, props, now_ms))
    f_wall, c_wall = [w for w, _ in finds], [w for w, _ in clis]
    f_cpu, c_cpu = [c for _, c in finds], [c for _, c in clis]
    f, c = statistics.median(f_wall), statistics.median(c_wall)
    print(f"find <logdir>:                {_ms(f_wall)}; CPU {_ms(f_cpu)}")
    print(f"retentiond plan, CLI:         {_ms(c_wall)}; CPU {_ms(c_cpu)}")
    cli_ratio = c / f
    cpu_ratio = statistics.median(c_cpu) / statistics.median(f_cpu)
    print(
        f"CLI plan / find: {cli_ratio:.2f}x wall, {cpu_ratio:.2f}x CPU "
        f"(goal <= 2x: {'met' if cli_ratio <= 2 else 'NOT met'})"
    )
    if others:
        o_wall, o_cpu = [w for w, _ in others], [c for _, c in others]
        print(f"{args.compare} CLI: {_ms(o_wall)}; CPU {_ms(o_cpu)}")
        print(
            f"  / find: {statistics.median(o_wall) / f:.2f}x wall, "
            f"{statistics.median(o_cpu) / statistics.median(f_cpu):.2f}x CPU"
        )
    p = statistics.median(plans)
    print(f"plan, in-process:             {_ms(plans)}")
    for i, what in enumerate(("scan + metadata", "plan_partition x all", "render text")):
        print(f"  {what:<26}  {_ms([x[i] for x in parts])}")
    print(f"in-process plan / find: {p / f:.2f}x")
    g = statistics.median(no_gc)
    print(f"plan, cyclic GC paused:       {_ms(no_gc)}  = {g / f:.2f}x find")
    if rounds:
        r = statistics.median(rounds)
        print(f"Kafka.plan_round + render:    {_ms(rounds)}  = {r / f:.2f}x find")
    if args.io_floor:
        # the floor beside the CLI plan and the CLI rescue --dry-run, alternately
        free = rescue_free_bytes(log_dir)
        time_rescue(props, free)  # warm-up
        floors, f_plans, f_rescues = [], [], []
        for _ in range(args.repeat):
            fw, fc = time_find(log_dir)
            w, cpu, what = io_floor(props, now_ms)
            floors.append((w, cpu, fw, fc))
            f_plans.append(time_cli(props))
            f_rescues.append(time_rescue(props, free))
        print(f"I/O floor ({what}):")
        print(f"  wall {_ms([x[0] for x in floors])}; CPU {_ms([x[1] for x in floors])}")
        print(
            "  / find (each beside its own find run): "
            f"{statistics.median(x[0] / x[2] for x in floors):.2f}x wall, "
            f"{statistics.median(x[1] / x[3] for x in floors):.2f}x CPU"
        )
        fl_wall = statistics.median(x[0] for x in floors)
        fl_cpu = statistics.median(x[1] for x in floors)
        for label, runs in (
            ("retentiond plan, CLI", f_plans),
            (f"retentiond rescue --free {free} --dry-run, CLI", f_rescues),
        ):
            r_wall = statistics.median(w for w, _ in runs) / fl_wall
            r_cpu = statistics.median(c for _, c in runs) / fl_cpu
            print(f"{label}: {_ms([w for w, _ in runs])}; CPU {_ms([c for _, c in runs])}")
            print(
                # the goal is on the time an operator waits (a run's wall time, as
                # ../shared/DECISIONS.md measures a ratio); the CPU shows what the second
                # process costs
                f"  / I/O floor: {r_wall:.2f}x wall, {r_cpu:.2f}x CPU "
                f"(goal <= 2x wall: {'met' if r_wall <= 2 else 'NOT met'})"
            )
    print(f"load after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
