"""The shipping job's counters (``journal.ship.ShipCounters``) as Prometheus metrics,
labelled ``cluster`` and ``broker`` like every other retentiond series."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from retentiond.journal.ship import ShipCounters


class ShipCollector(Collector):
    """``counters`` read at scrape time; register on the daemon's registry."""

    def __init__(
        self,
        counters: ShipCounters,
        labels: Callable[[], tuple[str, str]] = lambda: ("", ""),
    ) -> None:
        self.counters = counters
        self.labels = labels

    _COUNTERS = (
        ("runs", "Shipping passes run."),
        ("failures", "Shipping passes that could not ship every closed segment."),
        ("segments_shipped", "Journal segments shipped and verified."),
        ("records_shipped", "Journal records shipped."),
        ("torn_lines", "Torn journal lines skipped while shipping."),
        ("segments_dropped", "Closed segments DROPPED unshipped to stay within maxLocalBytes."),
        ("records_dropped", "Journal records dropped unshipped."),
        ("bytes_dropped", "Journal bytes dropped unshipped."),
    )

    def collect(self) -> Iterator[Metric]:
        counters = self.counters
        names, values = ["cluster", "broker"], list(self.labels())
        with counters.lock:
            snap = {k: getattr(counters, k) for k, _ in self._COUNTERS}
            backlog = (counters.backlog_segments, counters.backlog_bytes)
            last = counters.last_success_ms
        for key, text in self._COUNTERS:
            family = CounterMetricFamily(f"retentiond_ship_{key}", text, labels=names)
            family.add_metric(values, snap[key])
            yield family
        gauges: list[tuple[str, str, float]] = [
            ("backlog_segments", "Closed journal segments waiting to be shipped.", backlog[0]),
            (
                "backlog_bytes",
                "Bytes of closed journal segments waiting to be shipped.",
                backlog[1],
            ),
        ]
        if last is not None:
            gauges.append(
                (
                    "last_success_timestamp_seconds",
                    "When a shipping pass last shipped everything it could see.",
                    last / 1000,
                )
            )
        for key, text, value in gauges:
            gauge = GaugeMetricFamily(f"retentiond_ship_{key}", text, labels=names)
            gauge.add_metric(values, value)
            yield gauge
