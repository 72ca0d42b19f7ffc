"""Reading a journal back: the local segments and the shipped copies, filtered, oldest first.

``retentiond journal`` is the operator's door to what ``docs/journal.md`` describes: the local
segments (``journal-<12 digits>.jsonl``, and ``.jsonl.gz`` if an operator compressed a closed
one) and, when ``retentiond.ship.target`` is set, the shipped files of every layout
(``journal.ship``): ``<target>/v3/<family>/dt=<day>/cluster=<c>/broker=<b>/*.jsonl.gz``,
``<target>/v2/dt=...`` and ``<target>/<type>/dt=...``. Only this broker's shipped records are
read (its ``cluster=`` and ``broker=`` directories, records written on this host), only the
directories that can hold the asked-for record types (a type's own directory, its family's,
and ``v2``), and only the days the time window touches. A record present in both places (a
shipping pass that died between its rename and the local delete) is shown once. Torn lines are
skipped and counted, as every journal reader does; a file or directory that cannot be read is
named in ``problems``, and what could be read is still returned.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import json
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from retentiond.journal.ship import MIXED_DIR, _part, layout_dir
from retentiond.journal.writer import parse_line

RECORD_TYPES = ("intent", "deletion", "abort", "round", "round_summary")
_LOCAL = re.compile(r"journal-(\d{12})\.jsonl(\.gz)?")
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
# Within one millisecond: an intent before its outcome, a round after its deletions.
_RANK = {"intent": 0, "deletion": 1, "abort": 1, "round": 2, "round_summary": 2}
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, now_ms: int, zone: ZoneInfo | None) -> int:
    """``--since`` / ``--until`` as epoch ms: ``2h``, ``7d``, ``30m``, ``1w`` (that long before
    now), or an ISO date or date-time (``2024-05-01``, ``2024-05-01T12:30``, ``...+02:00``,
    ``...Z``); without an offset it is read in ``zone`` (None: the machine's zone).
    Raises ``ValueError`` naming what it accepts."""
    text = text.strip()
    m = _RELATIVE.fullmatch(text)
    if m:
        return now_ms - int(float(m.group(1)) * _UNIT_S[m.group(2)] * 1000)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise ValueError(
            f"{text!r}: expected an ISO date or time (2024-05-01, 2024-05-01T12:30, "
            "2024-05-01T12:30+02:00) or a duration before now (30m, 2h, 7d, 1w)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone) if zone is not None else when.astimezone()
    return int(when.timestamp() * 1000)


@dataclass(frozen=True)
class Query:
    """Which records: by type, time window (``since_ms`` included, ``until_ms`` excluded), and
    for the records that have them, reason, file kind and file (a glob on the path or its
    name when it holds ``*?[``, else a substring of the path)."""

    types: frozenset[str] = frozenset({"deletion"})
    since_ms: int | None = None
    until_ms: int | None = None
    reasons: frozenset[str] | None = None
    kinds: frozenset[str] | None = None
    file: str | None = None

    def matches(self, record: dict[str, object]) -> bool:
        if record.get("type") not in self.types:
            return False
        t = record.get("time_ms")
        if self.since_ms is not None or self.until_ms is not None:
            if not isinstance(t, int):
                return False
            if self.since_ms is not None and t < self.since_ms:
                return False
            if self.until_ms is not None and t >= self.until_ms:
                return False
        if self.reasons is not None and record.get("reason") not in self.reasons:
            return False
        if self.kinds is not None and record.get("kind") not in self.kinds:
            return False
        if self.file is not None:
            path = record.get("file")
            if not isinstance(path, str):
                return False
            if any(c in self.file for c in "*?["):
                name = path.rsplit("/", 1)[-1]
                return fnmatch.fnmatchcase(path, self.file) or fnmatch.fnmatchcase(name, self.file)
            return self.file in path
        return True


@dataclass(frozen=True)
class Shipped:
    """Where this broker's shipped records are, and whose they are."""

    target: Path
    cluster: str
    broker: str
    host: str


@dataclass
class QueryResult:
    records: list[dict[str, object]] = field(default_factory=list)  # oldest first
    local_files: int = 0
    shipped_files: int = 0
    torn: int = 0
    duplicates: int = 0
    problems: list[str] = field(default_factory=list)  # what could not be read, and why


def _lines(path: Path) -> Iterator[bytes]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        yield from fh


def _read(
    path: Path, query: Query, host: str | None, result: QueryResult, seen: set[bytes]
) -> None:
    try:
        for line in _lines(path):
            if line == b"\n":
                continue
            record = parse_line(line)
            if record is None:
                result.torn += 1
                continue
            if host is not None and record.get("host") != host:
                continue
            if not query.matches(record):
                continue
            key = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).digest()
            if key in seen:
                result.duplicates += 1
                continue
            seen.add(key)
            result.records.append(record)
    except (OSError, EOFError, zlib.error) as exc:
        result.problems.append(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}")


def _local_files(directory: Path) -> list[Path]:
    found = []
    for entry in os.scandir(directory):
        m = _LOCAL.fullmatch(entry.name)
        if m and entry.is_file(follow_symlinks=False):
            found.append((int(m.group(1)), entry.name, Path(entry.path)))
    return [p for _, _, p in sorted(found)]


def _day(name: str) -> date | None:
    try:
        return date.fromisoformat(name.removeprefix("dt="))
    except ValueError:
        return None


def _shipped_files(source: Shipped, query: Query) -> Iterator[Path]:
    """This broker's shipped files of the asked-for types, on the days the window touches."""
    first = last = None
    if query.since_ms is not None:
        first = datetime.fromtimestamp(query.since_ms / 1000, UTC).date()
    if query.until_ms is not None:
        last = datetime.fromtimestamp(query.until_ms / 1000, UTC).date() + timedelta(days=1)
    # Every layout a target may hold (a broker's layout is its own setting): the type's own
    # directory (1), the one with every type (2), its family's (3). A record shipped twice in
    # two layouts is shown once (``seen``).
    dirs = {MIXED_DIR} | {layout_dir(n, t) for t in query.types for n in (1, 3)}
    for kind in sorted(dirs):
        base = source.target / kind
        if not base.is_dir():
            continue
        for day_dir in sorted(base.iterdir()):
            day = _day(day_dir.name)
            if day is None or (first and day < first) or (last and day > last):
                continue
            leaf = day_dir / f"cluster={_part(source.cluster)}" / f"broker={_part(source.broker)}"
            if not leaf.is_dir():
                continue
            for path in sorted(leaf.iterdir()):
                if path.name.endswith(".jsonl.gz") and not path.name.startswith("."):
                    yield path


def query_journal(local: Path | None, shipped: Shipped | None, query: Query) -> QueryResult:
    """The matching records of the local journal ``local`` and of ``shipped``, oldest first
    (by ``time_ms``; a record without one sorts first). A missing local directory is an empty
    journal (nothing journaled yet); a missing or unreadable ship target is a problem."""
    result = QueryResult()
    seen: set[bytes] = set()
    if local is not None and os.path.lexists(local):
        try:
            files = _local_files(local)
        except OSError as exc:
            result.problems.append(f"{local}: cannot read: {exc.strerror or exc}")
            files = []
        for path in files:
            result.local_files += 1
            _read(path, query, None, result, seen)
    if shipped is not None:
        if not shipped.target.is_dir():
            result.problems.append(f"{shipped.target}: the ship target is not a readable directory")
        else:
            try:
                files = list(_shipped_files(shipped, query))
            except OSError as exc:
                result.problems.append(f"{shipped.target}: cannot read: {exc.strerror or exc}")
                files = []
            for path in files:
                result.shipped_files += 1
                _read(path, query, shipped.host, result, seen)

    def when(record: dict[str, object]) -> tuple[int, int]:
        t = record.get("time_ms")
        return (t if isinstance(t, int) else -1, _RANK.get(str(record.get("type")), 1))

    result.records.sort(key=when)
    return result
