"""The directories under ``consumequeue/`` through the command line, cold and from the scan
cache: a directory that cannot be read is a store error naming it (exit 4, nothing under it
deleted, the rest of the round goes on), and a directory named like a queue but not as the
broker names one (``00``, ``+1``, ...) is foreign and its files are never touched.

Permission bits do not stop root, and CI runs as root: the commands run as root without its
capabilities (``tests.helpers.cli.DROP_CAPS``), whom they stop as any other user."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import need
from tests.helpers.cli import run_cli, without_caps
from tests.helpers.stores import EXPIRED, Store, make_store

SPEC = replace(EXPIRED, topics=2, queues_per_topic=2)


def _files(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every regular file below ``root`` with its inode, size and mtime."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def _age(root: Path) -> None:
    """Directories an hour old: the scan remembers their listings (and writes them to the
    scan cache file), which it does not for one changed within the last second."""
    old = os.stat(root).st_mtime - 3600
    for dirpath, _, _ in os.walk(root / "consumequeue"):
        os.utime(dirpath, (old, old))


def _write_cache(store: Store, prefix: tuple[str, ...] = ()) -> None:
    """A dry round lists every directory and writes the scan cache, as a daemon would."""
    _age(store.root)
    store.journal.mkdir(exist_ok=True)  # the cache is written beside the journal
    result = run_cli("once", "--dry-run", "--config", str(store.config), prefix=prefix)
    assert result.code == 0, result.err
    assert list(store.journal.glob("scan-cache-*.bin"))


def _unprivileged() -> tuple[str, ...]:
    if os.geteuid() == 0:
        need(shutil.which("setpriv") is not None, "setpriv (util-linux) is needed")
    return without_caps()


# What is made unreadable, and how: (path below consumequeue/, mode).
UNREADABLE = {
    "consumequeue/": ("", 0o000),
    "consumequeue/ listable, not searchable": ("", 0o644),
    "topic directory": ("TopicTest0", 0o000),
    "topic directory listable, not searchable": ("TopicTest0", 0o644),
    "queue directory": ("TopicTest1/1", 0o000),
}


@pytest.mark.parametrize("cached", [False, True], ids=["cold", "from the scan cache"])
@pytest.mark.parametrize("case", list(UNREADABLE))
def test_an_unreadable_directory_is_a_store_error_and_nothing_under_it_goes(
    tmp_path: Path, case: str, cached: bool
) -> None:
    prefix = _unprivileged()
    store = make_store(tmp_path, SPEC)
    rel, mode = UNREADABLE[case]
    cq = store.root / "consumequeue"
    target = cq / rel if rel else cq
    if cached:  # listings remembered before the change: chmod moves the ctime they carry
        _write_cache(store, prefix)
    before = _files(store.root)
    under = {p: v for p, v in before.items() if p.startswith(f"{target}/")}
    assert under
    os.chmod(target, mode)
    try:
        plan = run_cli("plan", "--json", "--config", str(store.config), prefix=prefix)
        text = run_cli("plan", "--config", str(store.config), prefix=prefix)
        once = run_cli("once", "--config", str(store.config), prefix=prefix)
    finally:
        os.chmod(target, 0o755)
    assert plan.code == 4, plan.err
    doc = json.loads(plan.out)
    assert doc["errors"]
    for err in doc["errors"]:  # each names the directory (or one below it) it covers
        assert err == f"{target}: {err.split(': ', 1)[1]}" or err.startswith(f"{target}/"), err
        assert "Permission denied" in err
    assert all(err in text.out for err in doc["errors"])
    assert "ERROR: " in text.out and text.code == 4
    assert once.code == 4, once.err
    after = _files(store.root)
    assert {p: after.get(p) for p in under} == under  # nothing under it was touched
    gone = set(before) - set(after)
    if rel:  # the rest of the store was cleaned as usual
        assert any("/consumequeue/" in p for p in gone), sorted(gone)
        assert doc["consumequeue"]["examined"] and doc["consumequeue"]["queue_count"] > 0
    else:  # consumequeue/ itself: the whole store is skipped, as for an unreadable index/
        assert doc["errors"] == [f"{target}: cannot {'list' if mode == 0 else 'search'} the "
                                 "consumequeue directory: Permission denied"]  # fmt: skip
        assert not gone


def test_a_daemon_walks_the_queues_again_while_a_directory_is_unreadable(
    tmp_path: Path,
) -> None:
    """The queue pass is gated on the CommitLog minimum having moved; a round that could not
    read a topic directory does not move the gate, so the next one walks the queues again
    and reports the directory again (and cleans it once it can be read)."""
    prefix = _unprivileged()
    store = make_store(tmp_path, SPEC)
    topic = store.root / "consumequeue" / "TopicTest0"
    script = (
        "import json, os, sys\n"
        "from retentiond.kinds import load_settings\n"
        "from retentiond.engine.cleaner import Cleaner\n"
        "from retentiond.journal.writer import Journal, Origin\n"
        "from retentiond.kinds import kind_for\n"
        "journal = Journal(sys.argv[3], Origin('c', 'b', 'h', 's'))\n"
        "c = Cleaner(kind_for(load_settings(sys.argv[1])), journal=journal)\n"
        "for restore in (False, False, True):\n"
        "    if restore:\n"
        "        os.chmod(sys.argv[2], 0o755)\n"
        "    p = c.run_round().plan\n"
        "    deleted = [d.path for q in p.queues.queues for d in q.deleted]\n"
        "    print('ROUND', json.dumps([list(p.errors), p.queues.examined, deleted]))\n"
    )
    os.chmod(topic, 0o000)
    try:
        out = subprocess.run(
            [*prefix, sys.executable, "-c", script, str(store.config), str(topic),
             str(store.journal)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.chmod(topic, 0o755)
    assert out.returncode == 0, out.stderr
    rounds = [json.loads(x[6:]) for x in out.stdout.splitlines() if x.startswith("ROUND ")]
    assert len(rounds) == 3, out.stdout
    for errors, examined, _ in rounds[:2]:
        assert examined and errors == [f"{topic}: cannot list the topic directory: "
                                       "Permission denied"]  # fmt: skip
    errors, examined, deleted = rounds[2]
    assert examined and not errors
    assert deleted and all(p.startswith(f"{topic}/") for p in deleted)


# Queue directory names the broker never opens: it parses the name to an int and opens
# ``<topic>/<that int>``. "10" (the decimal form of its id) is a queue, as a control.
NOT_QUEUES = ("00", "01", "+1", "-0", " 1", "1_")


@pytest.mark.parametrize("cached", [False, True], ids=["cold", "from the scan cache"])
def test_a_directory_not_named_as_the_broker_names_a_queue_is_foreign(
    tmp_path: Path, cached: bool
) -> None:
    store = make_store(tmp_path, SPEC)
    topic = store.root / "consumequeue" / "TopicTest0"
    for name in (*NOT_QUEUES, "10"):  # copies of queue 0: the same old files
        shutil.copytree(topic / "0", topic / name, copy_function=shutil.copy2)
    if cached:
        _write_cache(store)
    before = _files(store.root)
    plan = run_cli("plan", "--json", "--config", str(store.config))
    assert plan.code == 0, plan.err
    doc = json.loads(plan.out)
    foreign = {f["path"]: f["why"] for f in doc["foreign"]}
    for name in NOT_QUEUES:
        assert foreign.get(str(topic / name)) == "name_not_in_naming_scheme", name
    planned = {f["path"] for f in doc["consumequeue"]["files"]}
    assert not any(p.startswith(f"{topic / n}/") for n in NOT_QUEUES for p in planned)
    control = [
        f for f in doc["consumequeue"]["files"]
        if f["path"].startswith(f"{topic}/10/") and f["verdict"] == "delete"
    ]  # fmt: skip
    assert control and all(f["queue_id"] == 10 for f in control)
    once = run_cli("once", "--config", str(store.config))
    assert once.code == 0, once.err
    after = _files(store.root)
    for name in NOT_QUEUES:
        mine = {p: v for p, v in before.items() if p.startswith(f"{topic / name}/")}
        assert mine and {p: after.get(p) for p in mine} == mine, name
    assert not all(f["path"] in after for f in control)  # the control's old files went
