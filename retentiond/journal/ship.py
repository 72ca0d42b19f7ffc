"""Shipping: closed journal segments to the fleet's target directory, laid out for Spark.

``<target>/v3/<family>/dt=YYYY-MM-DD/cluster=<c>/broker=<b>/<host>-<journal id>-<seq>.jsonl.gz``

One closed segment becomes one gzip file per (record family, day, cluster, broker, host) it
holds (layout 3, the default). The families are what the fleet job reads apart: ``deletions``
(the deletion journal: ``intent``, ``deletion``, ``abort``; intents stay beside their outcomes
for audits), ``rounds`` (``round``, ``round_summary``) and ``other`` (every other type,
``invalid`` included): the job parses each family into its own narrow frame, from two files
per broker and day where layout 1 writes four or five. The earlier layouts stay readable and
writable (``layout=`` here, ``retentiond.ship.layout`` in a configuration): layout 1, one
file per record type, ``<target>/<type>/dt=.../...``; layout 2, one file with every type of a
segment's day, ``<target>/v2/dt=.../...``. Whatever the layout, the file name, the lines
(unchanged), the day (``record_day``) and the order of operations below are the same, and
the job (``retentiond analyze``) reads a target holding any mix of them. The order of
operations is what makes a crash at any point harmless:

1. each file is written under a hidden temporary name (Spark, DuckDB and globs skip names
   starting with ``.``), fsynced, renamed over its final name and the directory fsynced;
2. every file is read back and its record count and SHA-256 compared with what was meant;
3. only then is the local segment removed.

No intent leaves the host unreconciled. Before a pass the shipper runs start-up's
reconciliation (``journal.reconcile``): every open intent of a dead writer (a ``retentiond
once`` killed between its intent and its outcome) gets its ``deletion`` or ``abort``, appended
to the active segment that a later pass ships. A closed segment still holding an open intent of
a *live* writer stays local until a later pass: its outcome is due any moment, and should the
writer die first, the next pass reconciles it. Otherwise a segment shipped and removed with an
open intent would hide that intent from every later reconciliation, and a file whose unlink
did happen would never get its ``deletion`` record.

Names (and, since gzip's timestamp is pinned, bytes) are a function of the segment alone, so a
copy repeated after a crash between 1 and 3 replaces itself: no record is ever shipped twice.

When the target cannot be written, cleaning goes on (the daemon runs this in its own
scheduler job: ``daemon.shipping``) and segments stay local, bounded by
``retentiond.ship.maxLocalBytes``: past it the oldest closed segments are dropped, with an error
log and the ``dropped`` counters of the caller's ``ShipCounters`` (the daemon exports its own
as metrics: ``observe.ship_metrics``).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

import structlog

from retentiond.config.settings import (
    DEFAULT_SHIP_LAYOUT,
    SHIP_LAYOUTS,
    Settings,
    StoreSection,
)
from retentiond.journal import writer as jr
from retentiond.journal.reconcile import ReconcileResult, reconcile

log = structlog.get_logger(__name__)

SHIP_LOCK_NAME = "ship.lock"
LAYOUTS: tuple[int, ...] = SHIP_LAYOUTS  # (1, 2, 3): the values retentiond.ship.layout takes
DEFAULT_LAYOUT = DEFAULT_SHIP_LAYOUT  # 3
MIXED_DIR = "v2"  # layout 2's directory under the target (no record type is named so)
FAMILY_DIR = "v3"  # layout 3's directory under the target, v3/<family>/dt=... (nor is one so)
# Layout 3: the family each record type is filed under; every type not named here is "other".
FAMILIES: dict[str, str] = {
    "intent": "deletions",
    "deletion": "deletions",
    "abort": "deletions",
    "round": "rounds",
    "round_summary": "rounds",
}
OTHER_FAMILY = "other"
_TYPE = re.compile(r"[a-z][a-z0-9_]{0,31}")


class ShipError(Exception):
    """The target could not be written or a copy did not verify; the segment stays local."""


class JournalLike(Protocol):
    """What the shipper needs from the daemon's journal (a wrapper may stand in for it)."""

    def rotate_if_due(self) -> bool: ...


