"""The scan's fast paths against their plain definitions: the batch summary against a fold of
``iter_batches`` (batches from kafka-python's builder), the segment-name check against the
naming scheme, and the bulk classification of a partition dir against every kind of entry
it can hold."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.scan import _log_prefixes, list_log_dir, scan_log_dir, scan_partition
from tests.kinds.kafka.kafkalog import KafkaLog, R, v1_message, v2_batch

NOW = 1_700_000_000_000


def folded(data: bytes) -> fm.LogSummary:
    """The summary by its definition: every complete batch, one at a time."""
    batches = list(fm.iter_batches(data))
    if not batches:
        return fm.LogSummary(0, 0, -1, None)
    last = batches[-1]
    return fm.LogSummary(
        last.position + last.size,
        len(batches),
        max(-1, *(b.max_timestamp for b in batches)),
        last.last_offset + 1,
    )


LOGS = {
    "empty": b"",
    "v2": v2_batch(0, [NOW, NOW - 5, NOW + 7]) + v2_batch(3, [NOW - 9]),
    "no timestamps": v2_batch(0, [-1, -1]),
    "legacy v1 and v2": v1_message(0, NOW - 3) + v1_message(1, NOW) + v2_batch(2, [NOW - 1]),
    "legacy v0": v1_message(0, NOW)[:16] + b"\x00" + v1_message(0, NOW)[17:],
    "partial trailing batch": v2_batch(0, [NOW]) + v2_batch(1, [NOW + 1])[:40],
    "preallocated zeros": v2_batch(5, [NOW]) + bytes(4096),
    "short header": v2_batch(0, [NOW]) + bytes(10),
}


@pytest.mark.parametrize("name", sorted(LOGS))
def test_summary_equals_the_fold_of_iter_batches(name: str) -> None:
    data = LOGS[name]
    assert fm.summarize_log(data) == folded(data)
    assert fm.summarize_log(memoryview(data)) == folded(data)


def test_summary_unknown_magic_names_file_and_position() -> None:
    data = bytearray(v2_batch(0, [NOW]) + v2_batch(1, [NOW]))
    data[R + 16] = 200
    with pytest.raises(fm.FormatError, match=rf"x\.log: position {R}: .* magic 200"):
        fm.summarize_log(bytes(data), "x.log")
    with pytest.raises(fm.FormatError, match="magic 200"):
        list(fm.iter_batches(bytes(data), "x.log"))


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("00000000000000000042.log", (42, ".log")),
        ("00000000000000000042.snapshot", (42, ".snapshot")),
        ("00000000000000000042.txnindex", (42, ".txnindex")),
        ("00000000000000000042.log\n", None),
        ("0000000000000000042.log", None),
        ("000000000000000000042.log", None),
        ("0000000000000000004２.log", None),  # a fullwidth digit: not what Kafka writes
        ("0000000000000000004a.log", None),
        ("00000000000000000042.log.deleted", None),
        ("00000000000000000042.logx", None),
        ("00000000000000000042", None),
    ],
)
def test_segment_file_names(name: str, parsed: tuple[int, str] | None) -> None:
    assert fm.parse_segment_file_name(name) == parsed


def plain_log_prefixes(names: list[str]) -> list[str]:
    """The definition: every name that is 20 ASCII digits and ``.log``, in offset order."""
    parsed = [fm.parse_segment_file_name(n) for n in names]
    return [f"{p[0]:020d}" for p in sorted(x for x in parsed if x and x[1] == ".log")]


SEG = [f"{b:020d}{s}" for b in (0, 20, 40) for s in (".log", ".index", ".timeindex")]
NAME_LISTS = {
    "empty": [],
    "no segment": ["leader-epoch-checkpoint", "partition.metadata"],
    "well formed": [*SEG, f"{40:020d}.snapshot", "leader-epoch-checkpoint"],
    "adjacent .log names": [f"{b:020d}.log" for b in (60, 0, 20, 40)],
    "one .log only": [f"{7:020d}.log"],
    "a bare .log": [".log", *SEG],
    "short prefix": ["0000000000000000042.log", *SEG],
    "long prefix": ["000000000000000000042.log", *SEG],
    "fullwidth digit": ["0000000000000000004２.log", *SEG],
    "letter in the prefix": ["0000000000000000004a.log", *SEG],
    ".log twice": [f"{5:020d}.log.log", *SEG],
    ".log leftover": [f"{5:020d}.log.deleted", f"{5:020d}.log.swap", *SEG],
    "digits run into the previous name": ["12345", "678.log", *SEG],
    "name ending in digits before a .log": [f"x{0:020d}.log", *SEG],
    "past a long": ["99999999999999999999.log", "09223372036854775808.log", *SEG],
    "a long at most": ["09223372036854775807.log", *SEG],
}


@pytest.mark.parametrize("case", sorted(NAME_LISTS))
def test_log_prefixes_equal_their_definition(case: str) -> None:
    """The bulk pick of ``.log`` names (a few string operations per dir) against the
    naming scheme checked name by name, in every listing order."""
    names = NAME_LISTS[case]
    for order in (names, names[::-1], sorted(names)):
        assert _log_prefixes(list(order)) == plain_log_prefixes(list(order)), order


def _every_kind_of_entry(tmp_path: Path) -> Path:
    """A partition dir holding every kind of entry (``test_partition_dir_every_kind_of_entry``)."""
    log = KafkaLog(tmp_path, segment_bytes=5 * R)
    log.append_records(15, NOW)
    log.write(hw=15)
    d = log.dir
    (d / f"{7:020d}.index").write_bytes(b"")  # an index without its .log
    (d / f"{99:020d}.log.deleted").write_bytes(b"x")
    (d / "leader-epoch-checkpoint.deleted").write_bytes(b"x")  # not a leftover of ours
    (d / "cleaner-offset-checkpoint.checkpoint.deleted").write_bytes(b"x")
    (d / f"{3:020d}.log.swap").write_bytes(b"x")  # the cleaner's
    (d / "notes.txt").write_text("hello")
    (d / f"{50:020d}.log").symlink_to(d / f"{0:020d}.log")
    (d / f"{60:020d}.log").mkdir()
    (d / "partition.metadata").write_text("version: 0\n")
    return d


def test_partition_dir_every_kind_of_entry(tmp_path: Path) -> None:
    """Segments in offset order with their companions, snapshots, leftovers, the orphan index,
    foreign files, a symlink and a directory named like a segment; the leader-epoch file is
    read only when asked for, and a bad one is an error then."""
    d = _every_kind_of_entry(tmp_path)
    part, foreign = scan_partition(str(d), fm.parse_partition_dir_name(d.name))  # type: ignore[arg-type]
    assert [s.base_offset for s in part.segments] == [0, 5, 10]
    assert [s.log_path for s in part.segments] == [str(d / f"{b:020d}.log") for b in (0, 5, 10)]
    assert part.segments[0].companions == frozenset({".index", ".timeindex"})
    assert part.snapshots == (5, 10)
    assert part.leftovers == (str(d / f"{99:020d}.log.deleted"),)
    assert dict(foreign) == {
        str(d / "leader-epoch-checkpoint.deleted"): "not a Kafka segment file",
        str(d / f"{7:020d}"): "index without .log",
        str(d / "notes.txt"): "not a Kafka segment file",
        str(d / f"{50:020d}.log"): "symlink (never followed)",
        str(d / f"{60:020d}.log"): "not a Kafka segment file",
    }
    assert part.leader_epochs == ((0, 0),) and part.errors == ()
    (d / "leader-epoch-checkpoint").write_text("7\n")
    part, _ = scan_partition(str(d), fm.parse_partition_dir_name(d.name))  # type: ignore[arg-type]
    assert part.leader_epochs is None and "unrecognised version" in part.errors[0]


def test_classification_is_the_same_after_the_listing_was_made(tmp_path: Path) -> None:
    """A rescue measures its deletions first (``Partition.listing``), then reports the
    foreign files: the classification made from that listing is the one made without it."""
    d = _every_kind_of_entry(tmp_path)
    (d / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (plain,) = scan_log_dir(str(d.parent)).partitions  # classified when first asked
    (listed,) = scan_log_dir(str(d.parent)).partitions
    assert f"{0:020d}.index" in listed.listing
    for part in (plain, listed):
        assert part.leader_epoch_file == str(d / "leader-epoch-checkpoint")
    assert plain._classified == listed._classified
    assert listed.leftovers == (str(d / f"{99:020d}.log.deleted"),)
    assert (str(d / f"{7:020d}"), "index without .log") in listed.foreign


def test_partition_dir_swapped_for_a_symlink_is_not_listed(tmp_path: Path) -> None:
    """Partition dirs are opened from the log dir without following a symlink: one that
    became a symlink after the log dir was listed is an error, not a listing of its target."""
    log = KafkaLog(tmp_path / "logs", segment_bytes=5 * R)
    log.append_records(5, NOW)
    log.write(hw=5)
    fd = os.open(tmp_path / "logs", os.O_RDONLY | os.O_DIRECTORY)
    try:
        twin = tmp_path / "twin"
        log.dir.rename(twin)
        log.dir.symlink_to(twin)
        with pytest.raises(OSError):
            scan_partition(str(log.dir), fm.parse_partition_dir_name(log.dir.name), fd)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    snap = scan_log_dir(str(tmp_path / "logs"))
    assert not snap.partitions and str(log.dir) in dict(snap.foreign)


def _big_log() -> bytes:
    """Batches of many sizes, one far longer than the small windows below."""
    out = b""
    offset = 0
    for n in (1, 3, 40, 2, 1, 7, 1):
        out += v2_batch(offset, [NOW + i for i in range(n)])
        offset += n
    return out + v1_message(offset, NOW + 99) + v2_batch(offset + 1, [NOW - 1])


@pytest.mark.parametrize("window", [17, 61, 100, 333, 1 << 20])
@pytest.mark.parametrize("name", [*sorted(LOGS), "big"])
def test_windowed_reads_equal_the_whole_file(tmp_path: Path, name: str, window: int) -> None:
    """A large ``.log`` is read a window at a time with ``pread`` (never mapped: a broker
    truncating it would kill us with SIGBUS): the same summary as the whole file at once,
    for every window size, including windows shorter than a batch or than its header."""
    data = _big_log() if name == "big" else LOGS[name]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert fm.summarize_log_fd(fd, len(data), str(path), window) == folded(data)
        # the file shrank after its size was taken (a broker truncating it): the walk stops
        # at what is there, as over the shorter file
        cut = len(data) * 2 // 3
        os.truncate(path, cut)
        got = fm.summarize_log_fd(fd, len(data), str(path), window)
        assert got == folded(data[:cut])
    finally:
        os.close(fd)


def test_windowed_read_names_the_absolute_position_of_an_unknown_magic(tmp_path: Path) -> None:
    data = bytearray(_big_log() + v2_batch(100, [NOW]))
    bad = len(_big_log())
    data[bad + 16] = 200
    path = tmp_path / "x.log"
    path.write_bytes(bytes(data))
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(fm.FormatError, match=rf"x\.log: position {bad}: .* magic 200"):
            fm.summarize_log_fd(fd, len(data), str(path), 100)
    finally:
        os.close(fd)


def test_a_large_segment_is_read_in_windows_with_the_same_summary(tmp_path: Path) -> None:
    """A ``.log`` over the one-read limit (1 MiB) goes through ``summarize_log_fd``."""
    d = tmp_path / "big-0"
    d.mkdir()
    data = b""
    offset = 0
    while len(data) <= 3 << 19:  # 1.5 MiB of batches
        data += v2_batch(offset, [NOW - 10_000 + offset % 777 for _ in range(50)])
        offset += 50
    (d / f"{0:020d}.log").write_bytes(data)
    (d / f"{offset:020d}.log").write_bytes(b"")
    part, _ = scan_partition(str(d), fm.parse_partition_dir_name(d.name))  # type: ignore[arg-type]
    assert part.segments[0].summary == folded(data)
    assert part.segments[0].summary.next_offset == offset


def test_a_scan_reusing_the_root_listing_sees_what_a_fresh_scan_sees(tmp_path: Path) -> None:
    """A scan of part of the partitions that takes the root listing (``root=``) or the root
    listing and the checkpoints of an earlier scan (``like=``) finds the same partitions,
    foreign entries, checkpoints and errors as one that lists and reads them itself."""
    logs = tmp_path / "logs"
    for topic in ("a", "b", "c"):
        for n in range(2):
            log = KafkaLog(logs, topic=topic, partition=n, segment_bytes=5 * R)
            log.append_records(12, NOW)
            log.write(hw=12)
    (logs / "stray.txt").write_text("x")
    (logs / "not-a-partition").mkdir()
    (logs / "c-9").symlink_to(logs / "c-0")
    (logs / fm.RECOVERY_CHECKPOINT).write_text("garbage\n")  # an error, the same in each
    path = str(logs)
    root = list_log_dir(path)
    assert [e for e, _n in root.dirs] == ["a-0", "a-1", "b-0", "b-1", "c-0", "c-1"]

    def owned(entry: str, _name: fm.PartitionDirName) -> bool:
        return entry >= "b-1"

    first = scan_log_dir(path, lambda _e, _n: False, frozenset({"a"}), root=root)
    assert [p.path for p in first.extra] == [f"{path}/a-0", f"{path}/a-1"]
    fresh = scan_log_dir(path, owned, frozenset({"a"}))
    for got in (scan_log_dir(path, owned, frozenset({"a"}), like=first), first, fresh):
        assert got.root_foreign == fresh.root_foreign
        assert got.errors == fresh.errors and any(fm.RECOVERY_CHECKPOINT in e for e in got.errors)
        assert got.high_watermarks == fresh.high_watermarks
        assert got.log_start_offsets == fresh.log_start_offsets
        assert got.recovery_points == fresh.recovery_points is None
    again = scan_log_dir(path, owned, frozenset({"a"}), like=first)
    assert [p.path for p in again.partitions] == [p.path for p in fresh.partitions]
    assert [p.bases for p in again.partitions] == [p.bases for p in fresh.partitions]
    assert [p.path for p in again.extra] == [p.path for p in fresh.extra]
    assert again.foreign == fresh.foreign
    assert {f for f, _why in fresh.root_foreign} == {
        f"{path}/stray.txt",
        f"{path}/not-a-partition",
        f"{path}/c-9",
    }
