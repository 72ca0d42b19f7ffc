"""Explicit Spark schemas of the shipped records (docs/journal.md is the contract).

Reading JSON with an explicit schema means no inference pass over the whole fleet's files, the
same column types on every run, and fields unknown to this version simply ignored. ``dt``,
``cluster`` and ``broker`` are also the directory partitions the shipper writes.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

SUPPORTED_SCHEMA_VERSION = 2  # 2 added the keep reason unlink_refused only


def _f(name: str, kind: object) -> StructField:
    return StructField(name, kind, nullable=True)  # type: ignore[arg-type]


_COMMON = [
    _f("schema_version", IntegerType()),
    _f("type", StringType()),
    _f("time_ms", LongType()),
    _f("host", StringType()),
    _f("store", StringType()),
    _f("config_hash", StringType()),
]
_PARTITIONS = [_f("dt", StringType()), _f("cluster", StringType()), _f("broker", StringType())]

DELETION = StructType(
    [
        *_COMMON,
        _f("id", StringType()),
        _f("kind", StringType()),
        _f("file", StringType()),
        _f("reason", StringType()),
        _f("forced", BooleanType()),
        _f("dry_run", BooleanType()),
        _f("disk_ratio_before", DoubleType()),
        _f("bytes", LongType()),
        _f("mtime_ms", LongType()),
        _f("age_ms", LongType()),
        _f("start_offset", LongType()),
        _f("end_offset", LongType()),
        _f("topic", StringType()),
        _f("queue_id", IntegerType()),
        _f("duration_ms", DoubleType()),
        _f("file_reserved_time_hours", IntegerType()),
        *_PARTITIONS,
    ]
)

_KIND_COUNTS = StructType([_f("files", LongType()), _f("bytes", LongType())])

_TRIGGERS = StructType(
    [
        _f("time_up", BooleanType()),
        _f("usage_exceeds", BooleanType()),
        _f("manual", BooleanType()),
        _f("clean_immediately", BooleanType()),
        _f("clean_at_once", BooleanType()),
        _f("physic_ratio", DoubleType()),
        _f("logics_ratio", DoubleType()),
        _f("disk_state", StringType()),
        _f("hour", IntegerType()),
        _f("fired", BooleanType()),
        _f("error", StringType()),
    ]
)
_THRESHOLDS = StructType(
    [
        _f("disk_max_used_ratio", DoubleType()),
        _f("clean_forcibly_ratio", DoubleType()),
        _f("warning_level_ratio", DoubleType()),
    ]
)

ROUND = StructType(
    [
        *_COMMON,
        _f("manual", BooleanType()),
        _f("triggers", _TRIGGERS),
        _f("hour", IntegerType()),
        _f("min_offset_before", LongType()),
        _f("min_offset_after", LongType()),
        _f("queues_examined", BooleanType()),
        _f(
            "deleted",
            StructType(
                [
                    _f("commitlog", _KIND_COUNTS),
                    _f("consumequeue", _KIND_COUNTS),
                    _f("index", _KIND_COUNTS),
                ]
            ),
        ),
        _f("failures", IntegerType()),
        _f("expired_pending", IntegerType()),
        _f("errors", ArrayType(StringType())),
        _f("stopped", BooleanType()),
        _f("duration_ms", DoubleType()),
        _f("file_reserved_time_hours", IntegerType()),
        _f("interval_ms", LongType()),
        _f("thresholds", _THRESHOLDS),
        _f(
            "disk",
            ArrayType(
                StructType(
                    [
                        _f("role", StringType()),
                        _f("path", StringType()),
                        _f("ratio", DoubleType()),
                        _f("total_bytes", LongType()),
                        _f("used_bytes", LongType()),
                        _f("avail_bytes", LongType()),
                        _f("error", StringType()),
                    ]
                )
            ),
        ),
        *_PARTITIONS,
    ]
)

# Idle rounds folded by the daemon (``engine/rollup.py``): what the tables read of them.
ROUND_SUMMARY = StructType(
    [
        *_COMMON,
        _f("last_time_ms", LongType()),
        _f("rounds", LongType()),
        _f("disk_state", StringType()),
        _f(
            "ratio",
            StructType(
                [
                    _f("min", DoubleType()),
                    _f("max", DoubleType()),
                    _f("sum", DoubleType()),
                    _f("n", LongType()),
                    _f("last", DoubleType()),
                ]
            ),
        ),
        _f("state_ms", MapType(StringType(), LongType())),
        _f("stuck_rounds", LongType()),
        _f("max", StructType([_f("expired_pending", IntegerType())])),
        _f("triggers", _TRIGGERS),
        _f("file_reserved_time_hours", IntegerType()),
        _f("interval_ms", LongType()),
        _f("thresholds", _THRESHOLDS),
        *_PARTITIONS,
    ]
)

SCHEMAS = {"deletion": DELETION, "round": ROUND, "round_summary": ROUND_SUMMARY}
