"""Reconciliation: give every orphaned intent its outcome.

The executor fsyncs an ``intent`` before each unlink and appends a ``deletion`` (or ``abort``)
after it. A process killed in between leaves an intent without an outcome. Before its first
round, a cleaner reads the journal and, for every intent whose writer is no longer alive:

* the file is gone (or another file now has its name): append a ``deletion`` record copied
  from the intent, marked ``reconciled: true`` — the unlink happened;
* the file is still there, unchanged: append an ``abort`` marked ``reconciled: true`` — it
  did not; a later round plans it again;
* the file is gone, but another writer's ``deletion`` of that very file (same path and inode)
  is in the journal: an ``abort`` too — the other writer unlinked it (a ``once`` killed before
  its unlink while the daemon went on), and a second deletion record would count it twice.

Several processes may write one journal (a ``retentiond once`` beside the daemon), so an
intent belongs to its *writer* (boot id, pid and process start time, stamped on the intent)
and is only reconciled once that writer is gone; ``reconcile.lock`` in the journal directory
keeps two starting processes from reconciling the same intent twice. Torn lines (a kill in
the middle of a write) are skipped and counted, never fatal.

The shipper runs the same reconciliation before every pass (``journal.ship``): a segment that
leaves the host takes its intents with it, and no later start-up could reconcile them. So the
shipper reconciles the intents of dead writers first (their outcomes go into the active
segment, shipped later) and keeps every closed segment that still holds an open intent of a
live writer (``ReconcileResult.live_segments``) until that writer has written its outcome or
died.

A cleaner also runs a pass after each round that deleted files (``Cleaner._settle_journal``).

Each pass reads only what was appended since the one before (``reconcile.mark``): where the
last pass stopped reading (journal id, segment, byte offset at a line end, and that segment's
inode, device and first line) and every intent that was still open there, live writers' and
those the pass itself just gave an outcome (until that outcome has been read back, an intent
counts as open). Lines before the mark are settled, so a restart beside a journal of
millions of records costs what was written since the last pass, not the journal's whole
history. The one question an older line could answer, "did another writer delete this very
file?", is asked only for an orphan of a dead writer whose file is gone or replaced, and then
the whole journal is read as before. A missing, unreadable or foreign mark (another journal
id, a segment that is another file or shorter than the offset, segments started again below
it) means reading everything, as without one; a mark that cannot be replaced is removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import structlog

from retentiond.journal.writer import ID_NAME, directory_lock, list_segments, parse_line

log = structlog.get_logger(__name__)

LOCK_NAME = "reconcile.lock"
MARK_NAME = "reconcile.mark"
MARK_VERSION = 1
_OUTCOMES = (b'"type":"deletion"', b'"type":"abort"')
_INTENT = b'"type":"intent"'
_PROC = "/proc"
_ORIGIN = ("cluster", "broker", "host", "store")
_INTENT_ONLY = ("type", "writer", "ino", "dev")  # not carried over to the deletion record


def _boot_id(proc_root: str = _PROC) -> str:
    try:
        with open(f"{proc_root}/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()[:8]
    except OSError:
        return "unknown"


def _start_time(pid: int, proc_root: str = _PROC) -> str | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot): pid + this = one process."""
    # Hand-written: journals keep ticks; psutil gives epoch seconds, moved by clock steps
    try:
        with open(f"{proc_root}/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
        return text[text.rindex(")") + 2 :].split()[19]
    except (OSError, ValueError, IndexError):
        return None


def writer_identity(proc_root: str = _PROC) -> str:
    """``boot:pid:start`` of this process, stamped on its intents."""
    pid = os.getpid()
    return f"{_boot_id(proc_root)}:{pid}:{_start_time(pid, proc_root) or '0'}"


def writer_alive(identity: object, proc_root: str = _PROC) -> bool:
    """True only if the process that wrote an intent is still running (same boot, pid, start)."""
    if not isinstance(identity, str):
        return False
    parts = identity.split(":")
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    boot, pid, start = parts
    if boot != _boot_id(proc_root):
        return False
    return _start_time(int(pid), proc_root) == start


@dataclass
class ReconcileResult:
    intents: int = 0  # intents read
    open_intents: int = 0  # without an outcome
    deleted: int = 0  # reconciled as deleted
    aborted: int = 0  # reconciled as not deleted
    live: int = 0  # left alone: their writer is still running
    unwritten: int = 0  # their outcome waits in memory for disk space (``held``)
    busy: bool = False  # another pass held the lock and this one did not wait (``blocking``)
    torn: int = 0  # lines that did not parse
    segments: int = 0
    # Segment numbers holding an open intent of a live writer: not to be shipped away yet.
    live_segments: set[int] = field(default_factory=set)

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if isinstance(v, int)}


