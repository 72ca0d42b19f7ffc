"""Crash tests: a journal writer and a shipper, each a real process, SIGKILLed at random points
over and over; afterwards every record the writer had acknowledged is in the target, none
twice, and none missing in between.

The writer appends numbered records (some of them 100 KiB, so a kill can tear a write in
half) and prints each number once ``append_many`` returned. On restart it continues after the
highest number it can find, looking in the local journal first and then in the target: a
segment leaves the journal only after its copy is renamed into place, so a record is always
visible in at least one of the two, and a written-but-unacknowledged record is never written
again.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from retentiond.journal import ship
from retentiond.journal import writer as jr

pytestmark = pytest.mark.slow

WRITER = r"""
import gzip, json, pathlib, random, sys
from retentiond.journal.writer import Journal, Origin, read_records

jdir, target = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
T0 = 1_709_510_400_000

def highest():
    while True:
        try:
            seq = max((r.get("seq", 0) for r in read_records(jdir)), default=0)
            break
        except FileNotFoundError:  # a segment shipped away while we read: read again
            continue
    for path in target.rglob("*.jsonl.gz"):
        with gzip.open(path, "rt") as fh:
            seq = max([seq, *(json.loads(line)["seq"] for line in fh)])
    return seq

jdir.mkdir(parents=True, exist_ok=True)
seq = highest()
journal = Journal(jdir, Origin("c", "b", "h", "/s"), max_segment_bytes=2048,
                  max_segment_age_ms=10**13)
rng = random.Random()
while True:
    n = rng.randint(1, 3)
    big = rng.random() < 0.1
    records = [
        {"type": rng.choice(["deletion", "round", "intent"]), "seq": seq + i + 1,
         "time_ms": T0 + (seq + i) * 600_000,
         "pad": "x" * (100_000 if big else rng.randint(0, 300))}
        for i in range(n)
    ]
    journal.append_many(records)
    seq += n
    print(seq, flush=True)
"""

SHIPPER = r"""
import pathlib, sys, time
from retentiond.journal.ship import ship_once

jdir, target = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
while True:
    if jdir.is_dir():
        ship_once(jdir, target, max_local_bytes=1 << 40, max_segment_age_ms=10**13)
    time.sleep(0.002)
"""


class Child:
    """One of the two processes, restartable; the writer's acknowledgements are collected."""

    def __init__(self, code: str, args: list[str]) -> None:
        self.code, self.args = code, args
        self.acked = 0
        self.proc: subprocess.Popen[str] | None = None
        self.kills = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.code, *self.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            # the pipe is drained to the end: a child's own log lines (the shipper warns of
            # torn lines on stdout) are not acknowledgements
            if line.strip().isdigit():
                self.acked = max(self.acked, int(line))

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.kills += 1


def shipped_seqs(target: Path) -> Counter[int]:
    seen: Counter[int] = Counter()
    for path in target.rglob("*.jsonl.gz"):
        with gzip.open(path, "rt") as fh:
            for line in fh:
                record = json.loads(line)
                # <target>/v3/<family>/dt=/cluster=/broker=/file: the default layout
                assert path.parents[3].name == ship.family_of(record["type"])
                assert path.parents[4].name == ship.FAMILY_DIR
                seen[record["seq"]] += 1
    return seen


@pytest.mark.parametrize(("with_shipper", "kills"), [(False, 20), (True, 40)])
def test_random_kills_lose_and_duplicate_nothing(
    tmp_path: Path, with_shipper: bool, kills: int
) -> None:
    jdir, target = tmp_path / "journal", tmp_path / "target"
    target.mkdir()
    writer = Child(WRITER, [str(jdir), str(target)])
    shipper = Child(SHIPPER, [str(jdir), str(target)])
    children = [writer, shipper] if with_shipper else [writer]
    rng = random.Random(kills)
    for child in children:
        child.start()
    try:
        for _ in range(kills):
            time.sleep(rng.uniform(0.15, 0.5))
            victim = rng.choice(children)
            victim.kill()
            victim.start()
        time.sleep(0.3)
    finally:
        for child in children:
            if child.proc is not None and child.proc.poll() is None:
                child.kill()
    assert writer.acked > 50, "the writer hardly wrote anything"

    # What a restarted daemon's shipping job would do: close the last segment, ship the rest.
    jr.close_idle_segment(jdir, 0, jr.wall_ms())
    result = ship.ship_once(jdir, target, max_local_bytes=1 << 40, max_segment_age_ms=10**13)
    assert result.error is None
    assert jr.closed_segments(jdir) == []
    assert not list(target.rglob(".*.tmp")), "a temporary copy was left behind"

    seen = shipped_seqs(target)
    duplicated = sorted(s for s, n in seen.items() if n > 1)
    assert not duplicated, f"shipped twice: {duplicated[:20]}"
    top = max(seen)
    missing = sorted(set(range(1, top + 1)) - set(seen))
    assert not missing, f"lost: {missing[:20]}"
    assert top >= writer.acked, "an acknowledged record is missing"
    assert sum(c.kills for c in children) == kills + len(children)
