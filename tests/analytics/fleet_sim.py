"""A fleet of brokers simulated for a week by the real engine, for the Spark tests.

Each broker gets a generated store holding ten days of CommitLog and ConsumeQueue files. Files
are hidden until the moving clock passes their mtime, so the store grows as a broker's would;
every hour the real ``Cleaner`` runs a round and journals through the real ``Journal``; every
simulated midnight the real shipper moves closed segments to the target.

Only the disk is simulated: ``os.statvfs`` on a broker's store answers for a virtual disk of a
chosen size, whose other data grows by a per-broker rate, plus the bytes the store really holds
at that moment. That gives each broker its own disk story (healthy, filling, stuck, full) with
no root, no tmpfs and no dependence on the test machine's disks, while every deletion still
changes the ratio the next round measures.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retentiond.engine.cleaner import Cleaner
from retentiond.journal import ship
from retentiond.journal.rollup import IdleView, RoundFolder
from retentiond.journal.writer import Journal, Origin
from retentiond.storegen.rocketmq import StoreSpec
from tests.helpers.stores import make_store

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
START_MS = 1_709_510_400_000  # 2024-03-04T00:00:00Z, a Monday
DAYS = 7
HISTORY_DAYS = 3  # data already in the store when the week starts
FILE_SIZE = 32 * 1024
FILES_PER_DAY = 12
MSGS_PER_FILE = 31  # 1 KiB messages in a 32 KiB file with the 8-byte blank
BLOCK = 4096
SUMMARY_INTERVAL_MS = 6 * HOUR_MS  # hourly rounds: up to six idle ones per round_summary


@dataclass(frozen=True)
class Profile:
    """One broker's disk story and configuration."""

    capacity: int  # bytes of the virtual disk
    other_start: float  # fraction of the disk used by other data at the start of the week
    other_per_day: float  # and its growth per day
    reserved_hours: int = 48
    batch_max: int = 20


@dataclass
class LedgerJournal(Journal):
    """The real journal, also remembering every record it acknowledged (the test's truth)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.ledger: list[dict[str, object]] = []

    def append_many(self, records):  # type: ignore[no-untyped-def]
        records = [dict(r) for r in records]
        super().append_many(records)
        self.ledger.extend(records)


class LedgerFolder(RoundFolder):
    """The real folding, also remembering every round record offered to it: the history
    as it was before folding, against which the tables must give the same answers."""

    def __init__(self) -> None:
        super().__init__()
        self.offered: list[dict[str, Any]] = []

    def offer(
        self, record: Mapping[str, Any], view: IdleView | None, interval_ms: int
    ) -> list[dict[str, Any]]:
        self.offered.append(dict(record))
        return super().offer(record, view, interval_ms)


@dataclass
class Broker:
    cluster: str
    name: str
    host: str
    profile: Profile
    root: Path
    journal_dir: Path
    hidden: list[tuple[int, Path, Path]] = field(default_factory=list)  # (mtime, live, stash)
    cleaner: Cleaner | None = None
    journal: LedgerJournal | None = None

    def records(self) -> list[dict[str, object]]:
        """The acknowledged records with the origin the journal stamps on them."""
        assert self.journal is not None
        origin = {"cluster": self.cluster, "broker": self.name, "host": self.host}
        return [{**origin, **r} for r in self.journal.ledger]

    def every_round(self) -> list[dict[str, object]]:
        """Every round the cleaner ran, as full ``round`` records (folded or not)."""
        assert self.cleaner is not None and isinstance(self.cleaner.folder, LedgerFolder)
        origin = {"cluster": self.cluster, "broker": self.name, "host": self.host}
        return [{**origin, **r} for r in self.cleaner.folder.offered]


def profiles() -> dict[tuple[str, str], Profile]:
    """Three clusters of four brokers; each cluster has a healthy broker, a filling one, and
    a third and fourth with their own story, at cluster-specific rates."""
    mib = 1 << 20
    out = {}
    for c, speed in enumerate((1.0, 1.5, 0.5)):
        cluster = f"cluster-{c + 1}"
        out[(cluster, "broker-a")] = Profile(6 * mib, 0.30, 0.0)
        out[(cluster, "broker-b")] = Profile(6 * mib, 0.35, 0.05 * speed, batch_max=10)
        # Retention longer than the store's history: over the max ratio, nothing to delete.
        out[(cluster, "broker-c")] = Profile(5 * mib, 0.50, 0.02 * speed, reserved_hours=400)
        out[(cluster, "broker-d")] = Profile(8 * mib, 0.78, 0.02 * speed, reserved_hours=72)
    return out


def _store_spec() -> StoreSpec:
    files = (DAYS + HISTORY_DAYS) * FILES_PER_DAY
    return StoreSpec(
        commitlog_file_size=FILE_SIZE,
        cq_file_size=40 * 20,
        messages=files * MSGS_PER_FILE,
        message_size=1024,
        topics=1,
        queues_per_topic=2,
        oldest_age_hours=(DAYS + HISTORY_DAYS) * 24.0,
        newest_age_hours=0.0,
        preallocate=False,
        index=False,
        now_ms=START_MS + DAYS * DAY_MS,
    )


def _hide_future(broker: Broker, start_ms: int) -> None:
    """Move every file written after ``start_ms`` aside, to come back when its time comes."""
    stash = broker.root.parent / "stash"
    for sub in ("commitlog", "consumequeue"):
        for dirpath, _, names in os.walk(broker.root / sub):
            for name in names:
                live = Path(dirpath) / name
                mtime = live.stat().st_mtime_ns // 1_000_000
                if mtime > start_ms:
                    hidden = stash / live.relative_to(broker.root)
                    hidden.parent.mkdir(parents=True, exist_ok=True)
                    os.rename(live, hidden)
                    broker.hidden.append((mtime, live, hidden))
    broker.hidden.sort(key=lambda h: h[0], reverse=True)


def _release(broker: Broker, now_ms: int) -> None:
    while broker.hidden and broker.hidden[-1][0] <= now_ms:
        _, live, hidden = broker.hidden.pop()
        live.parent.mkdir(parents=True, exist_ok=True)
        os.rename(hidden, live)


def _store_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            total += os.stat(os.path.join(dirpath, name)).st_size
    return total


class VirtualDisks:
    """``os.statvfs`` for the brokers' stores; any other path gets the real answer."""

    def __init__(self, brokers: list[Broker], clock: Callable[[], int]) -> None:
        self.by_root = {str(b.root): b for b in brokers}
        self.clock = clock
        self.real = os.statvfs

    def _broker(self, path: str) -> Broker | None:
        for root, broker in self.by_root.items():
            if path == root or path.startswith(root + "/"):
                return broker
        return None

    def statvfs(self, path: os.PathLike | str) -> os.statvfs_result:
        broker = self._broker(os.fspath(path))
        if broker is None:
            return self.real(path)
        p = broker.profile
        days = (self.clock() - START_MS) / DAY_MS
        other = p.capacity * min(0.99, p.other_start + p.other_per_day * days)
        used = min(p.capacity, int(other) + _store_bytes(broker.root))
        blocks = p.capacity // BLOCK
        free = blocks - math.ceil(used / BLOCK)
        return os.statvfs_result((BLOCK, BLOCK, blocks, free, free, 1000, 900, 900, 0, 255))

    @contextmanager
    def installed(self) -> Iterator[None]:
        os.statvfs = self.statvfs  # type: ignore[assignment]
        try:
            yield
        finally:
            os.statvfs = self.real


