"""The Spark job: read the shipped records, build the tables, write Parquet and the report.

Runs on an embedded ``local[*]`` Spark by default, on any cluster through ``--master`` or
``spark-submit``. Tables are written partitioned by ``dt`` with dynamic partition overwrite,
so a nightly run over ``--since 35d`` replaces those days and keeps older ones.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark.errors import AnalysisException, PySparkRuntimeError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from retentiond.analytics import report as report_mod
from retentiond.analytics import risk, tables
from retentiond.analytics.schema import (
    FAMILIES,
    FAMILY_SCHEMAS,
    READ_SCHEMAS,
    READ_TYPES,
    SUPPORTED_SCHEMA_VERSION,
)
from retentiond.journal.ship import FAMILY_DIR, MIXED_DIR

# Exit codes of the README's table (retentiond.commands.common, which this module, below the
# commands, does not import).
EXIT_USAGE = 2
EXIT_NO_SPARK = 11  # Java is missing
EXIT_NO_RECORDS = 12  # the input holds no records (since --since): no report written

TABLES = (
    "daily_reclaim",
    "forced_deletions",
    "effective_retention",
    "disk_pressure",
    "capacity_forecast",
    "data_at_risk",
    "rescue",
    "fleet_summary",
)
TOP_OFFENDERS = 20
# Jobs the driver submits at once while it writes the tables (``analyze``).
SIDE_BY_SIDE = 4
# The embedded driver's C2 inlining budgets (``local_conf``).
JIT_OPTIONS = ("-XX:InlineSmallCode=1000", "-XX:FreqInlineSize=100")

FLEET_SCHEMA = StructType(
    [
        StructField("rank", IntegerType()),
        StructField("cluster", StringType()),
        StructField("broker", StringType()),
        StructField("host", StringType()),
        StructField("risk_level", StringType()),
        StructField("risk_score", IntegerType()),
        StructField("risk_factors", ArrayType(StringType())),
        StructField("risk_reasons", ArrayType(StringType())),
        StructField("latest_ratio", DoubleType()),
        StructField("last_day_max_ratio", DoubleType()),
        StructField("slope_per_day", DoubleType()),
        StructField("warning_level_ratio", DoubleType()),
        StructField("days_to_warning", DoubleType()),
        StructField("projected_warning_date", StringType()),
        StructField("files_deleted", LongType()),
        StructField("bytes_reclaimed", LongType()),
        StructField("forced_files", LongType()),
        StructField("forced_bytes", LongType()),
        StructField("forced_min_age_hours", DoubleType()),
        StructField("retention_p50_hours", DoubleType()),
        StructField("file_reserved_time_hours", IntegerType()),
        StructField("rounds", LongType()),
        StructField("ms_over_max_ratio", LongType()),
        StructField("ms_over_clean_forcibly", LongType()),
        StructField("ms_over_warning_level", LongType()),
        StructField("stuck_rounds", LongType()),
        StructField("error_rounds", LongType()),
        StructField("store_kind", StringType()),
        StructField("forced_days_7d", LongType()),
        StructField("messages_lost", LongType()),
        StructField("rescue_files", LongType()),
        StructField("rescue_bytes", LongType()),
        StructField("last_rescue_dt", StringType()),
        StructField("dt", StringType()),
    ]
)


@dataclass
class Inputs:
    """What the job had: where it looked, what it read and what it left out, and why."""

    root: str
    since: str | None = None
    layouts: dict[str, int] = field(default_factory=dict)  # layout -> files read
    records: dict[str, int] = field(default_factory=dict)  # record type -> records used
    versions: dict[int, int] = field(default_factory=dict)  # schema version -> records
    skipped: dict[str, int] = field(default_factory=dict)  # why -> records
    first_dt: str | None = None
    last_dt: str | None = None
    days: int = 0
    brokers: int = 0
    clusters: int = 0

    def lines(self) -> list[str]:
        """The inputs in words, for the log and the top of the report."""
        files = (
            ", ".join(f"{n:,} files of layout {k}" for k, n in sorted(self.layouts.items()))
            or "no files"
        )
        since = f" since {self.since}" if self.since else ""
        out = [
            f"read {self.root}{since}: {files}",
            f"{sum(self.records.values()):,} records used ("
            + ", ".join(f"{n:,} {t}" for t, n in self.records.items())
            + f") from {self.brokers} brokers in {self.clusters} clusters over {self.days} days"
            + (f" ({self.first_dt} to {self.last_dt})" if self.first_dt else ""),
            "schema versions: "
            + (", ".join(f"{v}: {n:,}" for v, n in sorted(self.versions.items())) or "none"),
        ]
        if self.skipped:
            out.append(
                "skipped: " + "; ".join(f"{n:,} {why}" for why, n in sorted(self.skipped.items()))
            )
        else:
            out.append("skipped: nothing")
        return out


@dataclass
class Result:
    as_of: str | None
    inputs: Inputs | None = None
    counts: dict[str, int] = field(default_factory=dict)  # tables written (fleet: its rows)
    report: Path | None = None
    seconds: float = 0.0
    # wall seconds per step, in order (the first action reads and caches every input once):
    # where the time goes, for profiling at fleet scale
    steps: dict[str, float] = field(default_factory=dict)


def local_conf(progress: bool) -> dict[str, str]:
    """The settings of an embedded (local) session: no web UI; Spark's own console progress
    bar (stages and tasks, redrawn on stderr) only for a person at a terminal (``progress``);
    file:// through the raw local file system: Hadoop's default wraps it in a checksum layer
    that looks for a ``.crc`` side file next to every input file (the shipper writes none)
    and writes one next to every Parquet file; this session is the only reader that would
    check them."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true" if progress else "false",
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    }
    options = []
    if not _chosen("GC"):
        # The embedded driver is the whole job: throughput, not pause times, is what counts.
        # The parallel collector made the job over a month of a 180-broker fleet use about a
        # tenth less CPU than G1, the JVM's default (bench/README.md, "Fleet analysis job").
        options.append("-XX:+UseParallelGC")
    if not _chosen("Inline"):
        # A nightly job is a cold JVM: its optimising (C2) compiler compiles Spark's
        # generated code and the JSON parser while the tasks run, on the same cores. With
        # smaller inlining budgets (HotSpot's defaults: 2500 and 325 bytes of bytecode) each
        # compile costs far less: over a month of a 180-broker fleet on 2 cores, C2 takes
        # about 20 s of CPU instead of 35 s and the job 7 s less, with no slower task code
        # (bench/README.md, "Fleet analysis job").
        options += JIT_OPTIONS
    if options:
        # Spark's "default" Java options: the user's own (extraJavaOptions) come after them.
        conf["spark.driver.defaultJavaOptions"] = " ".join(options)
    return conf


