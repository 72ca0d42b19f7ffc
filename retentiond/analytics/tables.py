"""The fleet tables, as DataFrame transformations (no Python UDFs: executors need no
retentiond code, only Spark). Every table is keyed by (cluster, broker, host): a RocketMQ
master and its slave share a broker name but not a disk. Definitions are in docs/journal.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from retentiond.analytics.schema import STATES_WEIGHED

KEY = ["cluster", "broker", "host"]
HOUR_MS = 3_600_000.0
MAX_PROJECTION_DAYS = 3650  # further than ten years out is "not in sight", not a date
DAY_DIGITS = 6  # days to the warning level are rounded to this many decimals before a date
# A trend of at most a billionth of the disk a day is flat: least squares over days whose
# peaks are all equal comes out at +-1e-18 or so, not 0, and a slope that is only rounding
# noise must not project the warning level 10^16 days out (nor order brokers by that figure).
FLAT_SLOPE_PER_DAY = 1e-9
OVER_MAX = list(STATES_WEIGHED)  # over_max_ratio, clean_forcibly, warning_level
OVER_FORCIBLY = ["clean_forcibly", "warning_level"]
# The kinds whose deletions measure retention: a RocketMQ CommitLog file, a Kafka segment.
RETENTION_KINDS = ["commitlog", "kafka_segment"]
# retentiond.kafka.diskWarningRatio's default, for Kafka rounds that name no threshold
KAFKA_WARNING_RATIO = 0.90


def _hours(col: Column) -> Column:
    return col / F.lit(HOUR_MS)


DELETION_COLUMNS = [
    "kind", "reason", "forced", "bytes", "age_ms", "file_reserved_time_hours", "rescue",
    "loss_groups",
]  # fmt: skip
ROUND_COLUMNS = [
    "time_ms", "last_time_ms", "n", "ratio_max", "ratio_sum", "ratio_n", "ratio", "disk_state",
    "interval_ms", "inner_over_max", "inner_over_forcibly", "inner_warning", "stuck", "error",
    "failures", "expired_pending", "file_reserved_time_hours", "warning_level_ratio", "kafka",
]  # fmt: skip


COMMON_COLUMNS = ["type", "schema_version", "dir_type", "dt", *KEY]


def _deletion_columns() -> list[Column]:
    """What the tables read of a deletion, as flat columns."""
    groups = F.col("loss.groups")
    return [
        F.col("dry_run"),
        F.col("kind"),
        F.col("reason"),
        F.col("forced"),
        F.col("bytes"),
        F.col("age_ms"),
        F.coalesce(F.col("rescue"), F.lit(False)).alias("rescue"),
        F.when(F.size(groups) > 0, groups).alias("loss_groups"),
        F.col("file_reserved_time_hours"),
    ]


def _round_columns() -> list[Column]:
    """What the tables read of a round and of a round summary (a round is a summary of
    one), as flat columns."""
    t = F.col("type")
    is_summary = t == "round_summary"
    kafka = F.col("plan_only_log_dirs").isNotNull()  # a field only Kafka rounds carry
    # RocketMQ: the worse of its two ratios; Kafka: the fullest log dir's disk
    ratio = F.when(kafka, F.array_max(F.col("disk.ratio"))).otherwise(
        F.greatest("triggers.physic_ratio", "triggers.logics_ratio")
    )
    warning = F.col("thresholds.warning_level_ratio")
    warning = F.when(kafka, F.coalesce(warning, F.lit(KAFKA_WARNING_RATIO))).otherwise(warning)
    # Kafka has two disk states (ok, warning_level), from its ratio and diskWarningRatio:
    # strictly above it, as the daemon's disk state and its folded rounds (Kafka.disk_state)
    state = F.when(
        kafka,
        F.when(ratio > warning, F.lit("warning_level")).when(ratio.isNotNull(), F.lit("ok")),
    ).otherwise(F.col("triggers.disk_state"))
    cl_deleted = F.coalesce(F.col("deleted.commitlog.files"), F.lit(0))
    errors = F.coalesce(F.size("errors"), F.lit(0))
    zero = F.lit(0).cast("long")

    def pick(summary: Column, round_: Column) -> Column:
        return F.when(is_summary, summary).otherwise(round_)

    return [
        F.col("time_ms"),
        pick(F.col("last_time_ms"), F.col("time_ms")).alias("last_time_ms"),
        pick(F.col("rounds"), F.lit(1).cast("long")).alias("n"),
        pick(F.col("ratio.max"), ratio).alias("ratio_max"),
        pick(F.col("ratio.sum"), ratio).alias("ratio_sum"),
        pick(
            F.coalesce(F.col("ratio.n"), zero),
            F.when(ratio.isNotNull(), 1).otherwise(0).cast("long"),
        ).alias("ratio_n"),
        pick(F.col("ratio.last"), ratio).alias("ratio"),
        pick(F.col("disk_state"), state).alias("disk_state"),
        F.col("interval_ms"),
        pick(_state_ms(OVER_MAX), zero).alias("inner_over_max"),
        pick(_state_ms(OVER_FORCIBLY), zero).alias("inner_over_forcibly"),
        pick(_state_ms(["warning_level"]), zero).alias("inner_warning"),
        pick(
            F.coalesce(F.col("stuck_rounds"), zero),
            (F.coalesce(F.col("triggers.usage_exceeds"), F.lit(False)) & (cl_deleted == 0)).cast(
                "long"
            ),
        ).alias("stuck"),
        pick(zero, (F.col("triggers.error").isNotNull() | (errors > 0)).cast("long")).alias(
            "error"
        ),
        pick(zero, F.coalesce(F.col("failures"), F.lit(0)).cast("long")).alias("failures"),
        pick(F.col("max.expired_pending"), F.col("expired_pending")).alias("expired_pending"),
        F.col("file_reserved_time_hours"),
        warning.alias("warning_level_ratio"),
        # the store kind as a flag, not its name: an aggregate keeps a flag in place, and
        # one name among its figures turns a hash aggregate into a sort of every round
        kafka.alias("kafka"),
    ]


def flatten_deletions(records: DataFrame) -> DataFrame:
    """Deletion records (``schema.READ_DELETIONS``'s columns) as the flat columns the tables
    read, beside what says where each came from (``COMMON_COLUMNS``).

    The job caches this, not the records: Spark's in-memory cache stores nested values as
    serialised rows, which costs far more to build and to scan than the few scalars the
    tables need."""
    return records.select(*COMMON_COLUMNS, *_deletion_columns())


def flatten_rounds(records: DataFrame) -> DataFrame:
    """Round and round-summary records (``schema.READ_ROUNDS``'s columns) as the flat
    columns the tables read, beside ``COMMON_COLUMNS``."""
    return records.select(*COMMON_COLUMNS, *_round_columns())


def daily_reclaim(d: DataFrame) -> DataFrame:
    """Files and bytes reclaimed per day, broker, kind and reason."""
    return d.groupBy("dt", *KEY, "kind", "reason").agg(
        F.count(F.lit(1)).alias("files"),
        F.coalesce(F.sum("bytes"), F.lit(0)).cast("long").alias("bytes"),
    )


def forced_deletions(d: DataFrame) -> DataFrame:
    """Per day and broker: unexpired data deleted because the disk was over the
    clean-forcibly ratio, how much and how young."""
    return (
        d.where(F.col("forced"))
        .groupBy("dt", *KEY)
        .agg(
            F.count(F.lit(1)).alias("files"),
            F.coalesce(F.sum("bytes"), F.lit(0)).cast("long").alias("bytes"),
            _hours(F.min("age_ms")).alias("min_age_hours"),
            _hours(F.percentile("age_ms", 0.5)).alias("median_age_hours"),
            _hours(F.max("age_ms")).alias("max_age_hours"),
            F.max("file_reserved_time_hours").alias("file_reserved_time_hours"),
        )
    )


def data_at_risk(d: DataFrame) -> DataFrame:
    """Per day, broker, file kind, topic and consumer group: messages deleted before the
    group consumed them (``loss.groups`` of the deletion records, schema 3 and up; records
    without it contribute nothing) and how many deleted files held them."""
    g = d.where(F.size("loss_groups") > 0).select(
        "dt", *KEY, "kind", F.explode("loss_groups").alias("g")
    )
    return (
        g.where(F.col("g.messages") > 0)
        .groupBy(
            "dt", *KEY, "kind", F.col("g.topic").alias("topic"), F.col("g.group").alias("group")
        )
        .agg(
            F.sum("g.messages").cast("long").alias("messages_lost"),
            F.count(F.lit(1)).alias("files"),
        )
    )


def rescue(d: DataFrame) -> DataFrame:
    """Per day, broker and reason: what ``retentiond rescue`` deleted (records with
    ``"rescue": true``, schema 4 and up) to get a stopped Kafka broker running again."""
    return (
        d.where(F.col("rescue"))
        .groupBy("dt", *KEY, "reason")
        .agg(
            F.count(F.lit(1)).alias("files"),
            F.coalesce(F.sum("bytes"), F.lit(0)).cast("long").alias("bytes"),
        )
    )


def effective_retention(d: DataFrame) -> DataFrame:
    """Per day and broker: the age of CommitLog files (Kafka: segments) at deletion against
    fileReservedTime (Kafka's retention is per topic: no configured figure here)."""
    reserved = F.col("file_reserved_time_hours")
    pcts = F.col("_pcts")
    out = (
        d.where(F.col("kind").isin(RETENTION_KINDS))
        .groupBy("dt", *KEY)
        .agg(
            F.count(F.lit(1)).alias("files"),
            F.sum(F.col("forced").cast("int")).alias("forced_files"),
            _hours(F.min("age_ms")).alias("min_age_hours"),
            # exact, interpolated as numpy does (not an estimate): both from one aggregate,
            # which keeps every age of the group once
            F.percentile("age_ms", [0.5, 0.95]).alias("_pcts"),
            _hours(F.max("age_ms")).alias("max_age_hours"),
            F.max("file_reserved_time_hours").alias("file_reserved_time_hours"),
        )
    )
    return out.select(
        "dt",
        *KEY,
        "files",
        "forced_files",
        "min_age_hours",
        _hours(pcts[0]).alias("p50_age_hours"),
        _hours(pcts[1]).alias("p95_age_hours"),
        "max_age_hours",
        "file_reserved_time_hours",
        F.when(reserved > 0, _hours(pcts[0]) / reserved).alias("p50_vs_reserved"),
    )


def _state_ms(states: list[str]) -> Column:
    """A summary's time already spent in these states (between its own rounds): its
    ``state_ms``, read as a struct of the states the tables weigh (``schema.STATES_WEIGHED``)."""
    total = F.lit(0).cast("long")
    for state in states:
        total = total + F.coalesce(F.col(f"state_ms.{state}"), F.lit(0).cast("long"))
    return total


def prepare_rounds(
    flat: DataFrame, extra: Sequence[str] = (), apart: Sequence[str] = ()
) -> DataFrame:
    """One row per ``round`` record or ``round_summary`` (a run of folded idle rounds) of
    ``flat`` (``flatten_rounds``: rows of no other type), with what the daily tables
    aggregate: round count, ratio figures, state, time.

    A round stands for the time until the broker's next round, capped at twice the configured
    interval (a stopped daemon is not "time above a threshold"); the last round for one
    interval. A summary already carries the time between its own rounds (``state_ms``); its
    last round is weighed here like any round (``tail_ms``), against the next record's start.

    ``extra`` columns are kept as they are; rows that differ in an ``apart`` column never
    follow one another (the job keeps the rows it does not use, to count them, apart).
    """
    w = Window.partitionBy(*KEY, *apart).orderBy("time_ms")
    # the next record's start as a column: each use of a window expression is a window
    # function of its own, and the tail below reads it three times
    nxt = F.lead("time_ms").over(w).alias("_next")
    items = flat.select("dt", *KEY, *ROUND_COLUMNS, *extra, nxt)
    gap = F.col("_next") - F.col("last_time_ms")
    interval = F.col("interval_ms")
    tail = F.when(gap.isNull(), F.coalesce(interval, F.lit(0))).otherwise(
        F.least(gap, F.coalesce(interval * 2, gap))
    )
    return items.withColumn("tail_ms", tail.cast("long")).drop("interval_ms", "_next")


def _ms_in(states: list[str], inner: str) -> Column:
    tail = F.when(F.col("disk_state").isin(states), F.col("tail_ms")).otherwise(F.lit(0))
    return F.sum(tail + F.col(inner)).cast("long")


# What ``disk_pressure`` keeps of each day's latest round for the per-broker figures
# (``capacity_forecast``, ``broker_window``): not columns of the table it writes.
LATEST_COLUMNS = [
    "_last_ms", "_reserved", "_kafka", "_ratio_ms", "_ratio", "_warning",
]  # fmt: skip


def hourly_rounds(r: DataFrame, extra: Sequence[str] = ()) -> DataFrame:
    """Per day, broker and hour (epoch hours), and ``extra`` columns: the sums, peaks and
    latest figures that ``disk_pressure`` adds up per day, and the records they come from
    (``records``).

    Of ``prepare_rounds``'s rows, one pass right after its window: the job keeps this (a
    few hundred rows per broker and day at most), not the rounds themselves, and takes from it
    the daily table, the per-cluster hourly chart (``hourly_ratio``) and the count of what it
    read. Every figure is a sum, a peak or the value at the latest time, so a day's figure
    from its hours is the figure from its rounds."""
    with_ratio = F.when(F.col("ratio").isNotNull(), F.col("last_time_ms"))
    hour = F.floor(F.col("time_ms") / F.lit(HOUR_MS)).cast("long").alias("hour")
    return r.groupBy("dt", *KEY, hour, *extra).agg(
        F.count(F.lit(1)).alias("records"),
        F.sum("n").cast("long").alias("rounds"),
        F.max("ratio_max").alias("max_ratio"),
        F.sum("ratio_sum").alias("ratio_sum"),
        F.sum("ratio_n").cast("long").alias("ratio_n"),
        _ms_in(OVER_MAX, "inner_over_max").alias("ms_over_max_ratio"),
        _ms_in(OVER_FORCIBLY, "inner_over_forcibly").alias("ms_over_clean_forcibly"),
        _ms_in(["warning_level"], "inner_warning").alias("ms_over_warning_level"),
        F.sum("stuck").cast("long").alias("stuck_rounds"),
        F.sum("error").cast("long").alias("error_rounds"),
        F.sum("failures").cast("long").alias("failures"),
        F.max("expired_pending").alias("max_expired_pending"),
        F.max("last_time_ms").alias("_last_ms"),
        F.max_by("file_reserved_time_hours", "last_time_ms").alias("_reserved"),
        F.max_by("kafka", "last_time_ms").alias("_kafka"),
        # of the rounds that measured a ratio (max_by passes over a null ordering)
        F.max(with_ratio).alias("_ratio_ms"),
        F.max_by("ratio", with_ratio).alias("_ratio"),
        F.max_by("warning_level_ratio", with_ratio).alias("_warning"),
    )


def disk_pressure(h: DataFrame) -> DataFrame:
    """Per day and broker, from ``hourly_rounds``: time above each threshold and rounds that
    could not help; and the day's latest round's figures (``LATEST_COLUMNS``), so that what
    needs a broker's latest round reads one row a day, not every round."""
    summed = [
        "ms_over_max_ratio", "ms_over_clean_forcibly", "ms_over_warning_level",
        "stuck_rounds", "error_rounds", "failures",
    ]  # fmt: skip
    return h.groupBy("dt", *KEY).agg(
        F.sum("rounds").cast("long").alias("rounds"),
        F.max("max_ratio").alias("max_ratio"),
        (F.sum("ratio_sum") / F.sum("ratio_n")).alias("avg_ratio"),
        *(F.sum(c).cast("long").alias(c) for c in summed),
        F.max("max_expired_pending").alias("max_expired_pending"),
        F.max("_last_ms").alias("_last_ms"),
        F.max_by("_reserved", "_last_ms").alias("_reserved"),
        F.max_by("_kafka", "_last_ms").alias("_kafka"),
        F.max("_ratio_ms").alias("_ratio_ms"),
        F.max_by("_ratio", "_ratio_ms").alias("_ratio"),
        F.max_by("_warning", "_ratio_ms").alias("_warning"),
    )


def capacity_forecast(pressure: DataFrame, as_of: str) -> DataFrame:
    """Per broker: least-squares trend of the daily peak disk ratio and the day it reaches
    the warning level (``diskSpaceWarningLevelRatio``: the broker then rejects writes)."""
    day = F.datediff(F.to_date("dt"), F.lit("1970-01-01").cast("date")).cast("double")
    daily = pressure.select(*KEY, "dt", "max_ratio", day.alias("x")).where(
        F.col("max_ratio").isNotNull()
    )
    trend = daily.groupBy(*KEY).agg(
        F.count(F.lit(1)).alias("n_days"),
        F.min("dt").alias("first_dt"),
        F.max("dt").alias("last_dt"),
        F.max("x").alias("x_last"),
        F.max_by("max_ratio", "x").alias("last_day_max_ratio"),
        F.regr_slope("max_ratio", "x").alias("slope_per_day"),
        F.regr_intercept("max_ratio", "x").alias("intercept"),
    )
    latest = pressure.groupBy(*KEY).agg(
        F.max_by("_ratio", "_ratio_ms").alias("latest_ratio"),
        F.max_by("_warning", "_ratio_ms").alias("warning_level_ratio"),
    )
    slope = F.col("slope_per_day")
    fitted = F.coalesce(F.col("intercept") + slope * F.col("x_last"), F.col("last_day_max_ratio"))
    warning = F.col("warning_level_ratio")
    days = (
        F.when(fitted >= warning, F.lit(0.0))
        .when(slope > FLAT_SLOPE_PER_DAY, (warning - fitted) / slope)
        .otherwise(F.lit(None).cast("double"))
    )
    out = trend.join(latest, KEY, "left").select(
        *KEY,
        "first_dt",
        "last_dt",
        "n_days",
        "latest_ratio",
        "last_day_max_ratio",
        slope.alias("slope_per_day"),
        fitted.alias("fitted_ratio_now"),
        warning.alias("warning_level_ratio"),
        days.alias("days_to_warning"),
    )
    # whole days, of the figure rounded to a millionth of a day first: the least-squares sums
    # come out in any order, and a trend that meets the level on a day boundary must not move
    # its date by a day with the last bit of a sum
    whole = F.ceil(F.round("days_to_warning", DAY_DIGITS)).cast("int")
    projected = F.when(
        F.col("days_to_warning") <= MAX_PROJECTION_DAYS,
        F.date_format(F.date_add(F.to_date("last_dt"), whole), "yyyy-MM-dd"),
    )
    return out.withColumn("projected_warning_date", projected).withColumn("dt", F.lit(as_of))


def broker_window(d: DataFrame, pressure: DataFrame, as_of: str) -> DataFrame:
    """Everything the risk ranking needs, one row per broker over the whole window, but the
    messages it lost: those are ``data_at_risk``'s, added up per broker by the job."""
    cl = F.col("kind") == "commitlog"
    retention_age = F.when(F.col("kind").isin(RETENTION_KINDS), F.col("age_ms"))
    recent = F.col("dt") > F.date_format(F.date_sub(F.to_date(F.lit(as_of)), 7), "yyyy-MM-dd")
    dels = d.groupBy(*KEY).agg(
        F.count(F.lit(1)).alias("files_deleted"),
        F.coalesce(F.sum("bytes"), F.lit(0)).cast("long").alias("bytes_reclaimed"),
        F.sum(F.col("forced").cast("int")).alias("forced_files"),
        F.coalesce(F.sum(F.when(F.col("forced"), F.col("bytes"))), F.lit(0))
        .cast("long")
        .alias("forced_bytes"),
        _hours(F.min(F.when(F.col("forced"), F.col("age_ms")))).alias("forced_min_age_hours"),
        _hours(F.percentile(retention_age, F.lit(0.5))).alias("retention_p50_hours"),
        F.sum(cl.cast("int")).alias("commitlog_files_deleted"),
        # days (a set of at most 7): no distinct aggregate, which doubles every row
        F.size(F.collect_set(F.when(F.col("forced") & recent, F.col("dt")))).alias(
            "forced_days_7d"
        ),
        F.sum(F.col("rescue").cast("int")).cast("long").alias("rescue_files"),
        F.coalesce(F.sum(F.when(F.col("rescue"), F.col("bytes"))), F.lit(0))
        .cast("long")
        .alias("rescue_bytes"),
        F.max(F.when(F.col("rescue"), F.col("dt"))).alias("last_rescue_dt"),
    )
    press = pressure.groupBy(*KEY).agg(
        F.sum("rounds").cast("long").alias("rounds"),
        F.sum("ms_over_max_ratio").cast("long").alias("ms_over_max_ratio"),
        F.sum("ms_over_clean_forcibly").cast("long").alias("ms_over_clean_forcibly"),
        F.sum("ms_over_warning_level").cast("long").alias("ms_over_warning_level"),
        F.sum("stuck_rounds").cast("long").alias("stuck_rounds"),
        F.sum("error_rounds").cast("long").alias("error_rounds"),
        F.max_by("_reserved", "_last_ms").alias("file_reserved_time_hours"),
        F.max_by("_kafka", "_last_ms").alias("_kafka"),
    )
    kafka = F.col("_kafka")
    store_kind = F.when(kafka, F.lit("kafka")).when(kafka.isNotNull(), F.lit("rocketmq"))
    press = press.withColumn("store_kind", store_kind).drop("_kafka")
    # every broker with a deletion or a round
    return dels.join(press, KEY, "full")


def top_losses(risk: DataFrame, by: str, limit: int) -> DataFrame:
    """The ``limit`` topics or groups (``by``) that lost the most messages over the window,
    with the brokers and clusters where they did."""
    return (
        risk.groupBy(by)
        .agg(
            F.sum("messages_lost").cast("long").alias("messages_lost"),
            F.sum("files").cast("long").alias("files"),
            F.count_distinct("cluster", "broker", "host").alias("brokers"),
            F.array_sort(F.collect_set(F.concat_ws("/", "cluster", "broker"))).alias("where"),
            F.max("dt").alias("last_dt"),
        )
        .orderBy(F.desc("messages_lost"), by)
        .limit(limit)
    )


def hourly_ratio(h: DataFrame) -> DataFrame:
    """Per broker and hour (epoch hours), from ``hourly_rounds``: the peak disk ratio, for
    the per-cluster charts."""
    return (
        h.where(F.col("max_ratio").isNotNull())
        .groupBy(*KEY, "hour")
        .agg(F.max("max_ratio").alias("ratio"))
    )
