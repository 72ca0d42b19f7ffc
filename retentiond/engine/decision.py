"""One file's verdict: the unit every store kind plans in and the engine acts on.

The same record serves the plan document, the executor's re-check, the journal and the metric
labels, whatever the store kind: ``kind`` and ``reason`` come from ``retentiond.reasons``; the
offsets and ``topic``/``queue_id`` carry the kind's own coordinates (a CommitLog file's start,
a queue's id, a Kafka partition).
"""

from __future__ import annotations

from typing import NamedTuple

from retentiond.engine.identity import FileIdentity
from retentiond.engine.loss import Loss
from retentiond.reasons import AnyReason, FileKind, Verdict


class Decision(NamedTuple):
    """One file's verdict. A NamedTuple: a round builds one per examined queue (100k+)."""

    kind: FileKind
    path: str
    verdict: Verdict
    reason: AnyReason
    identity: FileIdentity | None = None  # what was seen; the executor re-checks against it
    start_offset: int | None = None  # CommitLog: file start; CQ: logical byte offset
    end_offset: int | None = None  # CommitLog: start + size; CQ: last unit; index: endPhyOffset
    topic: str | None = None
    queue_id: int | None = None
    detail: str | None = None
    loss: Loss | None = None  # what deleting it costs its readers (engine.loss)

    @property
    def delete(self) -> bool:
        return self.verdict is Verdict.DELETE

    def as_dict(self, now_ms: int) -> dict[str, object]:
        data: dict[str, object] = {
            "kind": str(self.kind),
            "path": self.path,
            "verdict": str(self.verdict),
            "reason": str(self.reason),
        }
        if self.identity is not None:
            data["bytes"] = self.identity.size
            data["mtime_ms"] = self.identity.mtime_ms
            data["age_ms"] = now_ms - self.identity.mtime_ms
        for key in ("start_offset", "end_offset", "topic", "queue_id", "detail"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        if self.loss is not None:
            data["loss"] = self.loss.as_dict()
        return data
