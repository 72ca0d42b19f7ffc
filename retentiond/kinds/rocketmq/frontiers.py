"""What earlier loss counts found in each queue, carried between them (``loss.commitlog_losses``)
so that a count does not read again the queues whose files and readers have not moved.

A queue's unit at a logical index never changes once written, and the broker writes them in
CommitLog order, so for a CommitLog boundary ``b`` the first index whose unit is at or above
``b`` (its *frontier*) is fixed once such a unit is written: later units only come after it.
A count records, per queue directory:

  - ``floor``: the lowest first-needed index of the queue's readers when it was counted;
  - for each boundary it searched, the frontier when a written unit at or above the boundary
    was found (exact, and fixed), or ``floor`` for a boundary at or below the unit at
    ``floor`` (the frontier is then at most ``floor``: a reader at or above ``floor`` needs
    no more than that). A boundary above every written unit is not recorded (a unit still
    to come may fall below it).

A record is used only for the directory identity it was counted under (mtime, ctime, inode,
device: a file created, deleted or renamed in it changes that), only when every reader of
the queue is at or above its ``floor``, and only for a count whose every boundary it holds;
anything else reads the queue as before. It is never used when a guard keeps files (the
losses then decide verdicts): it serves reports only.

The records are kept in a file beside the scan cache (``scan-cache-*.bin``), written by the
daemon's rounds (never by ``plan``), to a temporary name and renamed into place. Its format:

    MAGIC, a header (``_HEADER``), the consumequeue path, then arrays of signed 64-bit
    integers in this machine's byte order -- the boundaries (ascending), each queue's
    directory key (``scan.DIR_KEY``, 32 bytes), per queue (``_Q``: floor, first run, runs)
    and the runs (``_R``: boundary index, frontier; a frontier of -1 means "not known" from
    that boundary on) -- and a SHA-256 of everything before it.

A file that is not one of these for this store (another store, file size, version or byte
order), cannot be parsed or fails its checksum is ignored with a warning: the counts then
read the queues.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
import sys
from array import array
from collections.abc import Callable, Sequence
from itertools import pairwise
from operator import itemgetter
from pathlib import Path

import structlog

from retentiond.kinds.rocketmq.scancache import write_digested

log = structlog.get_logger(__name__)

MAGIC = b"retentiond-rocketmq-frontiers\n"
VERSION = 1
# version, byte order (1 little), cq file size, path length, boundaries, queues, runs
_HEADER = struct.Struct("<IIqIIII")
_Q = 4  # floor, clamp, first run, runs (the directory keys are an array of their own)
_R = 2  # boundary index, frontier (-1: not known)
_KEY_WORDS = 4  # the directory key (scan.DIR_KEY: mtime_ns, ctime_ns, inode, device)

# A count's part of one queue's record: the count's boundaries (one tuple shared by every
# queue of that count) and the runs of frontiers over them: (position among those
# boundaries, frontier), a frontier of -1 meaning "not known" from there on.
Piece = tuple[tuple[int, ...], list[tuple[int, int]]]
# One queue's record: its floor, the index its readers were clamped to (its first unit;
# -1 when the count did not list the queue: no reader below the floor is served), and the
# pieces of the counts of this round (those of one floor and clamp).
Record = tuple[int, int, list[Piece]]


def runs_of(values: Sequence[int]) -> list[tuple[int, int]]:
    """(position, value) where the value changes."""
    runs: list[tuple[int, int]] = []
    last = -2
    for k, v in enumerate(values):
        if v != last:
            runs.append((k, v))
            last = v
    return runs


def memory_file(directory: Path, consumequeue_dir: str) -> Path:
    """Beside the scan cache, named by the same digest of the store's consumequeue path."""
    digest = hashlib.sha256(consumequeue_dir.encode()).hexdigest()[:16]
    return directory / f"frontiers-{digest}.bin"


