"""The daemon's metrics: one object the service calls at five points, nothing more.

``Daemon`` creates a ``DaemonMetrics`` beside its state, starts it with the control socket,
hands it the startup scan's plan and every round's result, and stops it on shutdown. All the
rest — the registry, listening to the cleaner's rounds, the HTTP server — lives here. What it
reads of the daemon is a ``DaemonView``, so this module does not know the daemon's class.

A ``/metrics`` endpoint that cannot bind (the port is taken) is logged as an error and the
daemon keeps cleaning: retention must not stop because monitoring is misconfigured, and a
Prometheus that cannot scrape the target sees ``up == 0`` and alerts (RetentiondDown).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Protocol

import structlog
from prometheus_client import disable_created_metrics
from prometheus_client.registry import Collector

from retentiond.config.metrics import is_loopback, parse_listen
from retentiond.config.settings import Settings, StoreSection
from retentiond.engine.cleaner import Cleaner, RoundResult
from retentiond.engine.kind import RoundPlan
from retentiond.observe.families import Counter, Gauge
from retentiond.observe.metrics import BASE_LABELS, RetentionMetrics
from retentiond.observe.server import MetricsServer, PasswordFile, TlsFiles

log = structlog.get_logger(__name__)

_BIND_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)


def build_server(metrics: RetentionMetrics, settings: Settings[StoreSection]) -> MetricsServer:
    """The server the settings describe (validated by the loader; files re-checked here)."""
    d = settings.daemon
    host, port = parse_listen(d.metrics_listen)
    tls = None
    if d.metrics_tls_cert_file is not None and d.metrics_tls_key_file is not None:
        tls = TlsFiles(d.metrics_tls_cert_file, d.metrics_tls_key_file)
    password = None
    if d.metrics_basic_auth_username is not None and d.metrics_basic_auth_password_file:
        password = PasswordFile(d.metrics_basic_auth_username, d.metrics_basic_auth_password_file)
    return MetricsServer(metrics.registry, host, port, tls=tls, password=password)


class EndpointCollector(Collector):
    """Read at scrape time from the listeners' own ``state``, so a count never lags.

    ``retentiond_endpoint_up{endpoint}`` is 0 while a listener is being re-created;
    ``retentiond_endpoint_client_errors_total{endpoint,kind}`` counts connections that failed
    or were refused (``busy``, ``timeout``, ``bad_request``, exception names);
    ``retentiond_endpoint_restarts_total{endpoint}`` counts re-creations. Each also carries
    ``cluster`` and ``broker`` (``base``), as every retentiond series does."""

    def __init__(
        self,
        states: Callable[[], dict[str, dict[str, object] | None]],
        base: tuple[str, str] = ("", ""),
    ) -> None:
        self.states = states
        self.base = list(base)

    @staticmethod
    def _families() -> tuple[Gauge, Counter, Counter]:
        return (
            Gauge(
                "retentiond_endpoint_up",
                "1 while the listener accepts connections, 0 while it is down or re-created.",
                [*BASE_LABELS, "endpoint"],
            ),
            Counter(
                "retentiond_endpoint_restarts",
                "Times the listener failed and was re-created.",
                [*BASE_LABELS, "endpoint"],
            ),
            Counter(
                "retentiond_endpoint_client_errors",
                "Client connections that failed or were refused, by kind (busy, timeout, "
                "bad_request, or the exception's name).",
                [*BASE_LABELS, "endpoint", "kind"],
            ),
        )

    def describe(self) -> Iterator[Gauge | Counter]:
        yield from self._families()

    def collect(self) -> Iterator[Gauge | Counter]:
        up, restarts, errors = self._families()
        base = self.base
        for name, state in self.states().items():
            if state is None:
                up.add_metric([*base, name], 0)
                continue
            up.add_metric([*base, name], 1 if state.get("up") else 0)
            restarts.add_metric([*base, name], float(state.get("restarts") or 0))  # type: ignore[arg-type]
            counts = state.get("errors")
            for kind, n in sorted(counts.items() if isinstance(counts, dict) else []):
                errors.add_metric([*base, name, kind], n)
        yield up
        yield restarts
        yield errors


class DaemonView(Protocol):
    """What the metrics read of the running daemon, at scrape time."""

    def settings_in_force(self) -> Settings[StoreSection]:
        """The settings of the last applied reload (the metrics' labels follow them)."""
        ...

    def status(self) -> dict[str, object]:
        """The status document (``retentiond status --json``)."""
        ...

    def control_state(self) -> dict[str, object] | None:
        """The control socket's listener state (up, restarts, failed clients)."""
        ...


class DaemonMetrics:
    def __init__(self, daemon: DaemonView, cleaner: Cleaner) -> None:
        # `_created` samples double the series count and no dashboard or rule here uses them.
        disable_created_metrics()
        self.metrics = RetentionMetrics(
            daemon.settings_in_force(),
            current_settings=daemon.settings_in_force,
            status=daemon.status,
        )
        self.metrics.watch(cleaner)
        self.server: MetricsServer | None = None
        self._retry: threading.Thread | None = None
        self._stopped = threading.Event()
        self.metrics.registry.register(
            EndpointCollector(
                lambda: {
                    "control": daemon.control_state(),
                    "metrics": self.server.state if self.server is not None else None,
                },
                self.metrics.base,
            )
        )

    def start(self) -> str | None:
        """Serve /metrics; returns its URL, or None if it could not be started (logged).

        A bind that fails (the port still held by a dying predecessor, say) is retried in
        the background with backoff, so monitoring comes back without a restart; until then
        ``retentiond_endpoint_up{endpoint="metrics"}`` and ``status`` say it is down."""
        url = self._try_start(log_failure=True)
        if url is None and self._retry is None:
            self._retry = threading.Thread(
                target=self._retry_bind, name="metrics-bind", daemon=True
            )
            self._retry.start()
        return url

    def _retry_bind(self) -> None:
        for wait in _BIND_BACKOFF_S:
            if self._stopped.wait(wait):
                return
            if self._try_start(log_failure=False) is not None:
                return
        while not self._stopped.wait(_BIND_BACKOFF_S[-1]):
            if self._try_start(log_failure=False) is not None:
                return

    def _try_start(self, *, log_failure: bool) -> str | None:
        settings = self.metrics.current_settings()
        try:
            server = build_server(self.metrics, settings)
            url = server.start()
        except (OSError, ValueError) as exc:
            if log_failure:
                log.error(
                    "cannot serve /metrics; cleaning continues without it, retrying",
                    listen=settings.daemon.metrics_listen,
                    error=str(exc),
                )
            return None
        self.server = server
        log.info(
            "metrics listening",
            url=url,
            tls=server.tls is not None,
            basic_auth=server.password is not None,
        )
        if not is_loopback(server.host) and (server.tls is None or server.password is None):
            log.warning(
                "/metrics is reachable from other machines without TLS and basic auth",
                listen=settings.daemon.metrics_listen,
            )
        return url

    # The daemon calls these from its round thread: a bug here must not stop the round job,
    # so it is logged and swallowed.
    def observe_plan(self, plan: RoundPlan) -> None:
        try:
            self.metrics.observe_plan(plan)
        except Exception:
            log.exception("metrics: cannot observe the startup scan")

    def round_done(self, result: RoundResult) -> None:
        try:
            self.metrics.round_done(result)
        except Exception:
            log.exception("metrics: cannot observe the round")

    def stop(self) -> None:
        self._stopped.set()
        if self._retry is not None:
            self._retry.join(timeout=1.0)
        if self.server is not None:
            self.server.stop()
            self.server = None
