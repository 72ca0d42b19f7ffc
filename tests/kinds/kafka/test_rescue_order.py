"""The order `rescue --beyond-retention` takes segments in, and what it needs to free: where
consumer progress is known, fully consumed segments go before those whose loss is unknown,
and those before unconsumed ones; the oldest first within each. The target arithmetic is
df's (``engine.disk.ratio_from_counts``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from retentiond.engine.cleaner import Cleaner
from retentiond.engine.disk import PathUsage, ratio_from_counts
from retentiond.engine.rescue import RescueRequest, Rescues
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.kafka.rescue import needed_bytes, order_key
from retentiond.storegen.kafka import (
    KafkaStoreSpec,
    generate_kafka_store,
    write_server_properties,
)
from retentiond.text.units import parse_bytes


def test_consumed_before_unknown_before_unconsumed_oldest_first() -> None:
    segments = [
        ("unconsumed-old", order_key(100, 5)),
        ("unknown-new", order_key(300, None)),
        ("consumed-new", order_key(400, 0)),
        ("unknown-old", order_key(200, None)),
        ("consumed-old", order_key(150, 0)),
    ]
    assert [name for name, _ in sorted(segments, key=lambda s: s[1])] == [
        "consumed-old",
        "consumed-new",
        "unknown-old",
        "unknown-new",
        "unconsumed-old",
    ]


def test_needed_bytes_meets_the_target_exactly() -> None:
    for used, avail, target in ((970, 30, 0.80), (62_000_000, 1_100_000, 0.8), (50, 50, 0.9)):
        usage = PathUsage("/x", ratio_from_counts(used, avail), used + avail, used, avail)
        need = needed_bytes(usage, RescueRequest(target_ratio=target))
        assert (ratio_from_counts(used - need, avail + need) or 0) <= target
        if need:
            assert (ratio_from_counts(used - need + 1, avail + need - 1) or 0) > target
    usage = PathUsage("/x", 0.5, 100, 50, 50)
    assert needed_bytes(usage, RescueRequest(free_bytes=80)) == 30
    assert needed_bytes(usage, RescueRequest(free_bytes=10)) == 0


def test_sizes() -> None:
    assert parse_bytes("50GiB") == 50 << 30
    assert parse_bytes("512 MiB") == 512 << 20
    assert parse_bytes("10g") == 10 << 30
    assert parse_bytes("4096") == 4096
    assert parse_bytes("1.5KiB") == 1536
    for bad in ("lots", "", "5 parsecs", "1..2G"):
        try:
            parse_bytes(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_equal_timestamps_go_in_scan_order(tmp_path: Path) -> None:
    """Partitions whose segments have the same largest timestamps (here byte copies) are
    taken in the order of the scan, the same in every run: a dry run says what the real run
    that follows it takes, also where the target stops the rescue between two of them."""
    spec = KafkaStoreSpec(topics={"orders": 6}, overrides={}, future_topic=None)
    spec = replace(spec, distinct_partitions=1)
    store = generate_kafka_store(tmp_path / "logs", spec)
    props = write_server_properties(tmp_path / "server.properties", [store.log_dir])
    orders = []
    for _ in range(3):
        kind = kind_for(load_settings(str(props)))
        kind.begin_rescue(RescueRequest(free_bytes=1 << 60, beyond_retention=True))
        Cleaner(kind, clock_ms=lambda: spec.now_ms, announce_proc_view=False).run_round(
            dry_run=True
        )
        (fs,) = kind.rescue_report().document["filesystems"]  # type: ignore[attr-defined]
        steps = {s["step"]: s["items"] for s in fs["steps"]}
        orders.append([i["path"] for i in steps["beyond retention"]])
    beyond = orders[0]
    assert len(beyond) > 6 and orders == [beyond] * 3
    # base offset first (each partition's prefix, the oldest first), then the scan's order
    key = {p: (Path(p).name, Path(p).parent.name) for p in beyond}
    assert beyond == sorted(beyond, key=lambda p: key[p])


def _short_report(tmp_path: Path, **props: str) -> str:
    """The last line of each filesystem of a dry-run rescue that the configured retention
    cannot satisfy, without ``--beyond-retention``."""
    spec = KafkaStoreSpec(topics={"orders": 3}, overrides={}, future_topic=None)
    spec = replace(spec, distinct_partitions=1)
    store = generate_kafka_store(tmp_path / "logs", spec)
    config = write_server_properties(tmp_path / "server.properties", [store.log_dir], **props)
    kind = kind_for(load_settings(str(config)))
    assert isinstance(kind, Rescues)
    kind.begin_rescue(RescueRequest(free_bytes=1 << 60))
    Cleaner(kind, clock_ms=lambda: spec.now_ms, announce_proc_view=False).run_round(dry_run=True)
    report = kind.rescue_report()
    assert not report.reached
    (last,) = [line for line in report.lines if line.startswith("  target NOT reached")]
    return last


def test_a_short_rescue_says_whether_going_beyond_the_retention_could_free_more(
    tmp_path: Path,
) -> None:
    """Short of its target after the configured retention, a rescue says whether
    ``--beyond-retention`` would find segments past it (here: every partition has some
    older than the floor), or that it stopped (a floor longer than the data's age)."""
    more = _short_report(tmp_path / "a")
    assert more.endswith(
        "; stopped after the configured retention: --beyond-retention would take the "
        "oldest segments past it"
    )
    none = _short_report(
        tmp_path / "b", **{"retentiond.kafka.rescue.minRetentionMs": str(1000 * 86_400_000)}
    )
    assert none.endswith("; stopped after the configured retention")