class Frontiers:
    """The records of one store: those loaded from the file (decoded per queue when a count
    asks) and those counted or used since (``found``), which are what ``save`` writes."""

    def __init__(self, recording: bool = True) -> None:
        self.recording = recording  # whether counts add their records (a daemon's rounds)
        # Counted or used this round: what the next file holds.
        self.found: dict[bytes, Record] = {}
        self.changed = False
        self._bounds: array[int] = array("q")
        self._qa: array[int] = array("q")
        self._ra: array[int] = array("q")
        self._at: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._at)

    def reader(
        self, bounds: Sequence[int]
    ) -> Callable[[bytes], tuple[int, int, list[int]] | None] | None:
        """For one count: the floor, the clamp and the frontier of each of ``bounds``
        (ascending) recorded for a directory key; None unless every one is known. None
        instead of a function when nothing can be known nor recorded (a count that does
        not record, of boundaries the file does not hold)."""
        bounds = tuple(bounds)
        all_bounds = self._bounds
        gis: list[int] = []
        for b in bounds:
            gi = bisect.bisect_left(all_bounds, b)
            gis.append(gi if gi < len(all_bounds) and all_bounds[gi] == b else -1)
        usable = bool(gis) and min(gis) >= 0
        if not usable and not self.recording:
            return None
        found, at, qa, ra = self.found, self._at, self._qa, self._ra
        n_runs = len(ra) // _R
        recording = self.recording

        decoded: dict[tuple[int, ...], list[int] | None] = {}

        def decode(floor: int, first: int, end: int) -> list[int] | None:
            out: list[int] = []
            r = first
            value = -1
            for gi in gis:
                while r < end and ra[_R * r] <= gi:
                    value = ra[_R * r + 1]
                    r += 1
                if value < floor:  # not known (-1), or a record that cannot be
                    return None
                out.append(value)
            return out

        def get(key: bytes) -> tuple[int, int, list[int]] | None:
            got = found.get(key)
            if got is not None:  # counted earlier this round (a daemon's: recording)
                floor, clamp, pieces = got
                for piece_bounds, piece_runs in pieces:
                    if piece_bounds == bounds:
                        values = [-1] * len(bounds)
                        tail = [*piece_runs[1:], (len(bounds), -1)]
                        for (k, v), nxt in zip(piece_runs, tail, strict=True):
                            values[k : nxt[0]] = [v] * (nxt[0] - k)
                        if min(values) < floor:
                            return None
                        return floor, clamp, values
                # (another count's boundaries: the file may hold these)
            i = at.get(key) if usable else None
            if i is None:
                return None
            floor, clamp, first, runs = qa[i], qa[i + 1], qa[i + 2], qa[i + 3]
            end = first + runs
            if not -1 <= clamp <= floor or first < 0 or runs < 1 or end > n_runs:
                return None  # (a record that cannot be: read the queue)
            # Queues mostly share their runs (as positions among the boundaries): decoded
            # once per distinct runs and floor.
            runs_key = (floor, *ra[_R * first : _R * end])
            if runs_key in decoded:
                out = decoded[runs_key]
            else:
                out = decoded[runs_key] = decode(floor, first, end)
            if out is None:
                return None
            if recording:  # carried to the next file: what this count used
                if got is not None and got[0] == floor and got[1] == clamp:
                    got[2].append((bounds, runs_of(out)))
                else:
                    found[key] = (floor, clamp, [(bounds, runs_of(out))])
            return floor, clamp, out

        return get

    def put(
        self,
        key: bytes,
        floor: int,
        clamp: int,
        bounds: tuple[int, ...],
        runs: list[tuple[int, int]],
    ) -> None:
        """A queue counted now: its floor, clamp and the runs of frontiers known over the
        count's ``bounds`` (see the module); added to what an earlier count of this round
        recorded under the same floor and clamp."""
        if not self.recording:
            return
        old = self.found.get(key)
        if old is not None and old[0] == floor and old[1] == clamp:
            old[2].append((bounds, runs))
        else:
            self.found[key] = (floor, clamp, [(bounds, runs)])
        self.changed = True

    def forget(self, key: bytes) -> None:
        """A queue whose record does not hold for this count (its readers moved below the
        floor, or the count needs boundaries it lacks): recounted, then ``put`` again."""
        if self.found.pop(key, None) is not None:
            self.changed = True

    # ---- the file -------------------------------------------------------------------------
    def save(self, path: Path, consumequeue_dir: str, cq_file_size: int) -> bool:
        """Write the records found since the load (those of the queues counted or used)."""
        found = self.found
        by_count: dict[int, tuple[int, ...]] = {}  # the counts' boundaries, by identity
        for _, _, pieces in found.values():
            for piece_bounds, _ in pieces:
                by_count.setdefault(id(piece_bounds), piece_bounds)
        all_bounds = sorted({b for bs in by_count.values() for b in bs})
        index = {b: gi for gi, b in enumerate(all_bounds)}
        n_all = len(all_bounds)
        # Each count's positions among all the boundaries, and whether they follow on
        # (else its runs are spelled out boundary by boundary).
        places = {i: [index[b] for b in bs] for i, bs in by_count.items()}
        follow = {i: g[-1] - g[0] + 1 == len(g) for i, g in places.items()}
        keys = b"".join(found)
        qa, ra = array("q"), array("q")
        for floor, clamp, pieces in found.values():
            start = len(ra) // _R
            merged: dict[int, int] = {}  # global position -> frontier (the later count wins)
            covered: list[tuple[int, int]] = []  # the positions the counts covered
            for piece_bounds, runs in pieces:
                g = places[id(piece_bounds)]
                if follow[id(piece_bounds)]:
                    for k, v in runs:
                        merged[g[k]] = v
                    covered.append((g[0], g[-1]))
                else:
                    ends = [*(k for k, _ in runs[1:]), len(g)]
                    for (k, v), stop in zip(runs, ends, strict=True):
                        for j in range(k, stop):
                            merged[g[j]] = v
                            covered.append((g[j], g[j]))
            # Past what a count covered, "not known" (unless another count covered it).
            for _, hi in covered:
                e = hi + 1
                if e < n_all and e not in merged and not any(a <= e <= z for a, z in covered):
                    merged[e] = -1
            last = -2
            for gi in sorted(merged):
                v = merged[gi]
                if v != last:
                    ra.extend((gi, v))
                    last = v
            if start == len(ra) // _R:
                ra.extend((0, -1))
            qa.extend((floor, clamp, start, len(ra) // _R - start))
        cq = consumequeue_dir.encode("utf-8", "surrogateescape")
        head = MAGIC + _HEADER.pack(
            VERSION, sys.byteorder == "little", cq_file_size, len(cq), len(all_bounds),
            len(found), len(ra) // _R,
        )  # fmt: skip
        body = [head, cq, array("q", all_bounds).tobytes(), keys, qa.tobytes(), ra.tobytes()]
        try:
            with write_digested(path) as put:
                for part in body:
                    put(part)
        except OSError as exc:
            log.warning("cannot write the frontier memory", file=str(path), error=str(exc))
            return False
        self.changed = False
        return True

    @classmethod
    def load(
        cls, path: Path, consumequeue_dir: str, cq_file_size: int, *, recording: bool = True
    ) -> Frontiers:
        """The records of the file, or none (a missing, foreign or corrupt file: the counts
        read the queues)."""
        memory = cls(recording)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return memory
        except OSError as exc:
            log.warning("cannot read the frontier memory; ignored", file=str(path), error=str(exc))
            return memory
        try:
            memory._parse(data, consumequeue_dir, cq_file_size)
        except (ValueError, struct.error, IndexError, OverflowError) as exc:
            log.warning("ignoring a corrupt or foreign frontier memory", file=str(path),
                        error=str(exc))  # fmt: skip
            memory = cls(recording)
        return memory

    def _parse(self, data: bytes, consumequeue_dir: str, cq_file_size: int) -> None:
        n_head = len(MAGIC) + _HEADER.size
        if not data.startswith(MAGIC) or len(data) < n_head + 32:
            raise ValueError("not a retentiond frontier memory")
        version, little, size, n_cq, n_b, n_q, n_r = _HEADER.unpack_from(data, len(MAGIC))
        if version != VERSION or little != (sys.byteorder == "little"):
            raise ValueError(f"a frontier memory of version {version} or another byte order")
        if len(data) != n_head + n_cq + 8 * (n_b + n_q * (_KEY_WORDS + _Q) + n_r * _R) + 32:
            raise ValueError("array lengths do not match the header")
        if hashlib.sha256(data[:-32]).digest() != data[-32:]:
            raise ValueError("checksum mismatch (a torn or edited file)")
        at = n_head + n_cq
        if data[n_head:at].decode("utf-8", "surrogateescape") != consumequeue_dir or (
            size != cq_file_size
        ):
            raise ValueError("a frontier memory of another store")
        bounds = array("q", data[at : at + 8 * n_b])
        at += 8 * n_b
        if any(a >= b for a, b in pairwise(bounds)):
            raise ValueError("boundaries out of order")
        key_size = 8 * _KEY_WORDS
        keys = map(
            itemgetter(0), struct.iter_unpack(f"{key_size}s", data[at : at + key_size * n_q])
        )
        at += key_size * n_q
        at_by_key = dict(zip(keys, range(0, n_q * _Q, _Q), strict=True))
        if len(at_by_key) != n_q:
            raise ValueError("two records for one directory key")
        qa = array("q", data[at : at + 8 * n_q * _Q])
        at += 8 * n_q * _Q
        ra = array("q", data[at : at + 8 * n_r * _R])
        # (Each queue's own runs are checked when a count asks for them.)
        if ra and (min(ra[0::2]) < 0 or max(ra[0::2]) >= n_b or min(ra[1::2]) < -1):
            raise ValueError("a run outside the boundaries")
        self._bounds, self._qa, self._ra, self._at = bounds, qa, ra, at_by_key
