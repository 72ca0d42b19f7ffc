"""The README's generated tables: the configuration reference from the key schema, the
metrics table from the collectors a daemon registers. Keep them identical."""

from __future__ import annotations

from pathlib import Path

from retentiond.kinds.kafka.config import render_reference_markdown as kafka_reference
from retentiond.kinds.rocketmq.config import render_reference_markdown
from retentiond.observe.reference import render_metrics_markdown

README = Path(__file__).resolve().parents[1] / "README.md"
KAFKA_DOC = README.parent / "docs" / "kafka.md"


def test_config_reference_in_readme_matches_schema():
    text = README.read_text()
    start = text.index("<!-- config-reference:start")
    start = text.index("\n", start) + 1
    end = text.index("<!-- config-reference:end -->")
    assert text[start:end].strip() == render_reference_markdown().strip(), (
        "regenerate the table: python -c 'from retentiond.kinds.rocketmq.config import "
        "render_reference_markdown as r; print(r())'"
    )


def test_kafka_config_reference_in_docs_matches_its_keys():
    text = KAFKA_DOC.read_text()
    start = text.index("<!-- kafka-config-reference:start")
    start = text.index("\n", start) + 1
    end = text.index("<!-- kafka-config-reference:end -->")
    assert text[start:end].strip() == kafka_reference().strip(), (
        "regenerate the table: python -c 'from retentiond.kinds.kafka.config import "
        "render_reference_markdown as r; print(r())'"
    )


def test_metrics_table_in_readme_matches_the_collectors():
    text = README.read_text()
    start = text.index("<!-- metrics-reference:start")
    start = text.index("\n", start) + 1
    end = text.index("<!-- metrics-reference:end -->")
    assert text[start:end].strip() == render_metrics_markdown().strip(), (
        "regenerate the table: python -c 'from retentiond.observe.reference import "
        "render_metrics_markdown as r; print(r())'"
    )


def test_the_metrics_table_lists_the_shipping_series():
    table = render_metrics_markdown()
    for name in (
        "runs_total",
        "failures_total",
        "segments_shipped_total",
        "records_shipped_total",
        "torn_lines_total",
        "segments_dropped_total",
        "records_dropped_total",
        "bytes_dropped_total",
        "backlog_segments",
        "backlog_bytes",
        "last_success_timestamp_seconds",
    ):
        assert f"| `retentiond_ship_{name}` |" in table, name
