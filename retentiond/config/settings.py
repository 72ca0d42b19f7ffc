"""The validated, immutable configuration every other module reads.

Only a configuration loader builds a ``Settings``; everything else takes one as an argument,
so a reload is simply "build a new one, swap the reference" and a round never sees half a
change. A ``Settings`` is generic over its store kind's section (``Settings[S]``): the kind
declares its keys, defaults and cross-checks beside its own code and hands back the section;
what is here is what every kind shares: the daemon's own settings (the ``retentiond:`` block),
where the settings were read from, and the identity and canonical form they are hashed by.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from retentiond.config.problems import ConfigProblem

# Journal rotation and shipping (journal.py, ship.py; contract in docs/journal.md).
DEFAULT_INITIAL_DELAY_MS = 60_000
DEFAULT_JOURNAL_MAX_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_JOURNAL_MAX_SEGMENT_AGE_MS = 3_600_000  # a quiet journal still ships hourly
DEFAULT_JOURNAL_ROUND_SUMMARY_INTERVAL_MS = 300_000  # idle rounds: one summary per 5 min
DEFAULT_SHIP_INTERVAL_MS = 300_000
DEFAULT_SHIP_MAX_LOCAL_BYTES = 256 * 1024 * 1024  # unshipped segments kept while unreachable
# The shipped layouts (journal/ship.py): 1 a directory per record type, 2 every type of a
# segment's day in one file (v2/), 3 one file per record family (v3/<family>/).
SHIP_LAYOUTS = (1, 2, 3)
DEFAULT_SHIP_LAYOUT = 3
DEFAULT_METRICS_LISTEN = "127.0.0.1:9465"  # loopback only; see observe/server.py


@dataclass(frozen=True)
class DaemonSettings:
    """Everything under the ``retentiond:`` key: settings the broker itself does not have."""

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
    ship_layout: int = DEFAULT_SHIP_LAYOUT
    # /metrics (observe/): where it listens, and its optional TLS and basic auth. The password
    # is read from a file so the secret never appears in the config, its hash or the logs.
    metrics_listen: str = DEFAULT_METRICS_LISTEN
    metrics_tls_cert_file: Path | None = None
    metrics_tls_key_file: Path | None = None
    metrics_basic_auth_username: str | None = None
    metrics_basic_auth_password_file: Path | None = None
    # What a deletion loses (config/guard.py): report only, or keep such files.
    guard_unconsumed: str = "report"
    guard_timers: str = "report"
    guard_ignore_groups: tuple[str, ...] = ()
    guard_stale_after_ms: int = 7 * 86_400_000
    guard_top_groups: int = 20
    # A human name for the cluster (journal origin, metric labels, status, the shipped
    # layout's ``cluster=``); None = the name the store kind's own configuration gives.
    cluster: str | None = None


_DAEMON_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DaemonSettings)}
_HASHED_ONLY_WHEN_SET = (
    "cluster",
    "guard_unconsumed",
    "guard_timers",
    "guard_ignore_groups",
    "guard_stale_after_ms",
    "guard_top_groups",
    "ship_layout",
)


class StoreSection(Protocol):
    """What every kind's section of the settings tells the rest of the program."""

    @property
    def kind_name(self) -> str:
        """The kind's name as the journal, ``status`` and the metrics label it."""
        ...

    @property
    def broker_name(self) -> str:
        """Names the broker in logs, metrics and shipped deletion records."""
        ...

    @property
    def broker_cluster_name(self) -> str:
        """Names the broker's cluster in logs, metrics and shipped deletion records."""
        ...

    @property
    def store_dirs(self) -> tuple[str, ...]:
        """The store's top directories as configured."""
        ...

    @property
    def round_interval_ms(self) -> int:
        """The period of the rounds."""
        ...

    @property
    def retry_interval_ms(self) -> int:
        """The longest wait before a refused unlink is tried again."""
        ...

    @property
    def restart_keys(self) -> frozenset[str]:
        """The kind's keys a reload may not change (they name which store this is)."""
        ...

    def as_dict(self) -> dict[str, object]:
        """Its part of the canonical form (JSON-ready): plans, ``status``, the config hash."""
        ...

    def key_values(self) -> dict[str, object]:
        """Its values by the file's key names, in reference order (reload diffs)."""
        ...


S_co = TypeVar("S_co", bound=StoreSection, covariant=True)


def plain(value: object) -> object:
    """A value as JSON has it: paths as strings, tuples as lists, mappings recursively."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Settings(Generic[S_co]):
    """One configuration: the kind's section, the daemon's settings, and the file read."""

    store: S_co
    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    source: Path | None = None  # the file these settings were read from
    # What the file sets that the broker itself would only warn about and ignore (a key it
    # does not know): said by the commands, no part of the settings or their hash.
    warnings: tuple[ConfigProblem, ...] = field(default=(), compare=False)

    @property
    def broker_name(self) -> str:
        return self.store.broker_name

    @property
    def broker_cluster_name(self) -> str:
        """``retentiond.cluster`` when set, else the name the kind's configuration gives."""
        return self.daemon.cluster or self.store.broker_cluster_name

    @property
    def store_dirs(self) -> tuple[str, ...]:
        """The store's top directories as configured."""
        return self.store.store_dirs

    @property
    def store_label(self) -> str:
        """The store as one string (journal origin, ``status``, ``check-config``)."""
        return ",".join(self.store_dirs)

    @property
    def round_interval_ms(self) -> int:
        return self.store.round_interval_ms

    @property
    def retry_interval_ms(self) -> int:
        return self.store.retry_interval_ms

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready view, for plans, `status` and reload diffs (paths as strings): the
        kind's part, then the daemon's."""
        data = dict(self.store.as_dict())
        daemon = dataclasses.asdict(self.daemon)
        # Keys added since hashes were first taken add nothing at their defaults: a file that
        # did not change keeps its hash across an upgrade.
        for name in _HASHED_ONLY_WHEN_SET:
            if daemon[name] == _DAEMON_DEFAULTS[name]:
                del daemon[name]
        data["daemon"] = plain(daemon)
        return data

    @property
    def config_hash(self) -> str:
        """Short, stable identity of the effective settings (not of the file's bytes)."""
        canonical = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]
