"""A RocketMQ plan says *when*: each CommitLog file's expiry, the next delete window for a
file kept because no pass runs, in the configured zone by name; a kept file younger than
fileReservedTime is ``not_expired`` -- and the deletions are exactly upstream's.

Real generated stores, the real command line (``python -m retentiond``) where the zone comes
from the process's environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from retentiond.reasons import Reason
from retentiond.text.units import human_time
from tests.conftest import Tmpfs, expired_spec, make_store

HOUR_MS = 3_600_000
RESERVED_H = 72


def plan_cli(config: Path, *args: str, tz: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TZ": tz}
    return subprocess.run(
        [sys.executable, "-m", "retentiond", "plan", "--config", str(config), *args],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def other_hour(tz: str) -> int:
    """An hour of the day in ``tz`` twelve hours from now: never the current one."""
    return (datetime.now(ZoneInfo(tz)).hour + 12) % 24


def young_and_old(tmp_path: Path, **keys: object):
    """24 CommitLog files aged 100 h .. 40 h: about half older than fileReservedTime."""
    spec = expired_spec(24, oldest_age_hours=100.0, newest_age_hours=40.0)
    return make_store(tmp_path, spec, fileReservedTime=RESERVED_H, **keys)


def test_outside_the_delete_hour_each_file_says_when(tmp_path: Path) -> None:
    """``timezone`` unset ("local"): the plan names the machine's zone (TZ here); expired
    files wait for the next delete window, the start of the deleteWhen hour in that zone
    (Asia/Kolkata: half past, in UTC); younger ones are not_expired, with their expiry."""
    tz = "Asia/Kolkata"
    hour = other_hour(tz)
    store = young_and_old(tmp_path, deleteWhen=f"{hour:02d}")
    result = plan_cli(store.config, "--json", tz=tz)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["timezone"] == tz and doc["now"].endswith("+05:30")
    window = doc["commitlog"]["next_delete_window_ms"]
    opens = datetime.fromtimestamp(window / 1000, ZoneInfo(tz))
    assert (opens.hour, opens.minute, opens.second) == (hour, 0, 0)
    assert 0 < window - doc["now_ms"] <= 24 * HOUR_MS
    assert doc["commitlog"]["next_delete_window"] == opens.isoformat()
    files = doc["commitlog"]["files"]
    reasons = [f["reason"] for f in files]
    assert "not_time_to_delete" in reasons and "not_expired" in reasons
    for f in files:
        assert f["expires_ms"] == f["mtime_ms"] + RESERVED_H * HOUR_MS
        if f["reason"] == "newest_file":
            continue
        expired = doc["now_ms"] >= f["expires_ms"]
        assert f["reason"] == ("not_time_to_delete" if expired else "not_expired"), f
        assert ("next_window_ms" in f) == expired
        if expired:
            assert f["next_window_ms"] == window

    text = plan_cli(store.config, tz=tz).stdout
    assert f"timezone {tz} " in text.splitlines()[0]
    when = human_time(window, tz)  # shown as in the zone: "2026-01-02 13:00 IST"
    assert f"next delete window {when}" in text and f"next window {when}" in text
    young = next(f for f in files if f["reason"] == "not_expired")
    assert f"expires {human_time(young['expires_ms'], tz)}" in text


def test_a_configured_zone_is_used_and_named(tmp_path: Path) -> None:
    zone = "America/New_York"
    hour = other_hour(zone)
    store = young_and_old(tmp_path, deleteWhen=f"{hour:02d}", retentiond={"timezone": zone})
    doc = json.loads(plan_cli(store.config, "--json", tz="Asia/Tokyo").stdout)
    assert doc["timezone"] == zone
    opens = datetime.fromtimestamp(doc["commitlog"]["next_delete_window_ms"] / 1000, ZoneInfo(zone))
    assert (opens.hour, opens.minute) == (hour, 0)


@pytest.mark.parametrize("batch", [3, 50])
def test_in_the_delete_hour_young_files_are_not_expired_and_deletions_are_upstreams(
    tmp_path: Path, batch: int
) -> None:
    """In a pass that ran, no file younger than fileReservedTime says batch_limit or
    after_first_kept; the files deleted are upstream's: the oldest expired ones, up to
    deleteFileBatchMax, never the newest data file."""
    store = young_and_old(tmp_path, deleteFileBatchMax=batch)
    plan = store.cleaner().plan()
    now = plan.now_ms
    cl = plan.commitlog
    assert cl.triggers.fired and cl.next_window_ms is None

    # the reference, from the files' mtimes on disk: oldest first (the newest data file and
    # the pre-allocated one after it excluded), stop at the first young one or at the batch
    candidates = [d for d in cl.decisions if d.reason is not Reason.NEWEST_FILE]
    expected = []
    for d in candidates:
        expires = os.stat(d.path).st_mtime_ns // 1_000_000 + RESERVED_H * HOUR_MS
        if now < expires or len(expected) == batch:
            break
        expected.append(d.path)
    assert expected and [d.path for d in cl.deletions()] == expected

    kept = [d for d in candidates if not d.delete]
    for d in kept:
        young = now < cl.expires_ms(d)
        assert (d.reason is Reason.NOT_EXPIRED) == young, d
        if not young:
            assert d.reason is Reason.BATCH_LIMIT, d
    assert any(d.reason is Reason.NOT_EXPIRED for d in kept)
    assert any(d.reason is Reason.BATCH_LIMIT for d in kept) == (batch == 3)  # 50: all go


def test_a_file_dated_past_year_9999_says_so(tmpfs: Tmpfs, tmp_path: Path) -> None:
    """A CommitLog file whose mtime is past any date (a tmpfs keeps one): the text plan
    says it expires after the last date there is, and lists every file as ``--json`` does."""
    spec = expired_spec(24, oldest_age_hours=100.0, newest_age_hours=40.0)
    store = make_store(tmp_path, spec, store_dir=tmpfs.path / "store", fileReservedTime=RESERVED_H)
    files = sorted((store.root / "commitlog").iterdir())
    far = 4 * 10**20  # ns: about the year 14645
    os.utime(files[3], ns=(far, far))
    assert os.stat(files[3]).st_mtime_ns == far
    result = plan_cli(store.config, "--all", tz="UTC")
    assert result.returncode == 0, result.stderr
    [row] = [line for line in result.stdout.splitlines() if line.startswith(str(files[3]))]
    assert row.endswith("expires after 9999-12-31"), row
    doc = json.loads(plan_cli(store.config, "--json", tz="UTC").stdout)
    assert len(doc["commitlog"]["files"]) == len(files)
