"""The command line: one module per command group, each with ``register(subparsers)``.

Argument parsing only; every command calls into the packages that do the work. The entry point
``retentiond.cli`` builds this parser and nothing imports it.

A run imports only the group of the command it names (``retentiond plan`` loads neither the
shipping nor the Spark modules): start-up is part of every CLI call's time. Help, a usage error
or a command missing from ``_GROUP_OF`` registers every group, so each still works as before;
a usage message names every command either way (the choices' metavar lists ``_GROUP_OF``).

The global options (``--log-level``, ``--log-format``) are accepted before the command and
after it: every command's parser has them too, without defaults of its own, so a value given
after the command wins and one given before it stays when none is.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

from retentiond import __version__

GROUPS = (
    "rounds",
    "rescue",
    "store",
    "config",
    "daemon",
    "ship",
    "journal",
    "analyze",
)  # modules of retentiond.commands
_GROUP_OF = {
    "once": "rounds",
    "plan": "rounds",
    "rescue": "rescue",
    "check-config": "store",
    "gen-store": "store",
    "config": "config",
    "run": "daemon",
    "trigger-delete": "daemon",
    "status": "daemon",
    "ship": "ship",
    "journal": "journal",
    "analyze": "analyze",
}
_TAKES_VALUE = ("--log-format", "--log-level")  # the global options that take a value
LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def log_level(text: str) -> str:
    """``--log-level``: a level name in any case; anything else is a usage error (exit 2)."""
    if text.lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a log level (choose from {', '.join(LOG_LEVELS)})"
        )
    return text.upper()


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The global options; on a command's parser without defaults (``SUPPRESS``), so that
    they override the top-level values only when given after the command."""
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="auto" if defaults else argparse.SUPPRESS,
        help="log lines as JSON, as readable text, or JSON unless stderr is a terminal (auto)",
    )
    parser.add_argument(
        "--log-level",
        type=log_level,
        default="INFO" if defaults else argparse.SUPPRESS,
        metavar="{" + ",".join(LOG_LEVELS) + "}",
        help="the lowest level logged (default info)",
    )


def command_in(argv: Sequence[str]) -> str | None:
    """The command word of a command line (None when help or the version comes first)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _TAKES_VALUE:
            skip = True
        elif not arg.startswith("-"):
            return arg
        elif not arg.startswith(tuple(f"{o}=" for o in _TAKES_VALUE)):
            return None  # -h, --version, or something argparse will refuse
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with only the named command's group when ``argv`` names a known one."""
    parser = argparse.ArgumentParser(
        prog="retentiond",
        description="Retention daemon for RocketMQ stores and Kafka log dirs: deletes what "
        "the broker's own retention would, safely, from outside the broker.",
    )
    parser.add_argument("--version", action="version", version=f"retentiond {__version__}")
    _add_global_options(parser, defaults=True)
    # Every command in the usage, also when only one group is registered below.
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="{" + ",".join(_GROUP_OF) + "}"
    )

    group = _GROUP_OF.get(command_in(argv) or "") if argv is not None else None
    for name in (group,) if group else GROUPS:
        importlib.import_module(f"retentiond.commands.{name}").register(sub)
    for command_parser in sub.choices.values():
        _add_global_options(command_parser, defaults=False)
        for action in command_parser._actions:  # a command's own commands (`config show`)
            if isinstance(action, argparse._SubParsersAction):
                for nested in action.choices.values():
                    _add_global_options(nested, defaults=False)
    return parser
