"""`retentiond ship`: copy closed journal segments to the fleet target once, by hand."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from retentiond.commands.common import (
    EXIT_OK,
    EXIT_SHIP_FAILED,
    EXIT_USAGE,
    journal_dir,
    load_settings_or_exit,
)
from retentiond.journal.ship import ship_once


def _active_bytes(directory: Path) -> int:
    """Bytes in the journal's active (highest) segment: what only ``--flush`` ships now."""
    from retentiond.journal.writer import list_segments

    try:
        segments = list_segments(directory)
        return segments[-1][1].stat().st_size if segments else 0
    except OSError:
        return 0


def cmd_ship(args: argparse.Namespace) -> int:
    if args.target is not None and not Path(args.target).is_absolute():
        print(
            f"error: --target {args.target}: must be an absolute path, as "
            "retentiond.ship.target is (the fleet's layout is found under it)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    settings = load_settings_or_exit(args.config)
    target = Path(args.target) if args.target else settings.daemon.ship_target
    if target is None:
        print(
            "error: no target: set retentiond.ship.target in the config or pass --target",
            file=sys.stderr,
        )
        return EXIT_USAGE
    directory = journal_dir(settings)
    if not directory.is_dir():
        print(f"nothing to ship: no journal at {directory}")
        return EXIT_OK
    started = time.monotonic()
    d = settings.daemon
    result = ship_once(
        directory,
        target,
        max_local_bytes=d.ship_max_local_bytes,
        max_segment_age_ms=d.journal_max_segment_age_ms,
        flush=args.flush,
        layout=d.ship_layout,
    )
    if result.busy:
        print(
            "error: another shipper (the daemon's job) is running on this journal; nothing was "
            "shipped, try again",
            file=sys.stderr,
        )
        return EXIT_SHIP_FAILED
    kept = f"{result.backlog_segments} closed segments ({result.backlog_bytes} bytes)"
    active = _active_bytes(directory)
    if result.shipped_segments or not result.error:
        print(
            f"shipped {result.shipped_segments} segments ({result.shipped_records} records, "
            f"{result.files_written} files) to {target} in {time.monotonic() - started:.2f}s; "
            f"{kept} kept locally"
        )
    if result.reconciled:
        print(f"reconciled {result.reconciled} intents of writers that died before their outcome")
    if result.waiting_segments:
        print(
            f"kept {result.waiting_segments} closed segments: they hold an intent of a running "
            "writer without its outcome yet (shipped by a later pass)"
        )
    if not result.error and not args.flush and active:
        print(
            f"the active segment ({active} bytes) was not shipped: it closes after "
            "retentiond.journal.maxSegmentAge; pass --flush to close and ship it now"
        )
    if result.torn_lines:
        print(f"warning: {result.torn_lines} torn journal lines skipped", file=sys.stderr)
    if result.dropped_segments:
        print(
            f"error: dropped {result.dropped_segments} unshipped segments "
            f"({result.dropped_records} records) to stay within retentiond.ship.maxLocalBytes",
            file=sys.stderr,
        )
    if result.error:
        shipped = (
            f"shipped {result.shipped_segments} segments before it"
            if result.shipped_segments
            else "nothing was shipped"
        )
        also = f" and the active segment ({active} bytes)" if active else ""
        print(
            f"error: {result.error}; {shipped}; {kept}{also} stay in {directory}", file=sys.stderr
        )
        return EXIT_SHIP_FAILED
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "ship", help="ship closed journal segments to retentiond.ship.target once, now"
    )
    p.add_argument(
        "--config", required=True, help="broker.yaml, broker.conf or Kafka's server.properties"
    )
    p.add_argument(
        "--target", help="ship here (an absolute path) instead of retentiond.ship.target"
    )
    p.add_argument(
        "--flush",
        action="store_true",
        help="close the active segment first, so everything journaled so far ships",
    )
    p.set_defaults(func=cmd_ship)
