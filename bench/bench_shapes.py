"""Benchmark: issue 28's goals on every shape a RocketMQ store of 100,000 queues has, in one run.

The shapes (``gen-store`` presets; 100,000 queues and the same CommitLog each):
  1000x100  ``bench-100k``: 1,000 topics x 100 queues x 2 ConsumeQueue files
  6250x16   ``bench-16q``: 6,250 topics x 16 queues (TopicConfig's default) x 2 files
  25000x4   ``bench-4q``: 25,000 topics x 4 queues (a producer's auto-created topic) x 2 files
  lmq       ``bench-lmq``: 100,000 ``%LMQ%`` topics x queue 0 x one short file

Per shape, beside ``find <store>`` over the same tree (alternating runs, medians; the page
cache warm for everyone):
  - ``retentiond plan`` (text) and ``plan --json``, CLI end to end, with the scan cache file a
    daemon leaves and without one (first contact): wall, CPU, peak RSS
    [text <= 1.5x / 2x find, JSON <= 2x / 2.5x, peak <= 150 MB]
  - rounds in a process of their own (as a daemon runs them): the cold round after a restart
    (scan cache file loaded) [<= 1.0x find], the first start (no cache file) [reported], the
    warm round [<= 0.5x], the idle round (CommitLog minimum unchanged) [< 50 ms]
  - a dry-run daemon's life (``retentiond run``, 2 s rounds), first start without a cache file
    and a restart with it: READY time, RSS at READY, after the first round, after 5 rounds,
    and the peak over its life [<= 100 MB at every point]

The plan rows use a config whose plan deletes 10 expired CommitLog files, so every queue is
examined; the store is never changed by them. The round rows' set-up round deletes the oldest
CommitLog file (one per run of this script), so that the minimum has moved.

Usage: python bench/bench_shapes.py [--dir DIR] [--shapes 1000x100,25000x4] [--repeat N]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine import load, machine

from retentiond.storegen.rocketmq import PRESETS, StoreSpec, generate_store, write_config

SHAPES = {
    "1000x100": "bench-100k",
    "6250x16": "bench-16q",
    "25000x4": "bench-4q",
    "lmq": "bench-lmq",
}
HOURS = ";".join(f"{h:02d}" for h in range(24))
MB = 2**20
# An operator's shell: compiled modules are used, stdout is buffered.
CLI_ENV = {
    k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")
}
Sample = tuple[float, float, int]  # wall s, CPU s (user + system), peak RSS bytes


def run_child(argv: list[str], pipe: bool = True) -> Sample:
    """Run to its end (stdout read through a pipe, as an operator's shell or a pager would)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE if pipe else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, env=CLI_ENV,
    )  # fmt: skip
    size = 0
    if proc.stdout is not None:
        while chunk := proc.stdout.read(1 << 20):
            size += len(chunk)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    assert os.waitstatus_to_exitcode(status) == 0, argv
    assert not pipe or size > 0, argv
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def retentiond(*args: str) -> list[str]:
    return [sys.executable, "-m", "retentiond", *args]


@dataclasses.dataclass
class Shape:
    name: str
    base: Path

    @property
    def spec(self) -> StoreSpec:
        return PRESETS[SHAPES[self.name]]

    @property
    def root(self) -> Path:
        return self.base / "store"

    def config(self, name: str, **over: Any) -> Path:
        """``name``.yaml with its own journal directory (where the scan cache file lives)."""
        journal = self.base / f"{name}-journal"
        journal.mkdir(parents=True, exist_ok=True)
        daemon = {"journal": {"dir": str(journal)}, **over.pop("retentiond", {})}
        return write_config(self.root, self.spec, self.base / f"{name}.yaml", retentiond=daemon,
                            **over)  # fmt: skip

    def cache_files(self, name: str) -> list[Path]:
        return list((self.base / f"{name}-journal").glob("scan-cache-*"))


def prepare(shape: Shape) -> str:
    if shape.root.exists():
        return "kept from an earlier run"
    t0 = time.perf_counter()
    store = generate_store(shape.root, shape.spec)
    return (
        f"generated in {time.perf_counter() - t0:.1f} s: {len(store.queues)} queues, "
        f"{store.cq_file_count} ConsumeQueue files, {len(store.commitlog_files)} CommitLog files"
    )


def find(shape: Shape) -> Sample:
    return run_child(["find", str(shape.root)], pipe=False)


