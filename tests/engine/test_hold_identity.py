"""``hold_in_order`` hands back the very run it was given when no file in it is held, and a
new run when one is: ``kinds.rocketmq.holds.hold_queues`` keeps a queue's decision as it is
on that identity alone (a plan on 100k queues would otherwise rebuild every one)."""

from __future__ import annotations

from retentiond.engine.decision import Decision
from retentiond.engine.holds import hold_in_order
from retentiond.engine.identity import FileIdentity
from retentiond.reasons import Kind, Reason, Verdict


class _Intervals:
    def interval(self, kind: Kind) -> int:
        return 60_000


def _run() -> tuple[Decision, ...]:
    return tuple(
        Decision(Kind.CONSUMEQUEUE, f"/s/cq/T/0/{i:020d}", Verdict.DELETE,
                 Reason.BELOW_COMMITLOG_MIN_OFFSET, FileIdentity(100 + i, 1, 40, 5), i * 40)
        for i in range(3)
    )  # fmt: skip


def test_a_run_nobody_holds_comes_back_as_the_same_tuple() -> None:
    run = _run()
    seen: dict = {}
    assert hold_in_order(run, lambda d: frozenset(), {}, 0, _Intervals(), seen) is run
    assert seen == {}


def test_a_held_file_makes_a_new_run_that_keeps_it_and_what_follows() -> None:
    run = _run()
    held_ino = run[1].identity.ino  # type: ignore[union-attr]

    def holders(d: Decision) -> frozenset[int]:
        return frozenset({42}) if d.identity and d.identity.ino == held_ino else frozenset()

    seen: dict = {}
    out = hold_in_order(run, holders, {}, 0, _Intervals(), seen)
    assert out is not run
    assert [d.verdict for d in out] == [Verdict.DELETE, Verdict.KEEP, Verdict.KEEP]
    assert out[0] is run[0]
    assert [d.reason for d in out[1:]] == [Reason.HELD_BY_OTHER_PROCESS, Reason.AFTER_FIRST_KEPT]
    assert list(seen) == [run[1].path]


def test_holders_that_cannot_be_seen_also_make_a_new_run() -> None:
    run = _run()
    out = hold_in_order(run, lambda d: None, {}, 0, _Intervals(), {})
    assert out is not run and out[0].reason is Reason.HELD_BY_OTHER_PROCESS
