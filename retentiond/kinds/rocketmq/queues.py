"""ConsumeQueue and index deletion, driven only by the CommitLog minimum offset (spec §4.10-13).

Nothing here looks at age or disk usage: a ConsumeQueue file goes when its last unit points
below the CommitLog minimum (so every unit in it does), an index file when its endPhyOffset
does. Each queue stops at its first file that still holds a live offset, and the newest file of
every queue and of the index list is never deleted.
"""

from __future__ import annotations

from collections.abc import Iterable

from retentiond.engine.decision import Decision
from retentiond.kinds.rocketmq.plan import QueueDecision, QueuesPlan
from retentiond.kinds.rocketmq.reader import BinaryReader, read_index_header
from retentiond.kinds.rocketmq.snapshot import IndexFile, QueueListing
from retentiond.reasons import Kind, Reason, Verdict


def plan_queue(q: QueueListing, min_offset: int, reader: BinaryReader) -> QueueDecision:
    """Oldest first; stop at the first file that is unreadable or still holds a live offset.

    This runs once per queue (100k+ per round), so it builds one Decision per examined file
    and nothing for the files behind the stop (``QueueDecision.decisions`` derives those).
    """
    deleted: list[Decision] = []
    stop: Decision | None = None
    directory, topic, queue_id, trust = q.directory, q.topic, q.queue_id, q.unchanged
    for name in q.names[:-1]:  # the newest file of a queue is never a candidate
        path = f"{directory}/{name}"
        got = reader.cq_last_offset(path, trust_cache=trust)
        value = got.value
        if value is not None and value < min_offset:  # strict "<" as upstream
            deleted.append(
                Decision(Kind.CONSUMEQUEUE, path, Verdict.DELETE,
                         Reason.BELOW_COMMITLOG_MIN_OFFSET, got.identity, int(name), value,
                         topic, queue_id)
            )  # fmt: skip
            continue
        reason = Reason.UNREADABLE if value is None else Reason.HOLDS_LIVE_OFFSET
        stop = Decision(Kind.CONSUMEQUEUE, path, Verdict.KEEP, reason, got.identity, int(name),
                        value, topic, queue_id, got.problem)  # fmt: skip
        break
    return QueueDecision(topic, queue_id, directory, q.names, tuple(deleted), stop)


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
        covered = dict(
            identity=ident, start_offset=header.begin_phy_offset, end_offset=header.end_phy_offset
        )
        if header.end_phy_offset < min_offset:
            decisions.append(
                Decision(
                    Kind.INDEX, path, Verdict.DELETE, Reason.BELOW_COMMITLOG_MIN_OFFSET, **covered
                )
            )
        else:
            decisions.append(
                Decision(Kind.INDEX, path, Verdict.KEEP, Reason.HOLDS_LIVE_OFFSET, **covered)
            )
            stop_reason = Reason.AFTER_FIRST_KEPT
    return tuple(decisions)


def plan_queues(
    queues: Iterable[QueueListing],
    index: tuple[IndexFile, ...],
    index_dir: str,
    *,
    min_offset: int,
    last_min_offset: int,
    reader: BinaryReader,
    memo: dict[str, tuple[QueueListing, QueueDecision]] | None = None,
) -> QueuesPlan:
    """Plan every queue and the index list, or nothing when the minimum has not moved.

    ``CleanConsumeQueueService`` only acts when the CommitLog minimum offset grew past the last
    one it acted on; that gate is what keeps an idle round O(1) in the number of queues.

    ``memo`` (kept by the caller between rounds) makes a round in which the minimum moved cheap
    on a large store: ``plan_queue`` is a pure function of the listing, the minimum and the
    cached values, so when the lister hands back the same unchanged listing and the earlier
    decision stopped at a file whose last unit is still at or above the new minimum, the
    earlier decision is the answer again.
    """
    if min_offset < 0 or min_offset <= last_min_offset:
        return QueuesPlan(
            min_offset, last_min_offset, examined=False, skip_reason=Reason.MIN_OFFSET_UNCHANGED
        )
    examined: list[QueueDecision] = []
    queue_count = file_count = 0
    problems: list[str] = []
    live = Reason.HOLDS_LIVE_OFFSET
    seen: dict[str, tuple[QueueListing, QueueDecision]] = {}
    for q in queues:
        queue_count += 1
        file_count += len(q.names)
        if len(q.names) < 2:
            continue  # only the newest file: nothing to examine
        decision = None
        if memo is not None:
            hit = memo.get(q.directory)
            if hit is not None and hit[0] is q and q.unchanged:
                stop = hit[1].stop
                if (
                    not hit[1].deleted
                    and stop is not None
                    and stop.reason is live
                    and stop.end_offset >= min_offset
                ):
                    decision = hit[1]
        if decision is None:
            decision = plan_queue(q, min_offset, reader)
        if memo is not None:
            seen[q.directory] = (q, decision)
        examined.append(decision)
        if decision.stop is not None and decision.stop.reason is Reason.UNREADABLE:
            problems.append(f"{decision.stop.path}: {decision.stop.detail}")
    if memo is not None:  # forget queues that are gone
        memo.clear()
        memo.update(seen)
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
