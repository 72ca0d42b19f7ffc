"""``QueueDecision`` keeps a queue's stop as its parts (issue 11: a daemon keeps one per queue).

Whatever stop it is given, it hands the same ``Decision`` back, and its parts (reason, value,
identity, detail, mtime) say what that Decision says: the compact form must never change what
a plan, the executor or the journal see.
"""

from __future__ import annotations

import pytest

from retentiond.engine.decision import Decision
from retentiond.engine.identity import FileIdentity
from retentiond.kinds.rocketmq.plan import QueueDecision
from retentiond.reasons import Kind, Reason, Verdict

D = "/store/consumequeue/T/3"
NAMES = ("00000000000000000000", "00000000000000000040", "00000000000000000080")
BIG = FileIdentity(ino=2**64 - 5, dev=2**63 + 7, size=6_000_000, mtime_ns=1_763_900_000_123_456_789)


def _cq(name: str, reason: Reason, **kw) -> Decision:
    base = dict(start_offset=int(name), topic="T", queue_id=3)
    base.update(kw)
    return Decision(Kind.CONSUMEQUEUE, f"{D}/{name}", Verdict.KEEP, reason, **base)  # type: ignore[arg-type]


GONE = Decision(Kind.CONSUMEQUEUE, f"{D}/{NAMES[0]}", Verdict.DELETE,
                Reason.BELOW_COMMITLOG_MIN_OFFSET, BIG, 0, 5, "T", 3)  # fmt: skip

STOPS = [
    # the usual stop: packed
    ((), _cq(NAMES[0], Reason.HOLDS_LIVE_OFFSET, identity=BIG, end_offset=2**62)),
    ((GONE,), _cq(NAMES[1], Reason.HOLDS_LIVE_OFFSET, identity=BIG, end_offset=0)),
    # unreadable with an identity (bad size) and without one (stat failed)
    ((), _cq(NAMES[0], Reason.UNREADABLE, identity=BIG, detail="size 3 != 40")),
    ((), _cq(NAMES[0], Reason.UNREADABLE, detail="stat failed: No such file")),
    # odd shapes kept whole: held, another path, another queue, a negative value
    ((), _cq(NAMES[0], Reason.HELD_BY_OTHER_PROCESS, identity=BIG, end_offset=9)),
    ((), _cq(NAMES[1], Reason.HOLDS_LIVE_OFFSET, identity=BIG, end_offset=9)),
    ((), _cq(NAMES[0], Reason.HOLDS_LIVE_OFFSET, identity=BIG, end_offset=9, queue_id=4)),
    ((), _cq(NAMES[0], Reason.HOLDS_LIVE_OFFSET, identity=BIG, end_offset=-1)),
    ((), None),
]


@pytest.mark.parametrize(("deleted", "stop"), STOPS)
def test_the_stop_given_is_the_stop_handed_back(deleted, stop):
    q = QueueDecision("T", 3, D, NAMES, deleted, stop)
    assert q.stop == stop
    assert q.stop_reason == (stop.reason if stop else None)
    assert q.stop_identity == (stop.identity if stop else None)
    assert q.stop_value == (stop.end_offset if stop else None)
    assert q.stop_detail == (stop.detail if stop else None)
    ident = stop.identity if stop else None
    assert q.stop_mtime_ms == (ident.mtime_ms if ident else None)
    decisions = list(q.decisions())
    assert decisions[: len(deleted)] == list(deleted)
    assert len(decisions) == len(NAMES)
    examined = len(deleted) + (stop is not None)
    if stop is not None:
        assert decisions[len(deleted)] == stop
    assert [d.path for d in decisions[examined:]] == [f"{D}/{n}" for n in NAMES[examined:]]
    assert decisions[-1].reason is Reason.NEWEST_FILE
    # holds rebuild a queue with another run and stop
    again = q.with_stop(deleted, stop)
    assert again.stop == stop and again.deleted == deleted
