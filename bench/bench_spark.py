"""Time the fleet analysis job on >= 10 million records, beside DuckDB on the same files.

    .venv/bin/python bench/bench_spark.py [--brokers-per-cluster 20] [--days 30] [--keep DIR]

1. writes synthetic records in the journal schema straight to the shipped layout
   (``retentiond.analytics.synth``: one record per round every minute, plus the deletions);
2. runs ``retentiond analyze`` in local mode as a separate process and samples the resident
   memory of its whole process tree (Python driver + JVM) for the peak;
3. computes the same daily aggregates with DuckDB, also as a separate process, from the same
   ``.jsonl.gz`` files, and checks that both engines agree;
4. writes the figures and the machine to bench/README.md under "## Fleet analysis job"
   (that section only; the rest of the file is left as it is).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil

from retentiond.analytics.synth import Plan, write_fleet

HERE = Path(__file__).resolve().parent
README = HERE / "README.md"
HEADING = "## Fleet analysis job"

DUCKDB_SQL = {
    "daily_reclaim": """
        SELECT dt, cluster, broker, host, kind, reason, count(*) AS files, sum(bytes) AS bytes
        FROM deletion WHERE NOT coalesce(dry_run, false)
        GROUP BY ALL""",
    "effective_retention": """
        SELECT dt, cluster, broker, host, count(*) AS files,
               quantile_cont(age_ms, 0.5) / 3600000.0 AS p50_age_hours,
               quantile_cont(age_ms, 0.95) / 3600000.0 AS p95_age_hours
        FROM deletion WHERE kind = 'commitlog' AND NOT coalesce(dry_run, false)
        GROUP BY ALL""",
    "disk_pressure": """
        WITH r AS (
            SELECT dt, cluster, broker, host, triggers.disk_state AS state,
                   greatest(triggers.physic_ratio, triggers.logics_ratio) AS ratio,
                   coalesce(least(lead(time_ms) OVER w - time_ms, 2 * interval_ms),
                            interval_ms) AS weight
            FROM round WINDOW w AS (PARTITION BY cluster, broker, host ORDER BY time_ms))
        SELECT dt, cluster, broker, host, count(*) AS rounds, max(ratio) AS max_ratio,
               sum(CASE WHEN state IN ('over_max_ratio', 'clean_forcibly', 'warning_level')
                   THEN weight ELSE 0 END) AS ms_over_max_ratio,
               sum(CASE WHEN state = 'warning_level' THEN weight ELSE 0 END)
                   AS ms_over_warning_level
        FROM r GROUP BY ALL""",
}

DUCKDB_SCRIPT = r"""
import json, sys, time, duckdb
target, sqls = sys.argv[1], json.loads(sys.argv[2])
con = duckdb.connect()
con.execute("SET preserve_insertion_order = false")
con.execute("SET enable_progress_bar = false")
cols = {
    "deletion": "{'time_ms':'BIGINT','host':'VARCHAR',"
                "'kind':'VARCHAR','reason':'VARCHAR','bytes':'BIGINT','age_ms':'BIGINT',"
                "'dry_run':'BOOLEAN','forced':'BOOLEAN'}",
    "round": "{'time_ms':'BIGINT','host':'VARCHAR',"
             "'interval_ms':'BIGINT','triggers':'STRUCT(disk_state VARCHAR, physic_ratio DOUBLE,"
             " logics_ratio DOUBLE)'}",
}
started = time.monotonic()
for kind, spec in cols.items():
    con.execute(
        f"CREATE TABLE {kind} AS SELECT * FROM read_json('{target}/{kind}/*/*/*/*.jsonl.gz', "
        f"columns={spec}, format='newline_delimited', hive_partitioning=true)"
    )
out = {}
for name, sql in sqls.items():
    rows = con.sql(sql).fetchall()
    out[name] = [[str(v) if not isinstance(v, (int, float)) or isinstance(v, bool) else v
                  for v in row] for row in rows]
