"""Prometheus metrics of one DRA driver process (its own registry, so several drivers in one
process, as in tests, never share samples). Served on `--metrics-bind` when given."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from hami_dcu.common.io.podlatency import bound_to_allocated, create_to_bound


class DriverMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.prepares = Counter(
            "hami_dcu_dra_prepares", "Claims prepared (NodePrepareResources), by result (success, failed)",
            ["node", "result"], registry=self.registry,
        )
        self.status_writes = Counter(
            "hami_dcu_dra_claim_status_writes", "Writes of a claim's status.devices, by result (success, failed)",
            ["node", "result"], registry=self.registry,
        )
        self.bound_to_allocated_seconds = bound_to_allocated(self.registry)
        self.create_to_bound_seconds = create_to_bound(self.registry)
