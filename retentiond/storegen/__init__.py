"""Realistic stores with the real binary formats, for the demo, the tests and the benches: one
module per kind, and the registry ``gen-store --kind`` picks a generator from.

Each kind's module offers ``gen_store(request)``: it generates the store the request
describes, writes a matching configuration when asked, and returns the lines to print.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GenStoreRefused", "GenStoreRequest", "generator", "kinds"]


@dataclass(frozen=True)
class GenStoreRequest:
    """What ``gen-store`` asks for; None: the generator's own default."""

    dir: Path
    preset: str = "demo"
    messages: int | None = None
    file_size: int | None = None
    oldest_hours: float | None = None
    topics: dict[str, int] | None = None
    sparse: bool = False
    config_out: Path | None = None
    # told what is being written now (gen-store on a terminal draws it as a progress line)
    progress: Callable[[str], None] | None = None


class GenStoreRefused(ValueError):
    """A request this kind's generator cannot honour (a usage error)."""


Generator = Callable[[GenStoreRequest], list[str]]


def kinds() -> tuple[str, ...]:
    """The kinds a store can be generated for; the first is the default."""
    return ("rocketmq", "kafka")


def generator(kind: str) -> Generator:
    """The generator of ``kind`` (one of ``kinds()``)."""
    if kind == "kafka":
        from retentiond.storegen.kafka import gen_store as kafka

        return kafka
    if kind == "rocketmq":
        from retentiond.storegen.rocketmq import gen_store as rocketmq

        return rocketmq
    raise KeyError(kind)
