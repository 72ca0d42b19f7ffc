"""Outside ``kinds/``, ``storegen/`` and ``analytics/`` no module branches on a store kind's
name: no comparison with ``"rocketmq"`` or ``"kafka"`` (nor a ``match`` case, a lookup table
keyed by them or a ``getattr`` of them) and no attribute named after a kind
(``settings.kafka``). The kind speaks for itself through ``engine.kind.StoreKind`` instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import retentiond

KIND_NAMES = frozenset({"rocketmq", "kafka"})
PACKAGE = Path(retentiond.__file__).parent
KIND_SPEAKERS = ("kinds", "storegen", "analytics")  # may name the kinds
MOVING: dict[str, str] = {}  # modules still to be rewritten: module -> why


def _names_a_kind(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.lower() in KIND_NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_kind(e) for e in node.elts)
    return False


def findings(source: str) -> list[str]:
    """``line: what`` for every place ``source`` branches on or reaches for a kind's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            if any(_names_a_kind(n) for n in (node.left, *node.comparators)):
                found.append(f"{line}: compares with a kind's name")
        elif isinstance(node, ast.MatchValue) and _names_a_kind(node.value):
            found.append(f"{line}: a match case on a kind's name")
        elif isinstance(node, ast.Dict) and any(
            k is not None and _names_a_kind(k) for k in node.keys
        ):
            found.append(f"{line}: a table keyed by kind names")
        elif isinstance(node, ast.Attribute) and node.attr.lower() in KIND_NAMES:
            found.append(f"{line}: reads attribute .{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) > 1
            and _names_a_kind(node.args[1])
        ):
            found.append(f"{line}: {node.func.id} of a kind's name")
    return found


def _modules() -> list[str]:
    paths = sorted(PACKAGE.rglob("*.py"))
    return [
        p.relative_to(PACKAGE).as_posix()
        for p in paths
        if p.relative_to(PACKAGE).parts[0] not in KIND_SPEAKERS
    ]


def _param(module: str) -> object:
    if module in MOVING:
        return pytest.param(module, marks=pytest.mark.xfail(strict=True, reason=MOVING[module]))
    return module


@pytest.mark.parametrize("module", [_param(m) for m in _modules()])
def test_no_module_outside_the_kinds_names_a_kind(module: str) -> None:
    assert findings((PACKAGE / module).read_text()) == []


def test_the_modules_walked_include_the_daemon_observe_and_the_commands() -> None:
    walked = set(_modules())
    assert {"daemon/statustext.py", "observe/live.py", "commands/daemon.py"} <= walked
    assert not any(m.startswith(KIND_SPEAKERS) for m in walked)


@pytest.mark.parametrize(
    "source",
    [
        'if doc.get("store_kind") == "kafka": pass',
        'x = kind != "RocketMQ"',
        'x = name in ("rocketmq", "other")',
        'match kind:\n    case "kafka": pass',
        'label = {"rocketmq": "RocketMQ broker"}.get(t)',
        "dirs = settings.kafka.log_dirs",
        'x = getattr(settings, "kafka", None)',
    ],
)
def test_each_way_of_naming_a_kind_is_found(source: str) -> None:
    assert findings(source)


def test_naming_a_kind_in_text_is_not_branching_on_it() -> None:
    assert findings('print("NOT a RocketMQ or Kafka broker"); x = kind.name') == []