def _chosen(what: str) -> bool:
    """Whether the user already picks the driver's JVM options, or those naming ``what``
    (``GC``: its garbage collector; ``Inline``: the JIT's inlining), in
    ``PYSPARK_SUBMIT_ARGS``, ``JAVA_TOOL_OPTIONS`` or ``JDK_JAVA_OPTIONS``."""
    given = " ".join(
        os.environ.get(k, "")
        for k in ("PYSPARK_SUBMIT_ARGS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS")
    )
    return what in given or "defaultJavaOptions" in given


def build_session(master: str | None, progress: bool | None = None) -> SparkSession:
    """The session of a run: ``master``, or the one spark-submit passes, else an embedded
    ``local[*]``. ``progress`` (default: whether stderr is a terminal) turns Spark's console
    progress bar on for an embedded session."""
    builder = SparkSession.builder.appName("retentiond-analyze")
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit passes its master
    if master:
        builder = builder.master(master)
    elif not under_submit:
        builder = builder.master("local[*]")
    if not under_submit and (master is None or master.startswith("local")):
        if progress is None:
            progress = sys.stderr.isatty()
        for key, value in local_conf(progress).items():
            builder = builder.config(key, value)
    return builder.getOrCreate()


def configure(spark: SparkSession, paths: tuple[str, ...] = ()) -> None:
    """Session settings the tables depend on (UTC days, replace only the days computed).

    Shuffle partitions and the cost of opening a file: unless the user set them (``--conf``),
    sized for the shipped layout (and, below, the listing, the cache and a local session's
    Hadoop conf). Shuffle partitions: twice the cores instead of Spark's
    fixed 200. The aggregates are per broker and day, far smaller than the input;
    200 partitions of a few rows each cost more in task overhead than the work they hold.
    """
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    sc = spark.sparkContext
    if not sc.getConf().contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(max(8, 2 * sc.defaultParallelism)))
    if not sc.getConf().contains("spark.sql.files.openCostInBytes"):
        # Shipped files are small gzip files (one per type, day and broker, tens of KiB) that
        # Spark cannot split. Its default "cost" of 4 MiB per opened file packs only ~32 of
        # them into a task, so a fleet's month becomes thousands of tasks; 256 KiB packs
        # hundreds per task, a few tasks per core.
        spark.conf.set("spark.sql.files.openCostInBytes", str(256 * 1024))
    if not sc.getConf().contains("spark.sql.inMemoryColumnarStorage.compressed"):
        # The cached records are read a few times, in memory, right after: compressing
        # them (gathering dictionary and run-length statistics per column) costs more CPU
        # than it saves, and a month of a 500-broker fleet fits uncompressed in a few GiB.
        spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", "false")
    if not sc.getConf().contains("spark.sql.sources.parallelPartitionDiscovery.threshold"):
        # List the day directories (a month: 30 of them) in parallel, not one by one on the
        # driver: a fleet's month is tens of thousands of broker directories per type.
        spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "8")
    if not sc.getConf().contains("spark.sql.json.filterPushdown.enabled"):
        # The only filter on a read is on the record's type, and a journal line carries its
        # keys in name order: "type" is among the last, so the parser cannot skip a line
        # early, and checking the pushed filter after every field it sets cost an eighth of
        # the rounds' parse. Spark filters the parsed rows instead.
        spark.conf.set("spark.sql.json.filterPushdown.enabled", "false")
    if not sc.getConf().contains("spark.sql.objectHashAggregate.sortBased.fallbackThreshold"):
        # The exact percentiles (and the sets of forced days) keep every group's values in
        # a hash map; past 128 groups in a task Spark's default sorts every row instead. A
        # group is a broker and day (a month of a 500-broker fleet: 15,000); its values are
        # the ages of that day's deletions, the whole input at most.
        spark.conf.set("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", "32768")
    if sc.master.startswith("local"):
        local = bool(paths) and all(_is_local(p) for p in paths)
        _trim_hadoop_defaults(spark, local_files=local)


