"""What deleting one file costs its readers: the ``loss`` of a plan row and a deletion record.

A value type any kind fills in (``shared/spec/consumers.md``; the field names are fixed by
``docs/journal.md``): the consumer groups whose unread messages the file holds, with the topic
and the count, and the broker's own pending work in it (RocketMQ's timer messages, delay
levels and transaction half messages). ``progress`` says how much the kind could know.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Progress(StrEnum):
    KNOWN = "known"  # every progress file the kind reads was read
    PARTIAL = "partial"  # some of it is absent (Kafka: __consumer_offsets partitions elsewhere)
    UNKNOWN = "unknown"  # no progress file at all: nothing can be said
    CORRUPT = "corrupt"  # a progress file is there but cannot be parsed (nor its backup)


class GroupState(StrEnum):
    ACTIVE = "active"  # enabled and protected by a guard set to keep
    DISABLED = "disabled"  # consumeEnable=false: reported, never protected
    STALE = "stale"  # offsets unmoved for guard.staleAfter: reported, no longer protected
    IGNORED = "ignored"  # matches guard.ignoreGroups


@dataclass(frozen=True, slots=True)
class GroupLoss:
    group: str
    topic: str
    messages: int
    state: GroupState = GroupState.ACTIVE

    def as_dict(self) -> dict[str, object]:
        return {
            "group": self.group,
            "topic": self.topic,
            "messages": self.messages,
            "state": str(self.state),
        }


@dataclass(frozen=True, slots=True)
class Loss:
    progress: Progress
    groups: tuple[GroupLoss, ...] = ()  # only groups that lose something, sorted
    timers: int = 0
    delay_levels: tuple[tuple[int, int], ...] = ()  # (level, messages), levels ascending
    half_messages: int = 0
    # Readers whose unread messages could not be counted (a topic whose ConsumeQueue could not
    # be read): the file may hold theirs too. Never empty with ``progress`` ``known``.
    uncounted: tuple[str, ...] = ()

    @property
    def messages(self) -> int:
        """Unread messages of active groups (the ones a guard set to ``keep`` protects)."""
        return sum(g.messages for g in self.groups if g.state is GroupState.ACTIVE)

    @property
    def nothing(self) -> bool:
        return (
            not self.groups
            and not self.timers
            and not self.delay_levels
            and not (self.half_messages)
        )

    def protects(self, *, unconsumed: bool, timers: bool) -> str | None:
        """Which keep reason a guard would give this file: ``unconsumed`` (an active group
        loses messages), ``pending_timer`` (timers, delay levels or half messages), or None."""
        if unconsumed and (self.messages > 0 or self.uncounted):
            return "unconsumed"  # a loss that could not be counted is not taken for none
        if timers and (self.timers or self.delay_levels or self.half_messages):
            return "pending_timer"
        return None

    def as_dict(self) -> dict[str, object]:
        return {
            "progress": str(self.progress),
            "messages": self.messages,
            "groups": [g.as_dict() for g in self.groups],
            "timers": self.timers,
            "delay_levels": [{"level": lv, "messages": n} for lv, n in self.delay_levels],
            "half_messages": self.half_messages,
            **({"uncounted": list(self.uncounted)} if self.uncounted else {}),
        }

    def summary(self) -> str:
        """One line for the text plan and logs."""
        if self.progress is Progress.UNKNOWN:
            return "loss unknown (no consumer progress on disk)"
        if self.progress is Progress.CORRUPT:
            return "loss unknown (consumer progress unreadable)"
        if self.uncounted:
            counted = "" if self.nothing else f"; {Loss(self.progress, *self._counted()).summary()}"
            return f"loss not counted for {', '.join(self.uncounted)} (unreadable){counted}"
        if self.nothing:
            return "loses nothing" + (" known (partial coverage)" if self.partial else "")
        parts = [f"{g.group}@{g.topic} {g.messages}" + ("" if g.state is GroupState.ACTIVE
                 else f" ({g.state})") for g in self.groups]  # fmt: skip
        if self.timers:
            parts.append(f"{self.timers} timer(s)")
        for level, n in self.delay_levels:
            parts.append(f"delay level {level}: {n}")
        if self.half_messages:
            parts.append(f"{self.half_messages} half message(s)")
        head = "loses " + (f"{self.messages} unread: " if self.messages else "")
        return head + ", ".join(parts) + (" (partial coverage)" if self.partial else "")

    def _counted(
        self,
    ) -> tuple[tuple[GroupLoss, ...], int, tuple[tuple[int, int], ...], int]:
        return self.groups, self.timers, self.delay_levels, self.half_messages

    @property
    def partial(self) -> bool:
        return self.progress is Progress.PARTIAL


OTHER_GROUPS = "__other__"  # the label of the groups beyond guard.topGroups, summed


@dataclass(frozen=True, slots=True)
class GroupRisk:
    """A group's leading indicator: how many of its unread messages lie in files the current
    configuration will delete, and when the first of them goes (ms; None: not known yet)."""

    group: str
    messages: int
    first_ms: int | None = None


def add_risk(
    into: dict[str, list[int | None]], group: str, messages: int, when: int | None
) -> None:
    """Accumulate ``messages`` at risk for ``group``, the first going at ``when``."""
    got = into.setdefault(group, [0, None])
    got[0] = (got[0] or 0) + messages
    if when is not None and (got[1] is None or when < got[1]):
        got[1] = when


def top_risks(acc: dict[str, list[int | None]], top: int) -> tuple[GroupRisk, ...]:
    """The ``top`` groups by risk (most messages, then the soonest), the rest summed into one
    ``OTHER_GROUPS`` entry (its first loss the soonest of theirs): bounded label values."""
    risks = [GroupRisk(g, int(m or 0), w) for g, (m, w) in acc.items() if m]
    risks.sort(
        key=lambda r: (-r.messages, r.first_ms if r.first_ms is not None else 2**63, r.group)
    )
    head, rest = risks[:top], risks[top:]
    if rest:
        whens = [r.first_ms for r in rest if r.first_ms is not None]
        head.append(
            GroupRisk(OTHER_GROUPS, sum(r.messages for r in rest), min(whens) if whens else None)
        )
    return tuple(head)


def risk_status(risks: tuple[GroupRisk, ...] | None) -> list[dict[str, object]] | None:
    """``status``'s ``groups_at_risk``: None while no consumer progress was read."""
    if risks is None:
        return None
    return [{"group": r.group, "messages": r.messages, "first_loss_ms": r.first_ms} for r in risks]
