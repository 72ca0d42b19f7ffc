"""Per-topic configs from the KRaft metadata log, offline (spec §10).

Every KRaft broker keeps a replica of ``__cluster_metadata-0``: its newest complete snapshot
(``<offset>-<epoch>.checkpoint``) plus the log records from that offset on are the whole
cluster state, topic overrides and dynamic broker defaults included. We replay only what
retention needs (TopicRecord, RemoveTopicRecord, ConfigRecord) and refuse, naming the file and
the byte position, anything we cannot read with certainty: a state parsed past a corrupt or
truncated record could invent a retention.ms, and a wrong config deletes data. The caller then
treats every topic as unknown, which keeps every segment.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from retentiond.kinds.kafka import formats as fm
from retentiond.kinds.kafka.scan import read_nofollow

METADATA_PARTITION_DIR = "__cluster_metadata-0"
_SNAPSHOT_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")

TOPIC_RECORD = 2
CONFIG_RECORD = 4
REMOVE_TOPIC_RECORD = 9
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
_KNOWN_VERSIONS = {TOPIC_RECORD: 0, CONFIG_RECORD: 0, REMOVE_TOPIC_RECORD: 0}


class MetadataError(ValueError):
    """The metadata log cannot be read with certainty; names the file and the position."""


class _Reader:
    """Bounds-checked reads of one record value; every overrun is a MetadataError."""

    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.pos = 0
        self.where = where

    def fail(self, what: str) -> MetadataError:
        return MetadataError(f"{self.where}+{self.pos}: {what}")

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"truncated: need {n} bytes, {len(self.data) - self.pos} left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            (b,) = self.take(1)
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise self.fail("varint too long")

    def varint(self) -> int:
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def compact_string(self, nullable: bool = False) -> str | None:
        n = self.uvarint()
        if n == 0:
            if nullable:
                return None
            raise self.fail("null string in a non-nullable field")
        try:
            return self.take(n - 1).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("string is not UTF-8") from None

    def uuid(self) -> bytes:
        return self.take(16)

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


@dataclass
class MetadataState:
    """What retention needs of the cluster state."""

    topics: dict[bytes, str] = field(default_factory=dict)  # topic id → name
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # "" = cluster
    sources: list[str] = field(default_factory=list)

    def topic_overrides(self) -> dict[str, dict[str, str]]:
        """Every existing topic → its overrides (empty if none): the input of
        ``KafkaServerConfig.config_for``; a topic missing here is unknown to the cluster."""
        return {name: dict(self.topic_configs.get(name, {})) for name in self.topics.values()}

    def broker_layers(self, node_id: int | None) -> list[Mapping[str, str]]:
        """The dynamic broker configs, lowest precedence first: cluster default, this node."""
        layers: list[Mapping[str, str]] = [self.broker_configs.get("", {})]
        if node_id is not None:
            layers.append(self.broker_configs.get(str(node_id), {}))
        return layers

    def replay(self, value: bytes, where: str) -> None:
        r = _Reader(value, where)
        frame = r.uvarint()
        if frame != 1:
            raise r.fail(f"metadata frame version {frame}, expected 1")
        api_key = r.uvarint()
        version = r.uvarint()
        if api_key not in _KNOWN_VERSIONS:
            return  # not a record retention needs: skipped whole
        if version > _KNOWN_VERSIONS[api_key]:
            raise r.fail(f"record type {api_key} version {version} is newer than we can read")
        if api_key == TOPIC_RECORD:
            name = r.compact_string()
            topic_id = r.uuid()
            r.tagged_fields()
            assert name is not None
            self.topics[topic_id] = name
        elif api_key == REMOVE_TOPIC_RECORD:
            topic_id = r.uuid()
            r.tagged_fields()
            gone = self.topics.pop(topic_id, None)
            if gone is not None:
                self.topic_configs.pop(gone, None)  # ConfigurationsDelta: deleteAll()
        else:
            rtype = r.int8()
            rname = r.compact_string()
            key = r.compact_string()
            val = r.compact_string(nullable=True)
            r.tagged_fields()
            assert rname is not None and key is not None
            if rtype == RESOURCE_TOPIC:
                target = self.topic_configs
            elif rtype == RESOURCE_BROKER:
                target = self.broker_configs
            else:
                return
            if val is None:
                target.get(rname, {}).pop(key, None)
            else:
                target.setdefault(rname, {})[key] = val
        if r.pos != len(value):
            raise r.fail(f"{len(value) - r.pos} bytes after the record's fields")


def _records(data: bytes, path: str, min_offset: int) -> Iterator[tuple[int, bytes, str]]:
    """(offset, value, where) of every data record at or above ``min_offset``, in order.
    Control batches are skipped; compressed batches, bad CRCs, truncation: MetadataError."""
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < fm.V2_HEADER_SIZE:
            raise MetadataError(f"{path}: position {pos}: truncated batch header")
        base, length = struct.unpack_from(">qi", data, pos)
        if length < fm.V2_HEADER_SIZE - fm.LOG_OVERHEAD or pos + fm.LOG_OVERHEAD + length > end:
            raise MetadataError(f"{path}: position {pos}: truncated batch (length {length})")
        batch = data[pos : pos + fm.LOG_OVERHEAD + length]
        magic = batch[16]
        if magic != 2:
            raise MetadataError(f"{path}: position {pos}: record batch magic {magic}, expected 2")
        (crc,) = struct.unpack_from(">I", batch, 17)
        if fm.crc32c(batch[21:]) != crc:
            raise MetadataError(f"{path}: position {pos}: batch CRC mismatch")
        (attrs,) = struct.unpack_from(">h", batch, 21)
        (count,) = struct.unpack_from(">i", batch, 57)
        if not attrs & fm.CONTROL_FLAG:
            if attrs & 0x07:
                raise MetadataError(f"{path}: position {pos}: compressed batch (codec {attrs & 7})")
            r = _Reader(batch, f"{path}: position {pos}")
            r.pos = fm.V2_HEADER_SIZE
            for _ in range(count):
                size = r.varint()
                rec = _Reader(r.take(size), f"{path}: position {pos + r.pos - size}")
                rec.int8()  # attributes
                rec.varint()  # timestamp delta
                offset = base + rec.varint()
                klen = rec.varint()
                if klen > 0:
                    rec.take(klen)
                vlen = rec.varint()
                if vlen < 0:
                    raise rec.fail("metadata record without a value")
                value = rec.take(vlen)
                for _h in range(rec.varint()):
                    rec.take(max(rec.varint(), 0))
                    hv = rec.varint()
                    if hv > 0:
                        rec.take(hv)
                if offset >= min_offset:
                    yield offset, value, rec.where
            if r.pos != len(batch):
                raise MetadataError(f"{path}: position {pos}: record count {count} != batch size")
        pos += fm.LOG_OVERHEAD + length


def read_metadata(partition_dir: str) -> MetadataState:
    """The newest complete snapshot, then every later log record (§10.1)."""
    try:
        names = os.listdir(partition_dir)
    except OSError as e:
        raise MetadataError(f"{partition_dir}: {e}") from None
    snapshots = sorted(
        (int(m.group(1)), int(m.group(2)), n) for n in names if (m := _SNAPSHOT_RE.match(n))
    )
    segments = sorted(
        p[0] for n in names if (p := fm.parse_segment_file_name(n)) and p[1] == fm.LOG_SUFFIX
    )
    state = MetadataState()
    start = 0
    if snapshots:
        start, _epoch, name = snapshots[-1]
        path = os.path.join(partition_dir, name)
        for _off, value, where in _records(read_nofollow(path), path, 0):
            state.replay(value, where)
        state.sources.append(path)
    if segments and segments[0] > start:
        raise MetadataError(
            f"{partition_dir}: the log starts at {segments[0]}, after the state at {start}: "
            "the records in between are gone"
        )
    if not snapshots and not segments:
        raise MetadataError(f"{partition_dir}: neither a snapshot nor a log segment")
    for i, base in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        if nxt is not None and nxt <= start:
            continue  # wholly inside the snapshot
        path = os.path.join(partition_dir, fm.segment_file_name(base, fm.LOG_SUFFIX))
        for _off, value, where in _records(read_nofollow(path), path, start):
            state.replay(value, where)
        state.sources.append(path)
    return state