# Default resources of Hadoop services an embedded local[*] session never talks to.
_UNUSED_DEFAULTS = ("yarn-default.xml", "mapred-default.xml")
# core-default.xml families of other file systems and of RPC services, unused when every
# path of the job is local.
_REMOTE_PREFIXES = (
    "fs.s3a.", "fs.gs.", "fs.azure", "fs.abfs", "fs.wasb", "fs.adl.", "adl.", "fs.viewfs.",
    "fs.ftp.", "ftp.", "ipc.", "rpc.", "hadoop.rpc.", "hadoop.http.", "hadoop.registry.",
    "hadoop.ssl.", "ha.", "hadoop.zk.", "hadoop.caller", "hadoop.prometheus", "nfs.",
)  # fmt: skip


def _trim_hadoop_defaults(spark: SparkSession, *, local_files: bool) -> None:
    """Drop the YARN and MapReduce *default* properties from a local session's Hadoop conf
    (and, when every path is local, core defaults of other file systems and RPC services).

    Spark copies the whole Hadoop ``Configuration`` (``new JobConf``) and scans it twice
    (``FutureIO.propagateOptions``) for every file it opens. With the ~1,100 properties of
    Hadoop's default resources, that is about half of the time to read one shipped file
    (a few hundred records in a few tens of KiB of gzip), and a fleet's month is tens of
    thousands of them. The 720 properties of ``yarn-default.xml`` and ``mapred-default.xml``
    are for services a local job does not use; of the few it reads (the output committer's),
    Spark sets its own (``mapreduce.fileoutputcommitter.algorithm.version``) and the code
    has the same defaults. Properties set anywhere else (``*-site.xml``, ``spark.hadoop.*``,
    Spark's own) are kept. Only for ``local`` masters: on a cluster the YARN and
    MapReduce settings may matter to the resource manager and the committers.
    """
    # ~1,100 properties down to ~140: 10 days of a 540-broker fleet took a fifth less CPU
    # (bench/README.md, "Fleet analysis job").
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    writer = jvm.java.io.StringWriter()
    jvm.org.apache.hadoop.conf.Configuration.dumpConfiguration(conf, writer)
    for prop in json.loads(writer.toString())["properties"]:
        source, key = prop.get("resource"), prop["key"]
        if source in _UNUSED_DEFAULTS or (
            local_files and source == "core-default.xml" and key.startswith(_REMOTE_PREFIXES)
        ):
            conf.unset(key)
    _forget_sources(spark, conf)


