"""The scan cache carried across restarts: queue directory listings and the values of full
ConsumeQueue files, so that the first round after a start costs about what a warm one does.

Nothing in the file is trusted as it stands. A listing is used only while its directory's
inode, device, mtime and change time (ctime: ``utime`` cannot set it back) are those recorded,
and a value loaded from the file is used only once an ``lstat`` of its file shows the identity
it was read with (inode, device, size, mtime and ctime), and only for the files the queue's
decision rests on (those that go and the first one kept); any difference means reading the file
again. So a directory or file renamed, replaced, truncated, rewritten or with a new file beside
it is read afresh, and a stale cache can at worst make a round keep more; every unlink
re-checks the file anyway. A file that is not a cache for this store (another store, another
file size, another format or byte order) or that cannot be parsed or fails its checksum is
ignored with a warning.

The format is binary and columnar, so that loading 100,000 queues is a few ``array.frombytes``
calls and one loop (the JSON of version 2 took seconds to parse and kept every string):

    MAGIC, then a header (``_HEADER``), the consumequeue path, a string table (topic and queue
    directory names, joined by "/", which no directory name holds), five arrays of signed
    64-bit integers in this machine's byte order -- per queue (``_Q`` of them), per file name
    (its start offset), per non-last file (``_V``: inode, size, mtime, ctime, value; value -1
    when not known), per parent directory (``consumequeue/`` and each topic: ``_P``), per
    child of those (its name's index in the string table) -- and a SHA-256 of everything
    before it.

It is written to a temporary file and renamed into place.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import struct
import sys
from array import array
from collections.abc import Callable, Iterator, Mapping
from itertools import accumulate, islice, repeat
from operator import mul, sub
from pathlib import Path
from sys import intern
from typing import Any, BinaryIO

import structlog

from retentiond.engine.identity import FileIdentity
from retentiond.kinds.rocketmq.names import parse_queue_id
from retentiond.kinds.rocketmq.plan import QueueDecision
from retentiond.kinds.rocketmq.queues import Values, decision_values
from retentiond.kinds.rocketmq.reader import Known
from retentiond.kinds.rocketmq.scan import DIR_KEY, PARENT_KEY, ParentListing, Parents, QueueLister
from retentiond.kinds.rocketmq.snapshot import QueueListing, QueueRoot

log = structlog.get_logger(__name__)

MAGIC = b"retentiond-rocketmq-scan-cache\n"
VERSION = 3
# version, byte order (1 little), cq file size, consumequeue dev, ino, path length,
# string table length, queues, file names, values, parent directories, their children
_HEADER = struct.Struct("<IIqqqIIIIIII")
_Q = 8  # topic index, dirname index, queue id, names; then the directory key (``DIR_KEY``)
_V = 5  # ino, size, mtime_ns, ctime_ns, value
_P = 5  # topic index (-1: consumequeue/ itself), mtime_ns, ctime_ns, ino, children
_U64 = 1 << 64
_I63 = 1 << 63


def cache_file(directory: Path, consumequeue_dir: str) -> Path:
    """One file per store beside the journal (the daemon's state directory)."""
    digest = hashlib.sha256(consumequeue_dir.encode()).hexdigest()[:16]
    return directory / f"scan-cache-{digest}.bin"


def _s64(x: int) -> int:
    """An unsigned 64-bit inode or device number as the signed integer the array holds."""
    return x - _U64 if x >= _I63 else x


def _u64(x: int) -> int:
    return x + _U64 if x < 0 else x


def _ctime_if_same(path: str, ident: FileIdentity) -> int | None:
    """The file's change time if it still has the identity its value was read with. Values
    read in this process carry no ctime (``Decision`` records inode, size and mtime), so the
    file is stat-ed once when it is written to the cache: a later process then also sees a
    file rewritten in place whose mtime was put back."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns) != (
        ident.ino, ident.dev, ident.size, ident.mtime_ns
    ):  # fmt: skip
        return None
    return st.st_ctime_ns


_SLICE = 8192  # queues per slice of an array written to the cache file


def _values(
    entries: list[QueueListing],
    memo: Mapping[bytes | str, QueueDecision],
    loaded: LoadedValues | None,
) -> array[int]:
    """The ``_V`` record of each non-last file of these queues: the value their decision
    read (``memo``; for a queue the memo does not know yet, what was loaded from the file)
    with the identity it was read under, or a record of "not known"."""
    va = array("q")
    loaded_get = loaded.get if loaded is not None else _nothing_loaded
    unpack = DIR_KEY.unpack
    for listing in entries:
        qpath, names = listing.directory, listing.names
        dev = unpack(listing.key)[3]
        hit = memo.get(listing.key or qpath)
        got = (hit.names, decision_values(hit)) if hit is not None else loaded_get(qpath)
        known: Values = ()
        if got is not None and (got[0] is names or got[0] == names):
            known = got[1]
        for i in range(len(names) - 1):
            k = known[i] if i < len(known) else None
            if k is None or k[0].dev != dev:
                va.extend((0, 0, 0, 0, -1))
            else:
                ident, ctime = k[0], k[2]
                if ctime is None:
                    ctime = _ctime_if_same(f"{qpath}/{names[i]}", ident)
                if ctime is None:
                    va.extend((0, 0, 0, 0, -1))  # changed or gone since it was read
                else:
                    va.extend((_s64(ident.ino), ident.size, ident.mtime_ns, ctime, k[1]))
    return va


def _plain(lister: QueueLister) -> Iterator[QueueListing]:
    """The listings the file carries, in the lister's order: only plain queue directories
    (with queue files and nothing else) are worth carrying over."""
    for _, listing in lister.queue_entries():
        if listing.names and not listing.strangers:
            yield listing


def _dirname(listing: QueueListing) -> str:
    """The queue directory's name (the lister's listings hold the store's QueueRoot: the
    name is the decimal form of the queue id)."""
    location = listing[2]
    return os.path.basename(location) if type(location) is str else str(listing.queue_id)


@contextlib.contextmanager
def write_digested(path: Path) -> Iterator[Callable[[bytes | array[int]], None]]:
    """Within: ``put(part)`` writes parts of ``path``'s new content; on leaving, their SHA-256
    follows them and the file is renamed into place (a reader sees the old file or the whole
    new one). An OSError leaves no temporary file behind and is raised."""
    digest = hashlib.sha256()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)  # as the journal's
        with open(fd, "wb") as f:

            def put(part: bytes | array[int]) -> None:
                digest.update(part)
                f.write(part)

            yield put
            f.write(digest.digest())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def save(
    path: Path,
    consumequeue_dir: str,
    lister: QueueLister,
    memo: Mapping[bytes | str, QueueDecision],
    loaded: LoadedValues | None,
    cq_file_size: int,
) -> bool:
    """Write the lister's remembered listings with the values their queues' decisions read
    (``memo``; for a queue the memo does not know yet, what was loaded from the file)."""
    try:
        st = os.stat(consumequeue_dir)
    except OSError:
        return False
    # First what the header needs (which queues, how many names, the string table), then
    # the arrays written a slice of queues at a time: a daemon writes this file after rounds
    # that listed anything, and whole arrays (or lists) for 100k+ queues would be a peak of
    # its memory. The listings are walked once per array instead.
    strings: dict[str, int] = {}
    n_q = n_names = 0
    for listing in _plain(lister):
        n_q += 1
        strings.setdefault(listing.topic, len(strings))
        strings.setdefault(_dirname(listing), len(strings))
        n_names += len(listing.names)
    parents = lister.parent_entries()
    root: ParentListing | None = None
    n_topics = n_children = 0
    if parents.root_path == consumequeue_dir:
        if parents.root is not None and not parents.root[2]:
            root = parents.root
            n_children += len(root[1])
            for name in root[1]:
                strings.setdefault(str(name), len(strings))
        for topic, _, children in parents.plain():
            n_topics += 1
            strings.setdefault(topic, len(strings))
            n_children += len(children)
            for pair in children:
                strings.setdefault(pair[0], len(strings))  # type: ignore[index]
    # The string table's length, without making it (written a slice at a time below).
    n_table = max(0, len(strings) - 1) + sum(
        len(x) if x.isascii() else len(x.encode("utf-8", "surrogateescape")) for x in strings
    )
    cq = consumequeue_dir.encode("utf-8", "surrogateescape")
    head = MAGIC + _HEADER.pack(
        VERSION, sys.byteorder == "little", cq_file_size, _s64(st.st_dev), _s64(st.st_ino),
        len(cq), n_table, n_q, n_names, n_names - n_q, (root is not None) + n_topics,
        n_children,
    )  # fmt: skip
    try:
        with write_digested(path) as put:
            put(head)
            put(cq)
            names = iter(strings)
            sep = b""
            while words := list(islice(names, _SLICE)):
                put(sep + "/".join(words).encode("utf-8", "surrogateescape"))
                sep = b"/"
            listings = _plain(lister)
            while batch := list(islice(listings, _SLICE)):
                qa = array("q")
                for listing in batch:
                    qa.extend((strings[listing.topic], strings[_dirname(listing)],
                               listing.queue_id, len(listing.names)))  # fmt: skip
                    qa.frombytes(listing.key)  # the key's four 64-bit fields as they are
                put(qa)
            listings = _plain(lister)
            while batch := list(islice(listings, _SLICE)):
                na = array("q")
                for listing in batch:
                    na.extend(map(int, listing.names))
                put(na)
            listings = _plain(lister)
            while batch := list(islice(listings, _SLICE)):
                put(_values(batch, memo, loaded))
            del batch
            unpack_parent = PARENT_KEY.unpack
            # The parents' records (consumequeue/ first), then their children's names.
            pa = array("q")
            if root is not None:
                p_mtime, p_ctime, p_ino = unpack_parent(root[0])
                pa.extend((-1, p_mtime, p_ctime, _s64(p_ino), len(root[1])))
            put(pa)
            # (Those without strays, walked twice rather than listed: as many as queues at worst.)
            plain = parents.plain()
            while chunk := list(islice(plain, _SLICE)):
                pa = array("q")
                for topic, key, children in chunk:
                    p_mtime, p_ctime, p_ino = unpack_parent(key)
                    pa.extend((strings[topic], p_mtime, p_ctime, _s64(p_ino), len(children)))
                put(pa)
            ca = array("q")
            if root is not None:
                ca.extend(strings[str(name)] for name in root[1])
            put(ca)
            plain = parents.plain()
            while chunk := list(islice(plain, _SLICE)):
                ca = array("q")
                for _, _, children in chunk:
                    ca.extend(strings[pair[0]] for pair in children)  # type: ignore[index]
                put(ca)
        lister.saved()
    except OSError as exc:
        log.warning("cannot write the scan cache", file=str(path), error=str(exc))
        return False
    with contextlib.suppress(OSError):  # the JSON cache of format version 2, now unused
        path.with_suffix(".json").unlink()
    return True


def _nothing_loaded(path: str) -> None:
    return None


# The lister's queue listings and parent listings, and the values, by directory.
Loaded = tuple[dict[bytes, QueueListing], "LoadedValues", Parents]


def load(path: Path, consumequeue_dir: str, cq_file_size: int) -> Loaded | None:
    """The lister's entries and the values by queue directory, or None.

    A missing file is the normal first start (no warning); anything else that is not a cache
    of this store in this format is ignored with a warning.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below, after the parse)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read the scan cache; ignored", file=str(path), error=str(exc))
        return None
    try:
        with f:
            got = _parse(f, os.fstat(f.fileno()).st_size, consumequeue_dir, cq_file_size)
    except OSError as exc:
        log.warning("cannot read the scan cache; ignored", file=str(path), error=str(exc))
        return None
    except (
        ValueError, TypeError, KeyError, IndexError, StopIteration, EOFError, struct.error,
        OverflowError,
    ) as exc:  # fmt: skip
        log.warning("ignoring a corrupt or foreign scan cache", file=str(path), error=str(exc))
        return None
    trim_heap()
    return got


