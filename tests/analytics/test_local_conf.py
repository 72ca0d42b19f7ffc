"""The settings of `retentiond analyze`'s embedded (local) Spark session."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import need

GC = "spark.driver.defaultJavaOptions"
USER_VARS = ("PYSPARK_SUBMIT_ARGS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS")


@pytest.fixture
def local_conf() -> Callable[[bool], dict[str, Any]]:
    """The job's local settings (the job imports pyspark: CI must have it)."""
    need(
        importlib.util.find_spec("pyspark") is not None,
        "pyspark is not installed (pip install -e '.[spark]')",
    )
    from retentiond.analytics.job import local_conf

    return local_conf  # type: ignore[return-value]


@pytest.fixture
def no_user_options(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """None of the variables where a user names JVM options is set."""
    for var in USER_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_the_embedded_driver_runs_the_parallel_collector(
    no_user_options: pytest.MonkeyPatch, local_conf: Callable[[bool], dict[str, Any]]
) -> None:
    no_user_options.setenv("PYSPARK_SUBMIT_ARGS", "--driver-memory 4g pyspark-shell")
    assert local_conf(False)[GC].split() == [
        "-XX:+UseParallelGC",
        "-XX:InlineSmallCode=1000",
        "-XX:FreqInlineSize=100",
    ]


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:+UseZGC pyspark-shell"),
        ("PYSPARK_SUBMIT_ARGS", "--conf spark.driver.defaultJavaOptions=-Xss4m pyspark-shell"),
        ("JAVA_TOOL_OPTIONS", "-XX:+UseG1GC"),
        ("JDK_JAVA_OPTIONS", "-XX:+UseSerialGC"),
    ],
)
def test_a_collector_the_user_chose_is_left_alone(
    no_user_options: pytest.MonkeyPatch,
    local_conf: Callable[[bool], dict[str, Any]],
    var: str,
    value: str,
) -> None:
    no_user_options.setenv(var, value)
    options = local_conf(False).get(GC, "")
    assert "GC" not in options
    if "defaultJavaOptions" in value:  # the user's own replace them all
        assert options == ""
    else:  # the inlining budgets stay
        assert options.split() == ["-XX:InlineSmallCode=1000", "-XX:FreqInlineSize=100"]


def test_inlining_budgets_the_user_chose_are_left_alone(
    no_user_options: pytest.MonkeyPatch, local_conf: Callable[[bool], dict[str, Any]]
) -> None:
    no_user_options.setenv("JAVA_TOOL_OPTIONS", "-XX:MaxInlineSize=50")
    assert local_conf(False)[GC] == "-XX:+UseParallelGC"


def test_the_embedded_driver_starts_with_those_options(
    no_user_options: pytest.MonkeyPatch, local_conf: Callable[[bool], dict[str, Any]]
) -> None:
    """The options reach the JVM, which starts with them (a flag it did not know would stop
    it). In a process of its own: a JVM another test started here would be reused."""
    import shutil
    import subprocess
    import sys

    need(shutil.which("java") is not None, "java is not installed")
    script = (
        "from retentiond.analytics.job import build_session\n"
        "spark = build_session('local[1]', progress=False)\n"
        "jvm = spark.sparkContext._jvm\n"
        "bean = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()\n"
        "print('\\n'.join(bean.getInputArguments()))\n"
        "spark.stop()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    args = done.stdout.splitlines()
    for option in local_conf(False)[GC].split():
        assert option in args
