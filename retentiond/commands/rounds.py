"""`retentiond once` and `retentiond plan`: one round, or what one would do now."""

from __future__ import annotations

import argparse
import json
import sys

from retentiond.commands.common import (
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_STORE,
    load_settings_or_exit,
    open_journal,
    without_collector,
)
from retentiond.kinds import kind_for


def cmd_once(args: argparse.Namespace) -> int:
    from retentiond.commands.progress import Progress, RoundProgress
    from retentiond.engine.cleaner import Cleaner
    from retentiond.text.units import human_bytes

    settings = load_settings_or_exit(args.config)
    dry_run = args.dry_run or settings.daemon.dry_run
    journal = None if dry_run else open_journal(settings)
    cleaner = Cleaner(kind_for(settings), journal=journal)
    with Progress("retentiond once") as progress:
        if progress.enabled:
            cleaner.add_listener(RoundProgress(progress))
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
        print(cleaner.kind.render_plan(plan))
        print("dry run: nothing was deleted")
    else:
        notes = cleaner.kind.plan_only_notes(plan)
        if notes:
            # nothing may go there (Kafka: while the broker runs): say what would, and why not
            print(cleaner.kind.render_plan(plan))
            for note in notes:
                print(note)
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
    if plan.store_errors():
        # Kafka: an unreadable metadata log keeps only the topics it would have named
        # (unless unknownTopics is brokerDefaults); the rest of the round may have deleted
        scope = (
            "nothing was deleted from this store"
            if not result.deleted
            else ("what it concerns was kept; the round's deletions are listed above")
        )
        for err in plan.store_errors():
            if err:
                print(f"error: {err}; {scope}", file=sys.stderr)
        return EXIT_STORE
    return EXIT_PARTIAL if result.failed else EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    # One scan, one document, then exit: a 100k-queue plan holds 100k+ long-lived records, and
    # the cyclic collector's full passes over them cost a fifth of the scan.
    with without_collector(args):
        return _plan(args)


def _plan(args: argparse.Namespace) -> int:
    from retentiond.commands.progress import Progress
    from retentiond.engine import forked
    from retentiond.engine.cleaner import Cleaner

    settings = load_settings_or_exit(args.config)
    # An incomplete view of /proc (a VM's init) is said only where it changed the plan.
    cleaner = Cleaner(kind_for(settings), announce_proc_view=False)
    # a one-off process: a kind may share its work with a forked child (never in a daemon)
    with (
        Progress("retentiond plan") as progress,
        forked.one_off(whole_plan=args.json or args.all),
    ):
        progress.update("scanning and planning the store")
        plan = cleaner.plan(manual=args.manual)
        progress.update("writing the plan")
        if sys.stdout.isatty():
            progress.close()  # the plan goes to the same terminal: no line drawn over it
        if args.json:
            as_document = getattr(plan, "as_document", None)  # streamed when the kind can
            if as_document is not None:
                from retentiond.text import jsonstream

                jsonstream.dump(as_document(), sys.stdout)
            else:
                json.dump(plan.as_dict(), sys.stdout, indent=2)
            print()
        else:
            text = cleaner.kind.render_plan(plan, all_queue_files=args.all)
            progress.close()
            print(text)
    doubt = cleaner.proc_view_doubt()
    if doubt is not None:
        print(f"note: {doubt}", file=sys.stderr)
    args.exit_without_teardown = (cleaner, plan)  # see cli.main: the process ends with these
    return EXIT_STORE if plan.store_errors() else EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("once", help="run exactly one cleaning round, as the daemon would")
    p.add_argument(
        "--config", required=True, help="broker.yaml, broker.conf or Kafka's server.properties"
    )
    p.add_argument("--dry-run", action="store_true", help="plan the round, delete nothing")
    p.add_argument("--manual", action="store_true", help="make it a manual-delete round")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=cmd_once)

    p = sub.add_parser("plan", help="show what a round would do now, with every verdict")
    p.add_argument(
        "--config", required=True, help="broker.yaml, broker.conf or Kafka's server.properties"
    )
    p.add_argument("--manual", action="store_true", help="plan a manual-delete round")
    p.add_argument("--json", action="store_true", help="the versioned plan document")
    p.add_argument("--all", action="store_true", help="list every consume-queue file")
    p.set_defaults(func=cmd_plan)
