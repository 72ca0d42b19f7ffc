"""The daemon's own keys: the ``retentiond:`` block every store kind's file may carry.

Journal, shipping, the control socket, ``/metrics``, dry runs and the time zone are the
daemon's business, not the broker's, so they are the same keys for every kind and live here;
a kind adds them to its own table (``KeyTable``), and they land in ``DaemonSettings``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from retentiond.config import metrics
from retentiond.config.guard import GUARD_KEYS
from retentiond.config.keys import ConfigKey, Format, Invalid, Kind, ValueType
from retentiond.config.settings import (
    DEFAULT_INITIAL_DELAY_MS,
    DEFAULT_JOURNAL_MAX_SEGMENT_AGE_MS,
    DEFAULT_JOURNAL_MAX_SEGMENT_BYTES,
    DEFAULT_JOURNAL_ROUND_SUMMARY_INTERVAL_MS,
    DEFAULT_METRICS_LISTEN,
    DEFAULT_SHIP_INTERVAL_MS,
    DEFAULT_SHIP_LAYOUT,
    DEFAULT_SHIP_MAX_LOCAL_BYTES,
    SHIP_LAYOUTS,
    DaemonSettings,
)

__all__ = [
    "DAEMON_KEYS",
    "DAEMON_NAMESPACE",
    "RESTART_KEYS",
    "cross_checks",
    "daemon_settings",
]

DAEMON_NAMESPACE = "retentiond"


def _layout(spec: ConfigKey, raw: object, fmt: Format) -> int:
    """A shipped layout: a whole number as every integer key takes it, one of ``SHIP_LAYOUTS``."""
    *first, last = (str(n) for n in SHIP_LAYOUTS)
    must = f"must be {', '.join(first)} or {last} (the shipped layout)"
    try:
        value = Kind.INT.coerce(spec, raw, fmt)
    except Invalid as exc:  # keeps the why: "not a string; remove the quotes"
        raise Invalid(must + str(exc).removeprefix("must be a whole number")) from None
    if value not in SHIP_LAYOUTS:
        raise Invalid(must)
    return value


LAYOUT = ValueType(
    "shipped layout", _layout, lambda spec: " / ".join(f"`{n}`" for n in SHIP_LAYOUTS)
)

DAEMON_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "retentiond.cluster",
        "daemon.cluster",
        Kind.TEXT,
        "A human name for the cluster: the `cluster` label of every metric series, the "
        "journal's origin, `status` and the shipped layout's `cluster=` directory.",
        default=None,
        default_doc="the cluster name the store's own configuration gives",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.timezone",
        "daemon.timezone",
        Kind.ZONE,
        "Zone in which the store's hours of the day are read; the broker uses the JVM's default "
        "zone.",
        default=None,
        default_doc="the machine's local zone",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.dryRun",
        "daemon.dry_run",
        Kind.BOOL,
        "Plan every round and report it, but delete (and journal) nothing.",
        default=False,
    ),
    ConfigKey(
        "retentiond.journal.dir",
        "daemon.journal_dir",
        Kind.PATH,
        "Where the write-ahead deletion journal is kept.",
        default=None,
        default_doc="chosen by the journal",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.journal.maxSegmentBytes",
        "daemon.journal_max_segment_bytes",
        Kind.INT,
        "A journal segment is closed (and becomes shippable) before a write would take it past "
        "this size; a record is never split.",
        default=DEFAULT_JOURNAL_MAX_SEGMENT_BYTES,
        unit="bytes",
        minimum=4096,
        java_type="long",
    ),
    ConfigKey(
        "retentiond.journal.maxSegmentAge",
        "daemon.journal_max_segment_age_ms",
        Kind.INT,
        "A journal segment is closed once its first record is this old, even if nothing new "
        "arrives, so a quiet broker's records still reach the fleet.",
        default=DEFAULT_JOURNAL_MAX_SEGMENT_AGE_MS,
        unit="ms",
        minimum=1000,
        java_type="long",
    ),
    ConfigKey(
        "retentiond.journal.roundSummaryInterval",
        "daemon.journal_round_summary_interval_ms",
        Kind.INT,
        "Idle rounds (nothing deleted, nothing failed, same triggers and disk state, ratio within "
        "0.01 of the last round record) are folded into one round_summary record written at "
        "most this often; 0 writes every round in full.",
        default=DEFAULT_JOURNAL_ROUND_SUMMARY_INTERVAL_MS,
        unit="ms",
        minimum=0,
        java_type="long",
    ),
    ConfigKey(
        "retentiond.ship.target",
        "daemon.ship_target",
        Kind.PATH,
        "Directory (local, or an NFS/HDFS/object-store mount) that closed journal segments are "
        "shipped to for the fleet analysis; it must exist (point it inside the mount).",
        default=None,
        default_doc="none (shipping off)",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.ship.interval",
        "daemon.ship_interval_ms",
        Kind.INT,
        "Period of the shipping job (when a target is set).",
        default=DEFAULT_SHIP_INTERVAL_MS,
        unit="ms",
        minimum=1000,
        java_type="long",
    ),
    ConfigKey(
        "retentiond.ship.maxLocalBytes",
        "daemon.ship_max_local_bytes",
        Kind.INT,
        "Most bytes of closed, unshipped segments kept while the target is unreachable; past "
        "it the oldest are dropped, with an error log and a metric.",
        default=DEFAULT_SHIP_MAX_LOCAL_BYTES,
        unit="bytes",
        minimum=0,
        java_type="long",
    ),
    ConfigKey(
        "retentiond.ship.layout",
        "daemon.ship_layout",
        LAYOUT,
        "How shipped files are laid out under the target: `3`, one file per record family "
        "(`v3/deletions`, `v3/rounds`, `v3/other`) per segment and day; `2`, one file with "
        "every record type (`v2/`); `1`, one file per record type (`<type>/`). "
        "`retentiond analyze` reads all three.",
        default=DEFAULT_SHIP_LAYOUT,
    ),
    ConfigKey(
        "retentiond.initialDelay",
        "daemon.initial_delay_ms",
        Kind.INT,
        "Delay before the first round after start, as the broker's fixed 60 s.",
        default=DEFAULT_INITIAL_DELAY_MS,
        unit="ms",
        minimum=0,
    ),
    ConfigKey(
        "retentiond.controlSocket",
        "daemon.control_socket",
        Kind.PATH,
        "Unix socket (mode 0600) on which `status` and `trigger-delete` reach the daemon.",
        default=None,
        default_doc="`$RUNTIME_DIRECTORY/control.sock`, else "
        "`/run/retentiond/<config file stem>-<8 hex of the sha256 of its real path>/control.sock`",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.metrics.listen",
        "daemon.metrics_listen",
        Kind.LISTEN,
        "Address of the Prometheus `/metrics` endpoint; loopback only unless you say otherwise.",
        default=DEFAULT_METRICS_LISTEN,
    ),
    ConfigKey(
        "retentiond.metrics.tlsCertFile",
        "daemon.metrics_tls_cert_file",
        Kind.FILE,
        "PEM certificate (chain) for HTTPS on `/metrics`; needs `tlsKeyFile` too.",
        default=None,
        default_doc="none (plain HTTP)",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.metrics.tlsKeyFile",
        "daemon.metrics_tls_key_file",
        Kind.FILE,
        "PEM private key of `tlsCertFile`.",
        default=None,
        default_doc="none",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.metrics.basicAuthUsername",
        "daemon.metrics_basic_auth_username",
        Kind.TEXT,
        "User name that `/metrics` requires (HTTP basic auth); needs `basicAuthPasswordFile`.",
        default=None,
        default_doc="none (no authentication)",
        nullable=True,
    ),
    ConfigKey(
        "retentiond.metrics.basicAuthPasswordFile",
        "daemon.metrics_basic_auth_password_file",
        Kind.FILE,
        "File holding the basic-auth password (one trailing newline ignored), so the secret "
        "is never in the config or the logs; re-read when it changes.",
        default=None,
        default_doc="none",
        nullable=True,
    ),
    *GUARD_KEYS,
)

# Keys that name *which* journal and socket this process serves, and the /metrics server
# (it binds once, at start: observe/server.py). Changing one live would relabel journal
# records or strand clients, so a reload that changes one is refused: the operator restarts
# the service instead. A kind adds the keys that name its store; ``store.kind`` is a switch
# between kinds.
RESTART_KEYS = frozenset(
    {
        "store.kind",
        "retentiond.cluster",
        "retentiond.journal.dir",
        "retentiond.controlSocket",
        "retentiond.metrics.listen",
        "retentiond.metrics.tlsCertFile",
        "retentiond.metrics.tlsKeyFile",
        "retentiond.metrics.basicAuthUsername",
        "retentiond.metrics.basicAuthPasswordFile",
    }
)


def daemon_settings(values: Mapping[str, object], keys: tuple[ConfigKey, ...]) -> DaemonSettings:
    """The ``DaemonSettings`` of validated ``values`` (by key) of the daemon ``keys``."""
    fields = {spec.field.removeprefix("daemon."): values[spec.key] for spec in keys}
    return DaemonSettings(**cast(dict[str, Any], fields))


def cross_checks(values: Mapping[str, object]) -> list[tuple[str, object, str]]:
    """Checks that need several daemon keys: (key to blame, its value, message) each."""
    return metrics.cross_checks(values)
