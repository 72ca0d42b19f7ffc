"""Names the broker's loader reads differently from the naming scheme.

``LogLoader.loadSegmentFiles`` lists the partition dir with ``File::isFile`` (which follows a
symlink) and takes every name ending in ``.log`` as a segment, its base offset
``Long.parseLong`` of what precedes the first dot. retentiond takes only regular files named
20 ASCII digits + ``.log``. Where the two disagree about a ``.log`` name, the segment list the
plan walks is not the broker's: a prefix deleted around a symlinked ``<base>.log`` is not a
prefix of the log the broker loads next (rule 1). Such a partition is left alone and says why.

And a log dir entry whose name only looks like ``<topic>-<partition>`` (a partition number of
non-ASCII digits, a newline before the dash) is foreign: it neither stops the scan nor becomes
a partition.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.offline import run_offline
from retentiond.kinds.kafka.policy import TopicConfig
from retentiond.kinds.kafka.scan import scan_log_dir
from retentiond.reasons import Reason, Verdict
from tests.kinds.kafka.kafkalog import KafkaLog, R, plan_one_partition, segment_bases

NOW = 1_700_000_000_000
CFG = TopicConfig(retention_ms=10_000)


def expired_log(log_dir: Path) -> KafkaLog:
    """Four expired segments and a recent one: 0, 5, 10, 15 go, 20 stays."""
    log = KafkaLog(log_dir, segment_bytes=5 * R)
    log.append_records(20, NOW - 100_000)
    log.append_records(5, NOW)
    log.write(hw=25)
    assert segment_bases(log.dir) == [0, 5, 10, 15, 20]
    return log


def plan_of(log_dir: Path):  # type: ignore[no-untyped-def]
    return plan_one_partition(log_dir, CFG, NOW)


def test_control_without_odd_names_the_prefix_goes(tmp_path: Path) -> None:
    log = expired_log(tmp_path)
    assert [d.start_offset for d in plan_of(log.log_dir).deletions] == [0, 5, 10, 15]


def _symlinked_segment(log: KafkaLog, tmp_path: Path) -> str:
    """A symlink named like a segment at base 7, to a regular file outside the dir: the
    broker's loader opens it as the segment at offset 7."""
    outside = tmp_path / "elsewhere.log"
    outside.write_bytes((log.dir / f"{5:020d}.log").read_bytes())
    name = f"{7:020d}.log"
    os.symlink(outside, log.dir / name)
    return name


def _plus_sign(log: KafkaLog, tmp_path: Path) -> str:
    """``Long.parseLong("+0000000000000000007")`` is 7: a segment for the broker."""
    name = "+0000000000000000007.log"
    (log.dir / name).write_bytes(b"")
    return name


def _arabic_indic_digits(log: KafkaLog, tmp_path: Path) -> str:
    """Java's ``Long.parseLong`` reads any Unicode decimal digit (``Character.digit``)."""
    name = "\u0660" * 19 + "\u0667.log"
    (log.dir / name).write_bytes(b"")
    return name


def _short_name(log: KafkaLog, tmp_path: Path) -> str:
    name = "7.log"
    (log.dir / name).write_bytes(b"")
    return name


@pytest.mark.parametrize(
    "make", [_symlinked_segment, _plus_sign, _arabic_indic_digits, _short_name]
)
def test_a_log_the_broker_would_load_and_we_do_not_stops_the_partition(
    tmp_path: Path,
    make,  # type: ignore[no-untyped-def]
) -> None:
    log = expired_log(tmp_path / "logs")
    name = make(log, tmp_path)
    p = plan_of(log.log_dir)
    assert not p.deletions and p.roll_offset is None
    assert p.decisions[0].verdict is Verdict.KEEP
    assert p.decisions[0].reason is Reason.UNREADABLE
    assert name in (p.decisions[0].detail or "")
    assert {d.verdict for d in p.decisions} == {Verdict.KEEP}
    # and carried out: nothing goes, the odd entry is untouched
    r = run_offline(str(log.log_dir), lambda _t: CFG, now_ms=NOW)
    assert not r.deleted
    assert all((log.dir / f"{b:020d}.log").is_file() for b in (0, 5, 10, 15, 20))
    assert os.path.lexists(log.dir / name)


def test_a_directory_named_like_a_segment_is_not_a_segment_for_the_broker_either(
    tmp_path: Path,
) -> None:
    """``File::isFile`` is false for a directory: the broker ignores it, so does the plan."""
    log = expired_log(tmp_path)
    (log.dir / f"{7:020d}.log").mkdir()
    assert [d.start_offset for d in plan_of(log.log_dir).deletions] == [0, 5, 10, 15]


@pytest.mark.parametrize(
    "name",
    [
        "orders-\u00b2",  # isdigit() True, int() refuses it
        "orders-\u0663",  # an Arabic-Indic 3: int() reads it as 3
        "orders\n-0",  # $ matches before a trailing newline
        "orders-0.0123456789abcdef0123456789abcdef-delete\n",
        "orders-\u0663.0123456789abcdef0123456789abcdef-delete",
    ],
)
def test_partition_dir_names_outside_the_scheme_are_foreign(tmp_path: Path, name: str) -> None:
    assert fm.parse_partition_dir_name(name) is None
    log = expired_log(tmp_path)
    (tmp_path / name).mkdir()
    snap = scan_log_dir(str(tmp_path))
    assert [p.path for p in snap.partitions] == [str(log.dir)]
    assert str(tmp_path / name) in dict(snap.foreign)


def test_a_base_offset_past_long_max_is_no_segment(tmp_path: Path) -> None:
    """Twenty digits hold more than a long: ``Long.parseLong("99999999999999999999")``
    throws, and the broker cannot load the partition. Not a segment of ours either: the name
    is outside the scheme (``filenamePrefixFromOffset`` of a long), the partition left alone."""
    assert fm.parse_segment_file_name("09223372036854775807.log") == (2**63 - 1, ".log")
    assert fm.parse_segment_file_name("09223372036854775808.log") is None
    assert fm.parse_segment_file_name("99999999999999999999.snapshot") is None
    log = expired_log(tmp_path)
    (log.dir / "99999999999999999999.log").write_bytes(b"")
    p = plan_of(log.log_dir)
    assert not p.deletions
    assert "99999999999999999999.log" in (p.decisions[0].detail or "")