elapsed = time.monotonic() - started
print(json.dumps({"seconds": elapsed, "tables": out}))
"""


def run_sampled(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """(seconds, peak RSS of the process tree in bytes, stdout) of one command."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        root = psutil.Process(proc.pid)
        while not stop.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                pass
            stop.wait(0.25)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = proc.communicate()
    stop.set()
    t.join()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed ({proc.returncode}):\n{err[-5000:]}")
    return time.monotonic() - started, peak, out


def _lines(path: Path) -> tuple[str, int]:
    import gzip

    with gzip.open(path, "rb") as fh:
        n = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 22), b""))
    return path.parents[3].name, n  # <target>/<type>/dt=/cluster=/broker=/file


def count_records(target: Path) -> dict[str, int]:
    """Records per type, counted from the files themselves (newlines, in parallel)."""
    from concurrent.futures import ProcessPoolExecutor

    counts = {"deletion": 0, "round": 0, "intent": 0}
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        for kind, n in pool.map(_lines, target.rglob("*.jsonl.gz"), chunksize=64):
            counts[kind] = counts.get(kind, 0) + n
    return counts


def compare(spark_out: Path, duck: dict[str, list[list]]) -> dict[str, str]:
    """Both engines' daily aggregates, row by row; returns a verdict per table."""
    import duckdb

    verdict = {}
    keys = {"daily_reclaim": 6, "effective_retention": 4, "disk_pressure": 4}
    for name in DUCKDB_SQL:
        n_key = keys[name]
        want = {tuple(r[:n_key]): r[n_key:] for r in duck[name]}
        columns = {
            "daily_reclaim": "dt, cluster, broker, host, kind, reason, files, bytes",
            "effective_retention": "dt, cluster, broker, host, files, p50_age_hours, p95_age_hours",
            "disk_pressure": "dt, cluster, broker, host, rounds, max_ratio, ms_over_max_ratio, "
            "ms_over_warning_level",
        }[name]
        rows = duckdb.sql(
            f"SELECT {columns} FROM read_parquet('{spark_out}/{name}/*/*.parquet', "
            "hive_partitioning=true)"
        ).fetchall()
        got = {tuple(str(v) for v in r[:n_key]): list(r[n_key:]) for r in rows}
        bad = 0
        for k, values in want.items():
            other = got.get(tuple(str(v) for v in k))
            if other is None or any(
                abs(float(a) - float(b)) > 1e-6 * max(1.0, abs(float(a)))
                for a, b in zip(values, other, strict=True)
            ):
                bad += 1
        extra = len(set(got) - {tuple(str(v) for v in k) for k in want})
        verdict[name] = (
            f"{len(want)} rows, identical" if not bad and not extra else f"{bad + extra} differ"
        )
    return verdict


def machine() -> str:
    mem = psutil.virtual_memory().total / 2**30
    cpu = platform.processor() or platform.machine()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    import duckdb
    import pyspark

    return (
        f"{psutil.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.system()} "
        f"{platform.release()}; Python {platform.python_version()}, PySpark "
        f"{pyspark.__version__}, {java.splitlines()[0] if java else 'java ?'}, DuckDB "
        f"{duckdb.__version__}; load average before the run {os.getloadavg()[0]:.1f}"
    )


