"""Benchmark: cleaning rounds on a store with 100,000 consume queues, beside `find`.

Measures, in one run on one machine (issue 11's goals in brackets):
  (a) a round in which the CommitLog minimum offset moved, so every queue is examined
      - cold: a fresh Cleaner (as after a daemon restart) that loads the scan cache file an
        earlier process left beside the journal [<= 1.0x find]
      - cold without any cache file (the very first start on a host) [reported]
      - warm: the daemon's own Cleaner on a later round [<= 0.5x find]
  (b) a round in which the minimum did not move, real and dry-run daemons [< 50 ms]
  `retentiond plan` (text) [<= 1.5x find] and `plan --json` [<= 2x find], CLI end to end
  (c) a dry-run daemon (`retentiond run`, 10 s rounds) on the store: READY time, steady RSS
      (and per queue) [<= 100 MB], CPU between rounds [< 0.5 % of a core]
next to `find <store>` over the same tree (median of several runs, page cache warm for both).
Each row also prints its median CPU time (user + system; `find` and the CLI rows as waited-for
children), which depends far less on the other jobs of a shared machine than wall time.

Usage: python bench/bench_round.py [--dir DIR] [--repeat N] [--keep] [--daemon-seconds S]
"""

from __future__ import annotations

import argparse
import dataclasses
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
from pathlib import Path

from machine import machine

from retentiond.engine.cleaner import Cleaner
from retentiond.journal.writer import Journal, Origin
from retentiond.kinds import kind_for, load_settings
from retentiond.storegen.rocketmq import PRESETS, generate_store, write_config


def _cpu() -> float:
    """CPU seconds (user + system) of this process and of its waited-for children: the
    rounds run in this process, `find` and the CLI rows as children."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def timed(fn, repeat: int) -> tuple[float, list[float], float]:
    """Median wall time, the wall samples, and the median CPU time (user + system). On a
    shared machine the wall time of a CPU-bound round depends on the other jobs far more than
    its CPU time does, so the CPU ratios are printed beside the wall ones."""
    samples, cpu = [], []
    for _ in range(repeat):
        c0 = _cpu()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        cpu.append(_cpu() - c0)
    return statistics.median(samples), samples, statistics.median(cpu)


def _proc_figures(pid: int) -> tuple[int, float]:
    """(RSS in bytes, CPU seconds user+system) of a process, from /proc."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / ticks