@dataclass
class ShipCounters:
    """Cumulative figures over the passes that were handed them (the daemon keeps one for
    its life; ``observe.ship_metrics`` exports it as Prometheus metrics)."""

    runs: int = 0
    failures: int = 0
    segments_shipped: int = 0
    records_shipped: int = 0
    files_written: int = 0
    torn_lines: int = 0
    segments_dropped: int = 0
    records_dropped: int = 0
    bytes_dropped: int = 0
    backlog_segments: int = 0  # closed segments still local after the last run
    backlog_bytes: int = 0
    last_success_ms: int | None = None
    last_error: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass
class ShipResult:
    shipped_segments: int = 0
    shipped_records: int = 0
    files_written: int = 0
    torn_lines: int = 0
    dropped_segments: int = 0
    dropped_records: int = 0
    backlog_segments: int = 0
    backlog_bytes: int = 0
    error: str | None = None
    busy: bool = False  # another shipper held the journal's ship lock; nothing was done
    reconciled: int = 0  # open intents of dead writers given their outcome before shipping
    waiting_segments: int = 0  # closed segments kept: an open intent of a live writer


# --- names ---------------------------------------------------------------------------------


def _part(value: object) -> str:
    """A partition value as Spark writes it: path-unsafe characters %-escaped."""
    return quote(str(value), safe="-_.~+@:,")


def record_day(record: dict[str, object], fallback_ms: int) -> str:
    """The UTC day a record is filed under (``dt=``)."""
    value = record.get("time_ms")
    ms = value if isinstance(value, int) and not isinstance(value, bool) else fallback_ms
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def record_type(record: dict[str, object]) -> str:
    value = record.get("type")
    return value if isinstance(value, str) and _TYPE.fullmatch(value) else "invalid"


def family_of(kind: str) -> str:
    """Layout 3's family of a record type (``record_type``): ``deletions``, ``rounds`` or
    ``other``."""
    return FAMILIES.get(kind, OTHER_FAMILY)


def layout_dir(layout: int, kind: str) -> str:
    """The directory under the target that a record of type ``kind`` goes to in ``layout``:
    ``<type>`` (1), ``v2`` (2), ``v3/<family>`` (3)."""
    if layout == 3:
        return f"{FAMILY_DIR}/{family_of(kind)}"
    if layout == 2:
        return MIXED_DIR
    # a type spelled like a layout's directory would be read as that layout's files
    return "invalid" if kind in (MIXED_DIR, FAMILY_DIR) else kind


def shipped_path(
    target: Path, kind: str, day: str, cluster: str, broker: str, host: str, jid: str, seq: int
) -> Path:
    """``kind``: the directory under the target (``layout_dir``)."""
    name = f"{_part(host)}-{jid}-{seq:012d}.jsonl.gz"
    return (
        Path(target) / kind / f"dt={day}" / f"cluster={_part(cluster)}" / f"broker={_part(broker)}"
    ) / name


# --- one segment ---------------------------------------------------------------------------


@dataclass
class _Group:
    lines: list[bytes] = field(default_factory=list)

    def digest(self) -> str:
        h = hashlib.sha256()
        for line in self.lines:
            h.update(line)
        return h.hexdigest()


def _group_segment(
    path: Path, target: Path, jid: str, stats: jr.ReadStats, layout: int = DEFAULT_LAYOUT
) -> dict[Path, _Group]:
    """The segment's lines, unchanged, grouped by the file each must go to."""
    seq = jr.segment_seq(path)
    fallback = int(path.stat().st_mtime * 1000)
    groups: dict[Path, _Group] = {}
    with open(path, "rb") as fh:
        for line in fh:
            if line == b"\n":
                continue
            record = jr.parse_line(line)
            if record is None:
                stats.torn += 1
                continue
            stats.records += 1
            dest = shipped_path(
                target,
                layout_dir(layout, record_type(record)),
                record_day(record, fallback),
                str(record.get("cluster", "unknown")),
                str(record.get("broker", "unknown")),
                str(record.get("host", "unknown")),
                jid,
                seq,
            )
            groups.setdefault(dest, _Group()).lines.append(line)
    return groups


