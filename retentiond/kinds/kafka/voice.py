"""What Kafka says for itself from documents alone: its lines of `status`, its part of
systemd's STATUS= and of `trigger-delete` (``engine.kind.KindVoice``). The ``Kafka`` kind
inherits it; a `status` client uses it without a store (``kinds.voice_named``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from retentiond.engine.kind import StatusDoc
from retentiond.text.units import human_bytes


def _strings(doc: StatusDoc, key: str) -> list[str]:
    value = doc.get(key)
    return [str(v) for v in value] if isinstance(value, list) else []


def _ratio(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "n/a"


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _disk_lines(doc: StatusDoc) -> list[str]:
    """The disk state against the warning level, then each log dir's filesystem as the last
    round found it."""
    disk = doc.get("disk")
    d = disk if isinstance(disk, Mapping) else {}
    dirs = d.get("log_dirs")
    warning = f"warning level above {_ratio(d.get('warning_level_ratio'))}"
    if not isinstance(dirs, list):
        return [f"disk      not measured yet ({warning})"]
    lines = [f"disk      {d.get('state') or 'unknown'} ({warning})"]
    for entry in dirs:
        e = entry if isinstance(entry, Mapping) else {}
        if e.get("ratio") is None:
            lines.append(f"          {e.get('path')}: not measured: {e.get('error')}")
            continue
        lines.append(
            f"          {e.get('path')}: used {_ratio(e.get('ratio'))}, "
            f"{human_bytes(_int(e.get('avail_bytes')))} available of "
            f"{human_bytes(_int(e.get('total_bytes')))}"
        )
    return lines


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
        plan-only), their disks and the verdicts of the last scan."""
        lines = []
        plan_only = set(_strings(doc, "plan_only_log_dirs"))
        for i, d in enumerate(_strings(doc, "log_dirs")):
            state = (
                "PLAN-ONLY: another process (the broker) holds .lock; nothing is deleted here"
                if d in plan_only
                else "deletes while the broker is stopped (the round holds .lock)"
            )
            lines.append(f"{'log dirs' if i == 0 else '':<10}{d}: {state}")
        lines.extend(_disk_lines(doc))
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
