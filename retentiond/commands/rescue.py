"""`retentiond rescue`: get a stopped broker whose disk is full running again.

The kind does the work (``engine.rescue.Rescues``: Kafka); this module parses, refuses what
it must, runs one round through the engine (a dry run or a real one, the same code) and maps
the kind's report to the exit codes of the README's table: 2 for a usage error or a kind
without rescue, 8 while a broker holds a store directory's lock (nothing deleted), 9 when a
target was not reached, 4 and 5 as for ``once``.
"""

from __future__ import annotations

import argparse
import json
import sys

from retentiond.commands.common import (
    EXIT_BROKER_RUNNING,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_STORE,
    EXIT_TARGET_MISSED,
    EXIT_USAGE,
    load_settings_or_exit,
    open_journal,
    without_collector,
)


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a ratio (say 0.80)") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a ratio between 0 and 1 (say 0.80)")
    return value


def _size(text: str) -> int:
    from retentiond.text.units import parse_bytes

    try:
        value = parse_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size above 0")
    return value


def cmd_rescue(args: argparse.Namespace) -> int:
    # One round, one report, then exit, as ``plan``: the round's objects (one per segment)
    # live until the report is printed.
    with without_collector(args):
        return _rescue(args)


def _rescue(args: argparse.Namespace) -> int:
    from retentiond.engine import forked
    from retentiond.engine.cleaner import Cleaner
    from retentiond.engine.rescue import RescueRequest, Rescues
    from retentiond.kinds import kind_for

    if (args.target_ratio is None) == (args.free is None):
        print("error: rescue takes exactly one of --target-ratio and --free", file=sys.stderr)
        return EXIT_USAGE
    settings = load_settings_or_exit(args.config)
    kind = kind_for(settings)
    if not isinstance(kind, Rescues):
        print(f"error: rescue is not available for {kind.product}", file=sys.stderr)
        return EXIT_USAGE
    held = kind.held_store_dirs()
    if held:
        for d in held:
            print(
                f"{d}: another process (the broker) holds its .lock: rescue runs only on a "
                "stopped broker; nothing was deleted",
                file=sys.stderr,
            )
        return EXIT_BROKER_RUNNING
    request = RescueRequest(args.target_ratio, args.free, args.beyond_retention)
    dry_run = args.dry_run or settings.daemon.dry_run  # retentiond.dryRun holds here too
    journal = None if dry_run else open_journal(settings)
    kind.begin_rescue(request)
    cleaner = Cleaner(kind, journal=journal, announce_proc_view=False)
    try:
        # a one-off process: a kind may share its deciding with a forked child; the deletions
        # stay here, in order, journaled first
        with forked.one_off():
            result = cleaner.run_round(dry_run=dry_run)
    finally:
        if journal is not None:
            journal.close()
    report = kind.rescue_report()
    if journal is None:
        # a dry run wrote nothing: the process may end without freeing what it built (see
        # cli.main), the plan and the selection of a large store, object by object
        args.exit_without_teardown = (cleaner, result, report)
    if args.json:
        json.dump({**report.document, "held": list(report.held)}, sys.stdout, indent=2)
        print()
    elif report.lines:
        sys.stdout.write("\n".join(report.lines) + "\n")  # one write: 20,000 lines and more
    if report.held:
        return EXIT_BROKER_RUNNING
    errors = result.plan.store_errors()
    for err in errors:
        print(f"error: {err}", file=sys.stderr)
    for o in result.failed:
        print(f"NOT deleted: {o.decision.path}: {o.error}", file=sys.stderr)
    if errors:
        return EXIT_STORE
    if result.failed:
        return EXIT_PARTIAL
    return EXIT_OK if report.reached else EXIT_TARGET_MISSED


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "rescue",
        help="free space on a stopped broker's full disk: leftovers, the configured "
        "retention, then (--beyond-retention) the oldest segments",
    )
    p.add_argument("--config", required=True, help="the broker's config (server.properties)")
    p.add_argument(
        "--target-ratio", type=_ratio, help="free until the disk's used ratio is at most this"
    )
    p.add_argument("--free", type=_size, help="free until this much is available (50GiB)")
    p.add_argument(
        "--beyond-retention",
        action="store_true",
        help="if the configured retention is not enough, delete the oldest segments past it",
    )
    p.add_argument("--dry-run", action="store_true", help="print what would go, delete nothing")
    p.add_argument("--json", action="store_true", help="the steps and items as JSON")
    p.set_defaults(func=cmd_rescue)
