"""Turn a store directory into a Snapshot. Read-only; never follows a symlink inside the store.

The top-level directories (the root, each CommitLog path, ``consumequeue/``, ``index/``) are
taken as configured, symlinked or not, because operators do put them on other disks; nothing
found *inside* them is followed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from retentiond.settings import Settings
from retentiond.store.formats import is_never_written
from retentiond.store.names import is_index_name, parse_offset_name, parse_queue_id
from retentiond.store.reader import identity_of, read_prefix
from retentiond.store.snapshot import (
    CommitLogFile,
    ForeignEntry,
    ForeignWhy,
    IndexFile,
    QueueListing,
    Snapshot,
    StoreError,
)


def _classify(entry: os.DirEntry[str]) -> ForeignWhy | None:
    """None for a regular file; otherwise why it is not one (uses d_type, no syscall)."""
    if entry.is_symlink():
        return ForeignWhy.SYMLINK
    if entry.is_dir(follow_symlinks=False):
        return ForeignWhy.DIRECTORY
    if not entry.is_file(follow_symlinks=False):
        return ForeignWhy.NOT_REGULAR
    return None


def _scan_commitlog(
    settings: Settings, foreign: list[ForeignEntry], errors: list[StoreError]
) -> tuple[CommitLogFile, ...]:
    by_offset: dict[int, CommitLogFile] = {}
    for path in settings.store_path_commitlog:
        directory = str(path)
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            errors.append(StoreError(directory, "CommitLog path does not exist"))
            continue
        except NotADirectoryError:
            errors.append(StoreError(directory, "CommitLog path is not a directory"))
            continue
        except OSError as exc:
            errors.append(StoreError(directory, f"cannot list CommitLog path: {exc.strerror}"))
            continue
        for entry in entries:
            why = _classify(entry)
            offset = parse_offset_name(entry.name)
            if why is None and offset is None:
                why = ForeignWhy.NAME
            if why is not None:
                foreign.append(ForeignEntry(entry.path, why))
                continue
            assert offset is not None
            try:
                ident = identity_of(entry.stat(follow_symlinks=False))
            except OSError:
                continue  # vanished between listing and stat: not ours to decide on
            clf = CommitLogFile(directory, entry.name, offset, ident, None)
            if offset in by_offset:
                other = by_offset[offset]
                foreign.append(ForeignEntry(clf.path, ForeignWhy.DUPLICATE))
                errors.append(
                    StoreError(
                        clf.path,
                        f"offset {entry.name} exists in two CommitLog paths "
                        f"({other.directory} and {directory}); refusing to choose",
                    )
                )
                continue
            by_offset[offset] = clf
    files = [by_offset[o] for o in sorted(by_offset)]
    # Read the head of files from the newest backwards until one holds data: everything from
    # there on is the broker's active or pre-allocated file and is kept.
    for i in range(len(files) - 1, -1, -1):
        prefix = read_prefix(files[i].path)
        empty = prefix is not None and is_never_written(prefix)
        files[i] = CommitLogFile(
            files[i].directory, files[i].name, files[i].start_offset, files[i].identity, empty
        )
        if not empty:
            break
    return tuple(files)


def _scan_index(index_dir: str, foreign: list[ForeignEntry]) -> tuple[IndexFile, ...]:
    try:
        entries = list(os.scandir(index_dir))
    except (FileNotFoundError, NotADirectoryError):
        return ()
    files = []
    for entry in entries:
        why = _classify(entry)
        if why is None and not is_index_name(entry.name):
            why = ForeignWhy.NAME
        if why is not None:
            foreign.append(ForeignEntry(entry.path, why))
            continue
        try:
            files.append(IndexFile(entry.name, identity_of(entry.stat(follow_symlinks=False))))
        except OSError:
            continue
    files.sort(key=lambda f: f.name)  # IndexService.load: lexicographic
    return tuple(files)


def iter_queues(consumequeue_dir: str, foreign: list[ForeignEntry]) -> Iterator[QueueListing]:
    """Every ``topic/queueId`` directory with its file names; names only, nothing stat-ed."""
    try:
        topics = list(os.scandir(consumequeue_dir))
    except (FileNotFoundError, NotADirectoryError):
        return
    for topic in topics:
        if topic.is_symlink() or not topic.is_dir(follow_symlinks=False):
            why = ForeignWhy.SYMLINK if topic.is_symlink() else ForeignWhy.NAME
            foreign.append(ForeignEntry(topic.path, why))
            continue
        try:
            queues = list(os.scandir(topic.path))
        except OSError:
            continue
        for queue in queues:
            queue_id = parse_queue_id(queue.name)
            if queue.is_symlink() or not queue.is_dir(follow_symlinks=False) or queue_id is None:
                why = ForeignWhy.SYMLINK if queue.is_symlink() else ForeignWhy.NAME
                foreign.append(ForeignEntry(queue.path, why))
                continue
            names = []
            try:
                entries = os.scandir(queue.path)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    why = _classify(entry)
                    if why is None and parse_offset_name(entry.name) is None:
                        why = ForeignWhy.NAME
                    if why is not None:
                        foreign.append(ForeignEntry(entry.path, why))
                    else:
                        names.append(entry.name)
            if names:
                names.sort()  # fixed-width decimal: lexicographic order is offset order
                yield QueueListing(topic.name, queue_id, queue.path, tuple(names))


def scan(settings: Settings, *, now_ms: int | None = None) -> Snapshot:
    foreign: list[ForeignEntry] = []
    errors: list[StoreError] = []
    root = str(settings.store_path_root_dir)
    if not os.path.isdir(root):
        errors.append(StoreError(root, "store root does not exist or is not a directory"))
    commitlog = _scan_commitlog(settings, foreign, errors)
    index_dir = str(settings.index_dir)
    index = _scan_index(index_dir, foreign)
    cq_dir = str(settings.consumequeue_dir)
    queue_foreign: list[ForeignEntry] = []
    return Snapshot(
        root=root,
        commitlog=commitlog,
        index=index,
        index_dir=index_dir,
        consumequeue_dir=cq_dir,
        foreign=tuple(foreign),
        errors=tuple(errors),
        taken_at_ms=now_ms if now_ms is not None else time.time_ns() // 1_000_000,
        list_queues=lambda: iter_queues(cq_dir, queue_foreign),
        queue_foreign=queue_foreign,
    )
