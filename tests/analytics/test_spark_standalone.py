"""The job on a real Spark cluster: a standalone master and one worker, started on loopback
from the installed PySpark (``spark-class``), with ``retentiond analyze --master
spark://127.0.0.1:PORT`` as the driver, exactly as an operator would run it; all stopped
afterwards. Input is synthetic records in the journal schema (``analytics.synth``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, need

pytestmark = pytest.mark.slow


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"port {port} never opened:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(``spark://127.0.0.1:PORT``, work dir) of a master with one 1-core worker; both
    stopped after."""
    try:
        from pyspark.find_spark_home import _find_spark_home
    except ImportError:
        need(False, "pyspark is not installed (pip install -e '.[spark]')")
    need(shutil.which("java") is not None, "java is not installed")
    home = Path(_find_spark_home())
    spark_class = home / "bin" / "spark-class"
    logs = tmp_path_factory.mktemp("spark-standalone")
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(logs),
        "SPARK_WORKER_DIR": str(logs / "work"),
        "PYSPARK_PYTHON": sys.executable,
    }
    port, ui = free_port(), free_port()
    master_log = logs / "master.log"
    master = subprocess.Popen(
        [str(spark_class), "org.apache.spark.deploy.master.Master",
         "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
        stdout=master_log.open("w"), stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    procs = [master]
    try:
        _wait_port(port, master, master_log)
        worker_log = logs / "worker.log"
        worker = subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.worker.Worker",
             "--host", "127.0.0.1", "--port", str(free_port()),
             "--webui-port", str(free_port()), "--cores", "1", "--memory", "1g",
             f"spark://127.0.0.1:{port}"],
            stdout=worker_log.open("w"), stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        procs.append(worker)
        deadline = time.monotonic() + 60
        while "Successfully registered with master" not in worker_log.read_text():
            if time.monotonic() > deadline or worker.poll() is not None:
                pytest.fail(f"worker did not register:\n{worker_log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield f"spark://127.0.0.1:{port}", logs / "work"
    finally:
        for proc in reversed(procs):
            _stop(proc)


def test_analyze_runs_on_a_standalone_cluster(cluster: tuple[str, Path], tmp_path: Path) -> None:
    import duckdb

    from retentiond.analytics.synth import Plan, write_fleet

    plan = Plan(clusters=2, brokers_per_cluster=2, days=3, rounds_per_day=48)
    records = write_fleet(tmp_path / "target", plan)
    out = tmp_path / "out"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    url, work = cluster
    proc = subprocess.run(
        [sys.executable, "-m", "retentiond", "analyze", "--master", url,
         "--input", str(tmp_path / "target"), "--output", str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "analysed up to 2024-03-06" in proc.stdout
    fleet = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{out}/fleet_summary/*/*.parquet')"
    ).fetchall()[0]
    assert fleet == (plan.brokers,)
    rounds = duckdb.sql(
        f"SELECT sum(rounds) FROM read_parquet('{out}/disk_pressure/*/*.parquet')"
    ).fetchall()[0]
    assert rounds == (plan.brokers * plan.days * plan.rounds_per_day,)
    assert records > rounds[0]
    assert (out / "report" / "report.html").exists()
    # The application really ran on the cluster: the worker launched an executor for it.
    assert list(work.glob("app-*/*/stderr")), "no executor ran on the worker"
