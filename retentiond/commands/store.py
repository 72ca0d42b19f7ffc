"""`retentiond check-config` and `retentiond gen-store`: a configuration and a store."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from retentiond.commands.common import EXIT_OK, EXIT_USAGE, load_settings_or_exit


def cmd_check_config(args: argparse.Namespace) -> int:
    settings = load_settings_or_exit(args.file)
    print(
        f"{args.file}: ok (config {settings.config_hash}, {settings.store_kind} store "
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


def _gen_kafka(args: argparse.Namespace) -> int:
    """A realistic Kafka log dir (storegen/kafka.py) whose newest data is now, and with
    ``--config-out`` a server.properties pointing at it."""
    import dataclasses
    import time

    from retentiond.commands.progress import Progress
    from retentiond.storegen.kafka import (
        KafkaStoreSpec,
        generate_kafka_store,
        write_server_properties,
    )

    if args.sparse:
        print("error: --sparse is for RocketMQ stores", file=sys.stderr)
        return EXIT_USAGE
    spec = KafkaStoreSpec(now_ms=int(time.time() * 1000))
    overrides: dict[str, object] = {}
    if args.topics is not None:
        overrides["topics"] = args.topics
    if args.messages is not None:
        overrides["records_per_partition"] = args.messages
    if args.file_size is not None:
        overrides["segment_bytes"] = args.file_size
    if args.oldest_hours is not None:
        overrides["span_ms"] = int(args.oldest_hours * 3_600_000)
    spec = dataclasses.replace(spec, **overrides)  # type: ignore[arg-type]
    log_dir = Path(args.dir).absolute()
    with Progress("retentiond gen-store") as progress:
        store = generate_kafka_store(log_dir, spec, progress.report if progress.enabled else None)
    segments = sum(len(s) for s in store.partitions.values())
    print(
        f"generated Kafka log dir at {log_dir}: {len(spec.topics)} topics, "
        f"{len(store.partitions)} partitions, {segments} segments, checkpoints, a KRaft "
        "metadata log with the topic overrides"
    )
    if args.config_out:
        path = write_server_properties(Path(args.config_out).absolute(), [log_dir])
        print(f"wrote config {path}")
    return EXIT_OK


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
    import dataclasses

    why = _not_empty(Path(args.dir))
    if why is not None:
        print(
            f"error: gen-store {args.dir}: {why}; give a new or empty directory "
            "(nothing was written)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.kind == "kafka":
        return _gen_kafka(args)

    from retentiond.commands.progress import Progress
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
    with Progress("retentiond gen-store") as progress:
        store = generate_store(root, spec, progress.report if progress.enabled else None)
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
    p.add_argument(
        "--kind",
        choices=("rocketmq", "kafka"),
        default="rocketmq",
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
