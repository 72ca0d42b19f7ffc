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

from retentiond.journal.ship import family_of

# Records of every version up to this one are read (docs/journal.md, "Versioning"): 2 added
# the keep reason unlink_refused; 3 the deletion's `loss`; 4 changed only plans and the kept
# files' reasons, so its records read as version 3's; 5 the Kafka partition_dir file kind and
# the rescue's reasons and `rescue` field; 6 the RocketMQ timerlog file kind (and its count in
# a round's `deleted`). A record without `loss` or `rescue` contributes nothing to the tables
# built on them; a newer record is skipped, and counted as such.
SUPPORTED_SCHEMA_VERSION = 6


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
        _f("partition", IntegerType()),
        _f("rescue", BooleanType()),
        _f(
            "loss",
            StructType(
                [
                    _f("progress", StringType()),
                    _f("messages", LongType()),
                    _f(
                        "groups",
                        ArrayType(
                            StructType(
                                [
                                    _f("group", StringType()),
                                    _f("topic", StringType()),
                                    _f("messages", LongType()),
                                    _f("state", StringType()),
                                ]
                            )
                        ),
                    ),
                    _f("timers", LongType()),
                    _f("half_messages", LongType()),
                ]
            ),
        ),
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
                    _f("timerlog", _KIND_COUNTS),
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
        _f("plan_only_log_dirs", ArrayType(StringType())),
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

# Idle rounds folded by the daemon (``journal/rollup.py``): what the tables read of them.
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
        _f("plan_only_log_dirs", ArrayType(StringType())),
        *_PARTITIONS,
    ]
)

SCHEMAS = {"deletion": DELETION, "round": ROUND, "round_summary": ROUND_SUMMARY}


def prune(schema: StructType, keep: dict[str, object]) -> StructType:
    """The part of ``schema`` named by ``keep`` (a field -> True, or -> a nested ``keep`` for a
    struct, an array of structs, or a map read as a struct of the keys named).

    The job reads each record type with only the fields its tables use: the JSON parser then
    skips every other value (file names, ids, triggers it does not need) instead of building
    it, which is most of the cost of reading a record.
    """
    fields = []
    for f in schema.fields:
        want = keep.get(f.name)
        if want is True:
            fields.append(f)
        elif isinstance(want, dict) and isinstance(f.dataType, StructType):
            fields.append(_f(f.name, prune(f.dataType, want)))
        elif (
            isinstance(want, dict)
            and isinstance(f.dataType, ArrayType)
            and isinstance(f.dataType.elementType, StructType)
        ):
            fields.append(_f(f.name, ArrayType(prune(f.dataType.elementType, want))))
        elif isinstance(want, dict) and isinstance(f.dataType, MapType):
            # a map read as a struct of the keys wanted (JSON objects are both)
            fields.append(_f(f.name, StructType([_f(k, f.dataType.valueType) for k in want])))
    return StructType(fields)


def merge(*schemas: StructType) -> StructType:
    """One schema holding every field of ``schemas`` (structs merged field by field): how a
    file of the mixed layout, where every record type shares the file, is read in one pass."""
    fields: dict[str, StructField] = {}
    for schema in schemas:
        for f in schema.fields:
            have = fields.get(f.name)
            if have is None:
                fields[f.name] = f
            elif isinstance(have.dataType, StructType) and isinstance(f.dataType, StructType):
                fields[f.name] = _f(f.name, merge(have.dataType, f.dataType))
            elif have.dataType != f.dataType:
                raise ValueError(f"{f.name}: {have.dataType} and {f.dataType}")
    return StructType(list(fields.values()))


#: The disk states whose time the tables add up (``tables.OVER_MAX``): a summary's
#: ``state_ms`` is read as a struct of these alone (the parser skips the other states), not
#: as a map, which Spark can only sum through interpreted higher-order functions.
STATES_WEIGHED = ("over_max_ratio", "clean_forcibly", "warning_level")

_READ = {"schema_version": True, "type": True, "host": True, "file_reserved_time_hours": True}
_READ_PARTITIONS = {"dt": True, "cluster": True, "broker": True}
_READ_ROUNDS = {
    **_READ,
    **_READ_PARTITIONS,
    "time_ms": True,
    "interval_ms": True,
    "thresholds": {"warning_level_ratio": True},
}

#: What the tables read of each record type (``job.read_family``); the rest is never parsed.
READ_SCHEMAS = {
    "deletion": prune(
        DELETION,
        {
            **_READ,
            **_READ_PARTITIONS,
            **dict.fromkeys(
                ["kind", "reason", "forced", "dry_run", "bytes", "age_ms", "rescue"], True
            ),
            "loss": {"groups": True},
        },
    ),
    "round": prune(
        ROUND,
        {
            **_READ_ROUNDS,
            "triggers": dict.fromkeys(
                ["usage_exceeds", "physic_ratio", "logics_ratio", "disk_state", "error"], True
            ),
            "deleted": {"commitlog": {"files": True}},
            **dict.fromkeys(["failures", "expired_pending", "errors"], True),
            "disk": {"ratio": True},
            "plan_only_log_dirs": True,
        },
    ),
    "round_summary": prune(
        ROUND_SUMMARY,
        {
            **_READ_ROUNDS,
            "last_time_ms": True,
            "rounds": True,
            "disk_state": True,
            "ratio": dict.fromkeys(["max", "sum", "n", "last"], True),
            "state_ms": dict.fromkeys(STATES_WEIGHED, True),
            "stuck_rounds": True,
            "max": {"expired_pending": True},
            "plan_only_log_dirs": True,
        },
    ),
}

#: Record types the job reads, in the order of ``READ_SCHEMAS``.
READ_TYPES = tuple(READ_SCHEMAS)

#: The two families of records the tables read, each read apart into its own frame: the
#: deletions (the per-deletion tables) and the rounds (each broker's rounds in time order),
#: as layout 3 ships them (``journal.ship.family_of``: ``v3/<family>/``), with the types of
#: each that the job reads.
FAMILIES = {
    family: tuple(t for t in READ_TYPES if family_of(t) == family)
    for family in ("deletions", "rounds")
}
READ_DELETIONS = READ_SCHEMAS["deletion"]
READ_ROUNDS = merge(READ_SCHEMAS["round"], READ_SCHEMAS["round_summary"])
FAMILY_SCHEMAS = {"deletions": READ_DELETIONS, "rounds": READ_ROUNDS}
