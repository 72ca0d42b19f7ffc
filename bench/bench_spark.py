"""Time the fleet analysis job on >= 10 million records, beside DuckDB on the same files.

    .venv/bin/python bench/bench_spark.py [--brokers-per-cluster 20] [--days 30] [--keep DIR]

1. writes synthetic records in the journal schema straight to the shipped layout
   (``retentiond.analytics.synth``: one record per round every minute, plus the deletions);
2. runs ``retentiond analyze`` in local mode as a separate process and samples the resident
   memory of its whole process tree (Python driver + JVM) for the peak;
3. computes the same six tables with DuckDB (SQL, and the same ``risk.rank`` for the fleet),
   also as a separate process, from the same ``.jsonl.gz`` files, and checks that both engines
   agree on every column of every row;
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

# The same tables as retentiond/analytics/tables.py, in DuckDB SQL (docs/journal.md has the
# definitions), fleet ranking included: both engines read the same files, build the same six
# tables and are checked against each other column by column.
_OVER_MAX = "('over_max_ratio', 'clean_forcibly', 'warning_level')"
_OVER_FORCIBLY = "('clean_forcibly', 'warning_level')"


def _inner(states: str) -> str:
    return (
        "coalesce(list_sum(list_transform(list_filter(map_entries(state_ms), "
        f"lambda e: e.key IN {states}), lambda e: e.value)), 0)"
    )


_RATIO = "greatest(triggers.physic_ratio, triggers.logics_ratio)"
DUCKDB_SQL = {
    "prepared": f"""
        WITH u AS (
            SELECT dt, cluster, broker, host, time_ms, time_ms AS last_time_ms, 1::BIGINT AS n,
                   {_RATIO} AS ratio_max, {_RATIO} AS ratio_sum,
                   CASE WHEN {_RATIO} IS NULL THEN 0 ELSE 1 END AS ratio_n, {_RATIO} AS ratio,
                   triggers.disk_state AS disk_state, interval_ms,
                   0 AS inner_over_max, 0 AS inner_over_forcibly, 0 AS inner_warning,
                   CASE WHEN coalesce(triggers.usage_exceeds, false)
                             AND coalesce(deleted.commitlog.files, 0) = 0 THEN 1 ELSE 0 END
                       AS stuck,
                   CASE WHEN triggers.error IS NOT NULL OR coalesce(len(errors), 0) > 0
                        THEN 1 ELSE 0 END AS error,
                   coalesce(failures, 0) AS failures, expired_pending,
                   file_reserved_time_hours,
                   thresholds.warning_level_ratio AS warning_level_ratio
            FROM round
            UNION ALL BY NAME
            SELECT dt, cluster, broker, host, time_ms, last_time_ms, rounds AS n,
                   ratio.max AS ratio_max, ratio.sum AS ratio_sum,
                   coalesce(ratio.n, 0) AS ratio_n, ratio.last AS ratio, disk_state,
                   interval_ms, {_inner(_OVER_MAX)} AS inner_over_max,
                   {_inner(_OVER_FORCIBLY)} AS inner_over_forcibly,
                   {_inner("('warning_level')")} AS inner_warning,
                   coalesce(stuck_rounds, 0) AS stuck, 0 AS error, 0 AS failures,
                   "max".expired_pending AS expired_pending, file_reserved_time_hours,
                   thresholds.warning_level_ratio AS warning_level_ratio
            FROM round_summary)
        SELECT *, coalesce(least(lead(time_ms) OVER w - last_time_ms, 2 * interval_ms),
                           interval_ms) AS tail_ms
        FROM u WINDOW w AS (PARTITION BY cluster, broker, host ORDER BY time_ms)""",
    "daily_reclaim": """
        SELECT dt, cluster, broker, host, kind, reason, count(*) AS files,
               coalesce(sum(bytes), 0) AS bytes
        FROM deletion GROUP BY ALL""",
    "forced_deletions": """
        SELECT dt, cluster, broker, host, count(*) AS files, coalesce(sum(bytes), 0) AS bytes,
               min(age_ms) / 3600000.0 AS min_age_hours,
               quantile_cont(age_ms, 0.5) / 3600000.0 AS median_age_hours,
               max(age_ms) / 3600000.0 AS max_age_hours,
               max(file_reserved_time_hours) AS file_reserved_time_hours
        FROM deletion WHERE forced GROUP BY ALL""",
    "effective_retention": """
        SELECT *, CASE WHEN file_reserved_time_hours > 0
                       THEN p50_age_hours / file_reserved_time_hours END AS p50_vs_reserved
        FROM (SELECT dt, cluster, broker, host, count(*) AS files,
                     sum(forced::INT) AS forced_files,
                     min(age_ms) / 3600000.0 AS min_age_hours,
                     quantile_cont(age_ms, 0.5) / 3600000.0 AS p50_age_hours,
                     quantile_cont(age_ms, 0.95) / 3600000.0 AS p95_age_hours,
                     max(age_ms) / 3600000.0 AS max_age_hours,
                     max(file_reserved_time_hours) AS file_reserved_time_hours
              FROM deletion WHERE kind = 'commitlog' GROUP BY ALL)""",
    "disk_pressure": f"""
        SELECT dt, cluster, broker, host, sum(n) AS rounds, max(ratio_max) AS max_ratio,
               sum(ratio_sum) / sum(ratio_n) AS avg_ratio,
               sum(CASE WHEN disk_state IN {_OVER_MAX} THEN tail_ms ELSE 0 END
                   + inner_over_max) AS ms_over_max_ratio,
               sum(CASE WHEN disk_state IN {_OVER_FORCIBLY} THEN tail_ms ELSE 0 END
                   + inner_over_forcibly) AS ms_over_clean_forcibly,
               sum(CASE WHEN disk_state = 'warning_level' THEN tail_ms ELSE 0 END
                   + inner_warning) AS ms_over_warning_level,
               sum(stuck) AS stuck_rounds, sum(error) AS error_rounds,
               sum(failures) AS failures, max(expired_pending) AS max_expired_pending
        FROM prepared GROUP BY ALL""",
    "capacity_forecast": """
        WITH daily AS (
            SELECT cluster, broker, host, dt, max_ratio,
                   (dt::DATE - DATE '1970-01-01')::DOUBLE AS x
            FROM disk_pressure WHERE max_ratio IS NOT NULL),
        trend AS (
            SELECT cluster, broker, host, count(*) AS n_days, min(dt) AS first_dt,
                   max(dt) AS last_dt, max(x) AS x_last,
                   arg_max(max_ratio, x) AS last_day_max_ratio,
                   regr_slope(max_ratio, x) AS slope_per_day,
                   regr_intercept(max_ratio, x) AS intercept
            FROM daily GROUP BY ALL),
        latest AS (
            SELECT cluster, broker, host, arg_max(ratio, last_time_ms) AS latest_ratio,
                   arg_max(warning_level_ratio, last_time_ms) AS warning_level_ratio
            FROM prepared WHERE ratio IS NOT NULL GROUP BY ALL),
        f AS (
            SELECT t.*, l.latest_ratio, l.warning_level_ratio,
                   coalesce(intercept + slope_per_day * x_last, last_day_max_ratio)
                       AS fitted_ratio_now
            FROM trend t LEFT JOIN latest l USING (cluster, broker, host)),
        d AS (
            SELECT *, CASE WHEN fitted_ratio_now >= warning_level_ratio THEN 0.0
                           WHEN slope_per_day > 0
                           THEN (warning_level_ratio - fitted_ratio_now) / slope_per_day
                      END AS days_to_warning
            FROM f)
        SELECT $as_of AS dt, cluster, broker, host, first_dt, last_dt, n_days, latest_ratio,
               last_day_max_ratio, slope_per_day, fitted_ratio_now, warning_level_ratio,
               days_to_warning,
               CASE WHEN days_to_warning <= 3650 THEN strftime(last_dt::DATE
                   + ceil(days_to_warning)::INTEGER, '%Y-%m-%d') END AS projected_warning_date
        FROM d""",
    "broker_window": """
        WITH dels AS (
            SELECT cluster, broker, host, count(*) AS files_deleted,
                   coalesce(sum(bytes), 0) AS bytes_reclaimed,
                   sum(forced::INT) AS forced_files,
                   coalesce(sum(CASE WHEN forced THEN bytes END), 0) AS forced_bytes,
                   min(CASE WHEN forced THEN age_ms END) / 3600000.0 AS forced_min_age_hours,
                   quantile_cont(CASE WHEN kind = 'commitlog' THEN age_ms END, 0.5)
                       / 3600000.0 AS retention_p50_hours
            FROM deletion GROUP BY ALL),
        press AS (
            SELECT cluster, broker, host, sum(rounds) AS rounds,
                   sum(ms_over_max_ratio) AS ms_over_max_ratio,
                   sum(ms_over_clean_forcibly) AS ms_over_clean_forcibly,
                   sum(ms_over_warning_level) AS ms_over_warning_level,
                   sum(stuck_rounds) AS stuck_rounds, sum(error_rounds) AS error_rounds
            FROM disk_pressure GROUP BY ALL),
        reserved AS (
            SELECT cluster, broker, host,
                   arg_max(file_reserved_time_hours, last_time_ms) AS file_reserved_time_hours
            FROM prepared GROUP BY ALL),
        keys AS (SELECT DISTINCT cluster, broker, host FROM deletion
                 UNION SELECT DISTINCT cluster, broker, host FROM prepared)
        SELECT * FROM keys
        LEFT JOIN dels USING (cluster, broker, host)
        LEFT JOIN press USING (cluster, broker, host)
        LEFT JOIN reserved USING (cluster, broker, host)
        LEFT JOIN (SELECT * EXCLUDE (dt) FROM capacity_forecast) USING (cluster, broker, host)""",
}
KEYS = {
    "daily_reclaim": 6,
    "forced_deletions": 4,
    "effective_retention": 4,
    "disk_pressure": 4,
    "capacity_forecast": 4,
    "fleet_summary": 4,
}

DUCKDB_SCRIPT = r"""
import json, sys, time, duckdb
from retentiond.analytics import risk
target, sqls = sys.argv[1], json.loads(sys.argv[2])
con = duckdb.connect()
con.execute("SET preserve_insertion_order = false")
con.execute("SET enable_progress_bar = false")
trig = ("'triggers':'STRUCT(usage_exceeds BOOLEAN, disk_state VARCHAR, physic_ratio DOUBLE,"
        " logics_ratio DOUBLE, error VARCHAR)'")
