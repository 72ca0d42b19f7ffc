"""Leftover partition dirs through the real command line: a ``-delete`` dir past
``log.segment.delete.delay.ms`` is removed as the broker would at its start; a ``-stray`` dir
and an orphan (its topic id gone from the metadata log) are reported with their bytes and
removed only when the configuration says so; each removal journaled (file kind
``partition_dir``, the dir's total as ``bytes``) before anything changes; never while another
process holds the log dir's ``.lock``; never through a symlink."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from retentiond.kinds.kafka.leftovers import remove_partition_dir
from retentiond.reasons import SCHEMA_VERSION
from tests.conftest import records, run_cli
from tests.e2e.test_kafka_cli import broker_holding, tree
from tests.kinds.kafka.leftover_dirs import LeftoverDirs, build_leftover_dirs, dir_bytes


def write_config(tmp_path: Path, log_dir: Path, **extra: str) -> Path:
    lines = [
        "process.roles=broker",
        "node.id=1",
        f"log.dirs={log_dir}",
        "log.retention.hours=168",
        f"retentiond.journal.dir={tmp_path / 'journal'}",
        *(f"{k}={v}" for k, v in extra.items()),
    ]
    path = tmp_path / "server.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


def leftovers_of(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [ld] = doc["log_dirs"]
    return {Path(d["path"]).name: d for d in ld["leftover_dirs"]}


def store(tmp_path: Path) -> LeftoverDirs:
    return build_leftover_dirs(tmp_path / "kafka-logs", int(time.time() * 1000))


def test_plan_counts_every_leftover_with_its_bytes(tmp_path: Path) -> None:
    s = store(tmp_path)
    config = write_config(tmp_path, s.log_dir, **{"log.segment.delete.delay.ms": "0"})
    result = run_cli("plan", "--json", "--config", str(config))
    assert result.code == 0, result.err
    got = leftovers_of(json.loads(result.out))
    assert set(got) == {s.delete_dir.name, s.stray_dir.name, s.orphan_dir.name}
    delete, stray, orphan = got[s.delete_dir.name], got[s.stray_dir.name], got[s.orphan_dir.name]
    assert (delete["verdict"], delete["reason"]) == ("delete", "delete_dir_leftover")
    assert (stray["verdict"], stray["reason"]) == ("keep", "stray_partition")
    assert (orphan["verdict"], orphan["reason"]) == ("keep", "orphan_partition")
    assert "removeStray" in stray["detail"] and "removeOrphans" in orphan["detail"]
    for d, path in ((delete, s.delete_dir), (stray, s.stray_dir), (orphan, s.orphan_dir)):
        assert d["kind"] == "partition_dir" and d["bytes"] == dir_bytes(path) > 0
    text = run_cli("plan", "--config", str(config))
    assert text.code == 0, text.err
    assert "delete_dir_leftover" in text.out and "orphan_partition" in text.out


def test_a_delete_dir_within_its_delay_is_kept(tmp_path: Path) -> None:
    s = store(tmp_path)
    config = write_config(tmp_path, s.log_dir)  # the default delay: 60 s from the rename
    doc = json.loads(run_cli("plan", "--json", "--config", str(config)).out)
    d = leftovers_of(doc)[s.delete_dir.name]
    assert (d["verdict"], d["reason"]) == ("keep", "transient_partition_dir")
    assert "log.segment.delete.delay.ms 60000" in d["detail"]
    once = run_cli("once", "--config", str(config))
    assert once.code == 0, once.err
    assert s.delete_dir.is_dir()


def test_once_removes_what_the_config_allows_journaled_first(tmp_path: Path) -> None:
    s = store(tmp_path)
    sizes = {p: dir_bytes(p) for p in (s.delete_dir, s.stray_dir, s.orphan_dir)}
    config = write_config(
        tmp_path,
        s.log_dir,
        **{
            "log.segment.delete.delay.ms": "0",
            "retentiond.kafka.removeStray": "true",
            "retentiond.kafka.removeOrphans": "true",
        },
    )
    once = run_cli("once", "--config", str(config))
    assert once.code == 0, once.err
    for p in sizes:
        assert not p.exists(), p
    # nothing renamed was left behind: the -delete form went too
    assert not [p for p in s.log_dir.iterdir() if p.name.endswith(("-delete", "-stray"))]
    for log in s.live.values():
        assert log.dir.is_dir()  # the live partitions are untouched
    journal = tmp_path / "journal"
    intents = {r["id"]: r for r in records(journal, "intent")}
    deletions = [r for r in records(journal, "deletion") if r["kind"] == "partition_dir"]
    assert {(Path(r["file"]), r["reason"], r["bytes"]) for r in deletions} == {
        (s.delete_dir, "delete_dir_leftover", sizes[s.delete_dir]),
        (s.stray_dir, "stray_partition", sizes[s.stray_dir]),
        (s.orphan_dir, "orphan_partition", sizes[s.orphan_dir]),
    }
    for r in deletions:
        assert r["id"] in intents and intents[r["id"]]["bytes"] == r["bytes"]
        assert r["schema_version"] == SCHEMA_VERSION and "rescue" not in r


def test_nothing_is_removed_while_a_broker_holds_the_lock(tmp_path: Path) -> None:
    s = store(tmp_path)
    config = write_config(
        tmp_path,
        s.log_dir,
        **{"log.segment.delete.delay.ms": "0", "retentiond.kafka.removeStray": "true"},
    )
    before = tree(s.log_dir)
    with broker_holding(s.log_dir):
        doc = json.loads(run_cli("plan", "--json", "--config", str(config)).out)
        got = leftovers_of(doc)
        for name in (s.delete_dir.name, s.stray_dir.name):
            assert got[name]["reason"] == "broker_running", got[name]
            assert got[name]["verdict"] == "keep"
        once = run_cli("once", "--config", str(config))
        assert once.code == 0, once.err
    assert tree(s.log_dir) == before
    assert not records(tmp_path / "journal", "intent")


def test_removal_renames_first_and_never_follows_a_symlink(tmp_path: Path) -> None:
    """An orphan holding a symlink to a file outside the store and a subdirectory: the dir
    is renamed to Kafka's -delete form, the link removed as a link, the target untouched."""
    log_dir = tmp_path / "logs"
    part = log_dir / "orders-3"
    (part / "sub").mkdir(parents=True)
    (part / "sub" / "x").write_bytes(b"x" * 5000)
    (part / "00000000000000000000.log").write_bytes(b"y" * 100)
    outside = tmp_path / "precious"
    outside.write_bytes(b"keep me")
    (part / "link").symlink_to(outside)
    (part / "dirlink").symlink_to(tmp_path)
    fd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY)
    renamed: list[str] = []
    real_rename = os.rename

    def spy(src: str, dst: str, **kw: Any) -> None:
        renamed.append(dst)
        real_rename(src, dst, **kw)

    try:
        os.rename = spy  # type: ignore[assignment]
        freed = remove_partition_dir(fd, "orders-3")
    finally:
        os.rename = real_rename
        os.close(fd)
    assert freed >= 5000 + 100
    assert len(renamed) == 1 and renamed[0].startswith("orders-3.")
    assert renamed[0].endswith("-delete") and len(renamed[0]) == len("orders-3.") + 32 + 7
    assert list(log_dir.iterdir()) == []
    assert outside.read_bytes() == b"keep me" and tmp_path.is_dir()
