"""The validated, immutable configuration every other module reads.

Only ``retentiond.config`` builds a ``Settings``; everything else takes one as an argument, so
a reload is simply "build a new one, swap the reference" and a round never sees half a change.
Field names are snake_case versions of RocketMQ's own keys; units are in the names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from retentiond.config.kafka import KafkaServer

# RocketMQ defaults (MessageStoreConfig, 5.x). See shared/spec/rocketmq.md §3.
DEFAULT_FILE_RESERVED_TIME_HOURS = 72
DEFAULT_DELETE_WHEN = "04"
DEFAULT_DISK_MAX_USED_SPACE_RATIO = 75  # percent, clamped upstream to [10, 95]
DEFAULT_CLEAN_RESOURCE_INTERVAL_MS = 10_000
DEFAULT_DELETE_COMMITLOG_FILES_INTERVAL_MS = 100
DEFAULT_DELETE_CONSUMEQUEUE_FILES_INTERVAL_MS = 100
DEFAULT_DESTROY_MAPPED_FILE_INTERVAL_FORCIBLY_MS = 120_000
DEFAULT_REDELETE_HANGED_FILE_INTERVAL_MS = 120_000
DEFAULT_DELETE_FILE_BATCH_MAX = 10
DEFAULT_DISK_SPACE_CLEAN_FORCIBLY_RATIO = 0.85  # clamped upstream to [0.30, 0.85]
DEFAULT_DISK_SPACE_WARNING_LEVEL_RATIO = 0.90  # clamped upstream to [0.35, 0.90]
DEFAULT_MAPPED_FILE_SIZE_COMMITLOG = 1024 * 1024 * 1024
DEFAULT_MAPPED_FILE_SIZE_CONSUMEQUEUE = 300_000 * 20
DEFAULT_MAX_HASH_SLOT_NUM = 5_000_000
DEFAULT_MAX_INDEX_NUM = 5_000_000 * 4
DEFAULT_INITIAL_DELAY_MS = 60_000
# Journal rotation and shipping (journal.py, ship.py; contract in docs/journal.md).
DEFAULT_JOURNAL_MAX_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_JOURNAL_MAX_SEGMENT_AGE_MS = 3_600_000  # a quiet journal still ships hourly
DEFAULT_JOURNAL_ROUND_SUMMARY_INTERVAL_MS = 300_000  # idle rounds: one summary per 5 min
DEFAULT_SHIP_INTERVAL_MS = 300_000
DEFAULT_SHIP_MAX_LOCAL_BYTES = 256 * 1024 * 1024  # unshipped segments kept while unreachable
DEFAULT_METRICS_LISTEN = "127.0.0.1:9465"  # loopback only; see observe/server.py

CQ_UNIT_SIZE = 20
INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20


@dataclass(frozen=True)
class DaemonSettings:
    """Everything under the ``retentiond:`` key: settings RocketMQ itself does not have."""

    timezone: str | None = None  # IANA name; None = the machine's local zone
    dry_run: bool = False
    journal_dir: Path | None = None  # None = default chosen by the journal module
    initial_delay_ms: int = DEFAULT_INITIAL_DELAY_MS
    control_socket: Path | None = None  # None = <runtime dir>/control.sock (daemon/control.py)
    # Journal rotation and shipping to the fleet (journal.py, ship.py).
    journal_max_segment_bytes: int = DEFAULT_JOURNAL_MAX_SEGMENT_BYTES
    journal_max_segment_age_ms: int = DEFAULT_JOURNAL_MAX_SEGMENT_AGE_MS
    journal_round_summary_interval_ms: int = DEFAULT_JOURNAL_ROUND_SUMMARY_INTERVAL_MS
    ship_target: Path | None = None  # None = shipping off
    ship_interval_ms: int = DEFAULT_SHIP_INTERVAL_MS
    ship_max_local_bytes: int = DEFAULT_SHIP_MAX_LOCAL_BYTES
    # /metrics (observe/): where it listens, and its optional TLS and basic auth. The password
    # is read from a file so the secret never appears in the config, its hash or the logs.
    metrics_listen: str = DEFAULT_METRICS_LISTEN
    metrics_tls_cert_file: Path | None = None
    metrics_tls_key_file: Path | None = None
    metrics_basic_auth_username: str | None = None
    metrics_basic_auth_password_file: Path | None = None


@dataclass(frozen=True)
class Settings:
    store_path_root_dir: Path
    store_path_commitlog: tuple[Path, ...]  # in configured order; several = multi-path
    file_reserved_time_hours: int = DEFAULT_FILE_RESERVED_TIME_HOURS
    delete_when: str = DEFAULT_DELETE_WHEN  # raw, validated; see delete_hours
    delete_hours: tuple[int, ...] = (4,)
    disk_max_used_space_ratio: int = DEFAULT_DISK_MAX_USED_SPACE_RATIO  # percent
    clean_resource_interval_ms: int = DEFAULT_CLEAN_RESOURCE_INTERVAL_MS
    delete_commitlog_files_interval_ms: int = DEFAULT_DELETE_COMMITLOG_FILES_INTERVAL_MS
    delete_consumequeue_files_interval_ms: int = DEFAULT_DELETE_CONSUMEQUEUE_FILES_INTERVAL_MS
    destroy_mapped_file_interval_forcibly_ms: int = DEFAULT_DESTROY_MAPPED_FILE_INTERVAL_FORCIBLY_MS
    redelete_hanged_file_interval_ms: int = DEFAULT_REDELETE_HANGED_FILE_INTERVAL_MS
    clean_file_forcibly_enable: bool = True
    delete_file_batch_max: int = DEFAULT_DELETE_FILE_BATCH_MAX
    disk_space_clean_forcibly_ratio: float = DEFAULT_DISK_SPACE_CLEAN_FORCIBLY_RATIO
    disk_space_warning_level_ratio: float = DEFAULT_DISK_SPACE_WARNING_LEVEL_RATIO
    mapped_file_size_commitlog: int = DEFAULT_MAPPED_FILE_SIZE_COMMITLOG
    mapped_file_size_consumequeue: int = DEFAULT_MAPPED_FILE_SIZE_CONSUMEQUEUE  # multiple of 20
    max_hash_slot_num: int = DEFAULT_MAX_HASH_SLOT_NUM
    max_index_num: int = DEFAULT_MAX_INDEX_NUM
    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    source: Path | None = None  # the file these settings were read from
    # A Kafka broker's server.properties (config/kafka.py): set, the store is its log dirs and
    # the RocketMQ fields above are unused defaults, except the round period
    # (clean_resource_interval_ms = log.retention.check.interval.ms) and the names the journal
    # and the metrics label a store with (broker_name, broker_cluster_name).
    kafka: KafkaServer | None = None

    @property
    def store_kind(self) -> str:
        """``kafka`` or ``rocketmq``: which store kind this configuration describes."""
        return "kafka" if self.kafka is not None else "rocketmq"

    @property
    def store_dirs(self) -> tuple[str, ...]:
        """The store's top directories as configured: the log dirs, or the store root."""
        if self.kafka is not None:
            return self.kafka.log_dirs
        return (str(self.store_path_root_dir),)

    @property
    def store_label(self) -> str:
        """The store as one string (journal origin, ``status``, ``check-config``)."""
        return ",".join(self.store_dirs)

    @property
    def consumequeue_dir(self) -> Path:
        return self.store_path_root_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.store_path_root_dir / "index"

    @property
    def index_file_size(self) -> int:
        return (
            INDEX_HEADER_SIZE
            + self.max_hash_slot_num * INDEX_SLOT_SIZE
            + self.max_index_num * INDEX_ENTRY_SIZE
        )

    @property
    def disk_max_used_ratio_fraction(self) -> float:
        """``diskMaxUsedSpaceRatio / 100.0`` exactly as upstream compares it."""
        return self.disk_max_used_space_ratio / 100.0

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready view, for plans, `status` and reload diffs (paths as strings)."""

        def plain(value: object) -> object:
            if isinstance(value, Path):
                return str(value)
            if isinstance(value, tuple):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return value

        if self.kafka is not None:
            return {
                "kind": "kafka",
                "kafka": plain(self.kafka.as_dict()),
                "broker_name": self.broker_name,
                "broker_cluster_name": self.broker_cluster_name,
                "daemon": plain(dataclasses.asdict(self.daemon)),
            }
        data = dataclasses.asdict(self)
        data.pop("source", None)
        data.pop("kafka", None)
        return {k: plain(v) for k, v in data.items()}

    @property
    def config_hash(self) -> str:
        """Short, stable identity of the effective settings (not of the file's bytes)."""
        canonical = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]
