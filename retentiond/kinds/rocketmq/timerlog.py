"""Timer log deletion, driven only by the CommitLog minimum offset (spec §4.11, consumers §A.4.3).

RocketMQ 5.x's ``TimerMessageStore`` runs ``deleteExpiredFileByOffsetForTimerLog`` every 30 s:
for each ``timerlog/`` file but the last, oldest first, it reads the unit where the last one of
a full file starts (TimerLog ``getOffsetForLastUnit``), and the file goes when that unit is a
unit (size 52, a magic of unit flags only) whose CommitLog offset is strictly below the
CommitLog minimum. The first file that does not go, or that holds bad data there, stops the
scan. Nothing here looks at age, disk usage or the timer checkpoint: a pending timer in such a
file already lost its CommitLog record.

Every timerlog file is created at the configured ``mappedFileSizeTimerLog`` (the broker refuses
to load one of another length), so the newest file's length is the size the others are read
with (the one before it when the newest is caught at 0 bytes, before it is mapped); a file
of another length is kept (``bad_size``) and stops the prefix.
"""

from __future__ import annotations

from retentiond.engine.decision import Decision
from retentiond.kinds.rocketmq.plan import TimerLogPlan
from retentiond.kinds.rocketmq.reader import read_timerlog_last_offset
from retentiond.kinds.rocketmq.snapshot import TimerLogFile
from retentiond.reasons import Kind, Reason, Verdict


def plan_timerlog(files: tuple[TimerLogFile, ...], directory: str, min_offset: int) -> TimerLogPlan:
    """Oldest first; the newest file is never a candidate; stop at the first file kept.
    ``min_offset`` < 0 (the store could not be fully read): nothing is examined."""
    if min_offset < 0:
        return TimerLogPlan(directory, min_offset)
    decisions: list[Decision] = []
    stopped = False
    last = len(files) - 1
    # The newest file caught at 0 bytes (created empty, then mapped to its size; or left so
    # by a crash, which the broker's load deletes) says nothing of the size: the newest
    # file with bytes does.
    file_size = files[-1].identity.size if files else 0
    whose = "the newest file's"
    if file_size == 0 and len(files) > 1 and files[-2].identity.size > 0:
        file_size = files[-2].identity.size
        whose = "the newest non-empty file's"
    for i, f in enumerate(files):
        path = f"{directory}/{f.name}"
        start = int(f.name)
        if i == last or stopped:
            reason = Reason.NEWEST_FILE if i == last else Reason.AFTER_FIRST_KEPT
            decisions.append(Decision(Kind.TIMERLOG, path, Verdict.KEEP, reason, f.identity, start))
            continue
        stopped = True  # unless it goes
        if f.identity.size != file_size:
            decisions.append(
                Decision(Kind.TIMERLOG, path, Verdict.KEEP, Reason.BAD_SIZE, f.identity, start,
                         detail=f"size {f.identity.size} != {file_size} ({whose})")
            )  # fmt: skip
            continue
        got = read_timerlog_last_offset(path, file_size)
        ident = got.identity or f.identity
        if got.value is None:
            # (the file was replaced by one of another size since the scan: bad_size)
            changed = got.problem is not None and got.problem.startswith("size ")
            why = Reason.BAD_SIZE if changed else Reason.UNREADABLE
            decisions.append(
                Decision(Kind.TIMERLOG, path, Verdict.KEEP, why, ident, start, detail=got.problem)
            )
            continue
        below = got.value < min_offset  # strict "<" as upstream
        decisions.append(
            Decision(
                Kind.TIMERLOG,
                path,
                Verdict.DELETE if below else Verdict.KEEP,
                Reason.BELOW_COMMITLOG_MIN_OFFSET if below else Reason.HOLDS_LIVE_OFFSET,
                ident,
                start,
                got.value,
            )
        )
        stopped = not below
    return TimerLogPlan(directory, min_offset, tuple(decisions))
