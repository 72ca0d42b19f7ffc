"""The compact plan against the spec's reference algorithm (§2.7), written out plainly here.

``plan_partition`` makes ``Segment`` objects lazily, reads only where Kafka's passes look and
builds a ``Decision`` only for the prefix and the first kept segment. None of that may change
what goes: on many generated partitions (real files, batches from kafka-python) the deleted
base offsets, the roll and the new log start offset must be exactly what the plain algorithm
gives, computed from what the writer knows (each segment's max timestamp, the log end offset)
and a plain ``stat`` of each ``.log``, not through the scan.
"""

from __future__ import annotations

import itertools
import os
import random
from dataclasses import dataclass
from pathlib import Path

from retentiond.kinds.kafka.policy import TopicConfig
from retentiond.reasons import Reason, Verdict
from tests.kinds.kafka.kafkalog import NO_TIMESTAMP, KafkaLog, R, plan_one_partition, segment_bases

NOW = 1_700_000_000_000
CASES = 100


@dataclass
class RefSegment:
    base: int
    size: int
    largest: int  # LogSegment.largestTimestamp: max batch timestamp, else the .log's mtime


def reference(
    segs: list[RefSegment],
    leo: int,
    lso_checkpoint: int | None,
    hw_checkpoint: int | None,
    config: TopicConfig,
) -> tuple[list[int], int | None, int]:
    """§2.7 as written: (deleted base offsets, roll offset, new log start offset)."""
    segs = list(segs)
    lso = max(lso_checkpoint if lso_checkpoint is not None else segs[0].base, segs[0].base)
    hw = min(max(hw_checkpoint if hw_checkpoint is not None else 0, lso), leo)
    deleted: list[int] = []
    roll: int | None = None

    def passes(pred):  # type: ignore[no-untyped-def]
        out = []
        for i, s in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base if nxt else leo
            last_empty = nxt is None and s.size == 0
            if hw >= upper and pred(s, nxt) and not last_empty:
                out.append(s)
            else:
                break
        return out

    def apply(out: list[RefSegment]) -> None:
        nonlocal segs, roll
        if not out:
            return
        if len(out) == len(segs):
            roll = leo
            segs = [*segs, RefSegment(leo, 0, -1)]
        deleted.extend(s.base for s in out)
        segs = segs[len(out) :]

    apply(passes(lambda s, n: n is not None and n.base <= lso))
    if config.delete:
        if config.retention_bytes >= 0:
            total = sum(s.size for s in segs)
            if total >= config.retention_bytes:
                diff = total - config.retention_bytes

                def size_pred(s: RefSegment, n: RefSegment | None) -> bool:
                    nonlocal diff
                    if diff - s.size >= 0:
                        diff -= s.size
                        return True
                    return False

                apply(passes(size_pred))
        if config.retention_ms >= 0:
            apply(passes(lambda s, n: NOW - s.largest > config.retention_ms))
    new_lso = max(lso, segs[0].base)
    return deleted, roll, new_lso


def generate(root: Path, rng: random.Random) -> tuple[KafkaLog, int | None, int | None]:
    """One partition: a random mix of old, recent, future and missing timestamps, random
    segment sizes, maybe a trailing empty segment, random checkpoints and mtimes."""
    start = rng.choice([0, 0, 100])
    log = KafkaLog(root, segment_bytes=rng.randint(1, 4) * R, start_offset=start)
    for _ in range(rng.randint(0, 22)):
        ts = rng.choice(
            [NOW - 1_000_000, NOW - 50_000, NOW - 5_000, NOW, NOW + 60_000, NO_TIMESTAMP]
        )
        log.append_records(1, ts)
    if log.segments[-1].data and rng.random() < 0.25:
        log.roll()  # a trailing empty segment
    leo = log.leo
    hw = rng.choice([None, leo, leo, rng.randint(start, leo + 2)])
    lso = rng.choice([None, None, rng.randint(start, leo + 1)])
    log.write(hw=hw, log_start_offset=lso)
    if hw is None and rng.random() < 0.5:  # the partition missing from an existing file
        (root / "replication-offset-checkpoint").write_text("0\n0\n")
    for p in log.dir.glob("*.log"):
        mt = NOW + rng.choice([-2_000_000, -40_000, -1, 30_000])
        os.utime(p, ns=(mt * 1_000_000, mt * 1_000_000))
    return log, hw, lso


CONFIGS = [
    TopicConfig(retention_ms=10_000),
    TopicConfig(retention_ms=100_000, retention_bytes=3 * R),
    TopicConfig(retention_ms=-1, retention_bytes=0),
    TopicConfig(retention_ms=0),
    TopicConfig(retention_ms=-1, retention_bytes=5 * R),
    TopicConfig(cleanup_policy=frozenset({"compact"}), retention_ms=0, retention_bytes=0),
    TopicConfig(cleanup_policy=frozenset({"compact", "delete"}), retention_ms=10_000),
]


def test_deletions_equal_the_reference_algorithm(tmp_path: Path) -> None:
    rng = random.Random(20261123)
    checked = deleting = 0
    for case in range(CASES):
        root = tmp_path / f"c{case}"
        log, hw, lso = generate(root, rng)
        bases = segment_bases(log.dir)
        ref_segs = []
        for seg in log.segments:
            path = log.dir / f"{seg.base:020d}.log"
            st = path.stat()
            largest = seg.max_ts if seg.max_ts >= 0 else st.st_mtime_ns // 1_000_000
            ref_segs.append(RefSegment(seg.base, st.st_size, largest))
        assert [s.base for s in ref_segs] == bases
        for config, compat in itertools.product(CONFIGS, (False, True)):
            # a fresh scan per config: what one plan read must not leak into the next; the
            # strict mode reads the time indexes, whose last entry is the same maximum
            p = plan_one_partition(root, config, NOW, time_index_compat=compat)
            want, roll, new_lso = reference(ref_segs, log.leo, lso, hw, config)
            got = [d.start_offset for d in p.deletions]
            ctx = (
                case,
                config,
                compat,
                hw,
                lso,
                log.leo,
                [(s.base, s.size, s.largest) for s in ref_segs],
            )
            assert got == want, ctx
            assert p.roll_offset == roll, ctx
            assert p.new_log_start_offset == new_lso, ctx
            # every segment has one verdict; exactly the prefix goes
            assert [d.start_offset for d in p.decisions] == bases, ctx
            assert [d.verdict for d in p.decisions] == [
                Verdict.DELETE if b in want else Verdict.KEEP for b in bases
            ], ctx
            # a segment past the first kept one is never a deletion, and never says it
            # would have been one
            first_kept = len(want)
            assert all(
                d.reason not in (Reason.RETENTION_MS_BREACH, Reason.RETENTION_BYTES_BREACH)
                for d in p.decisions[first_kept:]
            ), ctx
            # a plan-only dir hands over the same prefix, deleting nothing
            held = plan_one_partition(
                root, config, NOW, time_index_compat=compat, broker_running=True
            )
            assert not held.deletions
            assert [d.start_offset for d in held.head[: held.prefix]] == want, ctx
            assert {d.reason for d in held.head[: held.prefix]} <= {Reason.BROKER_RUNNING}
            checked += 1
            deleting += bool(want)
    assert checked == CASES * len(CONFIGS) * 2
    assert deleting > checked // 4  # the generator exercises deletions, not only keeps
