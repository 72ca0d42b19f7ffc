"""Safety rule 2 on real files: only regular files named by the store's scheme, inside the
configured directories, are ever deleted; symlinks are never followed out of the store."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from retentiond.storegen.rocketmq import PRESETS, generate_store, write_config
from tests.conftest import Tmpfs, run_cli
from tests.helpers.stores import CLEAN_NOW, config_keys

SPEC = replace(PRESETS["upstream-test"], oldest_age_hours=10.0, newest_age_hours=0.0)


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path below root with its size and mtime (symlinks not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


def config_for(root: Path, tmp: Path, **extra) -> Path:
    keys = config_keys(
        CLEAN_NOW, {"fileReservedTime": 1, "deleteFileBatchMax": 100, **extra}, tmp / "journal"
    )
    return write_config(root, SPEC, tmp / "broker.yaml", **keys)


def test_foreign_entries_and_symlinks_are_never_touched(tmpfs: Tmpfs, tmp_path):
    root = tmpfs.path / "store"
    store = generate_store(root, SPEC)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "00000000000000000000"
    victim.write_bytes(b"precious" * 16)
    os.utime(victim, (0, 0))
    (outside / "0").mkdir()
    (outside / "0" / "00000000000000000000").write_bytes(b"x" * 140)

    cl = store.commitlog_dirs[0]
    (cl / "notes.txt").write_text("operator notes")
    (cl / "0000000000000000000").write_bytes(b"19 digits")  # wrong length
    (cl / "99999999999999999999").write_bytes(b"overflows a long")  # > Long.MAX_VALUE
    (cl / "00000000000000000000.bak").write_bytes(b"backup")
    os.symlink(victim, cl / "00000000000000000001")  # symlink with a valid name, out of store
    (cl / "00000000000000009999").mkdir()  # directory with a valid name
    cq = root / "consumequeue"
    os.symlink(outside, cq / "EvilTopic")  # a topic directory that points out of the store
    os.symlink(outside / "0", cq / "test" / "7")  # a queue directory symlink
    (cq / "test" / "notaqueue").mkdir()
    os.symlink(victim, root / "index" / "20000101000000000")  # an index-named symlink
    for p in (cl / "notes.txt", cl / "0000000000000000000", cl / "00000000000000000000.bak"):
        os.utime(p, (0, 0))

    tmpfs.fill_to(0.90)  # clean forcibly: every non-newest data file may go
    before_outside = tree(outside)
    foreign = [
        cl / "notes.txt", cl / "0000000000000000000", cl / "99999999999999999999",
        cl / "00000000000000000000.bak", cl / "00000000000000000001", cl / "00000000000000009999",
        cq / "EvilTopic", cq / "test" / "7", cq / "test" / "notaqueue",
        root / "index" / "20000101000000000",
    ]  # fmt: skip
    result = run_cli("once", "--config", str(config_for(root, tmp_path)))
    assert result.code == 0, result.err
    assert tree(outside) == before_outside
    for p in foreign:
        assert os.path.lexists(p), p
    # the real files did go, so the round was not simply idle
    assert len([n for n in os.listdir(cl) if n.isdigit() and len(n) == 20]) < 55

    plan = run_cli("plan", "--config", str(config_for(root, tmp_path)), "--json")
    assert plan.code == 0, plan.err
    import json

    listed = {f["path"] for f in json.loads(plan.out)["foreign"]}
    assert str(cl / "notes.txt") in listed and str(cl / "00000000000000000001") in listed


def test_a_store_root_without_markers_is_a_store_error_and_nothing_is_deleted(tmp_path):
    not_a_store = tmp_path / "home"
    (not_a_store / "commitlog").mkdir(parents=True)
    f = not_a_store / "commitlog" / "00000000000000000000"
    f.write_bytes(b"\0" * 128)
    os.utime(f, (0, 0))
    config = tmp_path / "broker.yaml"
    config.write_text(
        f"storePathRootDir: {not_a_store}\nfileReservedTime: 0\ndeleteWhen: '00'\n"
        f"retentiond:\n  journal:\n    dir: {tmp_path / 'journal'}\n"
    )
    before = tree(not_a_store)
    for cmd in (["once", "--config", str(config)], ["check-config", str(config)]):
        result = run_cli(*cmd)
        assert result.code == 4, result  # lacks its marker files: a store error (DECISIONS.md)
        assert "not a RocketMQ store" in result.err and str(not_a_store) in result.err
        if cmd[0] == "check-config":
            assert "storePathRootDir" in result.err
    assert tree(not_a_store) == before


def test_missing_commitlog_path_is_a_store_error_not_a_full_disk(tmp_path):
    root = tmp_path / "store"
    store = generate_store(root, SPEC)
    config = config_for(root, tmp_path)
    before = tree(root)
    os.rename(store.commitlog_dirs[0], tmp_path / "unmounted")
    result = run_cli("once", "--config", str(config))
    # either refused at load (path gone) or a store error: never a deletion
    assert result.code in (3, 4), result
    os.rename(tmp_path / "unmounted", store.commitlog_dirs[0])
    assert tree(root) == before
