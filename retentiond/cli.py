"""Command-line entry points. Argument parsing only: each command calls one function.

Exit codes (also in the README):
  0  success (an empty plan is success)
  1  internal error
  2  usage error
  3  configuration invalid: nothing was deleted
  4  store error: a store path could not be read or measured; nothing was deleted
  5  the round ran but some planned deletions did not happen (re-check or unlink failed)
  6  the journal could not be opened: nothing was deleted
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_STORE = 4
EXIT_PARTIAL = 5
EXIT_JOURNAL = 6


def _load(path: str):
    from retentiond.config import ConfigError, load_settings

    try:
        return load_settings(path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        print(f"{path}: configuration refused; nothing was deleted", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def journal_dir(settings) -> Path:
    """The configured journal directory, else a default off the store's filesystem
    (``$STATE_DIRECTORY/journal`` or /var/lib/retentiond/journal first; see journal_place)."""
    from retentiond.journal_place import default_journal_dir

    if settings.daemon.journal_dir is not None:
        return Path(settings.daemon.journal_dir)
    return default_journal_dir(settings)


def open_journal(settings):
    from retentiond.journal import Journal, Origin

    origin = Origin.local(
        settings.broker_cluster_name, settings.broker_name, str(settings.store_path_root_dir)
    )
    directory = journal_dir(settings)
    try:
        return Journal(
            directory,
            origin,
            max_segment_bytes=settings.daemon.journal_max_segment_bytes,
            max_segment_age_ms=settings.daemon.journal_max_segment_age_ms,
        )
    except OSError as exc:
        print(f"error: journal directory {directory}: {exc}; nothing was deleted", file=sys.stderr)
        raise SystemExit(EXIT_JOURNAL) from None


def cmd_once(args: argparse.Namespace) -> int:
    from retentiond.cleaner import Cleaner
    from retentiond.report import human_bytes, render_plan

    settings = _load(args.config)
    dry_run = args.dry_run or settings.daemon.dry_run
    journal = None if dry_run else open_journal(settings)
    cleaner = Cleaner(settings, journal=journal)
    result = cleaner.run_round(manual=args.manual, dry_run=dry_run)
    plan = result.plan
    if args.json:
        doc = plan.as_dict(all_queue_files=False)
        doc["type"] = "round"
        doc["deleted"] = result.counts()
        doc["failures"] = [
            {"file": o.decision.path, "error": o.error, "cause": o.cause} for o in result.failed
        ]
        json.dump(doc, sys.stdout, indent=2)
        print()
    elif dry_run:
        print(render_plan(plan))
        print("dry run: nothing was deleted")
    else:
        for o in result.outcomes:
            state = "deleted" if o.deleted else f"NOT deleted ({o.error})"
            print(f"{state}: {o.decision.path} [{o.decision.reason}]")
        counts = result.counts()
        summary = ", ".join(
            f"{kind} {c['files']} files {human_bytes(c['bytes'])}" for kind, c in counts.items()
        )
        print(f"round done in {result.duration_s:.2f}s: {summary}")
    if journal is not None:
        journal.close()
    if plan.errors or plan.commitlog.triggers.error:
        for err in [*plan.errors, plan.commitlog.triggers.error]:
            if err:
                print(f"error: {err}; nothing was deleted from this store", file=sys.stderr)
        return EXIT_STORE
    return EXIT_PARTIAL if result.failed else EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    from retentiond.cleaner import Cleaner
    from retentiond.report import render_plan

    settings = _load(args.config)
    plan = Cleaner(settings).plan(manual=args.manual)
    if args.json:
        json.dump(plan.as_dict(), sys.stdout, indent=2)
        print()
    else:
        print(render_plan(plan, all_queue_files=args.all))
    return EXIT_STORE if plan.errors or plan.commitlog.triggers.error else EXIT_OK


def cmd_check_config(args: argparse.Namespace) -> int:
    settings = _load(args.file)
    print(f"{args.file}: ok (config {settings.config_hash}, store {settings.store_path_root_dir})")
    return EXIT_OK


def cmd_gen_store(args: argparse.Namespace) -> int:
    import dataclasses

    from retentiond.storegen import PRESETS, generate_store, write_config

    spec = PRESETS[args.preset]
    overrides: dict[str, object] = {"sparse": True} if args.sparse else {}
    if args.messages is not None:
        overrides["messages"] = args.messages
    if args.file_size is not None:
        overrides["commitlog_file_size"] = args.file_size
    if args.oldest_hours is not None:
        overrides["oldest_age_hours"] = args.oldest_hours
    spec = dataclasses.replace(spec, **overrides)
    root = Path(args.dir).absolute()
    store = generate_store(root, spec)
    print(f"generated store at {root}: {store.summary()}")
    if args.config_out:
        path = write_config(root, spec, Path(args.config_out).absolute())
        print(f"wrote config {path}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    from retentiond import __version__

    parser = argparse.ArgumentParser(
        prog="retentiond",
        description="Retention daemon for RocketMQ stores: deletes what the broker's own "
        "cleaner would, safely, from outside the broker.",
    )
    parser.add_argument("--version", action="version", version=f"retentiond {__version__}")
    parser.add_argument("--log-format", choices=("auto", "json", "console"), default="auto")
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("once", help="run exactly one cleaning round, as the daemon would")
    p.add_argument("--config", required=True, help="broker.yaml or broker.conf")
    p.add_argument("--dry-run", action="store_true", help="plan the round, delete nothing")
    p.add_argument("--manual", action="store_true", help="make it a manual-delete round")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=cmd_once)

    p = sub.add_parser("plan", help="show what a round would do now, with every verdict")
    p.add_argument("--config", required=True)
    p.add_argument("--manual", action="store_true", help="plan a manual-delete round")
    p.add_argument("--json", action="store_true", help="the versioned plan document")
    p.add_argument("--all", action="store_true", help="list every consume-queue file")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("check-config", help="validate a configuration file and its store")
    p.add_argument("file")
    p.set_defaults(func=cmd_check_config)

    p = sub.add_parser("gen-store", help="generate a realistic store (tests, demo, bench)")
    p.add_argument("dir")
    p.add_argument("--preset", default="demo")
    p.add_argument("--messages", type=int)
    p.add_argument("--file-size", type=int, help="mappedFileSizeCommitLog in bytes")
    p.add_argument("--oldest-hours", type=float, help="age of the oldest file")
    p.add_argument("--sparse", action="store_true", help="sparse files for very large stores")
    p.add_argument("--config-out", help="also write a matching broker.yaml here")
    p.set_defaults(func=cmd_gen_store)
    from retentiond.daemon import commands as daemon_commands  # run, trigger-delete, status

    daemon_commands.register(sub)
    from retentiond import ship
    from retentiond.analytics import cli as analytics_cli  # imports no pyspark until it runs

    ship.register(sub)
    analytics_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from retentiond.observe.logging import configure

    parser = build_parser()
    args = parser.parse_args(argv)
    fmt = args.log_format
    configure(json=None if fmt == "auto" else fmt == "json", level=args.log_level)
    try:
        return args.func(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
