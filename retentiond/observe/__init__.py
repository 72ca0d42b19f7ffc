"""What people and dashboards see of a running retentiond: structlog set-up (``logging``), the
Prometheus metrics of rounds, the daemon, the broker process and shipping (``metrics``,
``live``, ``daemon_metrics``, ``owner_metrics``, ``ship_metrics``), the ``/metrics`` server
(``server``) and the supervisor that keeps it and the control socket listening
(``listener``). Kind-neutral: the figures and labels come from the kind.
"""
