"""`retentiond run`, `trigger-delete` and `status`: the daemon's three CLI commands.

``register(subparsers)`` adds them to the parser; each command is one function. The two
client commands find the daemon from the same ``--config`` the service was started with, and
keep working while that file holds an edit the daemon refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from retentiond.commands.common import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    load_settings_or_exit,
    open_journal,
)


def _client_target(config: str) -> tuple[list[Path], str | None]:
    """Where to look for the daemon of ``config``, and the hash of the settings the file holds
    now. For a file that does not validate: the places its raw text names (or the defaults)
    and no hash, with a note, because a refused edit is exactly when an operator runs
    `status`."""
    from retentiond.config.loader import read_config_file
    from retentiond.config.problems import ConfigError
    from retentiond.daemon import control
    from retentiond.kinds import load_settings

    path = Path(config).absolute()
    try:
        read_config_file(path)
    except ConfigError as exc:
        # No file to read (or no right to): a daemon started with it may still answer, found
        # by the path alone; say what is wrong with the file, not that it "does not validate".
        for problem in exc.problems:
            print(f"note: {problem}", file=sys.stderr)
        return control.client_socket_paths(path, None), None
    try:
        settings = load_settings(path, check_store=False)
    except ConfigError:
        print(
            f"note: {config} does not validate; the daemon keeps its last good settings",
            file=sys.stderr,
        )
        return control.client_socket_paths(path, None), None
    return control.client_socket_paths(path, settings), settings.config_hash


def cmd_run(args: argparse.Namespace) -> int:
    from retentiond.daemon.reload import ConfigWatcher
    from retentiond.daemon.service import Daemon

    config = Path(args.config).absolute()
    watcher = ConfigWatcher(config)  # before loading: an edit in between is still a change
    settings = load_settings_or_exit(str(config))
    journal = open_journal(settings)  # opened even for dryRun: a reload may turn it off
    daemon = Daemon(config, settings, journal=journal, watcher=watcher, dry_run=args.dry_run)
    return daemon.run()


def _ask(args: argparse.Namespace, command: str) -> dict[str, object] | None:
    """The reply of the daemon serving this very file (its real path), or None (exit 7) when
    none answers, a daemon serving another file included: that one is asked nothing."""
    from retentiond.daemon import control

    places, file_hash = _client_target(args.config)
    real = control.real_config_path(Path(args.config).absolute())
    try:
        if command != "status":
            # A command that acts goes only to a daemon that first said, read-only, that it
            # serves this very file: one that says nothing (an older retentiond on a shared
            # default path) might serve another broker's.
            probe = control.ask(places, "status", config=real)
            if not probe.daemon:
                print(
                    f"error: the daemon on {probe.path} does not say which configuration it "
                    f"serves (an older retentiond?): nothing was asked of it; restart it with "
                    "this version first",
                    file=sys.stderr,
                )
                return None
            places = [probe.path]
        answer = control.ask(places, command, config=real)
    except control.ControlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    running = answer.daemon.get("config_hash")
    if not answer.daemon:
        print(
            f"warning: the daemon on {answer.path} does not say which configuration it serves "
            "(an older retentiond?)",
            file=sys.stderr,
        )
    elif file_hash is not None and running != file_hash:
        print(
            f"warning: the daemon (pid {answer.daemon.get('pid')}) runs settings {running}, "
            f"but {real} now holds {file_hash}: a reload was refused or is still to come "
            "(see the config lines of `retentiond status`)",
            file=sys.stderr,
        )
    return answer.result


def cmd_trigger_delete(args: argparse.Namespace) -> int:
    reply = _ask(args, "trigger-delete")
    if reply is None:
        return EXIT_UNREACHABLE
    from retentiond.kinds import DEFAULT_VOICE, voice_named

    voice = voice_named(reply.get("store_kind")) or DEFAULT_VOICE
    print(voice.manual_request_text(reply.get("manual_rounds")))
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from retentiond.daemon.statustext import render

    reply = _ask(args, "status")
    if reply is None:
        return EXIT_UNREACHABLE
    if args.json:
        json.dump(reply, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        print(render(reply))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="run the daemon: scheduled rounds, live reload, control socket")
    p.add_argument(
        "--config", required=True, help="broker.yaml, broker.conf or Kafka's server.properties"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="plan and report every round, delete and journal nothing: retentiond.dryRun: true "
        "for this run, whatever the file (and its reloads) say",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "trigger-delete",
        help="ask the running daemon for manual deletion rounds (upstream's "
        "executeDeleteFilesManually: the next 20 rounds)",
    )
    p.add_argument("--config", required=True, help="the config the daemon was started with")
    p.set_defaults(func=cmd_trigger_delete)

    p = sub.add_parser("status", help="the running daemon's live state")
    p.add_argument("--config", required=True, help="the config the daemon was started with")
    p.add_argument("--json", action="store_true", help="the status document, for scripts")
    p.set_defaults(func=cmd_status)
