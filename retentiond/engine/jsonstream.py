"""Write a large JSON document as it is produced, byte for byte as ``json.dump(doc, indent=2)``.

A plan of a 100,000-queue store lists 300,000+ files. ``json.dump`` with an indent runs the
pure-Python encoder over one dict per file, all built first; here the long lists are
``Rows``: flat dicts made one at a time and written with the C string encoder, so the
document is never held whole in memory and its text is unchanged (tests compare the two).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from json.encoder import encode_basestring_ascii
from typing import IO


class Rows:
    """A list in the document, produced lazily: flat dicts of scalars (str, int, None,
    bool, float); anything else is written by ``json.dumps`` as a nested value would be."""

    def __init__(self, make: Callable[[], Iterable[dict[str, object]]]) -> None:
        self._make = make

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


def dump(doc: object, out: IO[str], _level: int = 0) -> None:
    """``json.dump(materialize(doc), out, indent=2)``, streamed."""
    pad = "  " * _level
    inner = pad + "  "
    if isinstance(doc, Rows):
        first = True
        for row in doc:
            out.write(("[\n" if first else ",\n") + inner + _row(row, inner))
            first = False
        out.write("[]" if first else "\n" + pad + "]")
    elif isinstance(doc, dict) and doc:
        out.write("{")
        for i, (k, v) in enumerate(doc.items()):
            out.write(("\n" if i == 0 else ",\n") + inner + encode_basestring_ascii(str(k)) + ": ")
            dump(v, out, _level + 1)
        out.write("\n" + pad + "}")
    elif isinstance(doc, list) and doc:
        out.write("[")
        for i, v in enumerate(doc):
            out.write(("\n" if i == 0 else ",\n") + inner)
            dump(v, out, _level + 1)
        out.write("\n" + pad + "]")
    else:
        out.write(json.dumps(doc))
