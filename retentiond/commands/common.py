"""What every command needs: exit codes, settings loaded or refused, the journal opened.

Both the command modules and the daemon's ``run`` use these, so they live here rather than in
the entry point (``retentiond.cli``), which nothing imports.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from retentiond.config.problems import ConfigError, ConfigProblem
from retentiond.config.settings import Settings, StoreSection

if TYPE_CHECKING:
    from retentiond.journal.writer import Journal

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_STORE = 4
EXIT_PARTIAL = 5
EXIT_JOURNAL = 6
EXIT_UNREACHABLE = 7  # the daemon's control socket did not answer (status / trigger-delete)
EXIT_BROKER_RUNNING = 8  # rescue: a broker holds a store directory's lock; nothing deleted
EXIT_TARGET_MISSED = 9  # rescue: finished without reaching its target
EXIT_SHIP_FAILED = 10
EXIT_NO_SPARK = 11  # analyze: the spark extra or Java is missing
EXIT_NO_RECORDS = 12  # analyze: the input is missing or holds no records; no report written
EXIT_PIPE = 141  # a client command's output pipe closed (128 + SIGPIPE)


def load_settings_or_exit(path: str) -> Settings[StoreSection]:
    """The validated settings, or the problems on stderr and exit 3: nothing is deleted. A
    store that cannot be used now (missing, unmounted, unreadable) does not stop here: the
    round reports it as a store error (exit 4 for ``once`` and ``plan``) and the daemon
    retries it every round."""
    return read_settings_or_exit(path)[0]


def read_settings_or_exit(path: str) -> tuple[Settings[StoreSection], list[ConfigProblem]]:
    """The validated settings and the store errors found checking the store (none: it can
    be used), or the problems on stderr and exit 3. The keys the broker would only warn
    about (Kafka's unknown keys) are said on stderr as warnings."""
    from retentiond.kinds import StoreUnusable, load_settings

    try:
        settings, store_errors = load_settings(path), []
    except StoreUnusable as exc:
        settings, store_errors = exc.settings, exc.problems
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        print(f"{path}: configuration refused; nothing was deleted", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None
    for warning in settings.warnings:  # what the broker itself would warn about and ignore
        print(f"warning: {warning}", file=sys.stderr)
    return settings, store_errors


def journal_dir(settings: Settings[StoreSection]) -> Path:
    """The configured journal directory, else a default off the store's filesystem
    (``$STATE_DIRECTORY/journal`` or /var/lib/retentiond/journal first; see journal.place)."""
    from retentiond.journal.place import default_journal_dir

    if settings.daemon.journal_dir is not None:
        return Path(settings.daemon.journal_dir)
    from retentiond.kinds import kind_for

    return default_journal_dir(kind_for(settings).directories())


def open_journal(settings: Settings[StoreSection]) -> Journal:
    from retentiond.journal.writer import Journal, Origin

    origin = Origin.local(settings.broker_cluster_name, settings.broker_name, settings.store_label)
    directory = journal_dir(settings)
    try:
        return Journal(
            directory,
            origin,
            max_segment_bytes=settings.daemon.journal_max_segment_bytes,
            max_segment_age_ms=settings.daemon.journal_max_segment_age_ms,
        )
    except OSError as exc:
        print(f"error: journal directory {directory}: {exc}; nothing was deleted", file=sys.stderr)
        raise SystemExit(EXIT_JOURNAL) from None


@contextlib.contextmanager
def without_collector(args: object) -> Iterator[None]:
    """A one-off command's work without the cyclic collector: one round, one document, then
    exit. A large store's round holds millions of long-lived objects, and the collector's
    full passes over them free nothing. Turned back on afterwards as it was, unless the
    process ends right away without freeing what it built (``cli.main`` set
    ``process_entry`` and the command ``exit_without_teardown``): its first full pass would
    then walk the whole round just before the exit that drops it."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        ending = getattr(args, "process_entry", False) and getattr(
            args, "exit_without_teardown", None
        )
        if collecting and not ending:
            gc.enable()
