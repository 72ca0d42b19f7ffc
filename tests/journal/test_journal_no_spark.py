"""The daemon installs and runs without PySpark or Java: every module outside
``retentiond.analytics`` (and that package's CLI shim) imports with pyspark, py4j, duckdb and
matplotlib made unimportable, `retentiond --help` works, and `retentiond analyze` says what to
install instead of failing with a traceback."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import retentiond

BLOCKED = ("pyspark", "py4j", "duckdb", "matplotlib")
# Modules that are the Spark job itself: they need the extra, and only they may.
SPARK_ONLY = {
    "retentiond.analytics.job",
    "retentiond.analytics.tables",
    "retentiond.analytics.schema",
}

_PRELUDE = textwrap.dedent(
    f"""
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {BLOCKED!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)")
            return None

    sys.meta_path.insert(0, Block())
    """
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(retentiond.__file__).parents[1],
    )


def daemon_modules() -> list[str]:
    names = [
        m.name
        for m in pkgutil.walk_packages(retentiond.__path__, "retentiond.")
        if m.name not in SPARK_ONLY and not m.name.endswith("__main__")
    ]
    assert "retentiond.daemon.service" in names and "retentiond.journal.ship" in names
    return names


def test_every_daemon_module_imports_without_spark() -> None:
    proc = _run(
        f"""
        import importlib
        for name in {daemon_modules()!r}:
            importlib.import_module(name)
        leaked = sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r})
        assert not leaked, leaked
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_help_works_and_analyze_names_the_missing_extra() -> None:
    proc = _run(
        """
        from retentiond.cli import main
        try:
            main(["--help"])
        except SystemExit as exc:
            assert exc.code == 0
        code = main(["analyze", "--input", "/nonexistent", "--output", "/tmp/x"])
        print("exit", code)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "analyze" in proc.stdout and "ship" in proc.stdout
    assert "exit 11" in proc.stdout
    assert "install retentiond[spark]" in proc.stderr
