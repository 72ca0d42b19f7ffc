"""`retentiond config show`: every effective key, its value and where it came from.

The store kind lists its keys and their sources (``kinds.show_config``; the kind alone knows
its synonyms); this module only prints them, as a table or, with ``--json``, a list of
``{key, value, source, line, synonym}``.
"""

from __future__ import annotations

import argparse
import sys

from retentiond.commands.common import EXIT_CONFIG, EXIT_OK


def cmd_config_show(args: argparse.Namespace) -> int:
    from retentiond.config.problems import ConfigError
    from retentiond.config.show import render_json, render_text
    from retentiond.kinds import show_config

    try:
        shown = show_config(args.config)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        print(f"{args.config}: configuration refused", file=sys.stderr)
        return EXIT_CONFIG
    if args.json:
        sys.stdout.write(render_json(shown.keys))
    else:
        settings = shown.settings
        header = (
            f"# {settings.source or args.config}: {shown.title}, cluster "
            f"{settings.broker_cluster_name}, broker {settings.broker_name}, config "
            f"{settings.config_hash}"
        )
        sys.stdout.write(render_text(shown.keys, header))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("config", help="show a configuration: every effective key and its source")
    actions = p.add_subparsers(dest="config_command", required=True, metavar="{show}")
    show = actions.add_parser(
        "show",
        help="every effective key, its value and its source (file, default, broker synonym)",
        description="Every key retentiond reads of the file, with its effective value and "
        "where it came from: the file (and its line), the default, or a broker synonym "
        "(Kafka's log.retention.hours standing for log.retention.ms). The broker's other "
        "keys and the content of secret files are never shown. Exit 3 when the file does "
        "not validate (the problems are printed as check-config prints them).",
    )
    show.add_argument(
        "--config", required=True, help="broker.yaml, broker.conf or server.properties"
    )
    show.add_argument("--json", action="store_true", help="a JSON list of {key, value, source}")
    show.set_defaults(func=cmd_config_show)