def plan_rows(shape: Shape, repeat: int) -> dict[str, list[Sample]]:
    """find, then the four CLI plans, interleaved ``repeat`` times."""
    plan_over = dict(fileReservedTime=1, deleteWhen=HOURS, deleteFileBatchMax=10,
                     diskMaxUsedSpaceRatio=95)  # fmt: skip
    cached = shape.config("plan-cached", **plan_over)
    uncached = shape.config("plan-uncached", **plan_over)
    for stale in shape.cache_files("plan-uncached"):
        stale.unlink()
    # The file a daemon leaves beside its journal: one dry-run round writes it.
    run_child(retentiond("once", "--dry-run", "--config", str(cached)))
    assert shape.cache_files("plan-cached"), "the dry-run round wrote no scan cache file"
    rows: dict[str, Callable[[], Sample]] = {
        "find": lambda: find(shape),
        "plan text, cache": lambda: run_child(retentiond("plan", "--config", str(cached))),
        "plan json, cache": lambda: run_child(
            retentiond("plan", "--json", "--config", str(cached))
        ),
        "plan text, no cache": lambda: run_child(retentiond("plan", "--config", str(uncached))),
        "plan json, no cache": lambda: run_child(
            retentiond("plan", "--json", "--config", str(uncached))
        ),
    }
    for fn in rows.values():  # warm the page cache and the bytecode for everyone
        fn()
    out: dict[str, list[Sample]] = {k: [] for k in rows}
    for _ in range(repeat):
        for k, fn in rows.items():
            out[k].append(fn())
    assert not shape.cache_files("plan-uncached"), "plan wrote a scan cache file"
    return out


def rounds_here(config: str, repeat: int) -> dict[str, list[Sample]]:
    """The round rows, in this process (``--rounds``): a daemon's rounds, each row's cleaner
    made as the daemon makes it. Run in a fresh process per shape."""
    from retentiond.engine.cleaner import Cleaner
    from retentiond.journal.writer import Journal, Origin
    from retentiond.kinds import kind_for, load_settings

    settings = load_settings(Path(config))
    root = str(settings.store.store_path_root_dir)
    journal = Journal(Path(settings.daemon.journal_dir), Origin("bench", "bench", "bench", root))
    # Move the CommitLog minimum (the oldest file goes), then keep rounds idle on the
    # CommitLog side so every timed round does the same work.
    first = Cleaner(kind_for(settings), journal=journal).run_round()
    assert first.deleted, "the set-up round deleted nothing"
    idle = dataclasses.replace(
        settings,
        store=dataclasses.replace(settings.store, delete_hours=((time.gmtime().tm_hour + 12) % 24,),
                                  delete_when="never-now"),
        daemon=dataclasses.replace(settings.daemon, timezone="UTC"),
    )  # fmt: skip
    cache = kind_for(idle)._scan_cache_path()
    assert cache is not None

    def cpu() -> float:
        return sum(
            (r.ru_utime + r.ru_stime)
            for r in (resource.getrusage(resource.RUSAGE_SELF),
                      resource.getrusage(resource.RUSAGE_CHILDREN))
        )  # fmt: skip

    def timed(fn: Callable[[], None]) -> Sample:
        c0, t0 = cpu(), time.perf_counter()
        fn()
        return time.perf_counter() - t0, cpu() - c0, 0

    def cold() -> None:
        cleaner = Cleaner(kind_for(idle), journal=journal)
        result = cleaner.run_round()
        assert cleaner.kind.cache_loaded_queues >= 90_000, "no scan cache file loaded"
        assert result.plan.queues.examined and result.plan.queues.queue_count >= 100_000

    def first_start() -> None:
        cache.unlink(missing_ok=True)
        result = Cleaner(kind_for(idle), journal=journal).run_round()  # writes it again
        assert result.plan.queues.examined and result.plan.queues.queue_count >= 100_000

    warm_cleaner = Cleaner(kind_for(idle), journal=journal)
    warm_cleaner.run_round()

    def warm() -> None:
        warm_cleaner.kind.last_physical_min_offset = 0  # the minimum "moved": every queue
        assert warm_cleaner.run_round().plan.queues.examined

    def idle_round() -> None:
        assert not warm_cleaner.run_round().plan.queues.examined

    rows = {"find": lambda: subprocess.run(["find", root], stdout=subprocess.DEVNULL, check=True),
            "cold round, cache": cold, "first start round, no cache": first_start,
            "warm round": warm, "idle round": idle_round}  # fmt: skip
    out: dict[str, list[Sample]] = {k: [] for k in rows}
    for _ in range(repeat):
        for k, fn in rows.items():
            gc.collect()
            out[k].append(timed(fn))
    journal.close()
    return out


