"""The shipping job's counters (``journal.ship.ShipCounters``) as Prometheus metrics,
labelled ``cluster`` and ``broker`` like every other retentiond series."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from retentiond.journal.ship import ShipCounters
from retentiond.observe.families import Counter, Gauge


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

    _GAUGES = (
        ("backlog_segments", "Closed journal segments waiting to be shipped."),
        ("backlog_bytes", "Bytes of closed journal segments waiting to be shipped."),
        (
            "last_success_timestamp_seconds",
            "When a shipping pass last shipped everything it could see (no sample before the "
            "first such pass).",
        ),
    )

    def _families(self) -> tuple[list[Counter], list[Gauge]]:
        names = ["cluster", "broker"]
        return (
            [Counter(f"retentiond_ship_{k}", text, names) for k, text in self._COUNTERS],
            [Gauge(f"retentiond_ship_{k}", text, names) for k, text in self._GAUGES],
        )

    def describe(self) -> Iterator[Metric]:
        counters, gauges = self._families()
        yield from counters
        yield from gauges

    def collect(self) -> Iterator[Metric]:
        c = self.counters
        values = list(self.labels())
        with c.lock:
            snap = {k: getattr(c, k) for k, _ in self._COUNTERS}
            last = None if c.last_success_ms is None else c.last_success_ms / 1000
            gauge_values = (c.backlog_segments, c.backlog_bytes, last)
        counters, gauges = self._families()
        for (key, _), family in zip(self._COUNTERS, counters, strict=True):
            family.add_metric(values, snap[key])
            yield family
        for value, gauge in zip(gauge_values, gauges, strict=True):
            if value is not None:
                gauge.add_metric(values, value)
            yield gauge
