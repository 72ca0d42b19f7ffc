"""A RocketMQ plan as operators read it: triggers, disk, then tables of files and verdicts.

A 100k-queue plan has 300k+ files, most of them kept behind their queue's stop. The summary
counts those by arithmetic over each queue (``QueueDecision`` keeps them implicit) and the
tables list only what was asked for, so the text costs a pass over the queues, not a
``Decision`` per file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from retentiond.engine.decision import Decision
from retentiond.kinds.rocketmq.plan import sorted_queues
from retentiond.reasons import AnyReason, Reason, Verdict
from retentiond.text.units import human_age, human_bytes, human_time

if TYPE_CHECKING:
    from retentiond.kinds.rocketmq.plan import Plan, QueueDecision

_Row = tuple[str, str, str, str, str]
_HEADER: _Row = ("FILE", "SIZE", "AGE", "VERDICT", "REASON")


def _ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}"


def _rows(decisions: Iterable[Decision], now_ms: int) -> list[_Row]:
    sizes: dict[int, str] = {}  # queue files mostly share one size
    rows = []
    for d in decisions:
        ident = d.identity
        if ident is None:
            rows.append((d.path, "-", "-", str(d.verdict), str(d.reason)))
            continue
        size = sizes.get(ident.size)
        if size is None:
            size = sizes[ident.size] = human_bytes(ident.size)
        age = human_age(now_ms - ident.mtime_ms)
        rows.append((d.path, size, age, str(d.verdict), str(d.reason)))
    return rows


def _table(
    rows: list[_Row] | list[tuple[str, ...]], header: tuple[str, ...] = _HEADER
) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    last = len(header) - 1 if len(header) > len(_HEADER) else -1  # WHEN: text, left-aligned
    fmt = "  ".join(
        f"{{:{'<' if i in (0, last) else '>'}{w if i != last else ''}}}"
        for i, w in enumerate(widths)
    )
    return [fmt.format(*header).rstrip(), *(fmt.format(*r).rstrip() for r in rows)]


_WHEN_HEADER = (*_HEADER, "WHEN")


def _when(plan: Plan, d: Decision) -> str:
    """When a CommitLog file goes: for a file kept because no pass runs, the next delete
    window; otherwise when it expires (or expired). The newest file goes at no age."""
    cl = plan.commitlog
    if d.reason is Reason.NEWEST_FILE:
        return "never while newest"
    if d.reason is Reason.NOT_TIME_TO_DELETE and cl.next_window_ms is not None:
        return f"next window {human_time(cl.next_window_ms, cl.zone)}"
    expires = cl.expires_ms(d)
    if expires is None:
        return "-"
    verb = "expired" if plan.now_ms >= expires else "expires"
    return f"{verb} {human_time(expires, cl.zone)}"


def _commitlog_rows(plan: Plan) -> list[tuple[str, ...]]:
    decisions = plan.commitlog.decisions
    return [
        (*r, _when(plan, d)) for r, d in zip(_rows(decisions, plan.now_ms), decisions, strict=True)
    ]


def _reason_counts(queues: Iterable[QueueDecision]) -> dict[str, int]:
    """Examined queue files by reason, as ``QueueDecision.decisions`` would list them."""
    counts: dict[AnyReason, int] = {}
    live = Reason.HOLDS_LIVE_OFFSET
    held_live = newest = behind = 0
    for qd in queues:
        start = len(qd.deleted)
        for d in qd.deleted:
            counts[d.reason] = counts.get(d.reason, 0) + 1
        reason = qd.stop_reason
        if reason is not None:
            start += 1
            if reason is live:
                held_live += 1
            else:
                counts[reason] = counts.get(reason, 0) + 1
        rest = len(qd.names) - start
        if rest > 0:
            newest += 1
            behind += rest - 1
    for reason, n in ((live, held_live), (Reason.NEWEST_FILE, newest)):
        if n:
            counts[reason] = counts.get(reason, 0) + n
    if behind:
        counts[Reason.AFTER_FIRST_KEPT] = counts.get(Reason.AFTER_FIRST_KEPT, 0) + behind
    return {str(r): n for r, n in counts.items()}


def _queue_rows(queues: Iterable[QueueDecision], now_ms: int) -> Iterator[_Row]:
    """Every queue file's row (``--all``): the files behind a stop without a Decision each."""
    keep = str(Verdict.KEEP)
    after, newest = str(Reason.AFTER_FIRST_KEPT), str(Reason.NEWEST_FILE)
    for qd in queues:
        stop = qd.stop
        examined = [*qd.deleted, stop] if stop is not None else qd.deleted
        yield from _rows(examined, now_ms)
        names = qd.names
        last = len(names) - 1
        prefix = qd.directory + "/"
        for i in range(len(examined), last):
            yield (prefix + names[i], "-", "-", keep, after)
        if len(examined) <= last:
            yield (prefix + names[last], "-", "-", keep, newest)