def round_rows(shape: Shape, repeat: int) -> dict[str, list[Sample]]:
    config = shape.config(
        "rounds", fileReservedTime=1, deleteWhen=HOURS, deleteFileBatchMax=1,
        diskMaxUsedSpaceRatio=95, deleteCommitLogFilesInterval=0,
        deleteConsumeQueueFilesInterval=0,
    )  # fmt: skip
    argv = [sys.executable, __file__, "--rounds", str(config), "--repeat", str(repeat)]
    out = subprocess.run(argv, capture_output=True, text=True, env=CLI_ENV, check=False)
    if out.returncode:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"the round rows of {shape.name} failed")
    return {k: [tuple(s) for s in v] for k, v in json.loads(out.stdout.splitlines()[-1]).items()}


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def daemon_life(shape: Shape, fresh: bool, rounds: int = 5) -> dict[str, float | None]:
    """A dry-run daemon, 2 s rounds: READY, then RSS sampled every 0.1 s until ``rounds``
    rounds are done (its control socket says how many). ``fresh``: no scan cache file."""
    sock_path = shape.base / "control.sock"
    config = shape.config(
        "daemon", fileReservedTime=1, deleteWhen=HOURS, cleanResourceInterval=2_000,
        retentiond={"dryRun": True, "initialDelay": 0, "timezone": "UTC",
                    "controlSocket": str(sock_path), "metrics": {"listen": "127.0.0.1:0"}},
    )  # fmt: skip
    if fresh:
        for stale in shape.cache_files("daemon"):
            stale.unlink()
    from retentiond.daemon.control import ControlError, request

    notify = shape.base / "notify.sock"
    notify.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    sock.setblocking(False)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        retentiond("run", "--config", str(config)), env=dict(CLI_ENV, NOTIFY_SOCKET=str(notify)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    got: dict[str, float | None] = {"ready_s": None, "rss_ready": None, "rss_round1": None}
    peak = 0
    done = 0
    try:
        while time.monotonic() - t0 < 120 and proc.poll() is None:
            time.sleep(0.1)
            now_rss = rss(proc.pid)
            peak = max(peak, now_rss)
            if got["ready_s"] is None:
                try:
                    if b"READY=1" in sock.recv(4096):
                        got["ready_s"] = time.monotonic() - t0
                        got["rss_ready"] = now_rss
                except BlockingIOError:
                    pass
                continue
            try:
                doc = request(sock_path, "status", timeout=2.0)
                done = int(doc["rounds"]["count"])  # type: ignore[index, call-overload]
            except (ControlError, KeyError, TypeError, ValueError):
                continue
            if done >= 1 and got["rss_round1"] is None:
                got["rss_round1"] = peak  # the peak up to the end of the first round
            if done >= rounds:
                break
        got["rss_after"] = rss(proc.pid)
        got["rss_peak"] = max(peak, got["rss_after"] or 0)
        got["rounds"] = done
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        sock.close()
    assert done >= rounds, f"the daemon did {done} rounds"
    if fresh:
        assert shape.cache_files("daemon"), "the daemon wrote no scan cache file"
    return got


def med(samples: list[Sample], i: int) -> float:
    return statistics.median(s[i] for s in samples)


def report(shape: Shape, plans: dict[str, list[Sample]], rounds: dict[str, list[Sample]],
           lives: dict[str, dict[str, float | None]]) -> list[tuple[str, str, str]]:  # fmt: skip
    """Prints the shape's rows; returns (goal, figure, verdict) for the summary."""
    summary: list[tuple[str, str, str]] = []
    for title, rows, targets in (
        ("CLI plans", plans, {"plan text, cache": 1.5, "plan json, cache": 2.0,
                              "plan text, no cache": 2.0, "plan json, no cache": 2.5}),
        ("rounds (in a process of their own)", rounds,
         {"cold round, cache": 1.0, "warm round": 0.5}),
    ):  # fmt: skip
        fw, fc = med(rows["find"], 0), med(rows["find"], 1)
        print(f"  {title}: find {fw * 1000:.0f} ms wall, {fc * 1000:.0f} ms CPU")
        print(f"  {'':28s} {'wall':>9s} {'x find':>7s} {'CPU':>9s} {'x find':>7s} {'peak RSS':>9s}")
        for name, samples in rows.items():
            w, c, m = med(samples, 0), med(samples, 1), max(s[2] for s in samples)
            peak = f"{m / MB:7.1f}MB" if m else ""
            runs = ", ".join(f"{s[0] * 1000:.0f}" for s in samples)
            print(f"  {name:28s} {w * 1000:7.1f}ms {w / fw:6.2f}x {c * 1000:7.1f}ms "
                  f"{c / fc:6.2f}x {peak:>9s}   runs {runs}")  # fmt: skip
            if name in targets:
                t = targets[name]
                summary.append((f"{name} <= {t}x find", f"{w / fw:.2f}x ({c / fc:.2f}x CPU)",
                                "met" if w / fw <= t else "NOT met"))  # fmt: skip
            elif name == "idle round":
                summary.append(("idle round < 50 ms", f"{w * 1000:.1f} ms",
                                "met" if w < 0.05 else "NOT met"))  # fmt: skip
            elif name == "first start round, no cache":
                summary.append(
                    ("first start round (reported)", f"{w / fw:.2f}x ({c / fc:.2f}x CPU)", "–")
                )
            if name.startswith("plan"):
                summary.append((f"{name}: peak RSS <= 150 MB", f"{m / MB:.1f} MB",
                                "met" if m <= 150 * MB else "NOT met"))  # fmt: skip

    def mb(got: dict[str, float | None], k: str) -> str:
        v = got.get(k)
        return "–" if v is None else f"{v / MB:.1f} MB"

    for life, got in lives.items():
        figures = ", ".join(
            f"{label} {mb(got, key)}"
            for label, key in (("RSS at READY", "rss_ready"), ("first round", "rss_round1"),
                               (f"after {got['rounds']} rounds", "rss_after"), ("peak", "rss_peak"))
        )  # fmt: skip
        print(f"  daemon, {life}: READY {got['ready_s']:.1f} s, {figures}")
        peak = got["rss_peak"] or 0
        summary.append((f"daemon {life}: READY (reported)", f"{got['ready_s']:.1f} s", "–"))
        summary.append((f"daemon {life}: RSS <= 100 MB at every point (peak; after 5 rounds)",
                        f"{peak / MB:.1f} MB; {mb(got, 'rss_after')}",
                        "met" if peak <= 100 * MB else "NOT met"))  # fmt: skip
    return summary


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", help="where the stores are kept (default: a temp dir, removed)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(SHAPES)}")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-daemon", action="store_true", help="skip the daemon lives")
    ap.add_argument("--rounds", metavar="CONFIG", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rounds:
        print(json.dumps(rounds_here(args.rounds, args.repeat)))
        return 0
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="retentiond-shapes-"))
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).parent, check=False).stdout.strip()  # fmt: skip
    print(f"machine: {machine()}; commit {rev or '?'}; medians of {args.repeat}")
    table: dict[str, list[tuple[str, str, str]]] = {}
    for name in args.shapes.split(","):
        shape = Shape(name, base / name)
        print(f"\n{name} ({SHAPES[name]}): {prepare(shape)}")
        print(f"  load before: {load()}", flush=True)
        plans = plan_rows(shape, args.repeat)
        print(f"  load after the plan rows: {load()}", flush=True)
        rounds = round_rows(shape, args.repeat)
        print(f"  load after the round rows: {load()}", flush=True)
        lives: dict[str, dict[str, float | None]] = {}
        if not args.no_daemon:
            lives["first start"] = daemon_life(shape, fresh=True)
            lives["restart with the cache"] = daemon_life(shape, fresh=False)
            print(f"  load after the daemons: {load()}", flush=True)
        table[name] = report(shape, plans, rounds, lives)
    names = list(table)
    goals = [g for g, _, _ in table[names[0]]]
    print(f"\nGoals, all shapes (load now {load()}):\n")
    print(f"| goal | {' | '.join(names)} |")
    print(f"|---|{'---|' * len(names)}")
    for i, goal in enumerate(goals):
        cells = []
        for n in names:
            _, fig, verdict = table[n][i]
            cells.append(fig if verdict == "–" else f"{fig} {'✓' if verdict == 'met' else '✗'}")
        print(f"| {goal} | {' | '.join(cells)} |")
    if not args.dir:
        shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
