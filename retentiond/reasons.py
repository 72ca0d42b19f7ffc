"""The one vocabulary of verdicts and reasons.

Plans, journal records, log lines, metric labels and the Spark tables all use these strings,
so adding or renaming a member is a schema change: bump ``SCHEMA_VERSION`` with it.

A store kind that lives outside this package declares its own file kinds and reasons with
``register_kind`` and ``register_reason``: each gives back a ``str`` with a ``value``, as the
members of ``Kind`` and ``Reason`` are, which plans, the journal, metrics and status take as
they take those (``FileKind`` and ``AnyReason`` name either). A registered value can never be
one of the package's own, so a record or a metric label always means one thing.
"""

from __future__ import annotations

import re
import threading
from enum import StrEnum
from typing import TypeAlias, TypeVar

# 2: reason unlink_refused; the Kafka file kind and its reasons. 3: the deletion's loss; keep
# reasons unconsumed and pending_timer. 4: one plan envelope for every kind; not_expired for
# every kept file younger than its retention; plans say when. 5: Kafka leftovers and rescue:
# file kind partition_dir; reasons delete_dir_leftover, orphan_partition, stray_partition,
# rescue_beyond_retention; "rescue": true on records. 6: the RocketMQ file kind timerlog
# (docs/journal.md keeps the table)
SCHEMA_VERSION = 6


class Kind(StrEnum):
    """Which file queue a file belongs to."""

    COMMITLOG = "commitlog"
    CONSUMEQUEUE = "consumequeue"
    INDEX = "index"
    TIMERLOG = "timerlog"  # RocketMQ 5.x timer log: its files go by the CommitLog minimum
    KAFKA_SEGMENT = "kafka_segment"  # a Kafka segment: its .log and companions go together
    PARTITION_DIR = "partition_dir"  # a whole Kafka partition dir (a leftover), with its files


class Verdict(StrEnum):
    DELETE = "delete"
    KEEP = "keep"


class Reason(StrEnum):
    # Reasons to delete.
    EXPIRED = "expired"  # older than fileReservedTime in a delete-hour round
    DISK_OVER_MAX_RATIO = "disk_over_max_ratio"  # expired, pass opened by diskMaxUsedSpaceRatio
    FORCED_OVER_CLEAN_FORCIBLY_RATIO = "forced_over_clean_forcibly_ratio"  # unexpired, forced
    MANUAL = "manual"  # expired, pass opened by a manual round
    BELOW_COMMITLOG_MIN_OFFSET = "below_commitlog_min_offset"  # CQ/index fully below CL min
    FORCED_AFTER_HOLD = "forced_after_hold"  # held by another process past the forcible interval

    # Reasons to keep.
    NEWEST_FILE = "newest_file"  # newest file holding data, or pre-allocated after it
    NOT_EXPIRED = "not_expired"  # younger than fileReservedTime: it would not go in any pass
    NOT_TIME_TO_DELETE = "not_time_to_delete"  # no trigger fired this round
    BATCH_LIMIT = "batch_limit"  # deleteFileBatchMax reached; for a file that would go
    AFTER_FIRST_KEPT = "after_first_kept"  # would go, but is behind a file that does not
    HOLDS_LIVE_OFFSET = "holds_live_offset"  # CQ/index still points at or above CL min
    MIN_OFFSET_UNCHANGED = "min_offset_unchanged"  # CL min offset did not move since last round
    UNREADABLE = "unreadable"  # a value needed for the decision could not be read
    BAD_SIZE = "bad_size"  # length differs from the configured file size
    HELD_BY_OTHER_PROCESS = "held_by_other_process"  # first attempt: wait for the interval
    STORE_ERROR = "store_error"  # the store (or a path of it) could not be measured
    UNLINK_REFUSED = "unlink_refused"  # the last unlink failed (EPERM, EROFS...): backing off
    # The opt-in guard (retentiond.guard.* = keep): the file holds what a reader still needs.
    UNCONSUMED = "unconsumed"  # unread messages of an active consumer group
    PENDING_TIMER = "pending_timer"  # pending timer, delay-level or half messages

    # Kafka (UnifiedLog.deleteOldSegments, shared/spec/kafka.md §2): reasons to delete.
    LOG_START_OFFSET_BREACH = "log_start_offset_breach"  # wholly below the log start offset
    RETENTION_BYTES_BREACH = "retention_bytes_breach"  # partition over retention.bytes
    RETENTION_MS_BREACH = "retention_ms_breach"  # largest timestamp older than retention.ms
    # `retentiond rescue --beyond-retention`: oldest first past the configured retention
    RESCUE_BEYOND_RETENTION = "rescue_beyond_retention"
    # Kafka partition dirs (file kind partition_dir); also the keep reason of one not removed
    DELETE_DIR_LEFTOVER = "delete_dir_leftover"  # a -delete dir past file.delete.delay.ms
    ORPHAN_PARTITION = "orphan_partition"  # its topic id is no longer in the metadata log
    STRAY_PARTITION = "stray_partition"  # a -stray dir (KRaft never deletes them)
    # Kafka: reasons to keep.
    WITHIN_RETENTION = "within_retention"  # no pass's predicate holds for it
    ABOVE_HIGH_WATERMARK = "above_high_watermark"  # holds offsets at or above the HW
    FUTURE_TIMESTAMP = "future_timestamp"  # its (or an earlier segment's) timestamp is ahead
    EMPTY_ACTIVE_SEGMENT = "empty_active_segment"  # the trailing empty segment always stays
    COMPACTED = "compacted"  # cleanup.policy compact: log-start-offset breaches only
    CLEANER_DISABLED = "cleaner_disabled"  # compacted and log.cleaner.enable=false
    TIERED = "tiered"  # remote.storage.enable: retention needs the remote tier's offsets
    CLUSTER_METADATA = "cluster_metadata"  # __cluster_metadata: KRaft's own log
    TRANSIENT_PARTITION_DIR = "transient_partition_dir"  # -delete, -future, -stray
    UNKNOWN_TOPIC_CONFIG = "unknown_topic_config"  # the topic's effective config is unknown
    BROKER_RUNNING = "broker_running"  # another process holds the log dir's .lock