def render_plan(plan: Plan, *, all_queue_files: bool = False) -> str:
    t = plan.commitlog.triggers
    out = [
        f"store {plan.store_root}  config {plan.config_hash}  timezone {plan.timezone} "
        f"(hour {t.hour})  {'manual round' if plan.manual else ''}".rstrip(),
        f"triggers: time_up={t.time_up} usage_exceeds={t.usage_exceeds} manual={t.manual} "
        f"clean_immediately={t.clean_immediately} clean_at_once={t.clean_at_once} "
        f"-> pass {'runs' if t.fired else 'does not run'}",
        f"disk: commitlog(min)={_ratio(t.physic_ratio)} consumequeue={_ratio(t.logics_ratio)} "
        f"state={t.disk_state}",
    ]
    for err in [*plan.errors, *([t.error] if t.error else [])]:
        scope = "under it" if err in plan.queue_errors else "from this store"
        out.append(f"ERROR: {err} (nothing is deleted {scope})")
    out.append("")
    cl = plan.commitlog
    hours = f"fileReservedTime {human_age(cl.reserved_ms)}" if cl.reserved_ms is not None else ""
    if cl.next_window_ms is not None:
        hours += f"; next delete window {human_time(cl.next_window_ms, cl.zone)}"
    out.append(f"CommitLog ({hours.lstrip('; ')})" if hours else "CommitLog")
    out.extend(_table(_commitlog_rows(plan), _WHEN_HEADER))
    losses = [(d.path, d.loss) for d in plan.commitlog.decisions if d.loss is not None]
    if losses:
        out.append("")
        out.append("What the CommitLog deletions lose (consumer progress on disk)")
        for path, loss in losses:
            out.append(f"  {path.rsplit('/', 1)[-1]}: {loss.summary()}")
    for path, text in plan.progress_problems:
        out.append(f"PROBLEM: {path}: {text}")
    q = plan.queues
    queues = sorted_queues(q.queues)
    queue_deletes = [d for qd in queues for d in qd.deleted]  # all DELETE (holds stop them)
    out.append("")
    if not q.examined:
        out.append(
            f"ConsumeQueue/index: not examined ({q.skip_reason or 'minimum offset unknown'}; "
            f"CommitLog min offset {q.min_offset}, last acted on {q.last_min_offset})"
        )
    else:
        reasons = _reason_counts(q.queues)
        summary = ", ".join(f"{k}={v}" for k, v in sorted(reasons.items())) or "nothing examined"
        out.append(
            f"ConsumeQueue (min offset {q.min_offset}): {q.queue_count} queues, "
            f"{q.file_count} files; examined files by reason: {summary}"
        )
        if all_queue_files:
            rows = list(_queue_rows(queues, plan.now_ms))
        else:
            rows = _rows((d for d in queue_deletes if d.delete), plan.now_ms)
        if rows:
            out.extend(_table(rows))
        out.append("")
        out.append("Index")
        out.extend(_table(_rows(q.index, plan.now_ms)) if q.index else ["(no index files)"])
        for problem in q.problems:
            out.append(f"WARNING: {problem}")
    tl = plan.timerlog
    if tl is not None:
        out.append("")
        if not tl.examined:
            out.append("TimerLog: not examined (CommitLog minimum offset unknown)")
        else:
            out.append(f"TimerLog (min offset {tl.min_offset})")
            out.extend(_table(_rows(tl.decisions, plan.now_ms)) if tl.decisions else ["(no files)"])
    if plan.foreign:
        out.append("")
        out.append(f"Foreign entries (never touched): {len(plan.foreign)}")
        for path, why in plan.foreign[:20]:
            out.append(f"  {path}  ({why})")
        if len(plan.foreign) > 20:
            out.append(f"  ... and {len(plan.foreign) - 20} more (see --json)")
    deletes = [
        *plan.commitlog.deletions(),
        *queue_deletes,
        *(d for d in q.index if d.delete),
        *(d for d in plan.timerlog_decisions() if d.delete),
    ]
    total = sum(d.identity.size for d in deletes if d.identity)
    out.append("")
    out.append(f"plan: delete {len(deletes)} files, {human_bytes(total)}")
    return "\n".join(out)
