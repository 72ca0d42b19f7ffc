"""What RocketMQ says for itself from documents alone: its lines of `status`, its part of
systemd's STATUS= and of `trigger-delete` (``engine.kind.KindVoice``). The ``RocketMQ`` kind
inherits it; a `status` client uses it without a store (``kinds.voice_named``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from retentiond.engine.kind import StatusDoc


def _ratio(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "n/a"


def _section(doc: StatusDoc, key: str) -> Mapping[str, object]:
    value = doc.get(key)
    return value if isinstance(value, Mapping) else {}


def _trigger_line(doc: StatusDoc) -> str:
    t = _section(doc, "triggers")
    if not t:
        return "not evaluated yet"
    hour = t.get("hour")
    when = f'deleteWhen "{doc.get("delete_when")}" ({doc.get("timezone")} zone, hour {hour})'
    parts = [
        f"{when}: {'delete hour' if t.get('time_up') else 'not the delete hour'}",
        f"disk over max: {'yes' if t.get('usage_exceeds') else 'no'}",
        f"manual: {'yes' if t.get('manual') else 'no'}",
    ]
    if t.get("clean_at_once"):
        parts.append("CLEANING FORCIBLY (unexpired files too)")
    if t.get("error"):
        parts.append(f"ERROR: {t['error']}")
    return "; ".join(parts)


class RocketMQVoice:
    name: ClassVar[str] = "rocketmq"
    product: ClassVar[str] = "RocketMQ"
    info_label_names: ClassVar[tuple[str, ...]] = (
        "file_reserved_time_hours",
        "delete_when",
        "timezone",
        "disk_max_used_space_ratio",
        "disk_space_clean_forcibly_ratio",
        "disk_space_warning_level_ratio",
        "clean_file_forcibly_enable",
        "delete_file_batch_max",
        "clean_resource_interval_ms",
        "dry_run",
    )

    @staticmethod
    def status_lines(doc: StatusDoc, manual_line: str) -> list[str]:
        """The triggers, manual rounds, the disk against its thresholds, expired files left."""
        disk = _section(doc, "disk")
        pending = doc.get("pending_expired")
        left = (
            "unknown" if pending is None else f"{pending} expired CommitLog files not deleted yet"
        )
        return [
            f"triggers  {_trigger_line(doc)}",
            manual_line,
            f"disk      commitlog {_ratio(disk.get('commitlog_ratio'))}, consumequeue "
            f"{_ratio(disk.get('consumequeue_ratio'))}: {disk.get('state') or 'unknown'} "
            f"(max {_ratio(disk.get('max_used_ratio'))}, clean forcibly "
            f"{_ratio(disk.get('clean_forcibly_ratio'))}, warning "
            f"{_ratio(disk.get('warning_level_ratio'))})",
            f"pending   {left}",
        ]

    @staticmethod
    def summary_parts(doc: StatusDoc) -> list[str]:
        pending = doc.get("pending_expired")
        disk = _section(doc, "disk")
        return [
            f"{'?' if pending is None else pending} expired pending",
            f"disk {_ratio(disk.get('commitlog_ratio'))} {disk.get('state') or 'unknown'}",
        ]

    @staticmethod
    def manual_request_text(rounds: object) -> str:
        return (
            f"manual deletion requested: the next {rounds} rounds run a "
            "deletion pass at any hour (expired files only, unless the disk is over its forcible "
            "ratio), as the broker's deleteExpiredCommitLog does"
        )