def trim_heap() -> None:
    """Give the file's memory back to the system (glibc keeps freed heap pages otherwise, and
    the daemon's resident size would carry the whole file for good)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL(None).malloc_trim(0)


class LoadedValues:
    """The values of the cache file by queue directory, made into ``Known`` tuples only when
    a round asks for a queue's (``get``), from the file's arrays.

    Built all at once at load time, 100,000 queues' tuples, identities and integers would
    live until the first round and leave the heap full of holes between what a daemon keeps
    (tens of MB of resident memory it never gives back); made per queue as the round goes,
    each is freed before the next queue's are made.
    """

    def __init__(self, listings: dict[bytes, QueueListing], qa: array[int], va: array[int],
                 starts: array[int]) -> None:  # fmt: skip
        self._at: dict[str, int] | None = None  # path -> position, made when first asked
        # In file order, which is the order a walk of the unchanged directories visits them
        # in (``plan_queues`` looks a queue up by position first, by path only when that
        # misses: no 100k-entry dictionary to build and search on the common path).
        self.listings = list(listings.values())
        # (The per-queue records and file names themselves are not kept: their keys and
        # names are in the listings, and they live as long as a daemon's start-up scan.)
        self._va = va
        # For ``queues.plan_queues``, which checks the values of the very listings loaded
        # with them (so the same names, in order) straight from the array
        # (``plan_queue_from_file``); any other listing of a queue goes through ``get``.
        self.va = va
        # Per queue: the directory's device (as stored: negative above 2**63) and where its
        # values start in ``va`` (its names' start minus its index, times the record size).
        # (One integer when every queue directory is on one device, as they mostly are.)
        devices = qa[7::_Q]
        self.devices: array[int] | int = devices
        if devices and devices.count(devices[0]) == len(devices):
            self.devices = devices[0]
        del devices
        n = len(starts) - 1
        # (32-bit positions while they fit: half the size.)
        code = "i" if n == 0 or (starts[-1] - n) * _V < 2**31 else "q"
        self.value_starts = array(code, map(mul, map(sub, starts[:-1], range(n)), repeat(_V, n)))
        self._ints: dict[int, int] = {}  # one int object per distinct size and device

    def __len__(self) -> int:
        return len(self.listings)

    @property
    def index(self) -> dict[str, int]:
        """Each queue directory's position in the file."""
        if self._at is None:
            self._at = {q.directory: i for i, q in enumerate(self.listings)}
        return self._at

    def get(self, path: str) -> tuple[tuple[str, ...], Values] | None:
        """The names the values were read under and each non-last file's value, or None."""
        i = self.index.get(path)
        if i is None:
            return None
        va, same = self._va, self._ints.setdefault
        names = self.listings[i].names  # (the loaded listing's: its values' names)
        devices = self.devices
        dev = devices if type(devices) is int else devices[i]  # type: ignore[index]
        if dev < 0:
            dev += _U64
        dev = same(dev, dev)
        at = self.value_starts[i]
        vals: list[Known | None] = []
        for j in range(at, at + (len(names) - 1) * _V, _V):
            v_ino, v_size, v_mtime, v_ctime, value = va[j : j + _V]
            if value < 0:
                vals.append(None)
                continue
            if v_ino < 0:
                v_ino += _U64
            ident = FileIdentity(v_ino, dev, same(v_size, v_size), v_mtime)
            vals.append((ident, value, v_ctime if v_ctime >= 0 else None))
        return names, tuple(vals)