def _gzip_bytes(lines: list[bytes]) -> bytes:
    """Deterministic gzip: no name and mtime 0, so a repeated copy is byte-identical."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
        for line in lines:
            gz.write(line)
    return buf.getvalue()


def _write_atomically(dest: Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, dest)
    jr._fsync_dir(dest.parent)


def _verify(dest: Path, group: _Group) -> None:
    with gzip.open(dest, "rb") as fh:
        lines = fh.read().splitlines(keepends=True)
    got = _Group(lines)
    if len(lines) != len(group.lines) or got.digest() != group.digest():
        raise ShipError(
            f"{dest}: read back {len(lines)} records, expected {len(group.lines)} "
            "(or the content differs); the segment is kept"
        )


def ship_segment(
    path: Path, target: Path, jid: str, layout: int = DEFAULT_LAYOUT
) -> tuple[int, int, int]:
    """Copy one closed segment and verify the copies; returns (records, files, torn lines).

    The caller removes the segment afterwards. Raises ShipError or OSError on failure.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"shipped layout {layout!r}: one of {LAYOUTS}")
    stats = jr.ReadStats()
    groups = _group_segment(path, target, jid, stats, layout)
    for dest, group in groups.items():
        _write_atomically(dest, _gzip_bytes(group.lines))
    for dest, group in groups.items():
        _verify(dest, group)
    return stats.records, len(groups), stats.torn


# --- a pass over the journal ---------------------------------------------------------------


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    except OSError:
        return 0


def _remove(path: Path) -> None:
    os.unlink(path)
    jr._fsync_dir(path.parent)


def _enforce_budget(
    directory: Path,
    max_local_bytes: int,
    result: ShipResult,
    keep: set[int] | None = None,
    counters: ShipCounters | None = None,
) -> None:
    """Drop the oldest closed segments until the unshipped backlog fits the budget; never one
    holding an open intent of a live writer (``keep``): its outcome is due any moment."""
    closed = jr.closed_segments(directory)
    sizes = {p: p.stat().st_size for _, p in closed}
    total = sum(sizes.values())
    for seq, path in closed:
        if total <= max_local_bytes:
            break
        if keep is not None and seq in keep:
            continue
        lines = _count_lines(path)
        _remove(path)
        total -= sizes[path]
        result.dropped_segments += 1
        result.dropped_records += lines
        if counters is not None:
            with counters.lock:
                counters.segments_dropped += 1
                counters.records_dropped += lines
                counters.bytes_dropped += sizes[path]
        log.error(
            "JOURNAL SEGMENT DROPPED UNSHIPPED: the ship target has been unreachable and the "
            "local backlog exceeds retentiond.ship.maxLocalBytes",
            segment=str(path),
            records=lines,
            bytes=sizes[path],
            max_local_bytes=max_local_bytes,
        )
    result.backlog_segments = len(closed) - result.dropped_segments
    result.backlog_bytes = total