def write_readme(section: str) -> None:
    text = README.read_text() if README.exists() else "# Benchmarks\n"
    start = text.find(HEADING)
    if start >= 0:
        end = text.find("\n## ", start + len(HEADING))
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    README.write_text(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clusters", type=int, default=12)
    p.add_argument("--brokers-per-cluster", type=int, default=20)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--rounds-per-day", type=int, default=1440)
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--keep", help="generate into (or reuse) this directory")
    p.add_argument("--no-readme", action="store_true")
    p.add_argument(
        "--reuse-spark", action="store_true", help="with --keep: reuse the last Spark figures"
    )
    args = p.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-spark-"))
    target, out = work / "target", work / "out"
    plan = Plan(args.clusters, args.brokers_per_cluster, args.days, args.rounds_per_day)
    load = machine()
    if not (target / "round").exists():
        started = time.monotonic()
        n = write_fleet(target, plan, workers=os.cpu_count() or 1)
        print(f"generated {n} records in {time.monotonic() - started:.0f}s", flush=True)
    counts = count_records(target)
    analysed = counts["deletion"] + counts["round"]
    print(f"records: {counts} ({analysed} read by the job)", flush=True)
    size = sum(f.stat().st_size for f in target.rglob("*.gz"))

    saved = work / "spark_result.json"
    if args.reuse_spark and saved.exists():  # a later step failed: do not redo the long part
        spark_s, spark_rss = json.loads(saved.read_text())
    else:
        shutil.rmtree(out, ignore_errors=True)
        memory = f"--driver-memory {args.driver_memory} pyspark-shell"
        spark_s, spark_rss, spark_stdout = run_sampled(
            [sys.executable, "-m", "retentiond", "analyze", "--master", "local[*]",
             "--input", str(target), "--output", str(out)],
            {**os.environ, "PYSPARK_SUBMIT_ARGS": memory},
        )  # fmt: skip
        print(spark_stdout.strip(), flush=True)
        saved.write_text(json.dumps([spark_s, spark_rss]))
    print(f"spark: {spark_s:.1f}s, peak RSS {spark_rss / 2**30:.2f} GiB", flush=True)

    duck_s, duck_rss, duck_stdout = run_sampled(
        [sys.executable, "-c", DUCKDB_SCRIPT, str(target), json.dumps(DUCKDB_SQL)]
    )
    duck = json.loads(duck_stdout.strip().splitlines()[-1])
    print(f"duckdb: {duck_s:.1f}s, peak RSS {duck_rss / 2**30:.2f} GiB", flush=True)
    verdict = compare(out, duck["tables"])
    print(verdict, flush=True)

    table = "\n".join(
        [
            "| Engine | What | Wall time | Records/s | Peak RSS (process tree) |",
            "|---|---|---|---|---|",
            f"| Spark, `retentiond analyze --master local[*]` | all six tables + report, "
            f"Parquet written | {spark_s:.1f} s | {analysed / spark_s:,.0f} | "
            f"{spark_rss / 2**30:.2f} GiB |",
            f"| DuckDB, same files | `daily_reclaim`, `effective_retention`, `disk_pressure` "
            f"(the daily aggregates) | {duck_s:.1f} s | {analysed / duck_s:,.0f} | "
            f"{duck_rss / 2**30:.2f} GiB |",
        ]
    )
    section = textwrap.dedent(
        f"""\
        {HEADING}

        `bench/bench_spark.py` (`make bench-spark`), run on {time.strftime("%Y-%m-%d")}.
        Input: {counts["deletion"] + counts["round"] + counts["intent"]:,} synthetic records
        in the journal schema ({counts["round"]:,} `round`, {counts["deletion"]:,} `deletion`,
        {counts["intent"]:,} `intent`; {plan.brokers} brokers in {plan.clusters} clusters,
        {plan.days} days, a round a minute) written straight to the shipped layout:
        {size / 2**30:.2f} GiB of `.jsonl.gz` in {len(list(target.rglob("*.gz"))):,} files.
        The job reads the {analysed:,} `deletion` and `round` records.

        @TABLE@

        Same figures from both engines: {"; ".join(f"`{k}` {v}" for k, v in verdict.items())}.
        Spark's wall time includes starting the JVM (a few seconds) and writing all six tables
        and the report; DuckDB computes three of them in memory. On one machine DuckDB is the
        faster peer; the Spark job is the one that scales out (`--master yarn`/`k8s://`/
        `spark://`) when a fleet's journals outgrow a host.

        Machine: {load}. Driver memory {args.driver_memory}.
        """
    ).replace("@TABLE@", table)
    if not args.no_readme:
        write_readme(section)
        print(f"wrote {README}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
