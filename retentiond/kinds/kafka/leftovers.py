"""Leftover partition dirs, counted and removed as Kafka would (``consumers.md`` B.3).

Three kinds of directory in a log dir hold bytes the broker's retention never frees:

- ``<topic>-<p>.<uuid32>-delete``: a topic deletion (or the old side of a move between log
  dirs). The broker removes it ``log.segment.delete.delay.ms`` after it scheduled it, and at
  every start schedules it anew: offline it goes once that delay has passed since the dir was
  renamed (its ctime) and last changed (its mtime), whichever is later
  (``delete_dir_leftover``);
- a partition whose topic id (its ``partition.metadata``) the KRaft metadata log no longer
  has: an orphan, reported with its bytes and removed only with
  ``retentiond.kafka.removeOrphans`` (``orphan_partition``);
- ``<topic>-<p>.<uuid32>-stray``: KRaft renames stray replicas and never deletes them
  (KAFKA-15605): removed only with ``retentiond.kafka.removeStray`` (``stray_partition``).

``-future`` dirs (a move between log dirs in progress) are never touched.

A removal is journaled before anything changes (the engine's intent); an orphan or stray dir is
then first renamed to Kafka's own ``-delete`` form, so that a crash halfway leaves what the
broker itself removes, and emptied through directory handles opened with ``O_NOFOLLOW``: a
symlink inside is unlinked as a link, never followed.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
import uuid
from collections.abc import Collection
from dataclasses import dataclass

from retentiond.engine.decision import Decision
from retentiond.engine.identity import FileIdentity
from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.scan import Partition, read_nofollow
from retentiond.reasons import Kind, Reason, Verdict

PARTITION_METADATA = "partition.metadata"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_NAME = 255  # LocalLog.logDirNameWithSuffixCappedLength


@dataclass(frozen=True, slots=True)
class DirTotals:
    """A directory as measured: its own inode, device and mtime, with ``size`` the total of
    the sizes of the files under it (what the journal's ``bytes`` says); ``allocated`` what
    removing it frees on the filesystem (``st_blocks``)."""

    identity: FileIdentity
    files: int
    allocated: int
    changed_ns: int  # the later of its ctime (the rename) and mtime

    @property
    def size(self) -> int:
        return self.identity.size


def _walk(fd: int) -> tuple[int, int, int]:
    """(files, sizes, allocated) under the directory ``fd``, never following a symlink."""
    files = size = allocated = 0
    with os.scandir(fd) as it:
        entries = list(it)
    for e in entries:
        st = e.stat(follow_symlinks=False)
        allocated += st.st_blocks * 512
        if stat.S_ISDIR(st.st_mode):
            child = os.open(e.name, _DIR_FLAGS, dir_fd=fd)
            try:
                f, s, a = _walk(child)
            finally:
                os.close(child)
            files, size, allocated = files + f, size + s, allocated + a
        else:
            files += 1
            size += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return files, size, allocated


def measure_dir(path: str) -> DirTotals:
    """A partition dir's totals, opened from its log dir without following a symlink."""
    parent = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = os.open(os.path.basename(path), _DIR_FLAGS, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        files, size, allocated = _walk(fd)
    finally:
        os.close(fd)
    ident = FileIdentity(st.st_ino, st.st_dev, size, st.st_mtime_ns)
    return DirTotals(ident, files, allocated, max(st.st_ctime_ns, st.st_mtime_ns))


def read_topic_id(part: Partition) -> bytes | None:
    """The topic id in the partition's ``partition.metadata`` (``version: 0`` then
    ``topic_id: <Uuid.toString: URL-safe base64 without padding>``); None when the file is
    missing or not of that form: such a partition is never taken for an orphan."""
    if PARTITION_METADATA not in part.listing:
        return None
    try:
        text = read_nofollow(os.path.join(part.path, PARTITION_METADATA)).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    raw = fields.get("topic_id")
    if fields.get("version") != "0" or not raw or len(raw) != 22:
        return None
    try:
        tid = base64.urlsafe_b64decode(raw + "==")
    except (binascii.Error, ValueError):
        return None
    return tid if len(tid) == 16 else None


def topic_id_text(tid: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(tid).decode("ascii").rstrip("=")


def is_orphan(part: Partition, known_names: Collection[str], known_ids: Collection[bytes]) -> bool:
    """A plain partition dir whose topic the metadata log does not know by name and whose
    ``partition.metadata`` names a topic id it does not have either (a deleted topic whose
    dir was never renamed, as after a log dir that was offline during the deletion). A
    partition without a readable topic id is never an orphan."""
    if part.name.special is not None or part.topic == fm.METADATA_TOPIC:
        return False
    if part.topic in known_names:
        return False
    tid = read_topic_id(part)
    return tid is not None and tid not in known_ids


def plan_leftover(
    part: Partition,
    *,
    now_ms: int,
    delete_delay_ms: int,
    orphan: bool,
    remove_orphans: bool,
    remove_stray: bool,
    broker_running: bool,
) -> Decision | None:
    """The verdict on a leftover dir as a whole (None for a dir that is none): delete, keep
    with why, or, while a broker holds the log dir, ``broker_running`` with what would go."""
    special = part.name.special
    if special not in ("delete", "stray") and not orphan:
        return None
    try:
        totals = measure_dir(part.path)
    except OSError as e:
        return _decision(part, Verdict.KEEP, Reason.UNREADABLE, None, f"cannot measure: {e}")
    ident = totals.identity
    size = f"{totals.files} files, {ident.size} bytes"
    if special == "delete":
        age_ms = now_ms - totals.changed_ns // 1_000_000
        if age_ms < delete_delay_ms:
            left = delete_delay_ms - age_ms
            detail = f"{size}; log.segment.delete.delay.ms {delete_delay_ms}: {left} ms to go"
            return _decision(part, Verdict.KEEP, Reason.TRANSIENT_PARTITION_DIR, ident, detail)
        verdict, reason = Verdict.DELETE, Reason.DELETE_DIR_LEFTOVER
        detail = f"{size}; renamed -delete {age_ms} ms ago (delay {delete_delay_ms} ms)"
    elif special == "stray":
        reason = Reason.STRAY_PARTITION
        if remove_stray:
            verdict, detail = Verdict.DELETE, f"{size}; a -stray dir, retentiond.kafka.removeStray"
        else:
            verdict = Verdict.KEEP
            detail = f"{size}; set retentiond.kafka.removeStray=true to remove it"
    else:
        reason = Reason.ORPHAN_PARTITION
        if remove_orphans:
            verdict = Verdict.DELETE
            detail = f"{size}; its topic id is not in the metadata log, removeOrphans"
        else:
            verdict = Verdict.KEEP
            detail = (
                f"{size}; its topic id is not in the metadata log: set "
                "retentiond.kafka.removeOrphans=true to remove it"
            )
    if verdict is Verdict.DELETE and broker_running:
        return _decision(part, Verdict.KEEP, Reason.BROKER_RUNNING, ident, f"would go: {reason}")
    return _decision(part, verdict, reason, ident, detail)


def _decision(
    part: Partition,
    verdict: Verdict,
    reason: Reason,
    identity: FileIdentity | None,
    detail: str,
) -> Decision:
    return Decision(
        Kind.PARTITION_DIR,
        part.path,
        verdict,
        reason,
        identity,
        None,
        None,
        part.topic,
        part.partition,
        detail,
    )


def delete_dir_name(topic: str, partition: int) -> str:
    """``LocalLog.logDeleteDirName``: ``<topic>-<p>.<uuid32>-delete``, the topic cut so the
    name fits in 255 characters."""
    suffix = f"-{partition}.{uuid.uuid4().hex}-delete"
    return topic[: _MAX_NAME - len(suffix)] + suffix


def _empty(fd: int) -> int:
    """Remove everything under the directory ``fd``; the bytes freed. Each subdirectory is
    opened with ``O_NOFOLLOW`` from its parent's handle; a symlink is unlinked as a link."""
    freed = 0
    with os.scandir(fd) as it:
        entries = list(it)
    for e in entries:
        st = os.stat(e.name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            child = os.open(e.name, _DIR_FLAGS, dir_fd=fd)
            try:
                freed += _empty(child)
            finally:
                os.close(child)
            os.rmdir(e.name, dir_fd=fd)
        else:
            os.unlink(e.name, dir_fd=fd)
        freed += st.st_blocks * 512
    return freed


def remove_partition_dir(parent_fd: int, name: str) -> int:
    """Remove the partition dir ``name`` of the log dir ``parent_fd``; the bytes freed. A dir
    not already in the ``-delete`` form is renamed to it first (and the rename made durable),
    so a crash leaves a dir the broker removes on its own at its next start."""
    parsed = fm.parse_partition_dir_name(name)
    if parsed is None:
        raise PermissionError(f"{name}: not a partition dir")
    if parsed.special != "delete":
        target = delete_dir_name(parsed.topic, parsed.partition)
        try:
            os.stat(target, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            raise FileExistsError(f"{target}: already exists")
        os.rename(name, target, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
        os.fsync(parent_fd)
        name = target
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        freed = _empty(fd)
        freed += os.fstat(fd).st_blocks * 512
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)
    os.fsync(parent_fd)
    return freed