@dataclass
class _Mark:
    """Where the previous pass stopped reading, and the intents still open there."""

    journal_id: str
    seq: int
    offset: int
    # What that segment is: a segment of the same number in a journal started again
    # (segments removed, ``journal.id`` kept) is another file, though its inode may be the
    # old one's, reused; its first line (a record with its own time and id) tells them apart.
    ino: int
    dev: int
    head: str  # SHA-256 of the segment's first line (up to 4 KiB), hex
    # op id -> (segment, intent record), in journal order
    open: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)


class _MarkMismatch(Exception):
    """The mark does not fit the segments on disk: not this journal's history."""


def _journal_id(directory: Path) -> str | None:
    try:
        text = (directory / ID_NAME).read_text().strip()
    except OSError:
        return None
    return text or None


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


def _read_mark(directory: Path, journal: str | None) -> _Mark | None:
    """The mark, or None (read everything) when it is missing, unreadable or not this
    journal's."""
    if journal is None:
        return None
    try:
        doc = json.loads((directory / MARK_NAME).read_bytes())
        if doc.get("version") != MARK_VERSION or doc.get("journal_id") != journal:
            return None
        seq, offset, ino, dev, head = (doc[k] for k in ("seq", "offset", "ino", "dev", "head"))
        if not all(map(_is_count, (seq, offset, ino, dev))) or not isinstance(head, str):
            return None
        open_: dict[str, tuple[int, dict[str, Any]]] = {}
        for op_id, at, record in doc["open"]:
            if not (isinstance(op_id, str) and _is_count(at) and isinstance(record, dict)):
                return None
            open_[op_id] = (at, record)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return _Mark(journal, seq, offset, ino, dev, head, open_)


def _write_mark(directory: Path, mark: _Mark) -> None:
    """Replace the mark atomically, or remove it when that fails: a mark left behind by an
    earlier pass would carry intents whose outcomes this pass read, and their segments may
    be shipped away before the next pass, which would then give them a second outcome.
    Without a mark the next pass reads every segment, as before there was one."""
    doc = {
        "version": MARK_VERSION,
        "journal_id": mark.journal_id,
        "seq": mark.seq,
        "offset": mark.offset,
        "ino": mark.ino,
        "dev": mark.dev,
        "head": mark.head,
        "open": [[op_id, at, record] for op_id, (at, record) in mark.open.items()],
    }
    path = directory / MARK_NAME
    tmp = directory / f".{MARK_NAME}.tmp"  # one name: passes take turns (reconcile.lock)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o640)
        with open(fd, "wb") as fh:  # (as private as the journal: it holds intents)
            fh.write(json.dumps(doc, separators=(",", ":")).encode())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)  # a crash must not bring back the mark this one replaced
        finally:
            os.close(dfd)
    except OSError as exc:
        _drop_mark(directory)
        log.warning("cannot write the reconcile mark; the next pass reads the whole journal",
                    file=str(path), error=str(exc))  # fmt: skip


def _drop_mark(directory: Path) -> None:
    """Remove the mark (an unlink works on a full disk too)."""
    with contextlib.suppress(OSError):
        (directory / f".{MARK_NAME}.tmp").unlink()
    try:
        (directory / MARK_NAME).unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.error("cannot remove a stale reconcile mark: remove it by hand, or a later pass "
                  "may give some intents a second outcome",
                  file=str(directory / MARK_NAME), error=str(exc))  # fmt: skip


