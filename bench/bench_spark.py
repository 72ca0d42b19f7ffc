"""Time the fleet analysis job at the margin, beside DuckDB on the same files.

    .venv/bin/python bench/bench_spark.py [--brokers-per-cluster 20] [--days 30]
        [--small-days 6] [--repeat 3] [--layout 3] [--keep DIR]

1. writes two synthetic fleets in the journal schema straight to the shipped layout
   (``retentiond.analytics.synth``: the same brokers, a round a minute, plus the deletions,
   RocketMQ and Kafka clusters, losses and rescues), a small one (``--small-days``) and a big
   one (``--days``);
2. runs, ``--repeat`` times and alternately, ``retentiond analyze`` in local mode as a
   separate process (sampling the resident memory of its process tree, Python driver + JVM)
   and the same eight tables with DuckDB (SQL, and the same ``risk.rank`` for the fleet), also
   as a separate process, on the small and on the big fleet, printing the load before each.
   Both engines are timed on the same work: the eight tables, each written as Parquet
   partitioned by day (DuckDB: ``COPY ... TO``). Spark's figure is its process's wall time
   less its report step (the job's own step timing: collecting what the report shows and
   drawing it), which is printed apart; DuckDB's is its process's wall time less what it
   does for the check below (fetching every row into Python);
3. checks that both engines agree on every column of every row of the big fleet's tables;
4. reports the medians and the ratio at the margin, as ../shared/DECISIONS.md defines it:
   (Spark big - Spark small) / (DuckDB big - DuckDB small); and writes the figures and the
   machine to bench/README.md under "## Fleet analysis job" (that section only).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
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


_KAFKA = "plan_only_log_dirs IS NOT NULL"
_WARNING = (
    f"CASE WHEN {_KAFKA} THEN coalesce(thresholds.warning_level_ratio, 0.90) "
    "ELSE thresholds.warning_level_ratio END"
)
_KIND = f"CASE WHEN {_KAFKA} THEN 'kafka' ELSE 'rocketmq' END"
DUCKDB_SQL = {
    "prepared": f"""
        WITH r AS (
            SELECT *, CASE WHEN {_KAFKA} THEN list_max(list_transform(disk, lambda x: x.ratio))
                           ELSE greatest(triggers.physic_ratio, triggers.logics_ratio)
                      END AS r_ratio,
                   {_WARNING} AS r_warning, {_KIND} AS store_kind
            FROM round),
        u AS (
            SELECT dt, cluster, broker, host, time_ms, time_ms AS last_time_ms, 1::BIGINT AS n,
                   r_ratio AS ratio_max, r_ratio AS ratio_sum,
                   CASE WHEN r_ratio IS NULL THEN 0 ELSE 1 END AS ratio_n, r_ratio AS ratio,
                   CASE WHEN {_KAFKA} THEN (CASE WHEN r_ratio > r_warning THEN 'warning_level'
                                                 WHEN r_ratio IS NOT NULL THEN 'ok' END)
                        ELSE triggers.disk_state END AS disk_state,
                   interval_ms,
                   0 AS inner_over_max, 0 AS inner_over_forcibly, 0 AS inner_warning,
                   CASE WHEN coalesce(triggers.usage_exceeds, false)
                             AND coalesce(deleted.commitlog.files, 0) = 0 THEN 1 ELSE 0 END
                       AS stuck,
                   CASE WHEN triggers.error IS NOT NULL OR coalesce(len(errors), 0) > 0
                        THEN 1 ELSE 0 END AS error,
                   coalesce(failures, 0) AS failures, expired_pending,
                   file_reserved_time_hours, r_warning AS warning_level_ratio, store_kind
            FROM r
            UNION ALL BY NAME
            SELECT dt, cluster, broker, host, time_ms, last_time_ms, rounds AS n,
                   ratio.max AS ratio_max, ratio.sum AS ratio_sum,
                   coalesce(ratio.n, 0) AS ratio_n, ratio.last AS ratio, disk_state,
                   interval_ms, {_inner(_OVER_MAX)} AS inner_over_max,
                   {_inner(_OVER_FORCIBLY)} AS inner_over_forcibly,
                   {_inner("('warning_level')")} AS inner_warning,
                   coalesce(stuck_rounds, 0) AS stuck, 0 AS error, 0 AS failures,
                   "max".expired_pending AS expired_pending, file_reserved_time_hours,
                   {_WARNING} AS warning_level_ratio, {_KIND} AS store_kind
            FROM round_summary)
        SELECT *, CASE WHEN lead(time_ms) OVER w IS NULL THEN interval_ms  -- (least skips NULL)
                       ELSE least(lead(time_ms) OVER w - last_time_ms,
                                  coalesce(2 * interval_ms, lead(time_ms) OVER w - last_time_ms))
                  END AS tail_ms
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
              FROM deletion WHERE kind IN ('commitlog', 'kafka_segment') GROUP BY ALL)""",
    "data_at_risk": """
        SELECT dt, cluster, broker, host, kind, g.topic AS topic, g."group" AS "group",
               sum(g.messages) AS messages_lost, count(*) AS files
        FROM (SELECT dt, cluster, broker, host, kind, unnest(loss.groups) AS g
              FROM deletion WHERE len(loss.groups) > 0)
        WHERE g.messages > 0 GROUP BY ALL""",
    "rescue": """
        SELECT dt, cluster, broker, host, reason, count(*) AS files,
               coalesce(sum(bytes), 0) AS bytes
        FROM deletion WHERE coalesce(rescue, false) GROUP BY ALL""",
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
                           WHEN slope_per_day > 1e-9  -- tables.FLAT_SLOPE_PER_DAY
                           THEN (warning_level_ratio - fitted_ratio_now) / slope_per_day
                      END AS days_to_warning
            FROM f)
        SELECT $as_of AS dt, cluster, broker, host, first_dt, last_dt, n_days, latest_ratio,
               last_day_max_ratio, slope_per_day, fitted_ratio_now, warning_level_ratio,
               days_to_warning,
               CASE WHEN days_to_warning <= 3650 THEN strftime(last_dt::DATE
                   + ceil(round(days_to_warning, 6))::INTEGER, '%Y-%m-%d')
               END AS projected_warning_date
        FROM d""",
    "broker_window": """
        WITH dels AS (
            SELECT cluster, broker, host, count(*) AS files_deleted,
                   coalesce(sum(bytes), 0) AS bytes_reclaimed,
                   sum(forced::INT) AS forced_files,
                   coalesce(sum(CASE WHEN forced THEN bytes END), 0) AS forced_bytes,
                   min(CASE WHEN forced THEN age_ms END) / 3600000.0 AS forced_min_age_hours,
                   quantile_cont(CASE WHEN kind IN ('commitlog', 'kafka_segment')
                                      THEN age_ms END, 0.5)
                       / 3600000.0 AS retention_p50_hours,
                   count(DISTINCT CASE WHEN forced AND dt > strftime($as_of::DATE - 7,
                         '%Y-%m-%d') THEN dt END) AS forced_days_7d,
                   coalesce(sum(list_sum(list_transform(loss.groups, lambda g: g.messages))), 0)
                       AS messages_lost,
                   sum(coalesce(rescue, false)::INT) AS rescue_files,
                   coalesce(sum(CASE WHEN rescue THEN bytes END), 0) AS rescue_bytes,
                   max(CASE WHEN rescue THEN dt END) AS last_rescue_dt
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
                   arg_max(file_reserved_time_hours, last_time_ms) AS file_reserved_time_hours,
                   arg_max(store_kind, last_time_ms) AS store_kind
            FROM prepared GROUP BY ALL),
        keys AS (SELECT DISTINCT cluster, broker, host FROM deletion
                 UNION SELECT DISTINCT cluster, broker, host FROM prepared)
        SELECT * FROM keys
        LEFT JOIN dels USING (cluster, broker, host)
        LEFT JOIN press USING (cluster, broker, host)
        LEFT JOIN reserved USING (cluster, broker, host)
        LEFT JOIN (SELECT * EXCLUDE (dt) FROM capacity_forecast) USING (cluster, broker, host)""",
}
_BROKER = ["dt", "cluster", "broker", "host"]
KEYS = {
    "daily_reclaim": [*_BROKER, "kind", "reason"],
    "forced_deletions": _BROKER,
    "effective_retention": _BROKER,
    "disk_pressure": _BROKER,
    "capacity_forecast": _BROKER,
    "data_at_risk": [*_BROKER, "kind", "topic", "group"],
    "rescue": [*_BROKER, "reason"],
    "fleet_summary": _BROKER,
}