common = "'type':'VARCHAR','schema_version':'INTEGER','time_ms':'BIGINT','host':'VARCHAR',"
cols = {
    "deletion": "{" + common + "'kind':'VARCHAR','reason':'VARCHAR','bytes':'BIGINT',"
                "'age_ms':'BIGINT','dry_run':'BOOLEAN','forced':'BOOLEAN',"
                "'file_reserved_time_hours':'INTEGER'}",
    "round": "{" + common + "'interval_ms':'BIGINT'," + trig + ","
             "'deleted':'STRUCT(commitlog STRUCT(files BIGINT))','errors':'VARCHAR[]',"
             "'failures':'INTEGER','expired_pending':'INTEGER',"
             "'file_reserved_time_hours':'INTEGER',"
             "'thresholds':'STRUCT(warning_level_ratio DOUBLE)'}",
    "round_summary": "{" + common + "'last_time_ms':'BIGINT','rounds':'BIGINT',"
             "'disk_state':'VARCHAR','ratio':'STRUCT(max DOUBLE, sum DOUBLE, n BIGINT,"
             " last DOUBLE)','state_ms':'MAP(VARCHAR, BIGINT)','stuck_rounds':'BIGINT',"
             "'max':'STRUCT(expired_pending INTEGER)','interval_ms':'BIGINT',"
             "'file_reserved_time_hours':'INTEGER',"
             "'thresholds':'STRUCT(warning_level_ratio DOUBLE)'}",
}
started = time.monotonic()
for kind, spec in cols.items():
    real = " AND NOT coalesce(dry_run, false)" if kind == "deletion" else ""
    con.execute(
        f"CREATE TABLE {kind} AS SELECT * FROM read_json('{target}/{kind}/*/*/*/*.jsonl.gz', "
        f"columns={spec}, format='newline_delimited', hive_partitioning=true, "
        f"hive_types_autocast=false) WHERE type = '{kind}' "
        f"AND coalesce(schema_version, 1) <= 2{real}"
    )
