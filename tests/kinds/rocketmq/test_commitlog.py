"""CommitLog policy on synthetic snapshots: upstream's deleteExpiredFileByTime rules."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from retentiond.config.settings import DaemonSettings, Settings
from retentiond.engine.identity import FileIdentity
from retentiond.kinds.rocketmq.commitlog import plan_commitlog
from retentiond.kinds.rocketmq.config import rocketmq_settings
from retentiond.kinds.rocketmq.snapshot import CommitLogFile
from retentiond.kinds.rocketmq.triggers import DiskState, Triggers, next_delete_window
from retentiond.reasons import DELETE_REASONS, Reason, Verdict

SIZE = 1024
HOUR = 3_600_000
NOW = 1_800_000_000_000


def settings(**kw) -> Settings:
    base = dict(
        store_path_root_dir=Path("/s"),
        store_path_commitlog=(Path("/s/commitlog"),),
        mapped_file_size_commitlog=SIZE,
        file_reserved_time_hours=1,
    )
    base.update(kw)
    return rocketmq_settings(**base)


def files(ages_h: list[float], preallocated: int = 0) -> tuple[CommitLogFile, ...]:
    out = []
    for i, age in enumerate([*ages_h, *([0.0] * preallocated)]):
        ident = FileIdentity(i + 1, 1, SIZE, int((NOW - age * HOUR) * 1_000_000))
        never = True if i >= len(ages_h) else (False if i == len(ages_h) - 1 else None)
        out.append(CommitLogFile("/s/commitlog", f"{i * SIZE:020d}", i * SIZE, ident, never))
    return tuple(out)


def triggers(*, time_up=False, usage=False, manual=False, at_once=False) -> Triggers:
    usage = usage or at_once  # clean_immediately only ever comes with isSpaceToDelete
    return Triggers(time_up, usage, manual, at_once, at_once, 0.5, 0.5, DiskState.OK, 4)


def verdicts(plan):
    return [(d.verdict, d.reason) for d in plan.decisions]


def test_time_up_deletes_expired_in_order_up_to_the_batch_max():
    plan = plan_commitlog(files([5] * 15 + [0.1] * 5), triggers(time_up=True), settings(), NOW)
    reasons = [d.reason for d in plan.decisions]
    assert reasons[:10] == [Reason.EXPIRED] * 10
    assert reasons[10:15] == [Reason.BATCH_LIMIT] * 5
    assert plan.min_offset_after == 10 * SIZE


def test_no_trigger_no_deletion():
    plan = plan_commitlog(files([5] * 5), triggers(), settings(), NOW)
    assert not plan.deletions()
    assert {d.reason for d in plan.decisions[:-1]} == {Reason.NOT_TIME_TO_DELETE}


def test_never_past_the_first_file_that_does_not_qualify():
    # MappedFileQueueTest.testDeleteExpiredFileByTime: 0-4 old, 5-20 fresh, 21-49 old.
    ages = [3] * 5 + [0] * 16 + [3] * 29
    plan = plan_commitlog(files(ages), triggers(time_up=True), settings(delete_file_batch_max=50),
                          NOW)  # fmt: skip
    assert len(plan.deletions()) == 5
    assert {d.reason for d in plan.decisions[5:21]} == {Reason.NOT_EXPIRED}
    # kept only because a younger file stops the pass before them
    assert {d.reason for d in plan.decisions[21:-1]} == {Reason.AFTER_FIRST_KEPT}


def test_newest_data_file_and_preallocated_files_are_kept_even_when_forced():
    plan = plan_commitlog(files([5, 5, 5], preallocated=1), triggers(at_once=True),
                          settings(), NOW)  # fmt: skip
    assert verdicts(plan)[-2:] == [(Verdict.KEEP, Reason.NEWEST_FILE)] * 2
    assert len(plan.deletions()) == 2


def test_forced_deletion_of_unexpired_files_names_its_reason():
    plan = plan_commitlog(files([0.1] * 4), triggers(usage=True, at_once=True), settings(), NOW)
    assert {d.reason for d in plan.deletions()} == {Reason.FORCED_OVER_CLEAN_FORCIBLY_RATIO}


def test_pressure_pass_without_force_deletes_only_expired():
    plan = plan_commitlog(files([5, 5, 0.1, 5]), triggers(usage=True), settings(), NOW)
    assert [d.reason for d in plan.deletions()] == [Reason.DISK_OVER_MAX_RATIO] * 2


def test_expiry_is_inclusive_at_exactly_reserved_time():
    plan = plan_commitlog(files([1.0, 0]), triggers(time_up=True), settings(), NOW)
    assert plan.decisions[0].delete


def test_wrong_size_file_stops_the_pass():
    fs = list(files([5, 5, 5]))
    bad = fs[1]
    fs[1] = CommitLogFile(bad.directory, bad.name, bad.start_offset,
                          FileIdentity(9, 1, 10, bad.identity.mtime_ns), None)  # fmt: skip
    plan = plan_commitlog(tuple(fs), triggers(time_up=True), settings(), NOW)
    assert [d.reason for d in plan.decisions] == [
        Reason.EXPIRED, Reason.BAD_SIZE, Reason.NEWEST_FILE,
    ]  # fmt: skip


@given(
    ages=st.lists(st.floats(min_value=0, max_value=10), min_size=0, max_size=30),
    prealloc=st.integers(0, 2),
    batch=st.integers(1, 12),
    time_up=st.booleans(),
    usage=st.booleans(),
    at_once=st.booleans(),
)
def test_invariants(ages, prealloc, batch, time_up, usage, at_once):
    fs = files(ages, preallocated=prealloc) if ages else ()
    s = settings(delete_file_batch_max=batch)
    plan = plan_commitlog(fs, triggers(time_up=time_up, usage=usage, at_once=at_once), s, NOW)
    deleted = [d.delete for d in plan.decisions]
    assert len(plan.decisions) == len(fs)
    # deletions form a prefix: never past a kept file
    assert deleted == sorted(deleted, reverse=True)
    assert sum(deleted) <= batch
    # the newest data file and everything after it survive
    if ages:
        assert not any(deleted[len(ages) - 1 :])
    for d in plan.decisions:
        assert (d.reason in DELETE_REASONS) == d.delete
        if d.delete and d.reason is not Reason.FORCED_OVER_CLEAN_FORCIBLY_RATIO:
            assert d.identity.mtime_ms + HOUR <= NOW
    if not (time_up or usage or at_once):
        assert not any(deleted)


# ---- what a kept file's reason says --------------------------------------------------------


def test_in_a_pass_a_young_file_behind_the_batch_limit_is_not_expired():
    """In the delete hour, files past deleteFileBatchMax that are expired say batch_limit;
    those younger than fileReservedTime say not_expired, never batch_limit."""
    plan = plan_commitlog(files([5] * 15 + [0.1] * 5), triggers(time_up=True), settings(), NOW)
    reasons = [d.reason for d in plan.decisions]
    assert reasons == (
        [Reason.EXPIRED] * 10 + [Reason.BATCH_LIMIT] * 5 + [Reason.NOT_EXPIRED] * 4
        + [Reason.NEWEST_FILE]
    )  # fmt: skip


def test_outside_the_delete_hour_expired_files_wait_and_young_ones_are_not_expired():
    s = settings(delete_hours=(4,), daemon=DaemonSettings(timezone="UTC"))
    plan = plan_commitlog(files([5, 5, 0.5, 0.2]), triggers(), s, NOW)
    assert [d.reason for d in plan.decisions] == [
        Reason.NOT_TIME_TO_DELETE, Reason.NOT_TIME_TO_DELETE, Reason.NOT_EXPIRED,
        Reason.NEWEST_FILE,
    ]  # fmt: skip
    assert plan.next_window_ms == next_delete_window(s, NOW) and plan.next_window_ms > NOW
    for d in plan.decisions:
        assert plan.expires_ms(d) == d.identity.mtime_ms + HOUR  # fileReservedTime 1 h


def test_a_forced_pass_keeps_young_files_behind_the_batch_limit_as_batch_limit():
    """Over the clean-forcibly ratio age does not matter: every file behind the limit would
    have gone, so each says batch_limit."""
    plan = plan_commitlog(files([0.1] * 15), triggers(at_once=True), settings(), NOW)
    assert [d.reason for d in plan.decisions[10:14]] == [Reason.BATCH_LIMIT] * 4
    assert plan.next_window_ms is None  # a pass ran


def _reference_deletions(ages, prealloc, batch, fired, at_once):
    """Upstream's deleteExpiredFileByTime, as the paths it deletes: oldest first, stop at the
    first file that does not qualify, at most ``batch``, never the newest data file."""
    if not fired:
        return []
    out = []
    for i, age in enumerate(ages[:-1]):  # the last data file is the newest: it stays
        expired = int((NOW - age * HOUR) * 1_000_000) // 1_000_000 + HOUR <= NOW
        if not (expired or at_once) or len(out) == batch:
            break
        out.append(f"/s/commitlog/{i * SIZE:020d}")
    return out


@given(
    ages=st.lists(st.floats(min_value=0, max_value=3), min_size=0, max_size=30),
    prealloc=st.integers(0, 2),
    batch=st.integers(1, 12),
    time_up=st.booleans(),
    usage=st.booleans(),
    at_once=st.booleans(),
)
def test_labels_change_no_deletion(ages, prealloc, batch, time_up, usage, at_once):
    """The deletions are upstream's; a kept file's reason is not_expired exactly when it is
    younger than fileReservedTime and the pass (if any) is not a forced one."""
    fs = files(ages, preallocated=prealloc) if ages else ()
    t = triggers(time_up=time_up, usage=usage, at_once=at_once)
    plan = plan_commitlog(fs, t, settings(delete_file_batch_max=batch), NOW)
    assert [d.path for d in plan.deletions()] == _reference_deletions(
        ages, prealloc, batch, t.fired, t.clean_at_once
    )
    for d in plan.decisions:
        if d.delete or d.reason is Reason.NEWEST_FILE:
            continue
        young = d.identity.mtime_ms + HOUR > NOW
        assert (d.reason is Reason.NOT_EXPIRED) == (young and not t.clean_at_once), d
        if d.reason in (Reason.BATCH_LIMIT, Reason.AFTER_FIRST_KEPT, Reason.NOT_TIME_TO_DELETE):
            assert not young or t.clean_at_once