DUCKDB_SCRIPT = r"""
import json, os, sys, time, duckdb
from retentiond.analytics import risk
target, output, sqls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
os.makedirs(output, exist_ok=True)
con = duckdb.connect()
con.execute("SET preserve_insertion_order = false")
con.execute("SET enable_progress_bar = false")
trig = ("'triggers':'STRUCT(usage_exceeds BOOLEAN, disk_state VARCHAR, physic_ratio DOUBLE,"
        " logics_ratio DOUBLE, error VARCHAR)'")
common = ("'type':'VARCHAR','schema_version':'INTEGER','time_ms':'BIGINT','host':'VARCHAR',"
          "'file_reserved_time_hours':'INTEGER','interval_ms':'BIGINT',"
          "'thresholds':'STRUCT(warning_level_ratio DOUBLE)','plan_only_log_dirs':'VARCHAR[]',")
cols = {
    "deletion": "'kind':'VARCHAR','reason':'VARCHAR','bytes':'BIGINT',"
                "'age_ms':'BIGINT','dry_run':'BOOLEAN','forced':'BOOLEAN','rescue':'BOOLEAN',"
                "'loss':'STRUCT(groups STRUCT(\"group\" VARCHAR, topic VARCHAR, "
                "messages BIGINT)[])'",
    "round": trig + ",'deleted':'STRUCT(commitlog STRUCT(files BIGINT))','errors':'VARCHAR[]',"
             "'failures':'INTEGER','expired_pending':'INTEGER','disk':'STRUCT(ratio DOUBLE)[]'",
    "round_summary": "'last_time_ms':'BIGINT','rounds':'BIGINT',"
             "'disk_state':'VARCHAR','ratio':'STRUCT(max DOUBLE, sum DOUBLE, n BIGINT,"
             " last DOUBLE)','state_ms':'MAP(VARCHAR, BIGINT)','stuck_rounds':'BIGINT',"
             "'max':'STRUCT(expired_pending INTEGER)'",
}
started = time.monotonic()
def read(glob, spec):
    return (f"SELECT * FROM read_json('{glob}', columns={{{spec}}}, "
            "format='newline_delimited', hive_partitioning=true, hive_types_autocast=false)")
# Every shipped layout: a directory per type (1), every type in one file under v2/ (2), a
# file per family under v3/ (3): the deletions family read with the deletion columns, the
# rounds family once with the round and round_summary columns, then split by type.
mixed = os.path.isdir(f"{target}/v2")
if mixed:
    every = common + ",".join(cols.values())
    con.execute(f"CREATE TABLE raw AS {read(target + '/v2/*/*/*/*.jsonl.gz', every)} "
                "WHERE type IN ('deletion', 'round', 'round_summary')")
families = {"deletions": ("deletion",), "rounds": ("round", "round_summary")}
family_of = {kind: family for family, kinds in families.items() for kind in kinds}
v3 = {family for family in families if os.path.isdir(f"{target}/v3/{family}")}
if "rounds" in v3:
    spec = common + cols["round"] + "," + cols["round_summary"]
    con.execute(f"CREATE TABLE v3_rounds AS {read(target + '/v3/rounds/*/*/*/*.jsonl.gz', spec)}"
                " WHERE type IN ('round', 'round_summary')")
for kind, spec in cols.items():
    real = " AND NOT coalesce(dry_run, false)" if kind == "deletion" else ""
    parts = []
    if os.path.isdir(f"{target}/{kind}"):
        parts.append(f"SELECT * FROM ({read(f'{target}/{kind}/*/*/*/*.jsonl.gz', common + spec)})"
                     f" WHERE type = '{kind}'{real}")
    if mixed:
        parts.append(f"SELECT * FROM raw WHERE type = '{kind}'{real}")
    if family_of[kind] in v3:
        if kind == "deletion":
            glob = f"{target}/v3/deletions/*/*/*/*.jsonl.gz"
            parts.append(f"SELECT * FROM ({read(glob, common + spec)}) WHERE type = '{kind}'{real}")
        else:
            parts.append(f"SELECT * FROM v3_rounds WHERE type = '{kind}'")
    con.execute(f"CREATE TABLE {kind} AS " + " UNION ALL BY NAME ".join(parts))
if mixed:
    con.execute("DROP TABLE raw")
if "rounds" in v3:
    con.execute("DROP TABLE v3_rounds")
con.execute(f"CREATE TABLE prepared AS {sqls.pop('prepared')}")
as_of = con.sql("SELECT max(dt) FROM (SELECT dt FROM deletion UNION ALL SELECT dt FROM prepared)"
                ).fetchall()[0][0]
def rows(rel):
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]
def write(name):
    # as the job writes them: a Parquet dataset per table, a directory per day
    con.execute(f"COPY {name} TO '{output}/{name}' (FORMAT parquet, PARTITION_BY (dt), "
                "OVERWRITE_OR_IGNORE)")
window = sqls.pop("broker_window").replace("$as_of", repr(str(as_of)))
for name, sql in sqls.items():
    con.execute(f"CREATE TABLE {name} AS {sql.replace('$as_of', repr(str(as_of)))}")
    write(name)
losses = {}
for r in rows(con.sql('SELECT cluster, broker, host, "group", topic, sum(messages_lost) AS '
                      'messages FROM data_at_risk GROUP BY ALL')):
    losses.setdefault((r["cluster"], r["broker"], r["host"]), []).append(r)
for v in losses.values():
    v.sort(key=lambda r: (-r["messages"], str(r["group"]), str(r["topic"])))
fleet = risk.rank(rows(con.sql(window)), losses)
fleet = [{**r, "dt": as_of} for r in fleet]
with open(f"{output}/fleet_summary.json", "w") as fh:
    json.dump(fleet, fh, default=str)
con.execute(f"CREATE TABLE fleet_summary AS SELECT * FROM read_json('{output}/fleet_summary.json',"
            " format='array')")
os.remove(f"{output}/fleet_summary.json")
write("fleet_summary")
done = time.monotonic()
# for the check against Spark's tables only (not timed): every row of every table
out = {name: rows(con.sql(f"SELECT * FROM {name}")) for name in sqls}
out["fleet_summary"] = fleet
print(json.dumps({"seconds": done - started, "check_seconds": time.monotonic() - done,
                  "tables": out}, default=str))
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


_TYPE = re.compile(rb'"type":"([a-z_]+)"')


def _lines(path: Path) -> dict[str, int]:
    """Records per type in one shipped file (layout 1: its directory's type; layout 2's mixed
    files and layout 3's family files of ``synth``: each line's compact ``"type":"..."``)."""
    import gzip

    kind = path.parents[3].name  # <target>/<type>/dt=/cluster=/broker=/file
    mixed = kind == "v2" or path.parents[4].name == "v3"  # <target>/v3/<family>/dt=/...
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    if not mixed:
        return {kind: data.count(b"\n")}
    counts: dict[str, int] = {}
    for m in _TYPE.finditer(data):
        counts[m.group(1).decode()] = counts.get(m.group(1).decode(), 0) + 1
    return counts


def count_records(target: Path) -> dict[str, int]:
    """Records per type, counted from the files themselves (in parallel)."""
    from concurrent.futures import ProcessPoolExecutor

    counts = {"deletion": 0, "round": 0, "round_summary": 0, "intent": 0}
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        for found in pool.map(_lines, target.rglob("*.jsonl.gz"), chunksize=64):
            for kind, n in found.items():
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


def _edge(column: str, row: dict) -> bool:
    """A projected date (and the reason quoting it) one day apart because ``days_to_warning``
    is a whole number of days give or take a rounding error, which ``ceil`` turns into a day
    either way."""
    days = row.get("days_to_warning")
    return (
        column in ("projected_warning_date", "risk_reasons")
        and isinstance(days, float)
        and abs(days - round(days)) < 1e-6
    )


def compare(spark_out: Path, duck: dict[str, list[dict]]) -> dict[str, str]:
    """Both engines' tables, every DuckDB column of every row; a verdict per table."""
    import duckdb

    verdict = {}
    for name, key_cols in KEYS.items():
        want = duck[name]
        columns = list(want[0]) if want else []
        rel = duckdb.sql(
            f"SELECT * FROM read_parquet('{spark_out}/{name}/**/*.parquet', "
            "hive_partitioning=true, hive_types_autocast=false, union_by_name=true)"
        )
        got_rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
        got = {tuple(str(r[c]) for c in key_cols): r for r in got_rows}
        bad = [
            k
            for r in want
            if (k := tuple(str(r[c]) for c in key_cols)) not in got
            or not all(_same(r[c], got[k].get(c)) or _edge(c, r) for c in columns if c in got[k])
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


def _median(values: list[float]) -> float:
    return statistics.median(values)


_STEPS = re.compile(r"^steps \(s\): (.*)$", re.M)


def report_seconds(stdout: str) -> float:
    """The report step of ``analyze``'s own step timings (its "steps (s): ..." line)."""
    found = _STEPS.search(stdout)
    if not found:
        raise SystemExit(f"no step timings in the job's output:\n{stdout[-2000:]}")
    report = re.search(r"(?:^|, )report ([0-9.]+)", found.group(1))
    if not report:
        raise SystemExit(f"no report step in the job's step timings: {found.group(0)}")
    return float(report.group(1))


def _run_spark(target: Path, out: Path, memory: str) -> tuple[float, float, int]:
    """(seconds without the report, the report's seconds, peak RSS) of one ``analyze``."""
    shutil.rmtree(out, ignore_errors=True)
    seconds, rss, stdout = run_sampled(
        [sys.executable, "-m", "retentiond", "analyze", "--master", "local[*]",
         "--input", str(target), "--output", str(out)],
        {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--driver-memory {memory} pyspark-shell"},
    )  # fmt: skip
    print("  " + stdout.strip().replace("\n", "\n  "), flush=True)
    report = report_seconds(stdout)
    return seconds - report, report, rss


def _run_duckdb(target: Path, out: Path) -> tuple[float, int, dict]:
    """(seconds without the rows fetched for the check, peak RSS, tables) of one DuckDB run."""
    shutil.rmtree(out, ignore_errors=True)
    seconds, rss, stdout = run_sampled(
        [sys.executable, "-c", DUCKDB_SCRIPT, str(target), str(out), json.dumps(DUCKDB_SQL)]
    )
    result = json.loads(stdout.strip().splitlines()[-1])
    return seconds - result["check_seconds"], rss, result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clusters", type=int, default=12)
    p.add_argument("--brokers-per-cluster", type=int, default=20)
    p.add_argument("--days", type=int, default=30, help="the big fleet's days")
    p.add_argument("--small-days", type=int, default=6, help="the small fleet's days")
    p.add_argument("--rounds-per-day", type=int, default=1440)
    p.add_argument("--layout", type=int, choices=(1, 2, 3), default=3, help="the shipped layout")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--keep", help="generate into (or reuse) this directory")
    p.add_argument("--no-readme", action="store_true")
    args = p.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-spark-"))
    load = machine()
    fleets = {}
    for size, days in (("small", args.small_days), ("big", args.days)):
        plan = Plan(
            args.clusters, args.brokers_per_cluster, days, args.rounds_per_day,
            layout=args.layout,
        )  # fmt: skip
        target = work / f"{size}-layout{args.layout}" / "target"
        if not target.exists():
            started = time.monotonic()
            n = write_fleet(target, plan, workers=os.cpu_count() or 1)
            print(f"{size}: generated {n} records in {time.monotonic() - started:.0f}s", flush=True)
        counts = count_records(target)
        analysed = sum(counts.get(t, 0) for t in ("deletion", "round", "round_summary"))
        files = list(target.rglob("*.jsonl.gz"))
        fleets[size] = {
            "plan": plan, "target": target, "out": target.parent / "out", "counts": counts,
            "analysed": analysed, "files": len(files),
            "bytes": sum(f.stat().st_size for f in files),
            "duck_out": target.parent / "duck-out", "spark": [], "report": [], "duck": [],
            "spark_rss": 0, "duck_rss": 0, "loads": [],
        }  # fmt: skip
        print(f"{size}: {counts} ({analysed:,} read by the job, {len(files):,} files)", flush=True)

    duck_tables: dict = {}
    for i in range(args.repeat):
        for size in ("small", "big"):
            f = fleets[size]
            before = _load()
            spark_s, report_s, spark_rss = _run_spark(f["target"], f["out"], args.driver_memory)
            between = _load()
            duck_s, duck_rss, duck = _run_duckdb(f["target"], f["duck_out"])
            f["spark"].append(spark_s)
            f["report"].append(report_s)
            f["duck"].append(duck_s)
            f["spark_rss"] = max(f["spark_rss"], spark_rss)
            f["duck_rss"] = max(f["duck_rss"], duck_rss)
            f["loads"].append((before, between))
            if size == "big":
                duck_tables = duck["tables"]
            print(
                f"run {i + 1} {size}: Spark {spark_s:.1f} s and its report {report_s:.1f} s "
                f"(load before {before}), DuckDB {duck_s:.1f} s (load before {between})",
                flush=True,
            )
    verdict = compare(fleets["big"]["out"], duck_tables)
    print(verdict, flush=True)
    small, big = fleets["small"], fleets["big"]
    med = {
        (size, eng): _median(fleets[size][eng])
        for size in fleets
        for eng in ("spark", "report", "duck")
    }
    spark_margin = med["big", "spark"] - med["small", "spark"]
    duck_margin = med["big", "duck"] - med["small", "duck"]
    ratio = spark_margin / duck_margin if duck_margin > 0 else float("inf")
    extra = big["analysed"] - small["analysed"]
    paired = [
        (sb - ss) / (db - ds) if db > ds else float("inf")
        for ss, sb, ds, db in zip(
            small["spark"], big["spark"], small["duck"], big["duck"], strict=True
        )
    ]
    after = _load()
    summary = (
        f"at the margin ({extra:,} records): Spark {spark_margin:.1f} s, DuckDB "
        f"{duck_margin:.1f} s, ratio {ratio:.2f}; medians of {args.repeat}: Spark "
        f"{med['small', 'spark']:.1f} / {med['big', 'spark']:.1f} s, DuckDB "
        f"{med['small', 'duck']:.1f} / {med['big', 'duck']:.1f} s (small / big); Spark's "
        f"report apart {med['small', 'report']:.1f} / {med['big', 'report']:.1f} s; load after "
        f"{after}"
    )
    print(summary, flush=True)

    def row(size: str) -> list[str]:
        f = fleets[size]
        runs = lambda xs: ", ".join(f"{x:.1f}" for x in xs)  # noqa: E731
        return [
            f"| {size} ({f['plan'].days} days, {f['analysed']:,} records, {f['files']:,} files, "
            f"{f['bytes'] / 2**30:.2f} GiB) | {med[size, 'spark']:.1f} s ({runs(f['spark'])}) | "
            f"{med[size, 'duck']:.1f} s ({runs(f['duck'])}) | "
            f"{med[size, 'report']:.1f} s ({runs(f['report'])}) | "
            f"{f['spark_rss'] / 2**30:.2f} / {f['duck_rss'] / 2**30:.2f} GiB | "
            + "; ".join(f"{a}, then {b}" for a, b in f["loads"])
            + " |"
        ]

    table = "\n".join(
        [
            "| Fleet | Spark, median (runs) | DuckDB, median (runs) | Spark's report, apart "
            "(runs) | Peak RSS Spark / DuckDB | "
            "Load (1 / 5 / 15 min) before Spark, then before DuckDB, per run |",
            "|---|---|---|---|---|---|",
            *row("small"),
            *row("big"),
            "",
            f"**At the margin** ({extra:,} more records): Spark {spark_margin:.1f} s, DuckDB "
            f"{duck_margin:.1f} s: **Spark / DuckDB = {ratio:.2f}** (goal ≤ 2: "
            f"{'met' if ratio <= 2 else 'not met'}). The same margin taken run by run "
            f"(each run's big minus its small, both engines): "
            f"{', '.join(f'{x:.2f}' for x in paired)}. Spark's report at the margin, not in "
            f"the ratio: {med['big', 'report'] - med['small', 'report']:.1f} s.",
        ]
    )
    counts = big["counts"]
    section = textwrap.dedent(
        f"""\
        {HEADING}

        `bench/bench_spark.py` (`make bench-spark`), run on {time.strftime("%Y-%m-%d %H:%M")} UTC.
        Two synthetic fleets in the journal schema (`retentiond.analytics.synth`:
        {big["plan"].brokers} brokers in {big["plan"].clusters} clusters, every third cluster
        Kafka, a round a minute, idle rounds folded as the daemon folds them, losses and
        rescues), shipped in layout {args.layout}, of {small["plan"].days} and
        {big["plan"].days} days; the big one holds
        {sum(counts.values()):,} records ({counts.get("round", 0):,} `round`,
        {counts.get("round_summary", 0):,} `round_summary`, {counts.get("deletion", 0):,}
        `deletion`, {counts.get("intent", 0):,} `intent`). Both engines read the `deletion`,
        `round` and `round_summary` records, build the same eight tables (the six of before,
        `data_at_risk` and `rescue`) and write each as Parquet, a directory per day (DuckDB:
        `COPY ... TO`). Timed: the same work. Spark's figure is the `analyze` process's wall time
        less its report step (the job's own step timing; the report is shown apart, not in the
        ratio); DuckDB's is its process's wall time less the check's fetching of every row.
        Runs alternate (Spark small, DuckDB small, Spark big, DuckDB big) {args.repeat} times.

        @TABLE@

        Same figures from both engines (big fleet): @VERDICT@.

        Machine: {load}. Driver memory {args.driver_memory}.
        Command: `python bench/bench_spark.py {" ".join(sys.argv[1:])}`.
        """
    ).replace("@TABLE@", table)
    section = section.replace("@VERDICT@", "; ".join(f"`{k}` {v}" for k, v in verdict.items()))
    if not args.no_readme:
        write_readme(section)
        print(f"wrote {README}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
