"""The text plan: per partition the segments the passes hand over and the first one kept,
with what stopped the prefix, then how many are kept behind it; ``plan --all`` lists every
segment with its own reason. The compact form is what makes a plan over 10,000 partitions
cheap; these tests pin what it still shows. Real log dirs (``KafkaLog``)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from retentiond.config.settings import DaemonSettings
from retentiond.kinds.kafka.config import load_server_properties
from retentiond.kinds.kafka.kind import Kafka
from retentiond.kinds.kafka.plan import KafkaPlan, LogDirPlan
from retentiond.kinds.kafka.policy import PartitionPlan, TopicConfig, plan_partition
from retentiond.kinds.kafka.report import render_plan
from retentiond.kinds.kafka.scan import scan_log_dir
from retentiond.reasons import Reason, Verdict
from retentiond.text.units import human_age, human_bytes, human_time
from tests.kinds.kafka.kafkalog import KafkaLog, R, plan_one_partition, segment_bases

NOW = 1_700_000_000_000
OLD = NOW - 100_000
CFG = TopicConfig(retention_ms=10_000)


_ROW = re.compile(r"^(\d+)\s+(-|\d+(?:\.\d)? \w+)\s+(keep|delete)\s+(\S+)(?: \((.*)\))?$")


def rows(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines()]


def partition_lines(text: str) -> list[str]:
    """The lines of the (one) partition's section: its head line, table and what follows, up
    to its topic's total."""
    lines = rows(text)
    first = next(i for i, ln in enumerate(lines) if ln.startswith("test-0:"))
    last = next(i for i, ln in enumerate(lines) if ln.startswith("topic test total:"))
    return lines[first:last]


def segment_rows(text: str) -> list[tuple[str, ...]]:
    """(base offset, size, verdict, reason, detail) of each segment row."""
    return [m.groups() for ln in rows(text) if (m := _ROW.match(ln))]


def render(log_dir: Path, plans: list[PartitionPlan], *, every: bool = False) -> str:
    (log_dir / "server.properties").write_text(f"node.id=1\nlog.dirs={log_dir}\n")
    kind = Kafka(
        SimpleNamespace(config_hash="h", daemon=DaemonSettings()),
        load_server_properties(str(log_dir / "server.properties")),
    )  # type: ignore[arg-type]
    plan = KafkaPlan(NOW, "h", (LogDirPlan(str(log_dir), True, tuple(plans)),), None)
    return kind.render_plan(plan, all_queue_files=every)


def render_in(log_dir: Path, plans: list[PartitionPlan], zone: str) -> str:
    """The text with ``retentiond.timezone`` set to ``zone``."""
    plan = KafkaPlan(NOW, "h", (LogDirPlan(str(log_dir), True, tuple(plans)),), None,
                     timezone=zone, zone=zone)  # fmt: skip
    return render_plan(plan)


def planned(log: KafkaLog, config: TopicConfig | None = CFG) -> PartitionPlan:
    return plan_one_partition(log.log_dir, config, NOW)


def six_segments(tmp_path: Path, recent_ts: int = NOW - 1000) -> KafkaLog:
    log = KafkaLog(tmp_path, segment_bytes=5 * R)
    log.append_records(15, OLD)
    log.append_records(15, recent_ts)
    log.write(hw=30)
    assert segment_bases(log.dir) == [0, 5, 10, 15, 20, 25]
    return log


def test_deletions_and_the_first_kept_are_listed_the_rest_counted(tmp_path: Path) -> None:
    log = six_segments(tmp_path)
    p = planned(log)
    assert p.prefix == 3 and p.behind == 2 and p.stop is p.head[3]
    assert p.head == p.decisions[:4]  # the head is the start of the full list
    text = partition_lines(render(log.log_dir, [p]))
    assert text[0] == "test-0: LSO 0 HW 30 LEO 30 -> LSO 15"
    assert text[1].split() == ["BASE", "OFFSET", "SIZE", "VERDICT", "REASON"]
    assert [(r[0], r[2], r[3]) for r in segment_rows("\n".join(text))] == [
        ("0", "delete", "retention_ms_breach"),
        ("5", "delete", "retention_ms_breach"),
        ("10", "delete", "retention_ms_breach"),
        ("15", "keep", "within_retention"),
    ]
    assert text[6] == "... 2 more kept behind 15 (within_retention)"
    assert len(text) == 7


