"""The guard's keys (retentiond.guard.*): shared by every kind, refused with file, key, value."""

from __future__ import annotations

from pathlib import Path

from retentiond.kinds import load_settings
from tests.conftest import run_cli


def _store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    for d in ("commitlog", "consumequeue"):
        (root / d).mkdir(parents=True)
    return root


def test_yaml_and_properties_forms(tmp_path: Path):
    root = _store(tmp_path)
    y = tmp_path / "broker.yaml"
    y.write_text(
        f"storePathRootDir: {root}\nretentiond:\n  guard:\n    unconsumed: keep\n"
        "    ignoreGroups: [tools-*, audit]\n    staleAfter: 3d\n"
    )
    s = load_settings(y)
    assert s.daemon.guard_unconsumed == "keep" and s.daemon.guard_timers == "report"
    assert s.daemon.guard_ignore_groups == ("tools-*", "audit")
    assert s.daemon.guard_stale_after_ms == 3 * 86_400_000
    assert s.daemon.guard_top_groups == 20
    c = tmp_path / "broker.conf"
    c.write_text(
        f"storePathRootDir={root}\nretentiond.guard.ignoreGroups=a*, b\n"
        "retentiond.guard.staleAfter=12h\nretentiond.guard.timers=keep\n"
    )
    s = load_settings(c)
    assert s.daemon.guard_ignore_groups == ("a*", "b") and s.daemon.guard_timers == "keep"
    assert s.daemon.guard_stale_after_ms == 12 * 3_600_000


def test_a_bad_mode_is_refused_naming_file_key_and_value(tmp_path: Path):
    root = _store(tmp_path)
    c = tmp_path / "broker.conf"
    c.write_text(f"storePathRootDir={root}\nretentiond.guard.unconsumed=always\n")
    result = run_cli("check-config", str(c))
    assert result.code == 3
    assert f"{c}: key 'retentiond.guard.unconsumed' = 'always'" in result.err
