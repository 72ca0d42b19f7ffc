"""The README's key reference, rendered from the same table the readers validate with."""

from __future__ import annotations

from collections.abc import Iterable

from retentiond.config.keys import ConfigKey

__all__ = ["render_reference"]


def render_reference(keys: Iterable[ConfigKey], notes: str) -> str:
    """A Markdown table of ``keys`` followed by ``notes`` (how the formats differ)."""
    lines = [
        "| Key | Type | Default | Allowed | Unit | Description |",
        "|---|---|---|---|---|---|",
    ]
    for spec in keys:
        description = spec.description
        if spec.upstream_note:
            description += f" *({spec.upstream_note}.)*"
        cells = [
            f"`{spec.key}`",
            spec.kind.name,
            spec.default_doc if spec.default_doc is not None else f"`{spec.doc_default}`",
            spec.doc_allowed,
            spec.unit or "–",
            description,
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += ["", notes]
    return "\n".join(lines) + "\n"
