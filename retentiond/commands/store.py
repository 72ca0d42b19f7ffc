"""`retentiond check-config` and `retentiond gen-store`: a configuration and a store."""

from __future__ import annotations

import argparse
from pathlib import Path

from retentiond.commands.common import EXIT_OK, load_settings_or_exit


def cmd_check_config(args: argparse.Namespace) -> int:
    settings = load_settings_or_exit(args.file)
    print(
        f"{args.file}: ok (config {settings.config_hash}, {settings.store_kind} store "
        f"{settings.store_label})"
    )
    return EXIT_OK


def cmd_gen_store(args: argparse.Namespace) -> int:
    import dataclasses

    from retentiond.storegen.rocketmq import PRESETS, generate_store, write_config

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


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