def _try_ship_lock(directory: Path) -> int | None:
    fd = os.open(directory / SHIP_LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def ship_once(
    directory: Path,
    target: Path,
    *,
    max_local_bytes: int,
    max_segment_age_ms: int,
    journal: JournalLike | None = None,
    flush: bool = False,
    now_ms: Callable[[], int] = jr.wall_ms,
    append: Callable[[dict[str, object]], None] | None = None,
    held: Callable[[str], bool] | None = None,
    counters: ShipCounters | None = None,
    layout: int = DEFAULT_LAYOUT,
) -> ShipResult:
    """One pass: close an idle segment, reconcile, ship every closed one oldest first, keep
    the budget; added to ``counters`` when given. ``layout``: the shipped layout (module
    docstring); a target may hold any mix of them.

    ``journal`` is the writer's own handle when called from the daemon; without it (the CLI)
    an idle segment is closed through the directory lock instead. ``flush`` closes the
    active segment whatever its age. Reconciled outcomes are written with ``append``, else
    with the journal's own ``append``, else through a handle opened for the purpose.
    ``held``: whether an outcome waits in the daemon's memory for disk space (the cleaner's
    ``SpoolingJournal.holds_outcome``): that intent gets no second outcome, and its segment
    stays local until the outcome is on disk.
    """
    directory, target = Path(directory), Path(target)
    result = ShipResult()
    lock = _try_ship_lock(directory)
    if lock is None:
        result.busy = True
        return result
    try:
        _close_active(directory, journal, flush, max_segment_age_ms, now_ms())
        keep: set[int] | None = None
        try:
            # Listed before the reconciliation reads the journal: every segment listed here
            # is closed, so the scan saw all of it, and nothing written later can be in it.
            closed = jr.closed_segments(directory)
            keep = _reconcile_first(directory, journal, append, now_ms(), result, held)
            _ship_closed(directory, target, result, keep, closed, layout)
        except (OSError, ShipError) as exc:
            result.error = str(exc)
            log.warning(
                "shipping failed; segments kept locally", target=str(target), error=str(exc)
            )
        _enforce_budget(directory, max_local_bytes, result, keep, counters)
    finally:
        os.close(lock)
    _count(result, now_ms(), counters)
    return result


def _close_active(
    directory: Path, journal: JournalLike | None, flush: bool, max_age_ms: int, now: int
) -> None:
    if flush:
        jr.close_idle_segment(directory, 0, now)
    elif journal is not None:
        journal.rotate_if_due()
    else:
        jr.close_idle_segment(directory, max_age_ms, now)


class _LazyAppend:
    """A journal handle opened on first use (the CLI has none of its own) and closed after.

    Its origin only fills fields a reconciled record lacks: reconciliation copies cluster,
    broker, host and store from the intent it closes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.journal: jr.Journal | None = None

    def __call__(self, record: dict[str, object]) -> None:
        if self.journal is None:
            self.journal = jr.Journal(self.directory, jr.Origin.local("unknown", "unknown", ""))
        self.journal.append(record)

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()


def _reconcile_first(
    directory: Path,
    journal: JournalLike | None,
    append: Callable[[dict[str, object]], None] | None,
    now: int,
    result: ShipResult,
    held: Callable[[str], bool] | None = None,
) -> set[int]:
    """Give dead writers' open intents their outcome; the segments to keep for live ones.

    Called after the closed segments were listed, so each of them was fully read here.
    Raises OSError when an outcome cannot be written: then nothing is shipped this pass."""
    lazy: _LazyAppend | None = None
    if append is None:
        append = getattr(journal, "append", None)
    if append is None:
        lazy = _LazyAppend(directory)
        append = lazy
    try:
        if held is None:
            held = getattr(journal, "holds_outcome", None)  # (a spooling journal handed in)
        rec: ReconcileResult = reconcile(directory, append, now_ms=now, when="shipping", held=held)
    finally:
        if lazy is not None:
            lazy.close()
    result.reconciled = rec.deleted + rec.aborted
    return rec.live_segments


def _ship_closed(
    directory: Path,
    target: Path,
    result: ShipResult,
    keep: set[int] | None = None,
    closed: list[tuple[int, Path]] | None = None,
    layout: int = DEFAULT_LAYOUT,
) -> None:
    if not target.is_dir():
        raise ShipError(f"target {target} is not a reachable directory")
    if closed is None:
        closed = jr.closed_segments(directory)
    if not closed:
        return
    jid = jr.journal_id(directory)
    for seq, path in closed:
        if keep is not None and seq in keep:
            result.waiting_segments += 1  # an open intent of a live writer: a later pass
            continue
        records, files, torn = ship_segment(path, target, jid, layout)
        if torn:
            log.warning("torn journal lines skipped while shipping", segment=str(path), torn=torn)
        _remove(path)
        result.shipped_segments += 1
        result.shipped_records += records
        result.files_written += files
        result.torn_lines += torn


def _count(result: ShipResult, now: int, counters: ShipCounters | None) -> None:
    if counters is None:
        return
    with counters.lock:
        counters.runs += 1
        counters.segments_shipped += result.shipped_segments
        counters.records_shipped += result.shipped_records
        counters.files_written += result.files_written
        counters.torn_lines += result.torn_lines
        if not result.busy:
            counters.backlog_segments = result.backlog_segments
            counters.backlog_bytes = result.backlog_bytes
        if result.error:
            counters.failures += 1
            counters.last_error = result.error
        elif not result.busy:
            counters.last_success_ms = now
            counters.last_error = None


def ship_with_settings(
    settings: Settings[StoreSection],
    directory: Path,
    journal: JournalLike | None = None,
    *,
    flush: bool = False,
    held: Callable[[str], bool] | None = None,
    counters: ShipCounters | None = None,
) -> ShipResult:
    d = settings.daemon
    assert d.ship_target is not None
    return ship_once(
        directory,
        d.ship_target,
        max_local_bytes=d.ship_max_local_bytes,
        max_segment_age_ms=d.journal_max_segment_age_ms,
        journal=journal,
        flush=flush,
        held=held,
        counters=counters,
        layout=d.ship_layout,
    )
