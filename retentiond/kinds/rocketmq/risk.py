"""When each CommitLog file goes under the current configuration, for the leading indicator
(``engine.loss.GroupRisk``): a group's unread messages in a file are at risk from that time.

A file goes:
  - now when this round's plan deletes it, and every file under a forced pass (the disk above
    ``diskSpaceCleanForciblyRatio`` with ``cleanFileForciblyEnable``: age does not matter);
  - else once it is older than ``fileReservedTime`` (mtime + fileReservedTime) and a pass
    runs: while the disk is above ``diskMaxUsedSpaceRatio`` a pass runs every round, so then;
    otherwise at the first ``deleteWhen`` hour in the configured zone at or after that time;
  - and never before the files before it: the pass stops at the first file that stays, so a
    file's time is at least its predecessor's.
The walk stops at the first file that does not go as the store stands: the newest file that
holds data (never deleted) and those after it, a file of the wrong size (the pass stops there
for good), a file the guard keeps, and any file when no delete hour is configured and no
pass runs by disk pressure, and a file dated so far ahead that it expires past the year 9999.
The times are the earliest each file can go, never later.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from retentiond.config.settings import Settings
from retentiond.engine.decision import Decision
from retentiond.engine.loss import GroupState, Loss, add_risk
from retentiond.kinds.rocketmq.config import RocketMQStore
from retentiond.kinds.rocketmq.plan import CommitLogPlan
from retentiond.kinds.rocketmq.triggers import next_delete_window
from retentiond.reasons import Reason

_NEVER = (Reason.NEWEST_FILE, Reason.BAD_SIZE, Reason.UNCONSUMED, Reason.PENDING_TIMER)
# The last time a date can carry (a day before the year 10000, for any zone's delete hour):
# a file that expires after it is taken as never expiring.
_LAST_MS = int(datetime(9999, 12, 30, tzinfo=UTC).timestamp() * 1000)


def going(
    cl: CommitLogPlan, settings: Settings[RocketMQStore], now_ms: int
) -> Iterator[tuple[int, Decision, int]]:
    """Each CommitLog file the current configuration will delete, oldest first: its index in
    the plan, its decision and the earliest time it goes (ms, at least ``now_ms``)."""
    t = cl.triggers
    forced = t.fired and t.clean_at_once
    pressure = t.error is None and t.usage_exceeds
    size = settings.store.mapped_file_size_commitlog
    reserved = settings.store.file_reserved_time_hours * 3_600_000
    when = now_ms
    for i, d in enumerate(cl.decisions):
        if d.start_offset is None or d.identity is None or d.reason in _NEVER:
            return
        if d.delete:
            yield i, d, now_ms
            continue
        if d.identity.size != size:
            return  # the pass would stop here (a file past the first stop was not sized)
        if not forced:
            expires = max(d.identity.mtime_ms + reserved, now_ms)
            if expires > _LAST_MS:
                return  # dated past any clock: it (and every file after it) never expires
            if not pressure:
                window = next_delete_window(settings, expires)
                if window is None:
                    return  # no delete hour: it goes only under disk pressure
                expires = max(expires, window)
            when = max(when, expires)
        yield i, d, when


def add_group_risks(
    into: dict[str, list[int | None]],
    files: Sequence[tuple[Decision, int]],
    losses: Sequence[Loss],
    *,
    guard: tuple[bool, bool] | None,
) -> None:
    """Each active group's unread messages in ``files`` (from ``going``) with their loss,
    the first at the time its file goes. ``guard``: (unconsumed, timers) set to keep, when
    the guard holds (not under a forced pass): a later file it would keep stops the walk."""
    for (d, when), loss in zip(files, losses, strict=True):
        if (
            guard is not None
            and not d.delete
            and loss.protects(unconsumed=guard[0], timers=guard[1])
        ):
            return
        for g in loss.groups:
            if g.state is GroupState.ACTIVE:
                add_risk(into, g.group, g.messages, when)
