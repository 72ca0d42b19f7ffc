"""The scan cache carried across restarts: queue directory listings and the values of full
ConsumeQueue files, so that the first round after a start costs about what a warm one does.

Nothing in the file is trusted as it stands. A listing is used only while its directory's
inode, device, mtime and change time (ctime: ``utime`` cannot set it back) are those recorded, and
values loaded from the file are never taken on trust: the first round re-checks each file's
identity (inode, device, size, mtime) with an ``lstat`` and reads it again on any difference.
So a directory or file renamed, replaced, truncated or with a new file beside it is read
afresh, and a stale cache can at worst make a round keep more; every unlink re-checks the
file anyway. A file that is not a cache for this store (another store, another file size,
another format) or that cannot be parsed is ignored with a warning.

The format is JSON (parsed without executing anything, unlike pickle), written to a
temporary file and renamed into place.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import structlog

from retentiond.engine.identity import FileIdentity
from retentiond.kinds.rocketmq.reader import BinaryReader
from retentiond.kinds.rocketmq.scan import QueueLister
from retentiond.kinds.rocketmq.snapshot import QueueListing

log = structlog.get_logger("retentiond.scancache")

MAGIC = "retentiond-rocketmq-scan-cache"
VERSION = 2


def cache_file(directory: Path, consumequeue_dir: str) -> Path:
    """One file per store beside the journal (the daemon's state directory)."""
    digest = hashlib.sha256(consumequeue_dir.encode()).hexdigest()[:16]
    return directory / f"scan-cache-{digest}.json"


def save(path: Path, consumequeue_dir: str, lister: QueueLister, reader: BinaryReader) -> bool:
    """Write the lister's trusted listings with the cached values of their full files."""
    try:
        st = os.stat(consumequeue_dir)
    except OSError:
        return False
    values = reader.cached_values()
    queues: list[list[Any]] = []
    for qpath, ((mtime_ns, ctime_ns), ino, dev, listing, strangers) in lister.queue_entries():
        if listing is None or strangers:
            continue  # only plain queue directories are worth carrying over
        vals: list[Any] = []
        for name in listing.names[:-1]:
            hit = values.get(f"{qpath}/{name}")
            if hit is None or hit[0].dev != dev:
                vals.append(None)
            else:
                ident, value = hit
                vals.append([ident.ino, ident.size, ident.mtime_ns, value])
        dirname = os.path.basename(qpath)
        queues.append([listing.topic, dirname, listing.queue_id, mtime_ns, ctime_ns, ino, dev,
                       list(listing.names), vals])  # fmt: skip
    doc = {
        "magic": MAGIC,
        "version": VERSION,
        "consumequeue": consumequeue_dir,
        "dir": [st.st_dev, st.st_ino],
        "cq_file_size": reader.cq_file_size,
        "queues": queues,
    }
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        # dumps, not dump: only the one-shot encoder is the C one (10x faster here).
        text = json.dumps(doc, separators=(",", ":"))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)  # as the journal's
        with open(fd, "w", encoding="ascii") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot write the scan cache", file=str(path), error=str(exc))
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


def load(path: Path, consumequeue_dir: str, lister: QueueLister, reader: BinaryReader) -> int:
    """Fill an empty lister and reader from the file; returns how many queues were loaded.

    A missing file is the normal first start (no warning); anything else that is not a cache
    of this store in this format is ignored with a warning.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        log.warning("cannot read the scan cache; ignored", file=str(path), error=str(exc))
        return 0
    try:
        doc = json.loads(raw)
        entries = _parse(doc, consumequeue_dir, reader.cq_file_size)
    except (ValueError, TypeError, KeyError, IndexError, UnicodeDecodeError) as exc:
        log.warning("ignoring a corrupt or foreign scan cache", file=str(path), error=str(exc))
        return 0
    if entries is None:
        return 0
    queues, values = entries
    lister.preload(queues)
    reader.preload(values)
    del doc, raw, entries
    _trim_heap()
    return len(queues)


def _trim_heap() -> None:
    """Give the parsed document's memory back to the system (glibc keeps freed heap pages
    otherwise, and the daemon's resident size would carry the whole JSON text for good)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL(None).malloc_trim(0)


def _int(x: object) -> int:
    if type(x) is not int:
        raise TypeError(f"expected an integer, got {type(x).__name__}")
    return x


_QueueEntry = tuple[tuple[int, int], int, int, QueueListing, tuple]


def _parse(
    doc: object, consumequeue_dir: str, cq_file_size: int
) -> tuple[dict[str, _QueueEntry], dict[str, tuple[FileIdentity, int]]] | None:
    """The lister's and the reader's entries, or an exception for anything malformed (one
    pass, with the type checks inline: this runs over every queue at start-up)."""
    if not isinstance(doc, dict) or doc.get("magic") != MAGIC or doc.get("version") != VERSION:
        raise ValueError("not a retentiond scan cache of this version")
    if doc["consumequeue"] != consumequeue_dir or _int(doc["cq_file_size"]) != cq_file_size:
        raise ValueError(
            f"a cache of another store ({doc['consumequeue']!r}, file size {doc['cq_file_size']})"
        )
    try:
        st = os.stat(consumequeue_dir)
    except OSError:
        return None
    if [st.st_dev, st.st_ino] != doc["dir"]:
        log.warning("the consumequeue directory was replaced; scan cache ignored")
        return None
    queues: dict[str, _QueueEntry] = {}
    values: dict[str, tuple[FileIdentity, int]] = {}
    for topic, dirname, queue_id, mtime_ns, ctime_ns, ino, dev, names, vals in doc["queues"]:
        if (
            type(topic) is not str
            or type(dirname) is not str
            or "/" in topic
            or topic in {"", ".", ".."}
            or not dirname.isascii()
            or not dirname.isdigit()
            or int(dirname) != queue_id
            or type(queue_id) is not int
            or type(mtime_ns) is not int
            or type(ctime_ns) is not int
            or type(ino) is not int
            or type(dev) is not int
            or type(names) is not list
            or not names
            or type(vals) is not list
            or len(vals) != len(names) - 1
        ):
            raise ValueError(f"bad queue entry for {topic!r}/{dirname!r}")
        joined = "".join(names)  # TypeError for a name that is not a string
        if not (joined.isascii() and joined.isdigit()) or set(map(len, names)) != {20}:
            raise ValueError(f"bad file names in {topic!r}/{dirname!r}")
        qpath = f"{consumequeue_dir}/{topic}/{dirname}"
        for name, v in zip(names, vals, strict=False):
            if v is None:
                continue
            v_ino, v_size, v_mtime, value = v
            if type(v_ino) is not int or type(v_size) is not int or type(v_mtime) is not int:
                raise ValueError(f"bad identity for {name}")
            values[f"{qpath}/{name}"] = (FileIdentity(v_ino, dev, v_size, v_mtime), _int(value))
        # unchanged=False: the first round re-checks every file's identity (see the module).
        listing = QueueListing(topic, queue_id, qpath, tuple(names), False)
        queues[qpath] = ((mtime_ns, ctime_ns), ino, dev, listing, ())
    return queues, values
