"""ConsumeQueue and index deletion, driven only by the CommitLog minimum offset (spec §4.10-13).

Nothing here looks at age or disk usage: a ConsumeQueue file goes when its last unit points
below the CommitLog minimum (so every unit in it does), an index file when its endPhyOffset
does. Each queue stops at its first file that still holds a live offset, and the newest file of
every queue and of the index list is never deleted.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Iterable, Sequence
from stat import S_ISREG
from typing import Protocol

from retentiond.engine.decision import Decision
from retentiond.engine.identity import FileIdentity
from retentiond.kinds.rocketmq.plan import STOP, VALUE_AT, QueueDecision, QueuesPlan
from retentiond.kinds.rocketmq.reader import BinaryReader, Known, read_index_header
from retentiond.kinds.rocketmq.snapshot import IndexFile, QueueListing
from retentiond.reasons import Kind, Reason, Verdict

pack = STOP.pack
_NO_VALUES: array[int] = array("q")
value_at = struct.Struct("=q").unpack_from
new_tuple = tuple.__new__  # a NamedTuple built without its keyword-handling __new__
_LIVE = Reason.HOLDS_LIVE_OFFSET

Values = tuple["Known | None", ...]  # per file name of a listing, oldest first (no newest)


class LoadedValues(Protocol):
    """What the planner reads of the values loaded from the scan cache file
    (``scancache.LoadedValues``), its listings in file order."""

    listings: list[QueueListing]
    va: array[int]  # per non-last file: inode, size, mtime_ns, ctime_ns, value or -1
    value_starts: array[int]  # per listing: where its values start in ``va``
    # per listing: its directory's device (negative above 2**63); one int: all the same
    devices: array[int] | int

    @property
    def index(self) -> dict[str, int]: ...

    def get(self, path: str) -> tuple[tuple[str, ...], Values] | None: ...

    def __len__(self) -> int: ...


def known_values(names: tuple[str, ...], values: Values, q: QueueListing) -> Values:
    """Values known for an earlier listing of a queue, lined up with its current names (the
    same tuple after an unchanged directory: nothing to do)."""
    if names is q.names or names == q.names:
        return values
    by_name = dict(zip(names, values, strict=False))
    return tuple(by_name.get(n) for n in q.names[:-1])


def decision_values(d: QueueDecision) -> Values:
    """What an earlier decision read: the value of each file it examined, oldest first."""
    got: list[Known | None] = []
    for x in d.deleted:  # (a file the planner let go was read: it has both)
        ident, value = x.identity, x.end_offset
        got.append(None if ident is None or value is None else (ident, value, None))
    ident, value = d.stop_identity, d.stop_value
    if d.stop_reason is not None and ident is not None and value is not None:
        got.append((ident, value, None))
    return tuple(got)


def plan_queue(
    q: QueueListing,
    min_offset: int,
    reader: BinaryReader,
    known: Values = (),
    *,
    trust: bool = False,
) -> QueueDecision:
    """Oldest first; stop at the first file that is unreadable or still holds a live offset.

    This runs once per queue (100k+ per round), so it builds one Decision per examined file
    and nothing for the files behind the stop (``QueueDecision.decisions`` derives those).
    ``known`` (lined up with ``q.names``) holds values read earlier: each is used after an
    lstat shows the file unchanged, or without one when ``trust`` says this process verified
    it and the directory has not changed since. Only the files this queue's decision rests
    on are looked at: the prefix that goes and the first one kept.
    """
    deleted: list[Decision] = []
    topic, queue_id, location = q[0], q[1], q[2]
    directory = q.directory
    n_known = len(known)
    for i, name in enumerate(q.names[:-1]):  # the newest file of a queue is never a candidate
        path = f"{directory}/{name}"
        got = reader.cq_last_offset(path, known[i] if i < n_known else None, trust=trust)
        value = got.value
        if value is not None and value < min_offset:  # strict "<" as upstream
            deleted.append(
                Decision(Kind.CONSUMEQUEUE, path, Verdict.DELETE,
                         Reason.BELOW_COMMITLOG_MIN_OFFSET, got.identity, int(name), value,
                         topic, queue_id)
            )  # fmt: skip
            continue
        # The stop is kept as its parts (``QueueDecision``): its path and offset are its name.
        reason = Reason.UNREADABLE if value is None else Reason.HOLDS_LIVE_OFFSET
        ident = got.identity
        packed = None
        if ident is not None:
            packed = pack(ident.ino, ident.dev, ident.size, ident.mtime_ns,
                          -1 if value is None else value)  # fmt: skip
        parts: tuple[Reason | None, bytes | None, str | None, bytes] = (
            reason, packed, got.problem, q.key
        )  # fmt: skip
        return new_tuple(QueueDecision, (topic, queue_id, location, q.names, (*deleted,), *parts))
    parts = (None, None, None, q.key)
    return new_tuple(QueueDecision, (topic, queue_id, location, q.names, (*deleted,), *parts))


def plan_queue_read(
    q: QueueListing, min_offset: int, reader: BinaryReader, values: bytes
) -> QueueDecision:
    """``plan_queue`` for a queue whose files a helper process has just read for this walk
    (``scan.Prefetch``): ``values`` holds a ``STOP`` record (inode, device, size, mtime_ns,
    value) per file read, oldest first, up to the first that holds an offset at or above
    ``min_offset`` or the newest, as ``plan_queue`` reads them; the decision is the one
    ``plan_queue`` makes from those reads."""
    size = STOP.size
    names = q[3]
    if len(values) == size and value_at(values, VALUE_AT)[0] >= min_offset and len(names) > 1:
        # The usual queue: its oldest file holds a live offset (the record is the stop's).
        fields: tuple[object, ...] = (q[0], q[1], q[2], names, (), _LIVE, values, None, q[5])
        return new_tuple(QueueDecision, fields)
    n = len(values) // size
    if n < 1 or n > len(names) - 1 or n * size != len(values):
        return plan_queue(q, min_offset, reader)  # (never: not what the helper sends)
    deleted: list[Decision] = []
    topic, queue_id = q[0], q[1]
    directory = q.directory
    for j in range(n):
        value = value_at(values, j * size + VALUE_AT)[0]
        if value < min_offset:  # strict "<" as upstream
            ino, dev, fsize, mtime, _ = STOP.unpack_from(values, j * size)
            name = names[j]
            deleted.append(
                Decision(Kind.CONSUMEQUEUE, f"{directory}/{name}", Verdict.DELETE,
                         Reason.BELOW_COMMITLOG_MIN_OFFSET, FileIdentity(ino, dev, fsize, mtime),
                         int(name), value, topic, queue_id)
            )  # fmt: skip
            continue
        if j != n - 1:
            return plan_queue(q, min_offset, reader)  # (never: read past its stop)
        packed = values if n == 1 else values[j * size :]
        fields = (topic, queue_id, q[2], names, (*deleted,), _LIVE, packed, None, q.key)
        return new_tuple(QueueDecision, fields)
    if n != len(names) - 1:
        return plan_queue(q, min_offset, reader)  # (never: stopped before its stop)
    fields = (topic, queue_id, q[2], names, (*deleted,), None, None, None, q.key)
    return new_tuple(QueueDecision, fields)


def plan_queue_from_file(
    q: QueueListing,
    min_offset: int,
    reader: BinaryReader,
    va: Sequence[int],
    at: int,
    dev: int,
) -> QueueDecision:
    """``plan_queue`` for a listing loaded from the scan cache file, whose values are still in
    the file's array (``va[at:]``: inode, size, mtime_ns, ctime_ns, value or -1 per non-last
    file; ``dev`` the directory's device): as ``plan_queue`` with each value handed in as
    ``known``, without making a FileIdentity, a tuple and a ReadResult per file first (the
    first round after a start does this for every queue).

    A value is used only after an lstat shows the file with the inode, device, size, mtime
    and ctime it was read with, as a regular file; any difference reads the file again.
    """
    deleted: list[Decision] = []
    names = q.names
    directory = q.directory
    if dev < 0:
        dev += 1 << 64  # stored as a signed 64-bit integer
    # Indexed rather than sliced (``names[:-1]``, ``va[at:at + 5]``): this loop runs for
    # every queue of the store in the first round after a start.
    value: int | None
    problem: str | None
    ident: FileIdentity | None
    for j in range(len(names) - 1):  # the newest file of a queue is never a candidate
        name = names[j]
        value = va[at + 4]
        problem = None
        ident = None
        cached = False  # the value is the file's, as recorded, and the file is unchanged
        if value >= 0:
            ino = va[at]
            if ino < 0:
                ino += 1 << 64
            ctime = va[at + 3]
            try:
                st = os.lstat(f"{directory}/{name}")
            except OSError as exc:  # as cq_last_offset: a known file that cannot be stat-ed
                value, problem = None, f"stat failed: {exc.strerror}"
            else:
                if (
                    st.st_ino == ino
                    and st.st_size == va[at + 1]
                    and st.st_mtime_ns == va[at + 2]
                    and st.st_dev == dev
                    and (ctime < 0 or st.st_ctime_ns == ctime)
                    and S_ISREG(st.st_mode)
                ):
                    cached = True
                else:
                    value = -1
        if value is not None and value < 0:  # not known, or changed: read it
            got = reader.cq_last_offset(f"{directory}/{name}")
            value, ident, problem = got.value, got.identity, got.problem
        at += 5
        if value is not None and value < min_offset:  # strict "<" as upstream
            if cached:
                ident = FileIdentity(ino, dev, va[at - 4], va[at - 3])
            deleted.append(
                Decision(Kind.CONSUMEQUEUE, f"{directory}/{name}", Verdict.DELETE,
                         Reason.BELOW_COMMITLOG_MIN_OFFSET, ident, int(name), value,
                         q.topic, q.queue_id)
            )  # fmt: skip
            continue
        reason = Reason.UNREADABLE if value is None else Reason.HOLDS_LIVE_OFFSET
        packed = None
        if ident is not None:  # read again just now
            packed = pack(ident.ino, ident.dev, ident.size, ident.mtime_ns,
                          -1 if value is None else value)  # fmt: skip
        elif cached:
            packed = pack(ino, dev, va[at - 4], va[at - 3], value)
        fields: tuple[object, ...] = (q.topic, q.queue_id, q[2], names, (*deleted,),
                                      reason, packed, problem, q.key)  # fmt: skip
        return new_tuple(QueueDecision, fields)
    fields = (q.topic, q.queue_id, q[2], names, (*deleted,), None, None, None, q.key)
    return new_tuple(QueueDecision, fields)


def plan_index(
    files: tuple[IndexFile, ...], index_dir: str, min_offset: int
) -> tuple[Decision, ...]:
    decisions: list[Decision] = []
    stop_reason: Reason | None = None
    last = len(files) - 1
    for i, f in enumerate(files):
        path = f"{index_dir}/{f.name}"
        if i == last:
            decisions.append(
                Decision(Kind.INDEX, path, Verdict.KEEP, Reason.NEWEST_FILE, identity=f.identity)
            )
            break
        if stop_reason is not None:
            decisions.append(
                Decision(Kind.INDEX, path, Verdict.KEEP, stop_reason, identity=f.identity)
            )
            continue
        header, ident, problem = read_index_header(path)
        if header is None:
            decisions.append(
                Decision(
                    Kind.INDEX,
                    path,
                    Verdict.KEEP,
                    Reason.UNREADABLE,
                    identity=ident or f.identity,
                    detail=problem,
                )
            )
            stop_reason = Reason.AFTER_FIRST_KEPT
            continue
        below = header.end_phy_offset < min_offset
        decisions.append(
            Decision(
                Kind.INDEX,
                path,
                Verdict.DELETE if below else Verdict.KEEP,
                Reason.BELOW_COMMITLOG_MIN_OFFSET if below else Reason.HOLDS_LIVE_OFFSET,
                identity=ident,
                start_offset=header.begin_phy_offset,
                end_offset=header.end_phy_offset,
            )
        )
        if not below:
            stop_reason = Reason.AFTER_FIRST_KEPT
    return tuple(decisions)


def _loaded_at(q: QueueListing, cursor: int, loaded: LoadedValues | None) -> int:
    """Where in the scan cache file ``q`` (a listing loaded from it, as it was loaded) is:
    at ``cursor`` on the common path (a walk of unchanged directories visits them in file
    order), else looked up by path; -1 when ``q`` is not that very listing."""
    if loaded is None:
        return -1
    listings = loaded.listings
    if cursor < len(listings) and listings[cursor] is q:
        return cursor
    i = loaded.index.get(q.directory, -1)
    return i if i >= 0 and listings[i] is q else -1


def plan_queues(
    queues: Iterable[QueueListing],
    index: tuple[IndexFile, ...],
    index_dir: str,
    *,
    min_offset: int,
    last_min_offset: int,
    reader: BinaryReader,
    memo: dict[bytes | str, QueueDecision] | None = None,
    loaded: LoadedValues | None = None,
    prefetched: dict[bytes, bytes] | None = None,
) -> QueuesPlan:
    """Plan every queue and the index list, or nothing when the minimum has not moved.

    ``CleanConsumeQueueService`` only acts when the CommitLog minimum offset grew past the last
    one it acted on; that gate is what keeps an idle round O(1) in the number of queues.

    ``memo`` (kept by the caller between rounds) makes a round in which the minimum moved cheap
    on a large store: ``plan_queue`` is a pure function of the listing, the minimum and the
    values read, so when the lister hands back the same unchanged listing and the earlier
    decision stopped at a file whose last unit is still at or above the new minimum, the
    earlier decision is the answer again.

    ``prefetched`` (a ``scan.Prefetch``'s ``values``): what a helper process read of the
    queues it listed for this walk, by their listings' keys, taken out as they are used.
    """
    if min_offset < 0 or min_offset <= last_min_offset:
        return QueuesPlan(
            min_offset, last_min_offset, examined=False, skip_reason=Reason.MIN_OFFSET_UNCHANGED
        )
    examined: list[QueueDecision] = []
    queue_count = file_count = 0
    problems: list[str] = []
    live, unreadable = Reason.HOLDS_LIVE_OFFSET, Reason.UNREADABLE
    # (After a start the memo is empty: no lookup per queue in that first walk.)
    memo_get = memo.get if memo else None
    prefetched_pop = prefetched.pop if prefetched is not None else None
    loaded_get = loaded.get if loaded else None
    # Listings loaded from the scan cache file, their values still in its arrays
    # (scancache.LoadedValues; looked up inline: this runs for every queue after a start).
    loaded_list: list[QueueListing] = []
    va = value_starts = _NO_VALUES
    devices: array[int] | int = _NO_VALUES
    n_loaded = cursor = 0  # the position in the file a walk in file order is at
    if loaded:
        loaded_list, va = loaded.listings, loaded.va
        value_starts, devices = loaded.value_starts, loaded.devices
        n_loaded = len(loaded_list)
    append = examined.append
    for q in queues:
        queue_count += 1
        n = len(q.names)
        file_count += n
        if n < 2:  # only the newest file: nothing to examine
            if cursor < n_loaded and loaded_list[cursor] is q:
                cursor += 1
            continue
        # The memo is keyed as the lister's listings are: by the directory's key (its path
        # when a listing has none), so a directory that changed has no earlier decision.
        slot = q.key or q.directory
        read = prefetched_pop(q.key, None) if prefetched_pop is not None else None
        hit = memo_get(slot) if memo_get is not None and read is None else None
        decision = None
        if read is not None:
            decision = plan_queue_read(q, min_offset, reader, read)  # read for this walk
        elif hit is not None:
            earlier = hit
            # The listing the earlier decision was made on: the lister hands back the same
            # listing (and its very key object) while the directory is unchanged. A listing
            # loaded from the scan cache file has no earlier decision in its first round.
            key = q.key
            same = q.unchanged and bool(key) and earlier.dir_key is key
            if (
                same
                and not earlier.deleted
                and earlier.stop_reason is live  # (so its value was read: in the bytes)
                and earlier.stop_extra is None
                and (packed := earlier.stop_packed) is not None
                and value_at(packed, VALUE_AT)[0] >= min_offset
            ):
                decision = earlier
            else:
                # Values this process read: trusted as they stand while the directory is the
                # very listing they were read under, else each re-checked with an lstat.
                known = known_values(earlier.names, decision_values(earlier), q)
                decision = plan_queue(q, min_offset, reader, known, trust=same)
        elif n_loaded and (i := _loaded_at(q, cursor, loaded)) >= 0:
            # The listing as loaded from the scan cache file, its values still in the file's
            # array: one lstat per file used (see plan_queue_from_file).
            cursor = i + 1
            decision = plan_queue_from_file(
                q,
                min_offset,
                reader,
                va,
                value_starts[i],
                devices if type(devices) is int else devices[i],  # type: ignore[index]
            )
        elif loaded_get is not None and (got := loaded_get(q.directory)) is not None:
            # From the scan cache file: never trusted as it stands (one lstat per file used).
            decision = plan_queue(q, min_offset, reader, known_values(got[0], got[1], q))
        else:
            decision = plan_queue(q, min_offset, reader)
        if memo is not None and hit is not decision and read is None:
            # (the common warm case writes nothing; nor does a walk shared with a child,
            # which leaves nothing behind)
            memo[slot] = decision
        append(decision)
        if decision.stop_reason is unreadable:
            stop = decision.stop
            assert stop is not None  # (an unreadable stop is a stop)
            problems.append(f"{stop.path}: {decision.stop_detail}")
    if memo is not None and len(memo) != len(examined):  # forget queues that are gone
        keep = {d.dir_key or d.directory for d in examined}
        for gone in [k for k in memo if k not in keep]:
            del memo[gone]
    return QueuesPlan(
        min_offset,
        last_min_offset,
        examined=True,
        queues=tuple(examined),
        queue_count=queue_count,
        file_count=file_count,
        index=plan_index(index, index_dir, min_offset),
        problems=tuple(problems),
    )
