"""Write a large JSON document as it is produced, byte for byte as ``json.dump(doc, indent=2)``.

A plan of a 100,000-queue store lists 300,000+ files. ``json.dump`` with an indent runs the
pure-Python encoder over one dict per file, all built first. Here the long lists are ``Rows``:
either flat dicts made one at a time and written with the C string encoder, or, when the
producer knows its rows' fixed shape, text it encodes itself (``Rows(make, encode=...)``;
``encode_decision`` is the encoder for a ``Decision``'s row). The document is never held whole
in memory, it is written in large chunks, and its text is unchanged (tests compare the two).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from json.encoder import encode_basestring_ascii
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from retentiond.engine.decision import Decision

_CHUNK = 1 << 18  # characters gathered before one write to the output


class Rows:
    """A list in the document, produced lazily: flat dicts of scalars (str, int, None,
    bool, float); anything else is written by ``json.dumps`` as a nested value would be.

    ``encode``, when given, writes the same list faster: called with the indent of the
    list's items, it yields text in which every item is ``",\\n" + indent + <item as
    json.dumps(item, indent=2) would write it at that depth>``, any number per piece.
    ``make`` still builds the dicts for ``materialize`` (``as_dict``).
    """

    def __init__(
        self,
        make: Callable[[], Iterable[dict[str, object]]],
        encode: Callable[[str], Iterable[str]] | None = None,
    ) -> None:
        self._make = make
        self.encode = encode

    def __iter__(self) -> Iterator[dict[str, object]]:
        return iter(self._make())

    def materialize(self) -> list[dict[str, object]]:
        return list(self._make())


def materialize(doc: object) -> object:
    """The same document with every ``Rows`` made into a list (for ``as_dict``)."""
    if isinstance(doc, Rows):
        return doc.materialize()
    if isinstance(doc, dict):
        return {k: materialize(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [materialize(v) for v in doc]
    return doc


def _scalar(v: object) -> str:
    if type(v) is str:
        return encode_basestring_ascii(v)
    if type(v) is int:
        return int.__repr__(v)
    return json.dumps(v)


def _row(row: dict[str, object], pad: str) -> str:
    inner = pad + "  "
    if not row:
        return "{}"
    parts = []
    for k, v in row.items():
        if type(v) in (dict, list):
            text = json.dumps(v, indent=2).replace("\n", "\n" + inner)
        else:
            text = _scalar(v)
        parts.append(f"{inner}{encode_basestring_ascii(k)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n" + pad + "}"


def _encoded_enums() -> dict[object, str]:
    from retentiond.reasons import Kind, Reason, Verdict

    return {m: encode_basestring_ascii(m.value) for e in (Kind, Verdict, Reason) for m in e}


_ENUM: dict[object, str] = _encoded_enums()  # a Decision's kind, verdict and reason, encoded


def _encoded(value: str) -> str:
    """A value missing from ``_ENUM``: a file kind or reason registered by a kind outside the
    package (``reasons.register_kind``), encoded once."""
    got = _ENUM[value] = encode_basestring_ascii(str(value))
    return got


def encode_decision(d: Decision, now_ms: int, pad: str, age_ms: int | None = None) -> str:
    """``Decision.as_dict(now_ms)`` as ``json.dumps(indent=2)`` writes it at indent ``pad``,
    without the dict: the same keys in the same order, absent ones left out. ``age_ms``:
    the age to write where the kind measures it from something other than the mtime (a
    Kafka segment's largest timestamp); by default ``now_ms - mtime_ms``."""
    k = ",\n" + pad + '  "'
    ident = d.identity
    try:
        kind, verdict, reason = _ENUM[d.kind], _ENUM[d.verdict], _ENUM[d.reason]
    except KeyError:
        kind, verdict, reason = (_ENUM.get(v) or _encoded(v) for v in (d.kind, d.verdict, d.reason))
    head = (
        f'{{\n{pad}  "kind": {kind}{k}path": {encode_basestring_ascii(d.path)}'
        f'{k}verdict": {verdict}{k}reason": {reason}'
    )
    start, end, topic, queue_id = d.start_offset, d.end_offset, d.topic, d.queue_id
    if (
        ident is not None
        and type(start) is int
        and type(end) is int
        and type(topic) is str
        and type(queue_id) is int
        and d.detail is None
        and d.loss is None
    ):  # a queue file: the shape of most rows, written at once
        mtime = ident.mtime_ms
        age = now_ms - mtime if age_ms is None else age_ms
        return (
            f'{head}{k}bytes": {ident.size}{k}mtime_ms": {mtime}{k}age_ms": {age}'
            f'{k}start_offset": {start}{k}end_offset": {end}'
            f'{k}topic": {encode_basestring_ascii(topic)}{k}queue_id": {queue_id}\n{pad}}}'
        )
    parts = [head]
    if ident is not None:
        mtime = ident.mtime_ms
        age = now_ms - mtime if age_ms is None else age_ms
        parts.append(f'{k}bytes": {ident.size}{k}mtime_ms": {mtime}{k}age_ms": {age}')
    for key in ("start_offset", "end_offset", "topic", "queue_id", "detail"):
        value = getattr(d, key)
        if value is not None:
            parts.append(f'{k}{key}": {_scalar(value)}')
    if d.loss is not None:
        nested = json.dumps(d.loss.as_dict(), indent=2).replace("\n", "\n" + pad + "  ")
        parts.append(f'{k}loss": {nested}')
    parts.append("\n" + pad + "}")
    return "".join(parts)


class _Buffered:
    """Pieces gathered and written in chunks of about ``_CHUNK`` characters."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.parts: list[str] = []
        self.size = 0

    def write(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size >= _CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            self.out.write("".join(self.parts))
            self.parts = []
            self.size = 0


def dump(doc: object, out: IO[str]) -> None:
    """``json.dump(materialize(doc), out, indent=2)``, streamed in large writes."""
    buffered = _Buffered(out)
    _dump(doc, buffered, 0)
    buffered.flush()


def _dump_rows(rows: Rows, out: _Buffered, pad: str, inner: str) -> None:
    first = True
    if rows.encode is not None:
        for text in rows.encode(inner):
            if not text:
                continue
            if first:  # the first item's separator ",\n" becomes the list's "[\n"
                out.write("[" + text[1:])
                first = False
            else:
                out.write(text)
    else:
        for row in rows:
            out.write(("[\n" if first else ",\n") + inner + _row(row, inner))
            first = False
    out.write("[]" if first else "\n" + pad + "]")


def _dump(doc: object, out: _Buffered, level: int) -> None:
    pad = "  " * level
    inner = pad + "  "
    if isinstance(doc, Rows):
        _dump_rows(doc, out, pad, inner)
    elif isinstance(doc, dict) and doc:
        out.write("{")
        for i, (k, v) in enumerate(doc.items()):
            out.write(("\n" if i == 0 else ",\n") + inner + encode_basestring_ascii(str(k)) + ": ")
            _dump(v, out, level + 1)
        out.write("\n" + pad + "}")
    elif isinstance(doc, list) and doc:
        out.write("[")
        for i, v in enumerate(doc):
            out.write(("\n" if i == 0 else ",\n") + inner)
            _dump(v, out, level + 1)
        out.write("\n" + pad + "]")
    else:
        out.write(json.dumps(doc))
