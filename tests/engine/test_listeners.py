"""Observers of rounds are listeners registered with the Cleaner: what they hear of a real
round on a generated store, and that one which raises does not stop the round."""

from __future__ import annotations

from collections.abc import Callable

from retentiond.engine.cleaner import RoundListener
from retentiond.engine.execute import Outcome
from tests.conftest import Store, records


class Recorder(RoundListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def round_started(self) -> None:
        self.events.append(("start", ""))

    def phase_started(self, phase: str) -> None:
        self.events.append(("phase", phase))

    def file_done(self, outcome: Outcome) -> None:
        self.events.append(("deleted" if outcome.deleted else "kept", outcome.decision.path))

    def round_ended(self) -> None:
        self.events.append(("end", ""))


class Broken(RoundListener):
    def file_done(self, outcome: Outcome) -> None:
        raise RuntimeError("a bug in an observer")


def test_listeners_hear_a_round_in_order_and_a_broken_one_stops_nothing(
    store: Callable[..., Store],
) -> None:
    made = store(fileReservedTime=72)
    cleaner = made.cleaner()
    first, second = Recorder(), Recorder()
    cleaner.add_listener(first)
    cleaner.add_listener(Broken())  # between the two: the second still hears every file
    cleaner.add_listener(second)
    result = cleaner.run_round()
    assert cleaner.journal is not None
    cleaner.journal.close()

    journaled = [r["file"] for r in records(made.journal, "deletion")]
    assert journaled and len(result.deleted) == len(journaled)
    for heard in (first.events, second.events):
        assert heard[0] == ("start", "") and heard[-1] == ("end", "")
        assert [p for what, p in heard if what == "phase"] == list(cleaner.kind.phases)
        assert [p for what, p in heard if what == "deleted"] == journaled
    assert first.events == second.events


def test_a_plan_is_no_round_to_the_listeners(store: Callable[..., Store]) -> None:
    cleaner = store(fileReservedTime=72).cleaner()
    heard = Recorder()
    cleaner.add_listener(heard)
    cleaner.plan()
    assert heard.events == []
