"""What Kafka says for itself from documents alone: its lines of `status`, its part of
systemd's STATUS= and of `trigger-delete` (``engine.kind.KindVoice``). The ``Kafka`` kind
inherits it; a `status` client uses it without a store (``kinds.voice_named``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from retentiond.engine.kind import StatusDoc


def _strings(doc: StatusDoc, key: str) -> list[str]:
    value = doc.get(key)
    return [str(v) for v in value] if isinstance(value, list) else []


class KafkaVoice:
    name: ClassVar[str] = "kafka"
    product: ClassVar[str] = "Kafka"
    info_label_names: ClassVar[tuple[str, ...]] = (
        "timezone",
        "clean_resource_interval_ms",
        "dry_run",
        "log_retention_ms",
        "log_retention_bytes",
        "log_cleanup_policy",
    )

    @staticmethod
    def status_lines(doc: StatusDoc, manual_line: str) -> list[str]:
        """Which log dirs a round may delete from (the broker holds .lock on the others:
        plan-only) and the verdicts of the last scan."""
        lines = []
        plan_only = set(_strings(doc, "plan_only_log_dirs"))
        for i, d in enumerate(_strings(doc, "log_dirs")):
            state = (
                "PLAN-ONLY: another process (the broker) holds .lock; nothing is deleted here"
                if d in plan_only
                else "deletes while the broker is stopped (the round holds .lock)"
            )
            lines.append(f"{'log dirs' if i == 0 else '':<10}{d}: {state}")
        scan = doc.get("scan")
        reasons = scan.get("reasons") if isinstance(scan, Mapping) else None
        counts = reasons if isinstance(reasons, Mapping) else {}
        shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "not scanned yet"
        lines.append(f"verdicts  {shown}")
        lines.append(manual_line)
        return lines

    @staticmethod
    def summary_parts(doc: StatusDoc) -> list[str]:
        plan_only = _strings(doc, "plan_only_log_dirs")
        if plan_only:
            return [f"{len(plan_only)} log dirs plan-only (broker running)"]
        return []

    @staticmethod
    def manual_request_text(rounds: object) -> str:
        return (
            f"manual deletion requested: the next {rounds} rounds are "
            "marked manual; Kafka's retention has no hour of day, so they delete what any "
            "round would (log dirs whose broker runs stay plan-only)"
        )
