"""``plan_queue_from_file`` (values straight from the scan cache file's arrays) decides every
queue exactly as ``plan_queue`` does with the same values handed in as ``known``: the whole
``QueueDecision`` is compared, identities, packed stop and problem text included, over real
files that are unchanged, changed, gone, replaced by a directory, or recorded without a
value or a ctime."""

from __future__ import annotations

import os
import random
import struct
from array import array
from pathlib import Path

from retentiond.engine.identity import FileIdentity
from retentiond.kinds.rocketmq.queues import plan_queue, plan_queue_from_file
from retentiond.kinds.rocketmq.reader import BinaryReader
from retentiond.kinds.rocketmq.snapshot import QueueListing

CQ = 20 * 10  # ten 20-byte units per file
_U64 = 1 << 64


def _signed(x: int) -> int:
    return x - _U64 if x >= 1 << 63 else x


def test_from_the_file_and_from_known_values_decide_alike(tmp_path: Path) -> None:
    rng = random.Random(11)
    cases = ("good", "good", "unknown", "changed", "gone", "directory", "no-ctime", "stale")
    seen: set[str] = set()
    for trial in range(300):
        d = tmp_path / f"q{trial}"
        d.mkdir()
        n = rng.randint(1, 6)
        names = tuple(f"{i * CQ:020d}" for i in range(n))
        offsets = sorted(rng.randint(0, 1000) for _ in range(n))
        for name, off in zip(names, offsets, strict=True):
            (d / name).write_bytes(b"\0" * (CQ - 20) + struct.pack(">qiq", off, 1, 0))
        dev = os.stat(d).st_dev
        va = array("q")
        known = []
        for j, name in enumerate(names[:-1]):
            path = d / name
            st = os.lstat(path)
            case = rng.choice(cases)
            seen.add(case)
            value = {"unknown": -1, "stale": rng.randint(0, 1000)}.get(case, offsets[j])
            ctime = -1 if case == "no-ctime" else st.st_ctime_ns
            va.extend([_signed(st.st_ino), st.st_size, st.st_mtime_ns, ctime, value])
            ident = FileIdentity(st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)
            known.append(None if value < 0 else (ident, value, None if ctime < 0 else ctime))
            if case == "changed":
                os.truncate(path, CQ // 2)
            elif case == "gone":
                path.unlink()
            elif case == "directory":
                path.unlink()
                path.mkdir()
        q = QueueListing("t", 0, str(d), names, True, b"key")
        minimum = rng.randint(0, 1100)
        stored_dev = _signed(dev) if rng.random() < 0.5 else dev
        from_file = plan_queue_from_file(q, minimum, BinaryReader(CQ), va, 0, stored_dev)
        from_known = plan_queue(q, minimum, BinaryReader(CQ), tuple(known))
        assert tuple(from_file) == tuple(from_known), (trial, from_file, from_known)
    assert seen == set(cases)
