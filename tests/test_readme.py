"""The README's configuration table is generated from the key schema: keep them identical."""

from __future__ import annotations

from pathlib import Path

from retentiond.kinds.rocketmq.config import render_reference_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def test_config_reference_in_readme_matches_schema():
    text = README.read_text()
    start = text.index("<!-- config-reference:start")
    start = text.index("\n", start) + 1
    end = text.index("<!-- config-reference:end -->")
    assert text[start:end].strip() == render_reference_markdown().strip(), (
        "regenerate the table: python -c 'from retentiond.kinds.rocketmq.config import "
        "render_reference_markdown as r; print(r())'"
    )