def _forget_sources(spark: SparkSession, conf: Any) -> None:
    """Forget where the properties no longer set came from.

    ``Configuration.unset`` leaves a removed property's entry in the conf's record of where
    each property came from (a private map that only ``getPropertySources`` reads), and each
    copy of the conf, one per file read, copies the whole map: after ``_trim_hadoop_defaults``,
    a thousand entries for the 140 properties left. The record keeps the properties still set
    (the private ``properties``, reached by reflection like the record); where this Hadoop lacks
    either field, nothing is done (it only saves time).
    """
    jvm: Any = spark.sparkContext._jvm  # type: ignore[attr-defined]
    try:
        cls = jvm.java.lang.Class.forName("org.apache.hadoop.conf.Configuration")
        record, props = (cls.getDeclaredField(n) for n in ("updatingResource", "properties"))
        record.setAccessible(True)
        props.setAccessible(True)
        sources, current = record.get(conf), props.get(conf)
        if sources is not None and current is not None:
            sources.keySet().retainAll(current.keySet())
    except Py4JError:
        return


def _read_json(spark: SparkSession, path: str, schema: StructType) -> DataFrame | None:
    """JSON lines under ``path`` with ``schema``; None when there is no such directory."""
    if not _exists(spark, path):
        # asked first: Spark's reader logs a Java stack trace for a missing path before it
        # raises (a fleet whose brokers never shipped a round_summary has no such directory)
        return None
    try:
        return spark.read.schema(schema).option("basePath", path).json(path)
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" not in str(exc) and "does not exist" not in str(exc):
            raise
        return None


def _conform(df: DataFrame, schema: StructType, layout: int, place: str | None) -> DataFrame:
    """A read of any layout with every column of ``schema`` (absent ones null), its layout
    and what its place says the records are (``dir_type``: layout 1's type directory, layout
    3's family; None for layout 2)."""
    have = set(df.columns)
    cols = [
        F.col(f.name) if f.name in have else F.lit(None).cast(f.dataType).alias(f.name)
        for f in schema.fields
    ]
    return df.select(
        *cols,
        F.lit(layout).alias("layout"),
        F.lit(place).cast("string").alias("dir_type"),
    )


