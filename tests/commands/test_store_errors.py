"""What the command line says of a store, a journal or a configuration file it cannot use,
through the real CLI (``python -m retentiond``): a store path that is missing, empty (a disk
not mounted) or without the broker's marker files is a store error (exit 4 for
``check-config``, ``plan`` and ``once``), never created nor written into; a configuration wrong
in itself stays exit 3 with only its own errors; a journal directory that cannot be used is
exit 6 for ``check-config`` as for ``once``; ``status`` of a file that does not exist says so.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import EXPIRED, make_store, run_cli


def test_a_missing_or_empty_store_is_a_store_error_and_nothing_is_created(tmp_path: Path) -> None:
    store = make_store(tmp_path, EXPIRED)
    root, config = store.root, str(store.config)
    root.rename(tmp_path / "away")  # the disk is not mounted, and its mount point is gone
    check = run_cli("check-config", config)
    assert check.code == 4, check.err
    assert f"key 'storePathRootDir' = '{root}': does not exist" in check.err
    plan = run_cli("plan", "--config", config)
    assert plan.code == 4, plan.err
    assert f"ERROR: {root}: store root does not exist" in plan.out
    result = run_cli("once", "--config", config)
    assert result.code == 4, result.err
    assert f"error: {root}: store root does not exist; nothing was deleted" in result.err
    assert not root.exists()
    root.mkdir()  # the mount point is there, the disk is not mounted on it
    for command in ("check-config", "plan", "once"):
        args = (command, config) if command == "check-config" else (command, "--config", config)
        result = run_cli(*args)
        assert result.code == 4, (args, result.out, result.err)
        assert "is empty (a disk not mounted?)" in result.out + result.err, (args, result.err)
    assert list(root.iterdir()) == []  # nothing created in the mount point
    check = run_cli("check-config", config)
    assert "configuration refused" not in check.err
    assert "the store cannot be used now" in check.err


def test_a_configuration_wrong_in_itself_is_still_refused_with_3(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text(f"storePathRootDir: /\nstorePathCommitLog: {tmp_path}\n")
    result = run_cli("check-config", str(config))
    assert result.code == 3 and "is the filesystem root" in result.err, result.err


def test_check_config_exits_6_for_a_journal_directory_that_cannot_be_used(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file where the journal's parent should be\n")
    store = make_store(tmp_path, EXPIRED, journal=blocker / "journal")
    check = run_cli("check-config", str(store.config))
    assert check.code == 6, (check.out, check.err)
    assert f"journal directory {blocker / 'journal'}: cannot be created: {blocker} is not a " in (
        check.err
    )
    assert check.out == ""
    assert blocker.read_text().startswith("a regular file")  # nothing created, nothing changed
    once = run_cli("once", "--config", str(store.config))
    assert once.code == 6, once.err  # what check-config announced


def test_status_of_a_config_that_does_not_exist_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such.yaml"
    result = run_cli("status", "--config", str(missing))
    assert result.code == 7, result.err  # no daemon serves it
    assert f"{missing}: cannot read: No such file or directory" in result.err
    assert "does not validate" not in result.err and "last good settings" not in result.err


def test_a_yaml_syntax_error_is_reported_alone(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text(f"storePathRootDir: {tmp_path}/store\na: [1, 2\n")
    result = run_cli("check-config", str(config))
    assert result.code == 3
    errors = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "not valid YAML" in errors[0], result.err
    assert "/store" not in result.err.replace(f"{tmp_path}/store", "")  # no invented default


def test_keys_of_two_kinds_are_one_error_naming_them(tmp_path: Path) -> None:
    (tmp_path / "kafka-logs").mkdir()
    config = tmp_path / "broker.conf"
    keys = ["storePathRootDir=/data/store", "fileReservedTime=48", "brokerName=a", "deleteWhen=04"]
    config.write_text("\n".join([f"log.dirs={tmp_path}/kafka-logs", *keys]) + "\n")
    result = run_cli("check-config", str(config))
    assert result.code == 3
    errors = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.err
    assert "(storePathRootDir, fileReservedTime, brokerName, deleteWhen)" in errors[0]
