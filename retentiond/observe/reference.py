"""The README's metrics table, generated from the collectors a daemon registers.

Every family a `retentiond run` can serve, in the order it serves them: name (counters with
their ``_total``), type, labels besides ``cluster`` and ``broker``, and the HELP text. Read
from the collectors themselves — the scrape-time ones describe every family they can yield,
with its labels, even one with no sample now — so the table cannot drift from ``/metrics``;
``tests/test_readme.py`` keeps the README equal to it. Regenerate with
``python -c 'from retentiond.observe.reference import render_metrics_markdown as r; print(r())'``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from retentiond.engine.figures import StoreStats
from retentiond.journal.ship import ShipCounters
from retentiond.kinds import load_settings
from retentiond.observe.daemon_metrics import EndpointCollector
from retentiond.observe.metrics import BASE_LABELS, RetentionMetrics
from retentiond.observe.ship_metrics import ShipCollector

# Labels a histogram or summary adds to its samples, not declared by its family.
_SAMPLE_ONLY_LABELS = frozenset({"le", "quantile"})


@dataclass(frozen=True)
class FamilyRow:
    name: str  # as scraped: a counter with its _total
    type: str
    labels: tuple[str, ...]  # besides cluster and broker
    help: str


def daemon_collectors() -> tuple[Collector, ...]:
    """The collectors of a daemon's registry, in the order it registers them: the metrics of
    a (RocketMQ) daemon, its endpoints and its shipping. Every kind serves the same families;
    only the samples differ."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "broker.yaml"
        config.write_text(f"storePathRootDir: {tmp}/store\n")
        settings = load_settings(config, check_store=False)
    metrics = RetentionMetrics(settings, status=dict)
    metrics.stats = StoreStats()
    return (
        *metrics.collectors,
        EndpointCollector(dict, metrics.base),
        ShipCollector(ShipCounters()),
    )


def _families(collector: Collector) -> Iterator[Metric]:
    """What the collector describes when it describes its families with their labels (the
    scrape-time collectors: every family, sampled or not); else what it collects."""
    describe = getattr(collector, "describe", None)
    if describe is not None:
        described = list(describe())
        if described and all(hasattr(f, "label_names") for f in described):
            yield from described
            return
    yield from collector.collect()


def _labels(family: Metric) -> tuple[str, ...]:
    declared = getattr(family, "label_names", None)
    if declared is not None:
        names: Iterable[str] = declared
    else:
        seen: dict[str, None] = {}
        for sample in family.samples:
            seen.update(dict.fromkeys(sample.labels))
        names = seen
    return tuple(n for n in names if n not in (*BASE_LABELS, *_SAMPLE_ONLY_LABELS))


def metric_rows() -> list[FamilyRow]:
    """Every ``retentiond_*`` family, in the order a daemon serves them."""
    rows = []
    for collector in daemon_collectors():
        for family in _families(collector):
            if not family.name.startswith("retentiond_"):
                continue
            name = family.name + ("_total" if family.type == "counter" else "")
            rows.append(FamilyRow(name, family.type, _labels(family), family.documentation))
    return rows


def render_metrics_markdown() -> str:
    lines = [
        "| Metric | Type | Labels (besides `cluster`, `broker`) | Meaning |",
        "|---|---|---|---|",
    ]
    for row in metric_rows():
        labels = ", ".join(f"`{n}`" for n in row.labels) or "–"
        meaning = row.help.replace("|", "\\|")
        lines.append(f"| `{row.name}` | {row.type} | {labels} | {meaning} |")
    lines.append(
        "| `process_*`, `python_info` | | | The standard process collectors, of retentiond "
        "itself (labelled `cluster` and `broker` too) |"
    )
    return "\n".join(lines) + "\n"
