"""`retentiond check-config` and `retentiond gen-store`: a configuration and a store."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from retentiond.commands.common import (
    EXIT_JOURNAL,
    EXIT_OK,
    EXIT_STORE,
    EXIT_USAGE,
    journal_dir,
    read_settings_or_exit,
)


def cmd_check_config(args: argparse.Namespace) -> int:
    """Exit 3 for a configuration wrong in itself, else 4 when its store cannot be used now
    (missing, unmounted, unreadable: the daemon would start and retry it every round), else 6
    when the journal directory cannot be used (the daemon and ``once`` would exit 6): what
    the daemon would meet, found without creating anything."""
    from retentiond.journal.place import unusable

    settings, store_errors = read_settings_or_exit(args.file)
    for problem in store_errors:
        print(f"error: {problem}", file=sys.stderr)
    directory = journal_dir(settings)
    journal = unusable(directory)
    if journal is not None:
        print(f"error: journal directory {directory}: {journal}", file=sys.stderr)
    if store_errors:
        print(
            f"{args.file}: the store cannot be used now (a store error: `once` and `plan` "
            "exit 4, the daemon starts and retries every round)",
            file=sys.stderr,
        )
        return EXIT_STORE
    if journal is not None:
        print(
            f"{args.file}: the journal cannot be used (the daemon and `once` exit 6)",
            file=sys.stderr,
        )
        return EXIT_JOURNAL
    print(
        f"{args.file}: ok (config {settings.config_hash}, {settings.store.kind_name} store "
        f"{settings.store_label})"
    )
    return EXIT_OK


def _topics(text: str) -> dict[str, int]:
    """``--topics orders:3,clicks:2`` → {"orders": 3, "clicks": 2}."""
    out: dict[str, int] = {}
    for item in text.split(","):
        name, _, count = item.strip().partition(":")
        if not name or (count and not count.isdigit()) or (count and int(count) < 1):
            raise argparse.ArgumentTypeError(f"{item!r}: expected topic or topic:partitions")
        out[name] = int(count) if count else 1
    return out


def _not_empty(path: Path) -> str | None:
    """Why ``gen-store`` may not write into ``path`` (None: it may): a generated store never
    mixes with files already there."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink() or not path.is_dir():
        return "it exists and is not a directory"
    try:
        with os.scandir(path) as entries:
            if next(entries, None) is not None:
                return "the directory is not empty"
    except OSError as exc:
        return f"cannot list it: {exc.strerror}"
    return None


def cmd_gen_store(args: argparse.Namespace) -> int:
    from retentiond.storegen import GenStoreRefused, GenStoreRequest, generator

    why = _not_empty(Path(args.dir))
    if why is not None:
        print(
            f"error: gen-store {args.dir}: {why}; give a new or empty directory "
            "(nothing was written)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from retentiond.commands.progress import Progress

    with Progress("retentiond gen-store") as progress:
        request = GenStoreRequest(
            dir=Path(args.dir),
            preset=args.preset,
            messages=args.messages,
            file_size=args.file_size,
            oldest_hours=args.oldest_hours,
            topics=args.topics,
            sparse=args.sparse,
            config_out=Path(args.config_out) if args.config_out else None,
            progress=progress.report if progress.enabled else None,
        )
        try:
            lines = generator(args.kind)(request)
        except GenStoreRefused as exc:
            progress.close()
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    for line in lines:
        print(line)
    return EXIT_OK


def _store_kinds() -> tuple[str, ...]:
    from retentiond.storegen import kinds

    return kinds()


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("check-config", help="validate a configuration file and its store")
    p.add_argument("file", help="broker.yaml, broker.conf or Kafka's server.properties")
    p.set_defaults(func=cmd_check_config)

    p = sub.add_parser("gen-store", help="generate a realistic store (tests, demo, bench)")
    p.add_argument("dir")
    p.add_argument(
        "--kind",
        choices=_store_kinds(),
        default=_store_kinds()[0],
        help="a RocketMQ store (default) or a Kafka log dir",
    )
    p.add_argument("--preset", default="demo", help="RocketMQ: the storegen preset")
    p.add_argument("--messages", type=int, help="messages (Kafka: records per partition)")
    p.add_argument(
        "--file-size",
        type=int,
        help="mappedFileSizeCommitLog in bytes (Kafka: segment.bytes)",
    )
    p.add_argument("--oldest-hours", type=float, help="age of the oldest file (record)")
    p.add_argument("--topics", type=_topics, help="Kafka: topic:partitions,... ")
    p.add_argument("--sparse", action="store_true", help="sparse files for very large stores")
    p.add_argument(
        "--config-out",
        help="also write a matching broker.yaml (Kafka: server.properties) here",
    )
    p.set_defaults(func=cmd_gen_store)
