"""What a scan saw: immutable records of the store's files at one moment.

The CommitLog and the index list are small and read eagerly; the consume queues can number in
the hundreds of thousands, so they are listed lazily (names only, no stat) and only when a round
needs them (the CommitLog minimum offset moved).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from retentiond.engine.identity import FileIdentity


@dataclass(frozen=True, slots=True)
class CommitLogFile:
    directory: str  # the configured CommitLog path it lives in
    name: str
    start_offset: int
    identity: FileIdentity
    never_written: bool | None  # None = not read (only the tail of the list is read)

    @property
    def path(self) -> str:
        return f"{self.directory}/{self.name}"


@dataclass(frozen=True, slots=True)
class IndexFile:
    name: str  # yyyyMMddHHmmssSSS
    identity: FileIdentity


@dataclass(frozen=True, slots=True)
class TimerLogFile:
    name: str  # 20 digits: the file's first timerlog byte offset
    identity: FileIdentity


class QueueRoot:
    """The ``consumequeue/`` directory as the scan's listings and decisions hold it: one
    object per store instead of a path string per queue directory (a store has 100k+ of
    them). A queue's directory is ``<path>/<topic>/<queue id>`` (only a directory named by
    the decimal form of its id is a queue: ``names.parse_queue_id``), made when asked."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"QueueRoot({self.path!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is QueueRoot and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)


def queue_directory(location: str | QueueRoot, topic: str, queue_id: int) -> str:
    """The directory of a queue whose record holds ``location`` (a path, or the root)."""
    if type(location) is str:
        return location
    return f"{location.path}/{topic}/{queue_id}"  # type: ignore[union-attr]


class _ListingFields(NamedTuple):
    topic: str
    queue_id: int
    # The queue directory's path, or (listings the scan makes) the store's ``QueueRoot``:
    # read it as ``directory``.
    location: str | QueueRoot
    names: tuple[str, ...]
    # The directory is unchanged since an earlier listing: no file in it was created, removed
    # or renamed, so values cached for its full files still describe them.
    unchanged: bool = False
    # What the lister (``scan.QueueLister``) remembers with it, so that one object per queue
    # directory is all it keeps: the directory's identity when listed (``scan.DIR_KEY``),
    # which is also what the lister and the planner's memo key it by, and what else the
    # directory held (reported as foreign every round).
    key: bytes = b""
    strangers: tuple[ForeignEntry, ...] = ()


class QueueListing(_ListingFields):
    """One ConsumeQueue directory: its file names in offset order, nothing stat-ed yet."""

    __slots__ = ()

    @property
    def directory(self) -> str:
        return queue_directory(self[2], self[0], self[1])


class ForeignWhy(StrEnum):
    NAME = "name_not_in_naming_scheme"
    SYMLINK = "symlink"
    NOT_REGULAR = "not_a_regular_file"
    DIRECTORY = "directory_in_wrong_place"
    DUPLICATE = "duplicate_offset_across_paths"


@dataclass(frozen=True, slots=True)
class ForeignEntry:
    """Something inside a store directory that is not ours to touch, with the reason."""

    path: str
    why: ForeignWhy


@dataclass(frozen=True)
class StoreError:
    """A configured path that could not be read: the store is skipped for the round."""

    path: str
    message: str


@dataclass(frozen=True)
class Snapshot:
    root: str
    commitlog: tuple[CommitLogFile, ...]
    index: tuple[IndexFile, ...]
    index_dir: str
    consumequeue_dir: str
    foreign: tuple[ForeignEntry, ...]
    errors: tuple[StoreError, ...]
    taken_at_ms: int
    # (Its optional argument: a ``scan.Prefetch``, for a walk shared with a helper process.)
    list_queues: Callable[..., Iterator[QueueListing]] = field(repr=False, compare=False)
    # Filled by list_queues() as it walks; read after iteration for reporting.
    queue_foreign: list[ForeignEntry] = field(default_factory=list, repr=False, compare=False)
    # Topic and queue directories the walk could not stat or list, also filled as it walks:
    # store errors that cover only the directory they name (nothing under it was listed).
    queue_errors: list[StoreError] = field(default_factory=list, repr=False, compare=False)
    # ``timerlog/`` (RocketMQ 5.x timer messages): its files oldest first; None when the store
    # has no such directory (a 4.x broker, or timers never used).
    timerlog: tuple[TimerLogFile, ...] | None = None
    timerlog_dir: str = ""

    @property
    def commitlog_min_offset(self) -> int:
        """CommitLog.getMinOffset: start of the first file, or -1 without files."""
        return self.commitlog[0].start_offset if self.commitlog else -1
