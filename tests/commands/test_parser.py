"""The command line imports only the group of the command it runs, and parses as before."""

from __future__ import annotations

import subprocess
import sys

import pytest

from retentiond.commands import GROUPS, build_parser, command_in


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["plan", "--config", "x"], "plan"),
        (["--log-level", "DEBUG", "once", "--config", "x"], "once"),
        (["--log-format=json", "ship"], "ship"),
        (["--log-format", "json", "gen-store", "d"], "gen-store"),
        (["-h", "plan"], None),
        (["--version"], None),
        ([], None),
    ],
)
def test_the_command_word_is_found_past_the_global_options(argv, command) -> None:
    assert command_in(argv) == command


def test_a_named_command_gets_its_own_group_and_help_gets_every_group() -> None:
    def commands(parser) -> set[str]:
        sub = next(a for a in parser._actions if a.dest == "command")
        return set(sub.choices)

    every = commands(build_parser())
    assert {"once", "plan", "check-config", "gen-store", "run", "status", "ship"} <= every
    assert commands(build_parser(["plan", "--config", "x"])) == {"once", "plan"}
    assert commands(build_parser(["--help"])) == every
    assert commands(build_parser(["no-such-command"])) == every  # argparse names the choices
    args = build_parser(["plan", "--config", "c.yaml", "--json"]).parse_args(
        ["plan", "--config", "c.yaml", "--json"]
    )
    assert args.config == "c.yaml" and args.json and not args.all


def test_plan_does_not_import_the_shipping_or_spark_modules() -> None:
    code = (
        "import sys; from retentiond.commands import build_parser; "
        "build_parser(['plan', '--config', 'x']); "
        "print(sorted(m for m in sys.modules if m.startswith('retentiond.commands.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = {m.rsplit(".", 1)[1] for m in eval(out.stdout)}
    assert loaded == {"rounds", "common"}, loaded
    assert set(GROUPS) >= loaded - {"common"}


def test_config_show_is_a_command_of_its_own_group_with_the_global_options() -> None:
    argv = ["config", "show", "--config", "c.yaml", "--json", "--log-level", "debug"]
    parser = build_parser(argv)
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == {"config"}
    args = parser.parse_args(argv)
    assert (args.config, args.json, args.log_level) == ("c.yaml", True, "DEBUG")
