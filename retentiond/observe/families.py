"""Metric families that keep the label names they were declared with.

prometheus_client's ``GaugeMetricFamily`` and ``CounterMetricFamily`` take the label names but
do not give them back; a family with no sample (a Kafka daemon's CommitLog offset, the owner's
figures while no broker runs) would then show nothing of its labels. The scrape-time
collectors build their families with these, so the README's metrics table
(``observe.reference``) lists every family's labels from the collectors themselves.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class Gauge(GaugeMetricFamily):
    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        super().__init__(name, documentation, labels=list(labels))
        self.label_names = tuple(labels)


class Counter(CounterMetricFamily):
    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        super().__init__(name, documentation, labels=list(labels))
        self.label_names = tuple(labels)