def _head(fh: BinaryIO) -> str:
    """The fingerprint of a segment: its first line (at most 4 KiB)."""
    fh.seek(0)
    return hashlib.sha256(fh.readline(4096)).hexdigest()


def _scan(
    directory: Path,
    result: ReconcileResult,
    deleted: set[tuple[object, object]],
    mark: _Mark | None = None,
) -> tuple[dict[str, tuple[int, dict[str, Any]]], tuple[int, int, int, int, str] | None]:
    """Intents without an outcome and the segment each is in, in journal order; ``deleted``
    collects (file, inode) of every deletion read whose intent is still local. Only intent
    and outcome lines are parsed. With a ``mark``, reading starts there with the intents it
    carries; raises ``_MarkMismatch`` when the mark does not fit the segments on disk.

    Also returns where reading ended (segment, offset just past its last line, and that
    segment's inode, device and first-line fingerprint), or None when there was nothing to
    read. The highest segment is read only up to its size under ``journal.lock``: writers
    hold that lock through each batch's write, fsync and, when the write failed part-way, its
    cut back to the last whole line, so that size is always at a batch's end and the mark
    never lands inside a line."""
    with directory_lock(directory):
        segments = list_segments(directory)
        limit = segments[-1][1].stat().st_size if segments else 0
    if mark is not None and (not segments or segments[-1][0] < mark.seq):
        raise _MarkMismatch(directory)  # started again below the mark: read it all
    open_: dict[str, tuple[int, dict[str, Any]]] = dict(mark.open) if mark else {}
    end = (mark.seq, mark.offset, mark.ino, mark.dev, mark.head) if mark else None
    last = segments[-1][0] if segments else -1
    for seq, path in segments:
        start = 0
        if mark is not None:
            if seq < mark.seq:
                continue  # read by an earlier pass
            if seq == mark.seq:
                start = mark.offset
        try:
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                head = _head(fh)
                if (
                    mark is not None
                    and seq == mark.seq
                    and ((st.st_ino, st.st_dev, head) != (mark.ino, mark.dev, mark.head)
                         or st.st_size < start)
                ):  # fmt: skip
                    raise _MarkMismatch(path)
                fh.seek(start)
                data = fh.read(max(0, limit - start)) if seq == last else fh.read()
        except FileNotFoundError:
            continue  # shipped away meanwhile
        result.segments += 1
        offset = start
        for line in data.splitlines(keepends=True):
            complete = line.endswith(b"\n")
            if complete:
                offset += len(line)
            elif seq == last:
                break  # a torn tail (a writer killed mid-line): read again next time
            if _INTENT not in line and not any(o in line for o in _OUTCOMES):
                if not complete:
                    result.torn += 1
                continue
            record = parse_line(line)
            if record is None:
                result.torn += 1
                continue
            op_id = record.get("id")
            if not isinstance(op_id, str):
                continue
            if record.get("type") == "intent":
                if not _well_formed(record):
                    result.torn += 1  # parses, but not as any writer of ours writes it
                    continue
                result.intents += 1
                open_[op_id] = (seq, record)
            elif record.get("type") in ("deletion", "abort"):
                closed = open_.pop(op_id, None)
                if closed is not None and record.get("type") == "deletion":
                    intent = closed[1]
                    if "ino" in intent:
                        deleted.add((intent.get("file"), intent.get("ino")))
        end = (seq, offset, st.st_ino, st.st_dev, head)
    return open_, end


def _well_formed(intent: dict[str, Any]) -> bool:
    """The fields reconciliation reads have the types our writers give them."""
    return (
        isinstance(intent.get("file", ""), str)
        and type(intent.get("ino", 0)) is int
        and type(intent.get("bytes", 0)) is int
        and type(intent.get("mtime_ms", 0)) is int
    )


