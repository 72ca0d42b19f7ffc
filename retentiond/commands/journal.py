"""`retentiond journal`: what was deleted, when and why, from the local and the shipped journal.

The reading is ``retentiond.journal.query``; this module parses the filters and prints a table
(times in the configured zone) or, with ``--json``, the records as journaled, one per line.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from retentiond.commands.common import (
    EXIT_CONFIG,
    EXIT_JOURNAL,
    EXIT_OK,
    EXIT_USAGE,
    journal_dir,
)

if TYPE_CHECKING:
    from retentiond.config.settings import Settings, StoreSection


def _words(values: list[str] | None) -> frozenset[str] | None:
    """Repeated and comma-separated values as one set (None: no filter)."""
    if not values:
        return None
    return frozenset(w.strip() for v in values for w in v.split(",") if w.strip())


def _settings(path: str) -> Settings[StoreSection]:
    """The settings, without checking the store: its journal outlives an unmounted store."""
    from retentiond.config.problems import ConfigError
    from retentiond.kinds import load_settings

    try:
        return load_settings(path, check_store=False)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        print(f"{path}: configuration refused", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def cmd_journal(args: argparse.Namespace) -> int:
    from retentiond.journal.query import RECORD_TYPES, Query, Shipped, parse_when, query_journal

    settings = _settings(args.config)
    zone = ZoneInfo(settings.daemon.timezone) if settings.daemon.timezone else None
    types = _words(args.type) or frozenset({"deletion"})
    if "all" in types:
        types = frozenset(RECORD_TYPES)
    unknown = sorted(types - set(RECORD_TYPES))
    if unknown:
        print(
            f"error: --type {','.join(unknown)}: expected {', '.join(RECORD_TYPES)} or all",
            file=sys.stderr,
        )
        return EXIT_USAGE
    now_ms = time.time_ns() // 1_000_000
    try:
        since = parse_when(args.since, now_ms, zone) if args.since else None
        until = parse_when(args.until, now_ms, zone) if args.until else None
    except ValueError as exc:
        print(f"error: --since/--until {exc}", file=sys.stderr)
        return EXIT_USAGE
    query = Query(
        types=types,
        since_ms=since,
        until_ms=until,
        reasons=_words(args.reason),
        kinds=_words(args.kind),
        file=args.file,
    )
    target = settings.daemon.ship_target
    shipped = None
    if target is not None and not args.local:
        shipped = Shipped(
            Path(target), settings.broker_cluster_name, settings.broker_name, socket.gethostname()
        )
    local = journal_dir(settings)
    result = query_journal(local, shipped, query)

    if args.json:
        for record in result.records:
            sys.stdout.write(json.dumps(record, separators=(",", ":")) + "\n")
    else:
        print(render_table(result.records, zone, settings.daemon.timezone))
    where = f"local journal {local}" + (f" and shipped {target}" if shipped else "")
    if not result.records:
        print(f"no {'/'.join(sorted(types))} records match in the {where}", file=sys.stderr)
    if result.torn:
        print(f"warning: {result.torn} torn journal lines skipped", file=sys.stderr)
    for problem in result.problems:
        print(f"error: {problem}", file=sys.stderr)
    if result.problems:
        print(
            "error: the records above are incomplete: part of the journal could not be read",
            file=sys.stderr,
        )
        return EXIT_JOURNAL
    return EXIT_OK


# --- the table --------------------------------------------------------------------------------


def _zone_label(zone: ZoneInfo | None, name: str | None) -> str:
    if name:
        return name
    return f"local, {time.strftime('%Z')}"


def _when(ms: object, zone: ZoneInfo | None) -> str:
    from datetime import datetime

    if not isinstance(ms, int):
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, zone) if zone else datetime.fromtimestamp(ms / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _loses(record: dict[str, object]) -> str:
    """What the record says the deletion lost (its ``loses`` field), compactly."""
    value = record.get("loses")
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "nothing"
    if isinstance(value, list):
        return f"{len(value)} items" if value else "nothing"
    return str(value)


def _row(record: dict[str, object], zone: ZoneInfo | None) -> list[str]:
    from retentiond.text.units import human_age, human_bytes

    kind = record.get("type")
    if kind in ("round", "round_summary"):
        deleted = record.get("deleted")
        files = nbytes = 0
        if isinstance(deleted, dict):
            for v in deleted.values():
                if isinstance(v, dict):
                    files += int(v.get("files") or 0)
                    nbytes += int(v.get("bytes") or 0)
        what = (
            f"{record.get('rounds')} idle rounds"
            if kind == "round_summary"
            else f"round: {files} files deleted" + (" (manual)" if record.get("manual") else "")
        )
        return [
            _when(record.get("time_ms"), zone),
            str(kind),
            "-",
            "-",
            human_bytes(nbytes) if nbytes else "-",
            "-",
            "-",
            "-",
            what,
        ]
    size = record.get("bytes")
    age = record.get("age_ms")
    reason = record.get("reason") or (record.get("error") and "error: " + str(record["error"]))
    return [
        _when(record.get("time_ms"), zone),
        str(kind),
        str(record.get("kind") or "-"),
        str(reason or "-"),
        human_bytes(size) if isinstance(size, int) else "-",
        human_age(age) if isinstance(age, int) else "-",
        "yes" if record.get("forced") else "no" if "forced" in record else "-",
        _loses(record),
        str(record.get("file") or "-"),
    ]


def render_table(
    records: list[dict[str, object]], zone: ZoneInfo | None, zone_name: str | None
) -> str:
    """One line per record, oldest first; the TYPE column only when several types show, the
    LOSES column only when a record says what it lost."""
    from retentiond.text.units import human_bytes

    header = [
        f"TIME ({_zone_label(zone, zone_name)})",
        "TYPE",
        "KIND",
        "REASON",
        "SIZE",
        "AGE",
        "FORCED",
        "LOSES",
        "FILE",
    ]
    rows = [_row(r, zone) for r in records]
    keep = [True] * len(header)
    keep[1] = len({r.get("type") for r in records}) > 1
    keep[7] = any("loses" in r for r in records)
    table = [[c for c, k in zip(row, keep, strict=True) if k] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]
    deletions = [r for r in records if r.get("type") == "deletion"]
    if deletions:
        total = sum(b for r in deletions if isinstance(b := r.get("bytes"), int))
        forced = sum(1 for r in deletions if r.get("forced"))
        lines.append(
            f"{len(deletions)} deletions, {human_bytes(total)}"
            + (f", {forced} forced" if forced else "")
        )
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "journal",
        help="query the deletion journal, local and shipped: what was deleted, when and why",
        description="Records of the local journal (retentiond.journal.dir) and, when "
        "retentiond.ship.target is set, this broker's shipped records written on this host; "
        "deletion records unless --type says otherwise; oldest first.",
    )
    p.add_argument(
        "--config",
        required=True,
        help="the broker's config (broker.yaml, broker.conf or "
        "server.properties): names the journal, the ship target, the zone",
    )
    p.add_argument(
        "--since",
        help="from then on: 2024-05-01, 2024-05-01T12:30[+02:00], or 30m, 2h, 7d, 1w "
        "ago (a time without offset is in retentiond.timezone)",
    )
    p.add_argument("--until", help="before then (same forms as --since)")
    p.add_argument(
        "--reason", action="append", help="only these reasons (repeat or comma-separate)"
    )
    p.add_argument(
        "--kind",
        action="append",
        help="only these file kinds: commitlog, consumequeue, index, kafka_segment",
    )
    p.add_argument(
        "--file",
        help="only files whose path contains this (or matches it, as a glob on the "
        "path or the name, when it has * ? [)",
    )
    p.add_argument(
        "--type",
        action="append",
        help="record types: deletion (default), intent, abort, round, round_summary, or all",
    )
    p.add_argument("--local", action="store_true", help="the local journal only, not shipped")
    p.add_argument("--json", action="store_true", help="the records as journaled, one per line")
    p.set_defaults(func=cmd_journal)
