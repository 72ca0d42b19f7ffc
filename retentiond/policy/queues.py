"""ConsumeQueue and index deletion, driven only by the CommitLog minimum offset (spec §4.10-13).

Nothing here looks at age or disk usage: a ConsumeQueue file goes when its last unit points
below the CommitLog minimum (so every unit in it does), an index file when its endPhyOffset
does. Each queue stops at its first file that still holds a live offset, and the newest file of
every queue and of the index list is never deleted.
"""

from __future__ import annotations

from collections.abc import Iterable

from retentiond.policy.plan import Decision, QueueDecision, QueuesPlan
from retentiond.reasons import Kind, Reason, Verdict
from retentiond.store.reader import BinaryReader, read_index_header
from retentiond.store.snapshot import IndexFile, QueueListing


def plan_queue(q: QueueListing, min_offset: int, reader: BinaryReader) -> QueueDecision:
    deleted: list[Decision] = []
    stop: Decision | None = None
    for name in q.names[:-1]:  # the newest file of a queue is never a candidate
        path = f"{q.directory}/{name}"
        got = reader.cq_last_offset(path)
        common = dict(
            identity=got.identity, start_offset=int(name), topic=q.topic, queue_id=q.queue_id
        )
        if got.value is None:
            stop = Decision(
                Kind.CONSUMEQUEUE,
                path,
                Verdict.KEEP,
                Reason.UNREADABLE,
                detail=got.problem,
                **common,
            )
            break
        if got.value < min_offset:  # strict "<" as upstream
            deleted.append(
                Decision(
                    Kind.CONSUMEQUEUE,
                    path,
                    Verdict.DELETE,
                    Reason.BELOW_COMMITLOG_MIN_OFFSET,
                    end_offset=got.value,
                    **common,
                )
            )
        else:
            stop = Decision(
                Kind.CONSUMEQUEUE,
                path,
                Verdict.KEEP,
                Reason.HOLDS_LIVE_OFFSET,
                end_offset=got.value,
                **common,
            )
            break
    return QueueDecision(q.topic, q.queue_id, q.directory, q.names, tuple(deleted), stop)


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
) -> QueuesPlan:
    """Plan every queue and the index list, or nothing when the minimum has not moved.

    ``CleanConsumeQueueService`` only acts when the CommitLog minimum offset grew past the last
    one it acted on; that gate is what keeps an idle round O(1) in the number of queues.
    """
    if min_offset < 0 or min_offset <= last_min_offset:
        return QueuesPlan(
            min_offset, last_min_offset, examined=False, skip_reason=Reason.MIN_OFFSET_UNCHANGED
        )
    examined: list[QueueDecision] = []
    queue_count = file_count = 0
    problems: list[str] = []
    for q in queues:
        queue_count += 1
        file_count += len(q.names)
        if len(q.names) < 2:
            continue  # only the newest file: nothing to examine
        decision = plan_queue(q, min_offset, reader)
        examined.append(decision)
        if decision.stop is not None and decision.stop.reason is Reason.UNREADABLE:
            problems.append(f"{decision.stop.path}: {decision.stop.detail}")
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
