"""`hami_dcu_http_connections_closed_total{listener, reason}`: the connections one of our HTTP
listeners closed itself (common/io/guardedsite.py names the reasons), so that a client's
"connection reset by peer" is either counted here or came from the network between.

    closed = ClosedConnections(registry)
    await serve_guarded(app, host, port, limits, tls, on_close=closed.recorder("webhook"))
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

from hami_dcu.common.io.guardedsite import CLOSE_REASONS

CLOSED_METRIC = "hami_dcu_http_connections_closed"


class ClosedConnections:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.counter = Counter(
            CLOSED_METRIC, "Connections an HTTP listener of this process closed itself, by listener and reason "
            "(header_timeout, idle_timeout, pushed_out, refused, tls_handshake)", ["listener", "reason"],
            registry=registry)

    def recorder(self, listener: str) -> Callable[[str], None]:
        """The `on_close` of one listener. Every reason starts at 0 on /metrics, so a rate or an
        increase is defined before the first close."""
        for reason in CLOSE_REASONS:
            self.counter.labels(listener, reason)

        def record(reason: str) -> None:
            self.counter.labels(listener, reason).inc()

        return record
