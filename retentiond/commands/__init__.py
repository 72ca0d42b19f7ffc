"""The command line: one module per command group, each with ``register(subparsers)``.

Argument parsing only; every command calls into the packages that do the work. The entry point
``retentiond.cli`` builds this parser and nothing imports it.
"""

from __future__ import annotations

import argparse

from retentiond import __version__
from retentiond.commands import analyze, daemon, rounds, ship, store


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="retentiond",
        description="Retention daemon for RocketMQ stores: deletes what the broker's own "
        "cleaner would, safely, from outside the broker.",
    )
    parser.add_argument("--version", action="version", version=f"retentiond {__version__}")
    parser.add_argument("--log-format", choices=("auto", "json", "console"), default="auto")
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    for group in (rounds, store, daemon, ship, analyze):
        group.register(sub)
    return parser