def _still_there(intent: dict[str, Any]) -> bool:
    """The very file the intent named is still on disk (same size and mtime; inode if known)."""
    path = intent.get("file")
    if not isinstance(path, str):
        return False
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: say "not deleted" (a later round re-plans it)
    if "ino" in intent and intent.get("ino") != st.st_ino:
        return False
    if "bytes" in intent and intent.get("bytes") != st.st_size:
        return False
    return not ("mtime_ms" in intent and intent.get("mtime_ms") != st.st_mtime_ns // 1_000_000)


def reconcile(
    directory: Path,
    append: Callable[[dict[str, object]], None],
    *,
    now_ms: int,
    alive: Callable[[object], bool] = writer_alive,
    when: str = "start-up",
    held: Callable[[str], bool] | None = None,
    blocking: bool = True,
) -> ReconcileResult:
    """Append an outcome for every intent of a dead writer that has none. Never deletes.

    ``when`` names the occasion in the records and the log (``start-up``, ``shipping``,
    ``round end``). ``held`` (``SpoolingJournal.holds_outcome``): whether an outcome for an
    op id waits in memory for disk space. Such an intent still looks open on disk, and giving
    it another outcome would write two once space returns; if the spool loses it (full), it
    is not held any more and the next pass gives it one again. Either way its segment is kept
    from shipping (``live_segments``) while its outcome exists only in memory. Without
    ``blocking``, a pass that finds another one running returns at once (``busy``)."""
    directory = Path(directory)
    result = ReconcileResult()
    if not directory.is_dir():
        return result
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            result.busy = True
            return result
        journal = _journal_id(directory)
        mark = _read_mark(directory, journal)
        deleted: set[tuple[object, object]] = set()
        try:
            orphans, end = _scan(directory, result, deleted, mark)
        except _MarkMismatch:
            mark = None
            result = ReconcileResult()
            deleted = set()
            orphans, end = _scan(directory, result, deleted)
        whole = mark is None  # ``deleted`` holds every deletion still in the journal
        result.open_intents = len(orphans)
        for op_id, (seq, intent) in orphans.items():
            if alive(intent.get("writer")):
                result.live += 1
                result.live_segments.add(seq)
                continue
            if held is not None and held(op_id):
                result.unwritten += 1
                result.live_segments.add(seq)  # not shipped while its outcome is in memory
                continue
            key = (intent.get("file"), intent.get("ino"))
            there = _still_there(intent)
            if not there and "ino" in intent and key not in deleted and not whole:
                # Not the file the intent named: only another writer's deletion, perhaps
                # before the mark, tells an unlink by someone else from this writer's own
                # (rare: a writer killed between its intent and its outcome). Read the whole
                # journal for it, as a pass without a mark does.
                _scan(directory, ReconcileResult(), deleted)
                whole = True
            by_other = "ino" in intent and key in deleted
            if by_other or there:
                why = "deleted by another writer" if by_other else "interrupted before the unlink"
                append(
                    {
                        "type": "abort",
                        "id": op_id,
                        "file": intent.get("file"),
                        "kind": intent.get("kind"),
                        # filed beside its intent whoever reconciles it (a shipper's handle)
                        **{k: intent[k] for k in _ORIGIN if k in intent},
                        "error": f"{why} (reconciled at {when})",
                        "reconciled": True,
                        "time_ms": now_ms,
                    }
                )
                result.aborted += 1
                if held is not None and held(op_id):  # written to memory only (disk full)
                    result.live_segments.add(seq)
            else:
                keep = {k: v for k, v in intent.items() if k not in _INTENT_ONLY}
                append({**keep, "type": "deletion", "reconciled": True, "reconciled_ms": now_ms})
                if "ino" in intent:  # a second orphan on this file did not unlink it
                    deleted.add((intent.get("file"), intent.get("ino")))
                result.deleted += 1
                if held is not None and held(op_id):
                    result.live_segments.add(seq)
        if journal is not None and end is not None:
            # Every intent still open where reading ended is carried, the ones given an
            # outcome just now too: they are settled once that outcome is read back.
            _write_mark(directory, _Mark(journal, *end, orphans))
        else:
            _drop_mark(directory)  # nothing to read: a mark left would not fit what comes
    finally:
        os.close(fd)
    if result.deleted or result.aborted or (when == "start-up" and (result.live or result.torn)):
        log.warning(f"journal reconciled at {when}", **result.as_dict())
    return result
