"""``retentiond/config`` is what every store kind shares: no module in it names a kind, one of
a kind's keys or one of its files, in a string constant (docstrings included) or an
identifier. Each kind's keys live in ``kinds/<kind>/config.py``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import retentiond.config
from retentiond.kinds import plugins
from retentiond.kinds.kafka.config import BROKER_KEYS

CONFIG = Path(retentiond.config.__file__).parent
# The broker's and the cluster's names label every kind's journal and metrics: shared words,
# although RocketMQ's file spells them as keys.
SHARED = frozenset({"brokerName", "brokerClusterName"})
FILE_WORDS = frozenset(
    {
        "rocketmq",
        "kafka",
        "commitlog",
        "consumequeue",
        "broker.conf",
        "broker.yaml",
        "server.properties",
        "meta.properties",
        "log.retention",
    }
)


def _squash(text: str) -> str:
    return text.lower().replace("_", "").replace("-", "")


def kind_words() -> frozenset[str]:
    """Every registered kind's name and identifying keys, Kafka's broker keys, and the words
    naming the kinds' files."""
    words = set(FILE_WORDS)
    for plugin in plugins():
        words.add(plugin.name)
        words |= {k for k in plugin.identifying_keys if k not in SHARED}
    words |= set(BROKER_KEYS)
    return frozenset(_squash(w) for w in words)


def _names(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of every string constant and identifier in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value
        elif isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.lineno, node.name
        elif isinstance(node, ast.arg):
            yield node.lineno, node.arg
        elif isinstance(node, ast.alias):
            yield getattr(node, "lineno", 0), node.asname or node.name
        elif isinstance(node, ast.keyword) and node.arg is not None:
            yield node.lineno, node.arg


def _hits(source: str, words: frozenset[str]) -> list[str]:
    found = []
    for line, text in _names(ast.parse(source)):
        squashed = _squash(text)
        found += [f"line {line}: {w!r} in {text[:60]!r}" for w in sorted(words) if w in squashed]
    return found


def test_the_words_are_the_kinds_own() -> None:
    words = kind_words()
    assert {"filereservedtime", "deletewhen", "log.dirs", "mappedfilesizecommitlog"} <= words
    assert "brokername" not in words


@pytest.mark.parametrize(
    "module", sorted(p.relative_to(CONFIG).as_posix() for p in CONFIG.rglob("*.py"))
)
def test_no_kind_word_in_config(module: str) -> None:
    assert _hits((CONFIG / module).read_text(), kind_words()) == []


def test_the_check_sees_a_kind_word() -> None:
    """The walk finds a key in a string, a docstring and an identifier alike."""
    words = kind_words()
    assert _hits('"""Reads server.properties."""\n', words)
    assert _hits("x = 'deleteWhen'\n", words)
    assert _hits("def read(file_reserved_time: int) -> None: ...\n", words)
    assert _hits("import retentiond.kinds.kafka\n", words)
    assert not _hits("def read(journal_dir: str, broker_name: str) -> None: ...\n", words)