def read_family(
    spark: SparkSession, root: str, family: str, since: str | None
) -> tuple[DataFrame, dict[str, int]]:
    """Every record of one family (``schema.FAMILIES``: the deletions, or the rounds and
    round summaries) of every shipped layout, with the fields its tables use (the JSON
    parser skips the rest); and the files read per layout.

    The shipped layouts (``journal.ship``): 1, a directory per record type
    (``<input>/<type>/dt=/cluster=/broker=/``); 2, every type of a segment's day in one file
    (``<input>/v2/dt=/...``); 3, each family in its own (``<input>/v3/<family>/dt=/...``).
    Layout 3 ships each family of a segment's day in its own file, layout 1 each type, so
    each family's frame reads only its own files. Layout 2's files hold every type: both
    families read them, each keeping its own types; the rounds also keep the lines that are
    not records at all, so that they are counted once."""
    base = root.rstrip("/")
    schema = FAMILY_SCHEMAS[family]
    types = FAMILIES[family]
    t = F.col("type")
    frames, files = [], {}
    df = _read_json(spark, f"{base}/{FAMILY_DIR}/{family}", schema)
    if df is not None:
        frames.append(_conform(df, schema, 3, family))
        files["3"] = len(df.inputFiles())
    for kind in types:
        df = _read_json(spark, f"{base}/{kind}", READ_SCHEMAS[kind])
        if df is not None:
            frames.append(_conform(df, schema, 1, kind))
            files["1"] = files.get("1", 0) + len(df.inputFiles())
    mixed = _read_json(spark, f"{base}/{MIXED_DIR}", schema)
    if mixed is not None:
        mine = t.isin(list(types))
        if family == "rounds":
            mine = mine | t.isNull()
            files["2"] = len(mixed.inputFiles())
        frames.append(_conform(mixed.where(mine), schema, 2, None))
    if not frames:
        frames.append(_conform(spark.createDataFrame([], schema), schema, 1, None))
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    if since:
        out = out.where(F.col("dt") >= since)
    # Other types (intent, abort: shipped for audits) share the deletions' files; only lines
    # that are not records at all are kept beside the types the job reads, to be counted.
    return out.where(t.isNull() | t.isin(list(READ_TYPES))), files


def _why(family: str) -> Column:
    """Why a record of ``family``'s frame is not used (null: it is)."""
    t, place = F.col("type"), F.col("dir_type")
    # layout 3's place is a family, layout 1's a type
    where_it_belongs = place == t
    for name, types in FAMILIES.items():
        where_it_belongs = F.when(place == name, t.isin(*types)).otherwise(where_it_belongs)
    why = (
        F.when(t.isNull(), F.lit("unreadable lines (not JSON, or not a journal record)"))
        .when(
            place.isNotNull() & ~where_it_belongs,
            F.lit("records filed under another type's directory"),
        )
        .when(
            F.coalesce(F.col("schema_version"), F.lit(1)) > SUPPORTED_SCHEMA_VERSION,
            F.lit(f"records of a schema newer than this job's ({SUPPORTED_SCHEMA_VERSION})"),
        )
    )
    if family == "deletions":
        why = why.when(
            (t == "deletion") & F.coalesce(F.col("dry_run"), F.lit(False)),
            F.lit("dry-run deletions (nothing was deleted)"),
        )
    return why


def read_deletions(spark: SparkSession, root: str, since: str | None) -> tuple[DataFrame, dict]:
    """The deletions' frame, flat (``tables.flatten_deletions``), every record read with
    ``why`` it is not used (null: it is); and the files read per layout."""
    raw, files = read_family(spark, root, "deletions", since)
    flat = tables.flatten_deletions(raw).withColumn("why", _why("deletions"))
    return flat.drop("dir_type"), files


def read_rounds(spark: SparkSession, root: str, since: str | None) -> tuple[DataFrame, dict]:
    """The rounds' frame, per day, broker and hour (``tables.hourly_rounds``, of
    ``tables.prepare_rounds``: each broker's rounds and summaries in time order, and the time
    each stands for), apart by record type, schema version and ``why`` its records are not
    used (null: they are), with how many records each row stands for (``records``); and the
    files read per layout. Records not used never follow used ones in time order."""
    raw, files = read_family(spark, root, "rounds", since)
    flat = tables.flatten_rounds(raw).withColumn("why", _why("rounds")).drop("dir_type")
    apart = ("type", "schema_version", "why")
    return tables.hourly_rounds(tables.prepare_rounds(flat, apart, ("why",)), apart), files


def _used(frame: DataFrame) -> DataFrame:
    return frame.where(F.col("why").isNull()).drop("type", "schema_version", "why")


def used_deletions(frame: DataFrame) -> DataFrame:
    """Of the deletions' frame (``read_deletions``), the deletions that happened (not dry
    runs, nor records the job does not use), with only the columns the tables read."""
    return _used(frame).select("dt", *tables.KEY, *tables.DELETION_COLUMNS)