def test_all_lists_every_segment_with_its_reason(tmp_path: Path) -> None:
    log = six_segments(tmp_path)
    p = planned(log)
    got = segment_rows(render(log.log_dir, [p], every=True))
    assert [(r[0], r[2], r[3]) for r in got] == [
        (str(d.start_offset), d.verdict.value, d.reason.value) for d in p.decisions
    ]
    assert [d.reason for d in p.decisions[4:]] == [
        Reason.AFTER_FIRST_KEPT,
        Reason.WITHIN_RETENTION,
    ]
    assert got[4][4] == "behind offset 15 (within_retention)"  # the first kept, by offset


def test_a_future_timestamp_that_pins_the_partition_is_named(tmp_path: Path) -> None:
    """The first kept segment says its largest timestamp is in the future; the segments it
    pins are counted behind it (``--all`` names it in each of their reasons)."""
    future = NOW + 3_600_000
    log = six_segments(tmp_path, recent_ts=future)
    p = planned(log)
    text = partition_lines(render(log.log_dir, [p]))
    row = segment_rows(text[5])[0]
    assert row[:4] == ("15", row[1], "keep", "future_timestamp")
    assert row[4] == f"largest timestamp {human_time(future, None)} is in the future"
    assert text[6] == "... 2 more kept behind 15 (future_timestamp)"
    first = p.decisions[3].path
    assert all(first in (d.detail or "") for d in p.decisions[4:5])


def test_a_partition_left_alone_says_why_once(tmp_path: Path) -> None:
    """Unknown topic config: every segment kept for that one reason, said on the first and
    counted for the rest."""
    log = six_segments(tmp_path)
    p = planned(log, None)
    text = partition_lines(render(log.log_dir, [p]))
    row = segment_rows(text[2])[0]
    assert (row[0], row[2], row[3], row[4]) == (
        "0", "keep", "unknown_topic_config", "no effective config for test",
    )  # fmt: skip
    assert text[3] == "... 5 more kept (unknown_topic_config)"
    assert {(d.verdict, d.reason) for d in p.decisions} == {
        (Verdict.KEEP, Reason.UNKNOWN_TOPIC_CONFIG)
    }
    assert len(p.decisions) == 6


def test_dates_ages_and_sizes_in_human_units(tmp_path: Path) -> None:
    """No epoch milliseconds, no ages in ms, no raw byte counts: dates in the configured
    zone (named), ages as ``1m40s``, sizes in B/KiB/MiB; the segment still within retention
    says when it expires (one ms past largest timestamp + retention.ms)."""
    log = six_segments(tmp_path)
    p = planned(log)
    text = render(log.log_dir, [p], every=True)
    assert not re.search(r"\b1[5-9]\d{11}\b", text), text  # no epoch ms anywhere
    assert " ms" not in text.replace("retention.ms", "")
    got = segment_rows(text)
    for (base, size, *_), b in zip(got, segment_bases(log.dir), strict=True):
        assert base == str(b)
        assert size == human_bytes((log.dir / f"{b:020d}.log").stat().st_size)
    deleted = got[0][4]
    assert deleted == (
        f"largest timestamp {human_time(OLD, None)}, age {human_age(NOW - OLD)}, "
        f"retention.ms {human_age(CFG.retention_ms)}"
    )
    kept = got[3][4]
    recent = NOW - 1000
    assert kept.endswith(f": expires {human_time(recent + CFG.retention_ms + 1, None)}")
    assert "Europe/Paris" in render_in(log.log_dir, [p], "Europe/Paris").splitlines()[0]
    paris = render_in(log.log_dir, [p], "Europe/Paris")
    assert f"largest timestamp {human_time(OLD, 'Europe/Paris')}," in paris
    assert human_time(OLD, "Europe/Paris").endswith((" CET", " CEST"))