con.execute(f"CREATE TABLE prepared AS {sqls.pop('prepared')}")
as_of = con.sql("SELECT max(dt) FROM (SELECT dt FROM deletion UNION ALL SELECT dt FROM prepared)"
                ).fetchall()[0][0]
out = {}
def rows(rel):
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]
window = sqls.pop("broker_window")
for name, sql in sqls.items():
    con.execute(f"CREATE TABLE {name} AS {sql.replace('$as_of', repr(str(as_of)))}")
    out[name] = rows(con.sql(f"SELECT * FROM {name}"))
fleet = risk.rank(rows(con.sql(window)))
out["fleet_summary"] = [{**r, "dt": as_of} for r in fleet]
elapsed = time.monotonic() - started
print(json.dumps({"seconds": elapsed, "tables": out}, default=str))
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


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(a)))  # type: ignore[arg-type]
    if isinstance(a, list | tuple) or isinstance(b, list | tuple):
        return list(a or []) == list(b or [])  # type: ignore[call-overload]
    return a == b or str(a) == str(b)


def compare(spark_out: Path, duck: dict[str, list[dict]]) -> dict[str, str]:
    """Both engines' tables, every DuckDB column of every row; a verdict per table."""
    import duckdb

    verdict = {}
    for name, n_key in KEYS.items():
        want = duck[name]
        columns = list(want[0]) if want else []
        rel = duckdb.sql(
            f"SELECT * FROM read_parquet('{spark_out}/{name}/**/*.parquet', "
            "hive_partitioning=true, hive_types_autocast=false, union_by_name=true)"
        )
        got_rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
        key_cols = ["dt", "cluster", "broker", "host", "kind", "reason"][:n_key]
        got = {tuple(str(r[c]) for c in key_cols): r for r in got_rows}
        bad = [
            k
            for r in want
            if (k := tuple(str(r[c]) for c in key_cols)) not in got
            or not all(_same(r[c], got[k].get(c)) for c in columns if c in got[k])
        ]
        extra = len(got) - (len(want) - sum(1 for k in bad if k not in got))
        verdict[name] = (
            f"{len(want)} rows, identical"
            if not bad and not extra
            else f"{len(bad)} of {len(want)} differ, {extra} extra (first: {bad[:1]})"
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


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def write_readme(section: str) -> None:
    text = README.read_text() if README.exists() else "# Benchmarks\n"
    start = text.find(HEADING)
    if start >= 0:
        end = text.find("\n## ", start + len(HEADING))
        rest = text[end + 1 :] if end >= 0 else ""
        # dated "### " notes under the section (earlier runs, what was tried) are kept
        old = text[start : end if end >= 0 else len(text)]
        notes = old.find("\n### ")
        if notes >= 0:
            section = section.rstrip("\n") + "\n" + old[notes:].rstrip("\n") + "\n"
        text = text[:start] + section.rstrip("\n") + "\n" + ("\n" + rest if rest else "")
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
    analysed = counts["deletion"] + counts["round"] + counts.get("round_summary", 0)
    print(f"records: {counts} ({analysed} read by the job)", flush=True)
    size = sum(f.stat().st_size for f in target.rglob("*.gz"))

    saved = work / "spark_result.json"
    spark_load = "(reused)"
    command = " ".join(sys.argv[1:])
    if args.reuse_spark and saved.exists():  # a later step failed: do not redo the long part
        spark_s, spark_rss = json.loads(saved.read_text())
    else:
        shutil.rmtree(out, ignore_errors=True)
        memory = f"--driver-memory {args.driver_memory} pyspark-shell"
        spark_load = _load()
        spark_s, spark_rss, spark_stdout = run_sampled(
            [sys.executable, "-m", "retentiond", "analyze", "--master", "local[*]",
             "--input", str(target), "--output", str(out)],
            {**os.environ, "PYSPARK_SUBMIT_ARGS": memory},
        )  # fmt: skip
        print(spark_stdout.strip(), flush=True)
        saved.write_text(json.dumps([spark_s, spark_rss]))
    print(f"spark: {spark_s:.1f}s, peak RSS {spark_rss / 2**30:.2f} GiB", flush=True)

    duck_load = _load()
    duck_s, duck_rss, duck_stdout = run_sampled(
        [sys.executable, "-c", DUCKDB_SCRIPT, str(target), json.dumps(DUCKDB_SQL)]
    )
    duck = json.loads(duck_stdout.strip().splitlines()[-1])
    print(f"duckdb: {duck_s:.1f}s, peak RSS {duck_rss / 2**30:.2f} GiB", flush=True)
    verdict = compare(out, duck["tables"])
    print(verdict, flush=True)
    print(
        f"{analysed:,} records: Spark {spark_s:.1f} s = {analysed / spark_s:,.0f} records/s, "
        f"DuckDB {duck_s:.1f} s = {analysed / duck_s:,.0f} records/s; "
        f"Spark time / DuckDB time = {spark_s / duck_s:.2f}; load (1, 5, 15 min) at the "
        f"Spark start {spark_load}, at the DuckDB start {duck_load}, after both {_load()}",
        flush=True,
    )

    table = "\n".join(
        [
            "| Engine | What | Wall time | Records/s | Peak RSS (process tree) |",
            "|---|---|---|---|---|",
            f"| Spark, `retentiond analyze --master local[*]` | all six tables + report, "
            f"Parquet written | {spark_s:.1f} s | {analysed / spark_s:,.0f} | "
            f"{spark_rss / 2**30:.2f} GiB |",
            f"| DuckDB, same files | all six tables (fleet ranked by the same `risk.rank`), "
            f"in memory | {duck_s:.1f} s | {analysed / duck_s:,.0f} | "
            f"{duck_rss / 2**30:.2f} GiB |",
            "",
            f"Spark reaches {duck_s / spark_s:.2f} of DuckDB's records/s: **Spark time / "
            f"DuckDB time = {spark_s / duck_s:.2f}** (goal ≤ 3: "
            f"{'met' if spark_s / duck_s <= 3 else 'not met'}).",
        ]
    )
    section = textwrap.dedent(
        f"""\
        {HEADING}

        `bench/bench_spark.py` (`make bench-spark`), run on {time.strftime("%Y-%m-%d")}.
        Input: {sum(counts.values()):,} synthetic records in the journal schema
        ({counts["round"]:,} `round`, {counts.get("round_summary", 0):,} `round_summary`,
        {counts["deletion"]:,} `deletion`, {counts["intent"]:,} `intent`; {plan.brokers}
        brokers in {plan.clusters} clusters, {plan.days} days, a round a minute, idle rounds
        folded as the daemon folds them) written straight to the shipped layout:
        {size / 2**30:.2f} GiB of `.jsonl.gz` in {len(list(target.rglob("*.gz"))):,} files.
        Both engines read the {analysed:,} `deletion`, `round` and `round_summary` records.

        @TABLE@

        Same figures from both engines: {"; ".join(f"`{k}` {v}" for k, v in verdict.items())}.
        Spark's wall time includes starting the JVM (a few seconds) and writing all six tables
        and the report; DuckDB computes the same six tables in memory. On one machine DuckDB is the
        faster peer; the Spark job is the one that scales out (`--master yarn`/`k8s://`/
        `spark://`) when a fleet's journals outgrow a host.

        Machine: {load}; load average (1, 5, 15 min) at the start of the Spark run
        {spark_load}, at the start of the DuckDB run {duck_load}, after both {_load()}.
        Driver memory {args.driver_memory}. Command: `python bench/bench_spark.py {command}`.
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
