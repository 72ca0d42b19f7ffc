"""The settings of `retentiond analyze`'s embedded (local) Spark session."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from retentiond.analytics.job import local_conf

GC = "spark.driver.defaultJavaOptions"
USER_VARS = ("PYSPARK_SUBMIT_ARGS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS")


def test_the_embedded_driver_runs_the_parallel_collector(monkeypatch) -> None:
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
def test_a_collector_the_user_chose_is_left_alone(monkeypatch, var: str, value: str) -> None:
    for v in USER_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv(var, value)
    assert GC not in local_conf(False)