def test_a_total_per_topic_and_per_log_dir(tmp_path: Path) -> None:
    """Each topic's partitions are followed by its total, each log dir by its own: segments
    and what goes; with ``--all``, which lists (and so stats) every segment, the bytes they
    hold too."""
    a = KafkaLog(tmp_path, topic="alpha", partition=1, segment_bytes=5 * R)
    a.append_records(15, OLD)
    a.write(hw=15)
    b = KafkaLog(tmp_path, topic="alpha", partition=0, segment_bytes=5 * R)
    b.append_records(10, NOW - 1000)
    b.write(hw=10)
    c = KafkaLog(tmp_path, topic="beta", partition=0, segment_bytes=5 * R)
    c.append_records(5, OLD)
    c.write(hw=5)
    snap = scan_log_dir(str(tmp_path))
    by_name = {
        (part.topic, part.partition): plan_partition(
            part, CFG, now_ms=NOW, high_watermarks=snap.high_watermarks,
            log_start_offsets=snap.log_start_offsets,
        )
        for part in snap.partitions
    }  # fmt: skip
    plans = [by_name[k.tp] for k in (a, b, c)]

    def size(k: KafkaLog) -> int:
        return sum(f.stat().st_size for f in k.dir.glob("*.log"))

    def gone(p: PartitionPlan) -> int:
        return sum(d.identity.size for d in p.deletions)

    alpha_gone = gone(plans[0]) + gone(plans[1])
    every_gone = alpha_gone + gone(plans[2])
    n_a, n_b, n_c = (len(segment_bases(k.dir)) for k in (a, b, c))
    d_a, d_b, d_c = (len(p.deletions) for p in plans)
    assert d_a and not d_b and d_c
    for every in (False, True):
        text = rows(render(a.log_dir, plans, every=every))
        heads = [ln for ln in text if ln.startswith(("alpha-", "beta-", "topic ", str(a.log_dir)))]

        def held(*logs: KafkaLog) -> str:
            return f", {human_bytes(sum(size(k) for k in logs))}" if every else ""  # noqa: B023

        assert heads[:3] == [  # sorted by topic, then partition
            str(a.log_dir),
            "alpha-0: LSO 0 HW 10 LEO 10 -> LSO 0",
            f"alpha-1: LSO 0 HW 15 LEO 15 -> LSO {plans[0].new_log_start_offset}",
        ]
        assert heads[3] == (
            f"topic alpha total: 2 partitions, {n_a + n_b} segments{held(a, b)}; "
            f"delete {d_a} segments, {human_bytes(alpha_gone)}"
        )
        assert heads[4] == "beta-0: LSO 0 HW 5 LEO 5 -> LSO 5"
        assert heads[5] == (
            f"topic beta total: 1 partition, {n_c} segment{'s' if n_c > 1 else ''}"
            f"{held(c)}; delete {d_c} segment{'s' if d_c > 1 else ''}, "
            f"{human_bytes(gone(plans[2]))}"
        )
        assert heads[6] == (
            f"{a.log_dir} total: 3 partitions, {n_a + n_b + n_c} segments{held(a, b, c)}; "
            f"delete {d_a + d_c} segments, {human_bytes(every_gone)}"
        )
        assert text[-1] == f"plan: delete {d_a + d_c} segments, {human_bytes(every_gone)}"


def test_streamed_document_is_the_json_document(tmp_path: Path) -> None:
    """``plan --json`` streams the Kafka plan (``as_document`` through ``jsonstream``): the
    text is byte for byte ``json.dumps(as_dict(), indent=2)``, every segment listed."""
    import io
    import json

    from retentiond.text import jsonstream

    log = six_segments(tmp_path / "a")
    other = six_segments(tmp_path / "b", recent_ts=NOW + 3_600_000)
    plans = [planned(log), planned(log, None), planned(other)]
    for locked in (True, False):
        plan = KafkaPlan(NOW, "h", (LogDirPlan(str(tmp_path), locked, tuple(plans)),), None)
        for every in (True, False):
            out = io.StringIO()
            jsonstream.dump(plan.as_document(all_queue_files=every), out)
            assert out.getvalue() == json.dumps(plan.as_dict(all_queue_files=every), indent=2)
    plan = KafkaPlan(NOW, "h", (LogDirPlan(str(tmp_path), True, tuple(plans)),), None)
    doc = plan.as_dict()
    assert [len(p["segments"]) for p in doc["log_dirs"][0]["partitions"]] == [6, 6, 6]  # type: ignore[index]


def test_json_segments_name_their_partition_and_when_they_expire(tmp_path: Path) -> None:
    """A segment row says ``partition`` (never ``queue_id``); a segment whose largest
    timestamp is known says when it passes retention.ms (``expires_ms``)."""
    log = six_segments(tmp_path)
    p = planned(log)
    plan = KafkaPlan(NOW, "h", (LogDirPlan(str(tmp_path), True, (p,)),), None,
                     retention_ms={"test": CFG.retention_ms})  # fmt: skip
    doc = plan.as_dict()
    assert doc["type"] == "plan" and doc["kind"] == "kafka"
    segments = doc["log_dirs"][0]["partitions"][0]["segments"]  # type: ignore[index]
    assert all("queue_id" not in s and s["partition"] == 0 for s in segments)
    first_kept = segments[3]
    assert first_kept["reason"] == "within_retention"
    assert first_kept["expires_ms"] == NOW - 1000 + CFG.retention_ms + 1
    assert segments[0]["expires_ms"] == OLD + CFG.retention_ms + 1  # past: it goes
    assert doc["totals"] == {
        "files": 6,
        "delete_files": 3,
        "delete_bytes": sum(d.identity.size for d in p.deletions),
        "keep_files": 3,
    }