class _NameTable(dict[int, str]):
    """File names by offset, made once each (``sys.intern``: the lister's listings share them)."""

    def __missing__(self, offset: int) -> str:
        name = self[offset] = intern(f"{offset:020d}")
        return name


def _read(f: BinaryIO, n: int, digest: Any) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ValueError("a truncated file")
    digest.update(data)
    return data


def _read_array(f: BinaryIO, n: int, digest: Any) -> array[int]:
    """``n`` 64-bit integers read straight into an array (no copy of the file in memory)."""
    a = array("q", bytes(8 * n))
    if f.readinto(a) != 8 * n:  # type: ignore[attr-defined]
        raise ValueError("a truncated file")
    digest.update(a)
    return a


def _parse(f: BinaryIO, file_size: int, consumequeue_dir: str, cq_file_size: int) -> Loaded | None:
    """Check everything that can be checked before a single entry is used, then build the
    entries in one loop over the arrays. The file is read piece by piece into its arrays (a
    daemon's peak memory counts: no whole copy of it), and its checksum is checked before
    anything of it is used."""
    digest = hashlib.sha256()
    head = f.read(len(MAGIC) + _HEADER.size)
    if not head.startswith(MAGIC) or file_size < len(MAGIC) + _HEADER.size + 32:
        raise ValueError("not a retentiond scan cache")
    digest.update(head)
    version, little, size, dev, ino, n_cq, n_table, n_q, n_n, n_v, n_p, n_c = _HEADER.unpack_from(
        head, len(MAGIC)
    )
    if version != VERSION or little != (sys.byteorder == "little"):
        raise ValueError(f"a scan cache of version {version} or another byte order")
    body_size = len(head) + n_cq + n_table + 8 * (n_q * _Q + n_n + n_v * _V + n_p * _P + n_c)
    if file_size != body_size + 32:
        raise ValueError("array lengths do not match the header")
    cq = _read(f, n_cq, digest).decode("utf-8", "surrogateescape")
    if cq != consumequeue_dir or size != cq_file_size:
        raise ValueError(f"a cache of another store ({cq!r}, file size {size})")
    raw_table = _read(f, n_table, digest)
    qa = _read_array(f, n_q * _Q, digest)
    na = _read_array(f, n_n, digest)
    va = _read_array(f, n_v * _V, digest)
    pa = _read_array(f, n_p * _P, digest)
    ca = _read_array(f, n_c, digest)
    if f.read(33) != digest.digest():
        raise ValueError("checksum mismatch (a torn or edited file)")
    # No name at all (a store without queues) is written as an empty table, not one ''.
    table = raw_table.decode("utf-8", "surrogateescape").split("/") if n_table else []
    del raw_table
    try:
        st = os.stat(consumequeue_dir)
    except OSError:
        return None
    if (st.st_dev, st.st_ino) != (_u64(dev), _u64(ino)):
        log.warning("the consumequeue directory was replaced; scan cache ignored")
        return None
    for s in table:
        if s in {"", ".", ".."}:
            raise ValueError(f"bad name {s!r} in the string table")
    queues: dict[bytes, QueueListing] = {}  # by directory key, as the lister keeps them
    root = QueueRoot(consumequeue_dir)
    # One string per distinct file name: queues are named by logical offsets, which repeat
    # from queue to queue (every queue starts at 0 and grows by one file size), so 100,000
    # queues share a handful of name strings instead of holding two or more each.
    names_by_offset = _NameTable()
    name_of = names_by_offset.__getitem__
    shared: dict[tuple[str, ...], tuple[str, ...]] = {}
    share = shared.setdefault
    dirnames: dict[int, int] = {}  # string index -> queue id, checked once per name
    # Checked for all queues at once before any is used: each queue has a file, the names
    # are the queues' and the values their non-last files'.
    # (Strided views of the arrays, not copies: a restarting daemon's peak is this load.)
    qv = memoryview(qa)
    counts = qv[3::_Q]
    if counts and min(counts) < 1:
        raise ValueError("a queue without files")
    if sum(counts) != len(na) or sum(counts) - n_q != n_v:
        raise ValueError("the file names or values do not match the queues")
    if na and min(na) < 0:
        raise ValueError("a negative file name")
    # Where each queue's names start (and its values: that minus the queue's index).
    starts = array("q", accumulate(counts, initial=0))
    # Strided views: one C-level step per queue instead of slicing a record apart.
    sv = memoryview(starts)
    records = zip(qv[0::_Q], qv[1::_Q], qv[2::_Q], sv[:-1], sv[1:], strict=True)
    keys = memoryview(qa).cast("B")  # each queue's key: the last 32 bytes of its record
    key_at = 32
    step = 8 * _Q
    new_listing = tuple.__new__  # a NamedTuple without its keyword-handling __new__
    last_offsets = array("q", [-1])
    names: tuple[str, ...] = ()
    for t, d, queue_id, first, end in records:
        if dirnames.get(d) != queue_id:
            dirname = table[d]
            if parse_queue_id(dirname) != queue_id:  # only the scan's queues are written
                raise ValueError(f"bad queue entry {table[t]!r}/{dirname!r}")
            dirnames[d] = queue_id
        key = bytes(keys[key_at : key_at + 32])
        key_at += step
        offsets = na[first:end]
        if offsets != last_offsets:  # (neighbouring queues mostly have the same names)
            names = tuple(map(name_of, offsets))
            names = share(names, names)  # queues with the same file names share one tuple
            last_offsets = offsets
        topic = table[t]
        # The first round re-checks every file it uses (see the module and plan_queues).
        queues[key] = new_listing(QueueListing, (topic, queue_id, root, names, True, key, ()))
    keys.release()
    if len(queues) != n_q:
        raise ValueError("two queue entries with the same directory key")
    values = LoadedValues(queues, qa, va, starts)
    parents = Parents(consumequeue_dir)
    ids: dict[int, tuple[str, int | None]] = {}  # string index -> (name, queue id)
    shared_children: dict[tuple[object, ...], tuple[object, ...]] = {}
    share_children = shared_children.setdefault
    ci = 0
    pack_parent = PARENT_KEY.pack
    for pi in range(0, len(pa), _P):
        which, p_mtime, p_ctime, p_ino, n = pa[pi : pi + _P]
        if which < -1:
            raise ValueError(f"bad parent directory entry {which}")
        got = ca[ci : ci + n]
        ci += n
        if ci > len(ca):
            raise ValueError("fewer children than parent directories hold")
        children: tuple[object, ...]
        if which == -1:
            children = tuple(map(table.__getitem__, got))  # topic names
        else:
            pairs = []
            for c in got:
                child = ids.get(c)
                if child is None:
                    child = ids[c] = (table[c], parse_queue_id(table[c]))
                pairs.append(child)
            children = (*pairs,)
            children = share_children(children, children)  # most topics hold the same ids
        key = pack_parent(p_mtime, p_ctime, _u64(p_ino))
        if which == -1:
            parents.root = (key, children, ())
        else:
            parents.put(table[which], key, children, ())
    if ci != len(ca):
        raise ValueError("more children than parent directories hold")
    return queues, values, parents
