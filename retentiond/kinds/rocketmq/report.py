"""A RocketMQ plan as operators read it: triggers, disk, then tables of files and verdicts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from retentiond.engine.decision import Decision
from retentiond.engine.units import human_age, human_bytes

if TYPE_CHECKING:
    from retentiond.kinds.rocketmq.plan import Plan


def _ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}"


def _rows(decisions: Iterable[Decision], now_ms: int) -> list[tuple[str, ...]]:
    rows = []
    for d in decisions:
        size = d.identity.size if d.identity else None
        age = now_ms - d.identity.mtime_ms if d.identity else None
        rows.append((d.path, human_bytes(size), human_age(age), str(d.verdict), str(d.reason)))
    return rows


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    header = ("FILE", "SIZE", "AGE", "VERDICT", "REASON")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*header), *(fmt.format(*r) for r in rows)]


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
        out.append(f"ERROR: {err} (nothing is deleted from this store)")
    out.append("")
    out.append("CommitLog")
    out.extend(_table(_rows(plan.commitlog.decisions, plan.now_ms)))
    q = plan.queues
    out.append("")
    if not q.examined:
        out.append(
            f"ConsumeQueue/index: not examined ({q.skip_reason or 'minimum offset unknown'}; "
            f"CommitLog min offset {q.min_offset}, last acted on {q.last_min_offset})"
        )
    else:
        reasons: Counter[str] = Counter()
        rows: list[tuple[str, ...]] = []
        for qd in q.queues:
            decisions = list(qd.decisions())
            reasons.update(str(d.reason) for d in decisions)
            shown = decisions if all_queue_files else [d for d in decisions if d.delete]
            rows.extend(_rows(shown, plan.now_ms))
        summary = ", ".join(f"{k}={v}" for k, v in sorted(reasons.items())) or "nothing examined"
        out.append(
            f"ConsumeQueue (min offset {q.min_offset}): {q.queue_count} queues, "
            f"{q.file_count} files; examined files by reason: {summary}"
        )
        if rows:
            out.extend(_table(rows))
        out.append("")
        out.append("Index")
        out.extend(_table(_rows(q.index, plan.now_ms)) if q.index else ["(no index files)"])
        for problem in q.problems:
            out.append(f"WARNING: {problem}")
    if plan.foreign:
        out.append("")
        out.append(f"Foreign entries (never touched): {len(plan.foreign)}")
        for path, why in plan.foreign[:20]:
            out.append(f"  {path}  ({why})")
        if len(plan.foreign) > 20:
            out.append(f"  ... and {len(plan.foreign) - 20} more (see --json)")
    deletes = [
        *plan.commitlog.deletions(),
        *(d for qd in q.queues for d in qd.deleted),
        *(d for d in q.index if d.delete),
    ]
    total = sum(d.identity.size for d in deletes if d.identity)
    out.append("")
    out.append(f"plan: delete {len(deletes)} files, {human_bytes(total)}")
    return "\n".join(out)
