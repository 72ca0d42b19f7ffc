"""The owner broker's process on ``/metrics``: who it is, and how near its map and file limits.

The figures are read by the round (``engine.proc.owner.OwnerWatch``, once per round) and only
*read* here: a scrape costs a reference read, never a walk of ``/proc/<pid>/maps`` (0.1 s for
a broker with 100,000 mappings, bench/README.md), however often Prometheus asks. The gauges
carry only ``cluster`` and ``broker``, so a broker restart (a new pid) continues the same
series; the pid and the command are labels of ``retentiond_owner_info`` alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from retentiond.engine.proc.owner import OwnerReport
from retentiond.observe.families import Gauge

BASE = ["cluster", "broker"]
INFO_LABELS = ["pid", "name", "type", "main_class", "user"]


def _g(name: str, doc: str, labels: list[str] | None = None) -> Gauge:
    return Gauge(name, doc, [*BASE, *(labels or [])])


class OwnerCollector(Collector):
    def __init__(self, base: tuple[str, str], report: Callable[[], OwnerReport | None]) -> None:
        self.base = list(base)
        self.report = report

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    @staticmethod
    def _families() -> tuple[Gauge, ...]:
        return (
            _g(
                "retentiond_owner_running",
                "1 if a process holds the store's lock (the broker runs), 0 if none does; "
                "absent when the lock table cannot be read.",
            ),
            _g(
                "retentiond_owner_info",
                "Always 1 for the process holding the store's lock; type: rocketmq "
                "(BrokerStartup), kafka (kafka.Kafka), other, or unknown (command line "
                "unreadable).",
                INFO_LABELS,
            ),
            _g(
                "retentiond_owner_open_fds",
                "Open file descriptors of the broker owning the store.",
            ),
            _g(
                "retentiond_owner_max_fds",
                "The broker's soft RLIMIT_NOFILE (absent when unlimited).",
            ),
            _g(
                "retentiond_owner_memory_maps",
                "Memory maps of the broker (lines of /proc/<pid>/maps); it fails with "
                "'Map failed' at vm.max_map_count.",
            ),
            _g(
                "retentiond_owner_max_memory_maps",
                "vm.max_map_count, the most memory maps one process (the broker) may have; "
                "read from the host even while no broker runs.",
            ),
            _g(
                "retentiond_owner_resident_memory_bytes",
                "Resident set size of the broker, in bytes.",
            ),
            _g(
                "retentiond_owner_start_time_seconds",
                "When the broker process started, in seconds since the epoch.",
            ),
            _g(
                "retentiond_owner_figures_timestamp_seconds",
                "When the owner's figures were read (once per round).",
            ),
        )

    def collect(self) -> Iterator[Metric]:
        report = self.report()
        if report is None:
            return
        (running, info, fds, max_fds, maps, max_maps, rss, start, stamp) = self._families()
        base = self.base
        if report.running is not None:
            running.add_metric(base, 1.0 if report.running else 0.0)
        if report.vm_max_map_count is not None:
            max_maps.add_metric(base, report.vm_max_map_count)
        if report.read_at_s is not None:
            stamp.add_metric(base, report.read_at_s)
        p = report.process
        if p is not None:
            labels = [str(p.pid), p.name or "", p.type, p.main_class or "", p.user or ""]
            info.add_metric([*base, *labels], 1.0)
            for family, value in (
                (fds, p.open_fds),
                (max_fds, p.max_fds),
                (maps, p.memory_maps),
                (rss, p.rss_bytes),
                (start, p.start_time_s),
            ):
                if value is not None:
                    family.add_metric(base, value)
        yield from (running, info, fds, max_fds, maps, max_maps, rss, start, stamp)