def _inputs(
    frames: tuple[DataFrame, ...], root: str, since: str | None, files: dict[str, int]
) -> Inputs:
    """One aggregate over each cached frame: what there was, and what was left out (a frame
    with a ``records`` column, the rounds', holds that many records a row)."""
    rows = []
    for frame in frames:
        n = F.sum("records") if "records" in frame.columns else F.count(F.lit(1))
        rows += (
            frame.groupBy("why", "type", F.col("schema_version").alias("version"), "dt")
            .agg(n.cast("long").alias("n"))
            .collect()
        )
    keys = [f.where(F.col("why").isNull()).select(*tables.KEY) for f in frames]
    union = keys[0]
    for k in keys[1:]:
        union = union.union(k)
    brokers = (
        union.distinct()
        .groupBy()
        .agg(F.count(F.lit(1)).alias("b"), F.count_distinct("cluster").alias("c"))
        .collect()[0]
    )
    inputs = Inputs(root, since, dict(sorted(files.items())))
    days = set()
    for r in rows:
        if r["why"] is not None:
            inputs.skipped[r["why"]] = inputs.skipped.get(r["why"], 0) + r["n"]
            continue
        inputs.records[r["type"]] = inputs.records.get(r["type"], 0) + r["n"]
        v = r["version"] if r["version"] is not None else 1
        inputs.versions[v] = inputs.versions.get(v, 0) + r["n"]
        days.add(r["dt"])
    inputs.records = {k: inputs.records[k] for k in READ_TYPES if k in inputs.records}
    inputs.days = len(days)
    inputs.first_dt, inputs.last_dt = (min(days), max(days)) if days else (None, None)
    inputs.brokers, inputs.clusters = int(brokers["b"] or 0), int(brokers["c"] or 0)
    return inputs


def _write(df: DataFrame, output: str, name: str) -> None:
    """Write a table partitioned by day; a table that is still empty afterwards (no partition
    at all, say ``forced_deletions`` for a healthy fleet) gets one Parquet file with its
    schema and no rows, so that every reader sees an empty table instead of an error."""
    path = f"{output.rstrip('/')}/{name}"
    # one file per day (the aggregates are small): not one per day and shuffle partition
    df.repartition("dt").write.mode("overwrite").partitionBy("dt").parquet(path)
    spark = df.sparkSession
    if not _has_days(spark, path):
        spark.createDataFrame([], df.schema).coalesce(1).write.mode("overwrite").parquet(path)


