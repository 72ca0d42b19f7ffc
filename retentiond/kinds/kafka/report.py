"""A Kafka plan as operators read it: per log dir, per partition, the segments with their sizes
and verdicts, a total per topic and per log dir; times in the configured zone, ages and sizes
in human units.

Per partition, the text lists the segments the passes handed over and the first one kept (what
stopped the prefix), then counts the rest (``plan --all`` lists every segment). A listed
segment's size is what the plan already knows of its ``.log`` (the identity a deletion carries,
the ``fstat`` of a read), else one ``stat``; the bytes of the segments behind the first kept
one, and so the bytes a total holds, are counted only by ``plan --all``, which lists them all:
on 200,000 segments that is 200,000 ``stat`` calls, more than the passes themselves need.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from retentiond.engine.decision import Decision
from retentiond.engine.loss import Progress
from retentiond.text.units import human_age, human_bytes, human_time

if TYPE_CHECKING:
    from retentiond.kinds.kafka.plan import KafkaPlan, LogDirPlan
    from retentiond.kinds.kafka.policy import PartitionPlan

_HEADER = ("BASE OFFSET", "SIZE", "VERDICT", "REASON")

# The policy's details, in epoch milliseconds and bytes (the JSON and the journal keep them).
_AGE_DETAIL = re.compile(
    r"(?P<src>largest timestamp|mtime) (?P<ts>-?\d+): age (?P<age>-?\d+) ms, "
    r"retention\.ms (?P<ret>-?\d+)"
)
_FUTURE = re.compile(r"largest timestamp (?P<ts>-?\d+) is in the future")
_BEHIND = re.compile(r"behind \S*/(?P<base>\d{20})\.log\b")
_BYTES = re.compile(r"partition (?P<size>\d+) bytes over retention\.bytes (?P<limit>-?\d+)")


def human_detail(detail: str | None, zone: str | None) -> str:
    """A segment's detail with its timestamps as dates in ``zone``, its ages as ``3d04h`` and
    its sizes in KiB/MiB/GiB; a segment still within retention.ms says when it expires.

    Each pattern is tried only where the text holds its fixed words (a plan has a detail for
    every row, and most hold one of the four forms, if any)."""
    if not detail:
        return ""
    if ": age " in detail:
        whole = _AGE_DETAIL.fullmatch(detail)  # the common case: the policy's own text
        if whole is not None:
            return _age(whole, zone)
        detail = _AGE_DETAIL.sub(lambda m: _age(m, zone), detail)
    if " is in the future" in detail:
        detail = _FUTURE.sub(
            lambda m: f"largest timestamp {human_time(int(m['ts']), zone)} is in the future",
            detail,
        )
    if "behind " in detail:
        detail = _BEHIND.sub(_behind, detail)
    if " bytes over retention.bytes " in detail:
        detail = _BYTES.sub(_over_bytes, detail)
    return detail


def _age(m: re.Match[str], zone: str | None) -> str:
    ts, ret, age = int(m["ts"]), int(m["ret"]), int(m["age"])
    text = f"{m['src']} {human_time(ts, zone)}, age {human_age(age)}, retention.ms {human_age(ret)}"
    if age <= ret:
        text += f": expires {human_time(ts + ret + 1, zone)}"
    return text


def _behind(m: re.Match[str]) -> str:
    return f"behind offset {int(m['base'])}"


def _over_bytes(m: re.Match[str]) -> str:
    return (
        f"partition {human_bytes(int(m['size']))} over retention.bytes "
        f"{human_bytes(int(m['limit']))}"
    )


def _size(p: PartitionPlan, i: int, d: Decision) -> int | None:
    """The ``.log``'s length: known from the plan (a deletion's identity, a read's
    ``fstat``), else a ``stat`` now; None if it has gone since the scan."""
    if d.identity is not None:
        return d.identity.size
    try:
        return p.partition.segment(i).size
    except OSError:
        return None


def _sum_text(counts: Sequence[int], every_size: bool) -> str:
    """Partitions and segments counted (with ``every_size``, ``plan --all``, the bytes of
    all of them), and those that go with their bytes: ``counts`` as ``Chunk.counts``."""
    partitions, segments, held, deletes, delete_bytes = counts
    size = f", {human_bytes(held)}" if every_size else ""
    return (
        f"{_n(partitions, 'partition')}, {_n(segments, 'segment')}{size}; "
        f"delete {_n(deletes, 'segment')}, {human_bytes(delete_bytes)}"
    )


def _add(into: list[int], counts: Sequence[int]) -> None:
    for k, c in enumerate(counts):
        into[k] += c


@dataclass
class Chunk:
    """The lines of consecutive partitions of one topic, and what its total line counts
    of them: partitions, segments, bytes of the segments listed (``plan --all`` only),
    deletions and their bytes; ``shown``: a partition of them is listed."""

    topic: str
    lines: list[str]
    counts: list[int]
    shown: bool


@dataclass
class DirText:
    """One log dir's part of the text: its first line, its partitions by topic, and its
    leftover dirs' lines with their names (the scan's order)."""

    path: str
    head: str
    chunks: list[Chunk]
    leftovers: list[tuple[str, str]]


@dataclass
class PlanText:
    """A plan's text before it is joined (``join_text``): the lines above the log dirs
    and each log dir's part. Plans of disjoint parts of the same store, each with the same
    lines above and the same log dirs, join into the text of the whole (``parallel``)."""

    header: list[str]
    dirs: list[DirText]
    every_size: bool


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


_HEADER_WIDTHS = tuple(map(len, _HEADER))


def _table(rows: list[tuple[str, str, str, str]], indent: str) -> list[str]:
    """The rows under ``_HEADER``: each column as wide as its widest cell, the first three
    right-aligned, the last left-aligned (its padding, trailing, is stripped)."""
    h0, h1, h2, _h3 = _HEADER_WIDTHS
    w0 = max(h0, *[len(r[0]) for r in rows])
    w1 = max(h1, *[len(r[1]) for r in rows])
    w2 = max(h2, *[len(r[2]) for r in rows])
    return [
        f"{indent}{a:>{w0}}  {b:>{w1}}  {c:>{w2}}  {d}".rstrip() for a, b, c, d in [_HEADER, *rows]
    ]


def _rows(
    decisions: Iterable[Decision], sizes: list[int | None], zone: str | None
) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    for i, d in enumerate(decisions):
        detail = human_detail(d.detail, zone)
        # f"{member}" is the member's value (a StrEnum, or a kind's own str reason)
        reason = f"{d.reason} ({detail})" if detail else f"{d.reason}"
        rows.append((str(d.start_offset), human_bytes(sizes[i]), f"{d.verdict}", reason))
    return rows


def _partition(
    plan: KafkaPlan, p: PartitionPlan, all_queue_files: bool, out: list[str]
) -> tuple[list[int | None], bool]:
    """The partition's lines (none for a transient directory with nothing to delete, unless
    every segment is asked for), the sizes of the segments it lists, and whether it was
    shown."""
    part = p.partition
    if not all_queue_files and not p.deletions and part.name.special:
        return [], False
    shown = p.decisions if all_queue_files else p.head
    sizes = [_size(p, i, d) for i, d in enumerate(shown)]
    out.append(
        f"  {part.name.name}: LSO {p.log_start_offset} HW {p.high_watermark}"
        f" LEO {p.log_end_offset} -> LSO {p.new_log_start_offset}"
    )
    if shown:
        out.extend(_table(_rows(shown, sizes, plan.zone), "    "))
    for d in p.head[: p.prefix]:
        if d.loss is not None and not d.loss.nothing:
            out.append(f"    segment {d.start_offset} {d.loss.summary()}")
    if p.behind and not all_queue_files:
        why = p.behind_reason
        if why is not None:
            out.append(f"    ... {p.behind} more kept ({why})")
        else:
            last = p.head[-1]
            out.append(f"    ... {p.behind} more kept behind {last.start_offset} ({last.reason})")
    return sizes, True


def _log_dir(plan: KafkaPlan, ld: LogDirPlan, all_queue_files: bool, own: bool) -> DirText:
    head = "" if ld.locked else "  (plan-only: another process holds .lock)"
    chunks: list[Chunk] = []
    chunk: Chunk | None = None
    for p in plan.partitions(ld, own=own):
        if chunk is None or p.partition.topic != chunk.topic:
            chunk = Chunk(p.partition.topic, [], [0, 0, 0, 0, 0], False)
            chunks.append(chunk)
        sizes, listed = _partition(plan, p, all_queue_files, chunk.lines)
        chunk.shown = chunk.shown or listed
        deletions = p.deletions
        _add(
            chunk.counts,
            (
                1,
                len(p.partition.bases),
                sum([s for s in sizes if s is not None]) if all_queue_files else 0,
                len(deletions),
                sum([d.identity.size for d in deletions if d.identity is not None]),
            ),
        )
    leftovers = []
    for d in ld.own_leftovers if own else ld.leftovers:
        size = human_bytes(d.identity.size) if d.identity is not None else "?"
        name = os.path.basename(d.path)
        leftovers.append(
            (
                name,
                f"    {name}: {d.verdict.value} {d.reason.value} {size}"
                + (f" ({d.detail})" if d.detail else ""),
            )
        )
    return DirText(ld.path, f"{ld.path}{head}", chunks, leftovers)


def plan_text(plan: KafkaPlan, *, all_queue_files: bool = False, own: bool = False) -> PlanText:
    """The parts of ``render_plan``'s text (``own``: of the partitions this process planned
    only, when another planned the rest)."""
    header = [
        f"kafka  config {plan.config_hash}  timezone {plan.timezone}  "
        f"now {human_time(plan.now_ms, plan.zone)}" + ("  manual round" if plan.manual else ""),
        f"metadata: {plan.metadata_source or 'none'}"
        + (f" (error: {plan.metadata_error})" if plan.metadata_error else ""),
    ]
    if plan.progress is not None:
        header.append(plan.progress.coverage_line())
        if plan.guard_unconsumed and plan.progress.progress is not Progress.KNOWN:
            header.append(
                "  guard: retentiond.guard.unconsumed=keep protects only the groups whose "
                "offsets were read here"
            )
        header.extend(f"  problem: {w}" for _p, w in plan.progress.problems)
    for err in plan.errors:
        header.append(f"ERROR: {err}")
    dirs = [_log_dir(plan, ld, all_queue_files, own) for ld in plan.log_dirs]
    return PlanText(header, dirs, all_queue_files)


def join_text(parts: Sequence[PlanText]) -> str:
    """The text of the plans of ``parts``, each of a disjoint part of the same store, in
    the order of their partitions (every topic of a part before those of the next, a topic
    split between two parts at most once); ValueError if they do not fit together."""
    first = parts[0]
    if any(
        p.header != first.header
        or p.every_size != first.every_size
        or [(d.path, d.head) for d in p.dirs] != [(d.path, d.head) for d in first.dirs]
        for p in parts
    ):
        raise ValueError("the parts are of different plans")
    every_size = first.every_size
    out = list(first.header)
    deletes = delete_bytes = 0
    for n, d in enumerate(first.dirs):
        out.append("")
        out.append(d.head)
        whole = [0, 0, 0, 0, 0]
        merged: list[Chunk] = []
        for part in parts:
            for c in part.dirs[n].chunks:
                if merged and merged[-1].topic == c.topic:
                    last = merged[-1]
                    merged[-1] = Chunk(
                        c.topic, [*last.lines, *c.lines], list(last.counts), last.shown or c.shown
                    )
                    _add(merged[-1].counts, c.counts)
                else:
                    merged.append(c)
        for c in merged:
            out.extend(c.lines)
            if c.shown:
                out.append(f"  topic {c.topic} total: {_sum_text(c.counts, every_size)}")
            _add(whole, c.counts)
        leftovers = sorted(
            (x for part in parts for x in part.dirs[n].leftovers), key=lambda x: x[0]
        )
        if leftovers:
            out.append("  leftover partition dirs (each removed whole or kept):")
        out.extend(line for _name, line in leftovers)
        out.append(f"{d.path} total: {_sum_text(whole, every_size)}")
        deletes += whole[3]
        delete_bytes += whole[4]
    out.append("")
    out.append(f"plan: delete {deletes} segments, {human_bytes(delete_bytes)}")
    return "\n".join(out) + "\n"


def render_plan(plan: KafkaPlan, *, all_queue_files: bool = False) -> str:
    """The text of ``plan`` (``all_queue_files``: ``plan --all``, every segment). A plan
    made in two processes joins this one's text with the other's (``plan.other_text``);
    ``plan --all`` and parts that do not fit are rendered from the whole plan (the other
    process's partitions planned here)."""
    if plan.other_text is not None and not all_queue_files:
        own, other = plan.other_text
        if not isinstance(own, PlanText):
            own = plan_text(plan, own=True)
        if isinstance(other, PlanText):
            try:
                return join_text([own, other])
            except ValueError:
                pass
    return join_text([plan_text(plan, all_queue_files=all_queue_files)])
