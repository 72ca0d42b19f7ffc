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


def test_the_embedded_driver_runs_the_parallel_collector(
    monkeypatch: pytest.MonkeyPatch, local_conf: Callable[[bool], dict[str, Any]]
) -> None:
    for var in USER_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-memory 4g pyspark-shell")
    assert local_conf(False)[GC] == "-XX:+UseParallelGC"


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
    monkeypatch: pytest.MonkeyPatch,
    local_conf: Callable[[bool], dict[str, Any]],
    var: str,
    value: str,
) -> None:
    for v in USER_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv(var, value)
    assert GC not in local_conf(False)
