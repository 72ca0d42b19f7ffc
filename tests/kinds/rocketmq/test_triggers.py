"""isSpaceToDelete / isTimeToDelete arithmetic on synthetic disk usage (spec §4.3, §4.4)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from retentiond.config.settings import DaemonSettings, Settings
from retentiond.engine.disk import PathUsage, adjusted, ratio_from_counts
from retentiond.kinds.rocketmq.config import rocketmq_settings
from retentiond.kinds.rocketmq.disk import DiskUsage
from retentiond.kinds.rocketmq.triggers import (
    DiskState,
    evaluate,
    hour_of_day,
    next_delete_window,
)


def settings(**kw) -> Settings:
    base = dict(
        store_path_root_dir=Path("/s"),
        store_path_commitlog=(Path("/s/commitlog"),),
        daemon=DaemonSettings(timezone="UTC"),
    )
    base.update(kw)
    return rocketmq_settings(**base)


def usage(*commitlog: float | None, cq: float | None = 0.1) -> DiskUsage:
    return DiskUsage(
        tuple(PathUsage(f"/p{i}", r, error=None if r is not None else "gone")
              for i, r in enumerate(commitlog)),
        PathUsage("/s/consumequeue", cq),
    )  # fmt: skip


AT_04 = int(datetime(2026, 1, 1, 4, 30, tzinfo=UTC).timestamp() * 1000)
AT_05 = AT_04 + 3_600_000


def test_ratio_is_df_use_percent_rounded_up():
    assert ratio_from_counts(22, 78) == 0.22
    assert ratio_from_counts(2201, 7799) == 0.23  # any remainder rounds up
    assert ratio_from_counts(0, 100) == 0.0
    assert ratio_from_counts(0, 0) is None


def test_pending_release_bytes_are_subtracted_before_deciding():
    u = PathUsage("/p", 0.9, total_bytes=100, used_bytes=90, avail_bytes=10)
    assert adjusted(u, 30).ratio == 0.6
    assert adjusted(u, 0) is u


def test_time_up_only_in_the_delete_hour_of_the_configured_zone():
    s = settings(delete_when="04", delete_hours=(4,))
    assert evaluate(s, AT_04, usage(0.1), manual=False).time_up
    assert not evaluate(s, AT_05, usage(0.1), manual=False).fired
    tokyo = settings(delete_hours=(13,), daemon=DaemonSettings(timezone="Asia/Tokyo"))
    assert hour_of_day(AT_04, "Asia/Tokyo") == 13
    assert evaluate(tokyo, AT_04, usage(0.1), manual=False).time_up


@pytest.mark.parametrize(
    ("physic", "logics", "exceeds", "immediately", "state"),
    [
        (0.75, 0.1, False, False, DiskState.OK),  # not strictly above 0.75
        (0.76, 0.1, True, False, DiskState.OVER_MAX_RATIO),
        (0.85, 0.1, True, False, DiskState.OVER_MAX_RATIO),
        (0.86, 0.1, True, True, DiskState.CLEAN_FORCIBLY),
        (0.91, 0.1, True, True, DiskState.WARNING_LEVEL),
        (0.1, 0.76, True, False, DiskState.OVER_MAX_RATIO),  # the consumequeue disk counts too
        (0.1, 0.86, True, True, DiskState.CLEAN_FORCIBLY),
        (0.1, None, False, False, DiskState.OK),  # consumequeue/ missing: no trigger, no -1
    ],
)
def test_space_thresholds(physic, logics, exceeds, immediately, state):
    t = evaluate(settings(), AT_05, usage(physic, cq=logics), manual=False)
    assert (t.usage_exceeds, t.clean_immediately, t.disk_state) == (exceeds, immediately, state)
    assert t.clean_at_once == immediately


def test_clean_forcibly_disabled_keeps_age_rule():
    t = evaluate(settings(clean_file_forcibly_enable=False), AT_05, usage(0.95), manual=False)
    assert t.clean_immediately and not t.clean_at_once


def test_multi_path_uses_the_minimum_ratio():
    t = evaluate(settings(), AT_05, usage(0.95, 0.5, 0.99), manual=False)
    assert t.physic_ratio == 0.5 and not t.clean_immediately


def test_unmeasurable_path_is_an_error_never_a_reason_to_delete():
    t = evaluate(settings(), AT_04, usage(0.5, None), manual=True)
    assert t.error and not t.fired and t.disk_state is DiskState.UNKNOWN


def test_manual_round_fires_outside_the_hour():
    assert evaluate(settings(), AT_05, usage(0.1), manual=True).fired


def _ms(*args: int, tz: str = "UTC") -> int:
    from zoneinfo import ZoneInfo

    return int(datetime(*args, tzinfo=ZoneInfo(tz)).timestamp() * 1000)  # type: ignore[misc]


def test_next_delete_window_starts_at_the_next_delete_hour_of_the_zone():
    s = settings(delete_when="04", delete_hours=(4,))
    assert next_delete_window(s, AT_05) == _ms(2026, 1, 2, 4)  # tomorrow at 04:00
    assert next_delete_window(s, AT_04) == _ms(2026, 1, 1, 4)  # inside it: this hour's start
    two = settings(delete_hours=(1, 22))
    assert next_delete_window(two, AT_05) == _ms(2026, 1, 1, 22)
    # Asia/Kolkata is UTC+05:30: its hours start at half past in UTC
    india = settings(delete_hours=(12,), daemon=DaemonSettings(timezone="Asia/Kolkata"))
    assert next_delete_window(india, AT_05) == _ms(2026, 1, 1, 12, tz="Asia/Kolkata")
    assert datetime.fromtimestamp(next_delete_window(india, AT_05) / 1000, UTC).minute == 30


def test_next_delete_window_across_a_dst_change():
    """Europe/Paris skips 02:00-03:00 on 2025-03-30: a window at hour 2 opens the next day;
    hour 4 opens that morning, one UTC hour earlier than the day before."""
    paris = DaemonSettings(timezone="Europe/Paris")
    before = _ms(2025, 3, 30, 1, 30, tz="Europe/Paris")
    at_two = settings(delete_hours=(2,), daemon=paris)
    assert next_delete_window(at_two, before) == _ms(2025, 3, 31, 2, tz="Europe/Paris")
    at_four = settings(delete_hours=(4,), daemon=paris)
    assert next_delete_window(at_four, before) == _ms(2025, 3, 30, 2)  # 04:00 CEST = 02:00 UTC


def test_next_delete_window_in_the_machine_zone_follows_the_c_library(monkeypatch):
    """``timezone`` unset: the machine's zone, as ``hour_of_day`` reads it (TZ here)."""
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        local = settings(delete_hours=(4,), daemon=DaemonSettings(timezone=None))
        at = next_delete_window(local, AT_05)
        assert at == _ms(2026, 1, 1, 4, tz="America/New_York")
        assert hour_of_day(at, None) == 4
    finally:
        monkeypatch.undo()
        time.tzset()