DELETE_REASONS = frozenset(
    {
        Reason.EXPIRED,
        Reason.DISK_OVER_MAX_RATIO,
        Reason.FORCED_OVER_CLEAN_FORCIBLY_RATIO,
        Reason.MANUAL,
        Reason.BELOW_COMMITLOG_MIN_OFFSET,
        Reason.FORCED_AFTER_HOLD,
    }
)

# The Kafka kind's reasons to delete (kept apart until the journal docs and metrics list them).
KAFKA_DELETE_REASONS = frozenset(
    {
        Reason.LOG_START_OFFSET_BREACH,
        Reason.RETENTION_BYTES_BREACH,
        Reason.RETENTION_MS_BREACH,
        Reason.RESCUE_BEYOND_RETENTION,
    }
)
# The reasons a whole Kafka partition dir (file kind partition_dir) is removed for.
KAFKA_DIR_REASONS = frozenset(
    {Reason.DELETE_DIR_LEFTOVER, Reason.ORPHAN_PARTITION, Reason.STRAY_PARTITION}
)


class Cause(StrEnum):
    """Why a planned deletion did not happen (``engine.execute.Outcome.cause``): the label of
    ``retentiond_delete_failures_total``, the ``cause`` of ``once --json`` and of log lines."""

    CHANGED = "changed"  # the file changed since the plan, or its rule no longer holds
    GONE = "gone"  # the file went away by itself: what was wanted, not a failure
    UNLINK_FAILED = "unlink_failed"  # unlink refused it (EPERM, EROFS, EBUSY...)
    CONTAINMENT = "containment"  # its directory could not be reached inside the store
    JOURNAL = "journal"  # the intent could not be journaled: nothing more this round


# Deleting these removed data that had not reached fileReservedTime.
FORCED_REASONS = frozenset({Reason.FORCED_OVER_CLEAN_FORCIBLY_RATIO})


# ---- file kinds and reasons of store kinds outside the package ---------------------------

_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a metric label value, a column value, a word


class _Extra(str):
    """A value declared by a store kind outside the package, read like an enum member."""

    __slots__ = ()

    @property
    def value(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class ExtraKind(_Extra):
    """A file kind declared by a store kind outside the package (``register_kind``)."""

    __slots__ = ()


class ExtraReason(_Extra):
    """A reason declared by a store kind outside the package (``register_reason``)."""

    __slots__ = ()


FileKind: TypeAlias = Kind | ExtraKind  # which file queue a file belongs to
AnyReason: TypeAlias = Reason | ExtraReason  # why a file goes or stays

_E = TypeVar("_E", ExtraKind, ExtraReason)
_lock = threading.Lock()
_kinds: dict[str, ExtraKind] = {}
_reasons: dict[str, ExtraReason] = {}


def _register(value: str, own: frozenset[str], table: dict[str, _E], make: type[_E]) -> _E:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(
            f"{value!r}: a registered name is lower-case letters, digits and '_', "
            "starting with a letter, at most 64 characters"
        )
    if value in own:
        raise ValueError(f"{value!r} is already retentiond's own; a kind cannot redefine it")
    with _lock:
        got = table.get(value)
        if got is None:
            got = table[value] = make(value)
        return got


def register_kind(value: str) -> ExtraKind:
    """Declare a file kind of a store kind outside the package; the same object for the
    same value every time. Raises ValueError for a built-in value or a malformed name."""
    return _register(value, _OWN_KINDS, _kinds, ExtraKind)


def register_reason(value: str) -> ExtraReason:
    """Declare a reason (to delete or to keep) of a store kind outside the package; the same
    object for the same value every time. Raises ValueError for a built-in value or a
    malformed name."""
    return _register(value, _OWN_REASONS, _reasons, ExtraReason)


def file_kind(value: str) -> FileKind:
    """The file kind named ``value``, built in or registered; ValueError if none is."""
    if value in _OWN_KINDS:
        return Kind(value)
    got = _kinds.get(value)
    if got is None:
        raise ValueError(f"{value!r} is not a file kind")
    return got


def reason(value: str) -> AnyReason:
    """The reason named ``value``, built in or registered; ValueError if none is."""
    if value in _OWN_REASONS:
        return Reason(value)
    got = _reasons.get(value)
    if got is None:
        raise ValueError(f"{value!r} is not a reason")
    return got


def registered() -> tuple[tuple[ExtraKind, ...], tuple[ExtraReason, ...]]:
    """The file kinds and reasons registered so far, in registration order."""
    with _lock:
        return tuple(_kinds.values()), tuple(_reasons.values())


_OWN_KINDS = frozenset(k.value for k in Kind)
_OWN_REASONS = frozenset(r.value for r in Reason)