def daemon_figures(base: Path, root: Path, spec, seconds: float) -> None:
    """(c): `retentiond run` as a dry-run daemon with 10 s rounds: READY from NOTIFY_SOCKET,
    then RSS and CPU sampled from /proc while its rounds find the minimum unchanged."""
    hour = (time.gmtime().tm_hour + 12) % 24
    config = write_config(
        root, spec, base / "daemon.yaml", fileReservedTime=1, deleteWhen=f"{hour:02d}",
        cleanResourceInterval=10_000,
        retentiond={"dryRun": True, "initialDelay": 1000, "timezone": "UTC",
                    "journal": {"dir": str(base / "journal")},
                    "controlSocket": str(base / "control.sock"),
                    "metrics": {"listen": "127.0.0.1:0"}},
    )  # fmt: skip
    notify = base / "notify.sock"
    notify.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    sock.settimeout(1.0)
    env = dict(os.environ, NOTIFY_SOCKET=str(notify))
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "retentiond", "run", "--config", str(config)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    ready = None
    try:
        while ready is None and time.monotonic() - t0 < 300 and proc.poll() is None:
            try:
                if b"READY=1" in sock.recv(4096):
                    ready = time.monotonic() - t0
            except TimeoutError:
                pass
        # The first rounds examine every queue (the minimum "moved" from 0 at start); then
        # measure a window of rounds with the minimum unchanged.
        time.sleep(max(0.0, 25 - (time.monotonic() - t0)))
        rss0, cpu0 = _proc_figures(proc.pid)
        w0 = time.monotonic()
        peak = rss0
        while time.monotonic() - w0 < seconds:
            time.sleep(2)
            rss, cpu1 = _proc_figures(proc.pid)
            peak = max(peak, rss)
        window = time.monotonic() - w0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        sock.close()
    queues = spec.topics * spec.queues_per_topic
    ready_text = f"{ready:.1f} s" if ready is not None else "never"
    print(f"(c) dry-run daemon: READY after {ready_text} (scan cache file present)")
    met = "met" if peak <= 100 * 2**20 else "NOT met"
    print(
        f"(c) steady RSS {rss / 2**20:.1f} MB (peak {peak / 2**20:.1f} MB over {window:.0f} s) "
        f"= {rss / queues:.0f} B per queue = {peak / (100 * 2**20):.2f}x the target: "
        f"<= 100 MB: {met}"
    )
    cpu = 100 * (cpu1 - cpu0) / window
    print(f"(c) idle CPU {cpu:.2f} % of a core at 10 s rounds = {cpu / 0.5:.2f}x the target: "
          f"< 0.5 %: {'met' if cpu < 0.5 else 'NOT met'}")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", help="where to build the store (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--daemon-seconds", type=float, default=60.0)
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
    idle = dataclasses.replace(settings, store=dataclasses.replace(
                                   settings.store,
                                   delete_hours=((time.gmtime().tm_hour + 12) % 24,),
                                   delete_when="never-now"), daemon=dataclasses.replace(
                                   settings.daemon, timezone="UTC"))  # fmt: skip

    def find() -> None:
        subprocess.run(["find", str(root)], stdout=subprocess.DEVNULL, check=True)

    cache_file = kind_for(settings)._scan_cache_path()  # beside the journal

    def round_cold() -> None:
        cleaner = Cleaner(kind_for(idle), journal=journal)
        result = cleaner.run_round()
        assert cleaner.kind.cache_loaded_queues >= 100_000, "no scan cache file loaded"
        assert result.plan.queues.examined and result.plan.queues.queue_count >= 100_000

    def round_first_start() -> None:
        if cache_file is not None and cache_file.exists():
            cache_file.unlink()
        result = Cleaner(kind_for(idle), journal=journal).run_round()  # writes it again
        assert result.plan.queues.examined and result.plan.queues.queue_count >= 100_000

    warm = Cleaner(kind_for(idle), journal=journal)
    warm.run_round()

    def round_warm() -> None:
        warm.kind.last_physical_min_offset = 0  # the minimum "moved" again: every queue
        assert warm.run_round().plan.queues.examined

    def round_unmoved() -> None:
        assert not warm.run_round().plan.queues.examined

    dry = Cleaner(kind_for(idle))
    assert dry.run_round(dry_run=True).plan.queues.examined

    def round_unmoved_dry() -> None:
        reads = dry.kind.reader.reads
        assert not dry.run_round(dry_run=True).plan.queues.examined
        assert dry.kind.reader.reads == reads

    def plan_inproc() -> None:
        Cleaner(kind_for(idle)).plan()

    def plan_cli(*extra: str) -> None:
        subprocess.run([sys.executable, "-m", "retentiond", "plan", "--config", str(config),
                        *extra], stdout=subprocess.DEVNULL, check=True)  # fmt: skip

    find()  # warm the page cache for everyone
    rows = [
        ("find <store>", find, None),
        ("(a) cold round (restart, cache file)", round_cold, 1.0),
        ("(a) cold round, first start (no cache)", round_first_start, None),
        ("(a) warm round", round_warm, 0.5),
        ("(b) round, min unchanged", round_unmoved, None),
        ("(b) dry-run round, min unchanged", round_unmoved_dry, None),
        ("plan, in-process", plan_inproc, None),
        ("retentiond plan (text), CLI", plan_cli, 1.5),
        ("retentiond plan --json, CLI", lambda: plan_cli("--json"), 2.0),
    ]
    results = {}
    cpu = {}
    print(f"load before: {os.getloadavg()}")
    for name, fn, _ in rows:
        med, samples, cpu[name] = timed(fn, args.repeat)
        results[name] = med
        print(
            f"{name:40s} median {med * 1000:9.1f} ms  CPU {cpu[name] * 1000:7.1f} ms  "
            f"(runs: {', '.join(f'{s * 1000:.0f}' for s in samples)})"
        )
    print(f"load after: {os.getloadavg()}")
    f = results["find <store>"]
    fc = cpu["find <store>"]
    print()
    print(f"{'goal':40s} {'median':>10s} {'vs find':>8s} {'CPU':>9s} {'vs find':>8s}  target")
    for name, _, target in rows[1:]:
        ratio = results[name] / f
        if name.startswith("(b)"):
            verdict = "met" if results[name] < 0.05 else "NOT met"
            goal = f"< 50 ms: {verdict}"
        elif target is not None:
            by_cpu = "met" if cpu[name] / fc <= target else "NOT met"
            goal = f"<= {target}x: {'met' if ratio <= target else 'NOT met'} (by CPU: {by_cpu})"
        else:
            goal = "reported"
        print(
            f"{name:40s} {results[name] * 1000:8.1f}ms {ratio:7.2f}x {cpu[name] * 1000:7.1f}ms "
            f"{cpu[name] / fc:7.2f}x  {goal}"
        )
    print()
    daemon_figures(base, root, spec, args.daemon_seconds)
    journal.close()
    if not args.keep and not args.dir:
        shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