def _exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` exists, through Hadoop's FileSystem (any input Spark reads)."""
    jvm: Any = spark.sparkContext._jvm  # type: ignore[attr-defined]
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return bool(hpath.getFileSystem(conf).exists(hpath))


def _has_days(spark: SparkSession, path: str) -> bool:
    """Whether a written table has any ``dt=`` partition: one listing through Hadoop's
    FileSystem (any output Spark writes to), not a read of the table, which would be a job
    and a Parquet footer per table."""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    root = jvm.org.apache.hadoop.fs.Path(path)
    fs = root.getFileSystem(conf)
    if not fs.exists(root):
        return False
    return any(
        s.isDirectory() and s.getPath().getName().startswith("dt=") for s in fs.listStatus(root)
    )


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def analyze(
    spark: SparkSession,
    input_root: str,
    output: str,
    *,
    since: str | None = None,
    report_dir: Path | None = None,
) -> Result:
    """Build and write every table (and the report); the tests call this with their session."""
    started = time.monotonic()
    configure(spark, (input_root, output))
    # One scan of each family's files, flattened to the scalars the tables read and kept in
    # memory: the deletions as they are; the rounds, weighed in each broker's time order,
    # added up per broker and hour. The inputs' figures and every table come from these two
    # caches.
    deletions_read, files = read_deletions(spark, input_root, since)
    rounds_read, round_files = read_rounds(spark, input_root, since)
    for layout, n in round_files.items():
        files[layout] = files.get(layout, 0) + n
    read = (deletions_read.cache(), rounds_read.cache())
    inputs = _inputs(read, input_root, since, files)
    mark = _Stopwatch(started)
    steps = {"read, parse and cache the records": mark()}
    deletions = used_deletions(read[0])
    prepared = _used(read[1])
    as_of = inputs.last_dt
    if as_of is None:
        for df in read:
            df.unpersist()
        return Result(None, inputs, seconds=time.monotonic() - started)
    pressure = tables.disk_pressure(prepared).cache()
    forecast = tables.capacity_forecast(pressure, as_of).cache()
    at_risk = tables.data_at_risk(deletions).cache()
    built = {
        "daily_reclaim": tables.daily_reclaim(deletions).cache(),
        "forced_deletions": tables.forced_deletions(deletions),
        "effective_retention": tables.effective_retention(deletions),
        "disk_pressure": pressure.drop(*tables.LATEST_COLUMNS),
        "capacity_forecast": forecast,
        "data_at_risk": at_risk,
        "rescue": tables.rescue(deletions),
    }
    result = Result(as_of, inputs, steps=steps)
    window = tables.broker_window(deletions, pressure, as_of)
    merged = window.join(forecast.drop("dt"), tables.KEY, "left")
    # The tables and the per-broker figures of the ranking are independent jobs over the
    # same caches: submitted side by side, the cores that one job's last tasks (or its
    # single writing task) leave idle run another's, and the driver plans one while the
    # executors run another.
    with ThreadPoolExecutor(max_workers=SIDE_BY_SIDE, thread_name_prefix="table") as pool:
        writes = [pool.submit(_write, df, output, name) for name, df in built.items()]
        per_broker = pool.submit(_rows, merged)
        lost = pool.submit(_losses_by_broker, at_risk)
        for future in writes:
            future.result()
        rows, losses = per_broker.result(), lost.result()
    for name in built:
        result.counts[name] = -1  # not counted: a count would be one more pass over the data
    steps[f"the {len(built)} tables, side by side"] = mark()
    fleet = risk.rank(_with_losses(rows, losses), losses)
    fleet_df = spark.createDataFrame([_fleet_row(r, as_of) for r in fleet], FLEET_SCHEMA)
    _write(fleet_df, output, "fleet_summary")
    result.counts["fleet_summary"] = len(fleet)
    steps["fleet_summary"] = mark()
    if report_dir is not None:
        result.report = _report(report_dir, as_of, inputs, fleet, built, prepared)
        steps["report"] = mark()
    for df in (*read, pressure, forecast, at_risk, built["daily_reclaim"]):
        df.unpersist()
    result.seconds = time.monotonic() - started
    return result


def _losses_by_broker(at_risk: DataFrame) -> dict[tuple, list[dict[str, Any]]]:
    """Per broker, its (group, topic) pairs that lost messages over the window, worst first."""
    rows = _rows(
        at_risk.groupBy(*tables.KEY, "group", "topic").agg(
            F.sum("messages_lost").cast("long").alias("messages")
        )
    )
    out: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r["cluster"], r["broker"], r["host"]), []).append(r)
    for v in out.values():
        v.sort(key=lambda r: (-r["messages"], str(r["group"]), str(r["topic"])))
    return out


def _with_losses(
    rows: list[dict[str, Any]], losses: dict[tuple, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Each broker's row with ``messages_lost``: the sum of its groups' losses (``losses``),
    0 for a broker that deleted and lost nothing, None for one that deleted nothing."""
    for r in rows:
        key = (r["cluster"], r["broker"], r["host"])
        lost = losses.get(key)
        if lost:
            r["messages_lost"] = sum(g["messages"] for g in lost)
        else:
            r["messages_lost"] = 0 if r.get("files_deleted") is not None else None
    return rows


class _Stopwatch:
    """Seconds since the last call (the first: since ``started``)."""

    def __init__(self, started: float) -> None:
        self.last = started

    def __call__(self) -> float:
        now = time.monotonic()
        spent, self.last = now - self.last, now
        return round(spent, 2)


def _fleet_row(r: dict[str, Any], as_of: str) -> dict[str, Any]:
    row: dict[str, Any] = {f.name: r.get(f.name) for f in FLEET_SCHEMA.fields}
    for f in FLEET_SCHEMA.fields:
        value = row[f.name]
        if value is None:
            continue
        if isinstance(f.dataType, LongType | IntegerType):
            row[f.name] = int(value)
        elif isinstance(f.dataType, DoubleType):
            row[f.name] = float(value)
    row["dt"] = as_of
    return row


def _report(
    directory: Path,
    as_of: str,
    inputs: Inputs,
    fleet: list[dict],
    built: dict[str, DataFrame],
    prepared: DataFrame,
) -> Path:
    """Collect what the report shows (small: per broker and day, or the top offenders) and
    write it."""
    charted = report_mod.charted_brokers(fleet)
    keys = [tuple(r[k] for k in tables.KEY) for r in charted]
    spark = prepared.sparkSession
    wanted = spark.createDataFrame(keys, ", ".join(f"{k} string" for k in tables.KEY))
    hourly = tables.hourly_ratio(prepared.join(F.broadcast(wanted), tables.KEY, "left_semi"))
    reclaim = built["daily_reclaim"]
    at_risk = built["data_at_risk"]
    data = report_mod.ReportData(
        as_of=as_of,
        inputs=inputs.lines(),
        fleet=fleet,
        hourly=_rows(hourly),
        broker_reclaim=_rows(
            reclaim.join(F.broadcast(wanted), tables.KEY, "left_semi")
            .groupBy("dt", *tables.KEY, "reason")
            .agg(F.sum("bytes").alias("bytes"))
        ),
        fleet_reclaim=_rows(
            reclaim.groupBy("dt", "reason").agg(F.sum("bytes").cast("long").alias("bytes"))
        ),
        kind_reclaim=_rows(
            reclaim.groupBy("kind", "reason").agg(
                F.sum("files").cast("long").alias("files"),
                F.sum("bytes").cast("long").alias("bytes"),
            )
        ),
        top_topics=_rows(tables.top_losses(at_risk, "topic", TOP_OFFENDERS)),
        top_groups=_rows(tables.top_losses(at_risk, "group", TOP_OFFENDERS)),
        data_at_risk=_rows(
            at_risk.orderBy(F.desc("messages_lost")).limit(report_mod.FULL_ROWS_MAX)
        ),
        data_at_risk_rows=at_risk.count(),
        rescue=_rows(built["rescue"].orderBy(F.desc("dt"), *tables.KEY)),
    )
    return report_mod.write_report(directory, data)


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def run(args: argparse.Namespace) -> int:
    report = args.report
    if report is None:
        if not _is_local(args.output):
            print("error: --output is not a local path: pass --report DIR", file=sys.stderr)
            return EXIT_USAGE
        report = str(Path(args.output.removeprefix("file://")) / "report")
    try:
        spark = build_session(args.master)
    except PySparkRuntimeError as exc:
        condition = getattr(exc, "getCondition", exc.getErrorClass)()  # (3.5: no getCondition)
        if condition != "JAVA_GATEWAY_EXITED":
            raise
        print(
            "error: Spark could not start its Java gateway: `retentiond analyze` needs Java "
            "17+ (JAVA_HOME or java on the PATH); no report written",
            file=sys.stderr,
        )
        return EXIT_NO_SPARK
    try:
        result = analyze(spark, args.input, args.output, since=args.since, report_dir=Path(report))
    finally:
        spark.stop()
    for line in result.inputs.lines() if result.inputs else ():
        print(f"inputs: {line}", file=sys.stderr)
    if result.as_of is None:
        since = f" since {args.since}" if args.since else ""
        print(f"error: no records under {args.input}{since}; no report written", file=sys.stderr)
        return EXIT_NO_RECORDS
    print(
        f"analysed up to {result.as_of} in {result.seconds:.1f}s: wrote "
        f"{', '.join(result.counts)} to {args.output} "
        f"({result.counts['fleet_summary']} brokers ranked)"
    )
    print(f"report: {result.report}")
    print("steps (s): " + ", ".join(f"{k} {v}" for k, v in result.steps.items()))
    return 0
