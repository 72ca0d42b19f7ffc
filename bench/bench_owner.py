"""What reading the owner broker's figures costs, against a process with many memory maps.

A helper process (tests/helpers/broker_proc.py) takes a store lock and maps one 4 KiB file
``--maps`` times (one page each, so every mapping is its own line of /proc/<pid>/maps). Then,
``--repeat`` times each, medians printed:

* ``count_maps``: the lines of /proc/<pid>/maps, what retentiond reads every round;
* ``read_owner``: all the owner's figures (psutil: name, command line, user, start time, RSS,
  descriptors, RLIMIT_NOFILE; plus the maps count) — the whole per-round cost;
* ``OwnerWatch.refresh`` after ``find_owner``: the round's call, lock lookup included;
* ``psutil memory_maps(grouped=False)`` and ``memory_maps()``: what reading smaps would cost.

vm.max_map_count (default 65530) must exceed the maps: as root the script raises it to
``--maps`` + 10,000 for the run with ``sysctl -w`` and puts the old value back afterwards.

    PYTHONPATH=. python bench/bench_owner.py --maps 100000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from retentiond.engine.proc.files import find_owner
from retentiond.engine.proc.owner import OwnerWatch, count_maps, read_owner
from tests.helpers.broker_proc import FakeBroker

MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")


def median_s(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--maps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--smaps-repeat", type=int, default=3)
    args = ap.parse_args()
    old_limit = int(MAX_MAP_COUNT.read_text())
    if old_limit < args.maps + 10_000:
        if os.geteuid() != 0:
            print(f"vm.max_map_count is {old_limit}: run as root or with --maps below it")
            return 2
        MAX_MAP_COUNT.write_text(str(args.maps + 10_000))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "lock").write_bytes(b"")
            (root / "file").write_bytes(b"x" * 4096)
            with FakeBroker(root / "lock") as broker:
                started = time.perf_counter()
                broker.map(args.maps, root / "file")
                mapped_s = time.perf_counter() - started
                pid = broker.pid
                maps = count_maps(pid)
                watch = OwnerWatch()
                proc = psutil.Process(pid)
                rows = [
                    ("count_maps (lines of /proc/<pid>/maps)", median_s(
                        lambda: count_maps(pid), args.repeat)),
                    ("read_owner (every figure)", median_s(lambda: read_owner(pid), args.repeat)),
                    ("find_owner + OwnerWatch.refresh (one round)", median_s(
                        lambda: watch.refresh(find_owner(str(root / "lock"))), args.repeat)),
                    ("psutil memory_maps(grouped=False) (smaps)", median_s(
                        lambda: proc.memory_maps(grouped=False), args.smaps_repeat)),
                    ("psutil memory_maps() (smaps, grouped)", median_s(
                        proc.memory_maps, args.smaps_repeat)),
                ]  # fmt: skip
    finally:
        if int(MAX_MAP_COUNT.read_text()) != old_limit:
            MAX_MAP_COUNT.write_text(str(old_limit))
    cpu = platform.processor() or platform.machine()
    print(f"{maps} maps in the helper (mapped in {mapped_s:.2f} s); {os.cpu_count()} cpus, "
          f"{cpu}, Linux {platform.release()}, Python {platform.python_version()}, "
          f"psutil {psutil.__version__}")  # fmt: skip
    print("| What | Median |")
    print("|---|---:|")
    for what, seconds in rows:
        print(f"| {what} | {seconds * 1000:.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