@dataclass
class Fleet:
    brokers: list[Broker]
    target: Path
    ship_results: list[ship.ShipResult]

    def records(self) -> list[dict[str, object]]:
        return [r for b in self.brokers for r in b.records()]

    def every_round(self) -> list[dict[str, object]]:
        return [r for b in self.brokers for r in b.every_round()]


def build(tmp: Path) -> Fleet:
    """Run the week; returns the fleet with its ledgers and the shipped target."""
    clock = {"now": START_MS}
    spec = _store_spec()
    # A /proc with no process in it: no broker and no reader holds a store file, so nothing
    # is deferred by the hold rules (this sandbox cannot see every real process, which they
    # would rightly treat as "held").
    proc = tmp / "proc"
    proc.mkdir()
    (proc / "locks").write_text("")
    brokers = []
    for (cluster, name), profile in profiles().items():
        base = tmp / cluster / name
        broker = Broker(
            cluster, name, f"{name}.{cluster}.example", profile, base / "store", base / "journal"
        )
        made = make_store(
            base,
            spec,
            journal=broker.journal_dir,
            defaults={"deleteCommitLogFilesInterval": 0, "deleteConsumeQueueFilesInterval": 0},
            brokerClusterName=cluster,
            brokerName=name,
            fileReservedTime=profile.reserved_hours,
            deleteFileBatchMax=profile.batch_max,
            cleanResourceInterval=HOUR_MS,
            retentiond={
                "timezone": "UTC",
                "journal": {
                    "dir": str(broker.journal_dir),
                    "roundSummaryInterval": SUMMARY_INTERVAL_MS,
                },
            },
        )
        _hide_future(broker, START_MS)
        origin = Origin(cluster, name, broker.host, str(broker.root))
        broker.journal = LedgerJournal(
            broker.journal_dir,
            origin,
            max_segment_bytes=16 * 1024,
            max_segment_age_ms=6 * HOUR_MS,
            clock_ms=lambda: clock["now"],
        )
        broker.cleaner = made.cleaner(
            broker.journal,
            clock_ms=lambda: clock["now"],
            proc_root=str(proc),
        )
        broker.cleaner.folder = LedgerFolder()
        brokers.append(broker)
    target = tmp / "target"
    target.mkdir()
    results: list[ship.ShipResult] = []
    disks = VirtualDisks(brokers, lambda: clock["now"])
    with disks.installed():
        for hour in range(DAYS * 24):
            for i, broker in enumerate(brokers):
                clock["now"] = START_MS + hour * HOUR_MS + i * 60_000  # staggered minutes
                _release(broker, clock["now"])
                assert broker.cleaner is not None
                broker.cleaner.run_round()
            if hour % 24 == 23:
                for broker in brokers:
                    results.append(_ship(broker, target, flush=False))
    for broker in brokers:
        assert broker.cleaner is not None
        broker.cleaner.flush_journal()  # the daemon's shutdown: the open summary is written
        results.append(_ship(broker, target, flush=True))
        assert broker.journal is not None
        broker.journal.close()
    return Fleet(brokers, target, results)


def layout_of(broker: Broker) -> int:
    """Brokers a ship a directory per type (layout 1), b every type in one file (2), c and d
    each family of types in its own file (3, the default): the job reads a target that holds
    all three."""
    return {"broker-a": 1, "broker-b": 2}.get(broker.name, 3)


def _ship(broker: Broker, target: Path, *, flush: bool) -> ship.ShipResult:
    return ship.ship_once(
        broker.journal_dir,
        target,
        max_local_bytes=1 << 30,
        max_segment_age_ms=6 * HOUR_MS,
        journal=broker.journal,
        flush=flush,
        layout=layout_of(broker),
    )
