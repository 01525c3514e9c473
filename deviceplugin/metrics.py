"""Prometheus metrics of one device plugin process (one registry per plugin, so several
plugins in one process, as in the local cluster, never share counters).

Served on `--metrics-bind` when given (`GET /metrics`, common/io/metricsserver.py); tests read the
registry directly.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hami_dcu.common.io.podlatency import bound_to_allocated


class PluginMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.allocations = Counter(
            "hami_dcu_plugin_allocations", "Allocate calls by result (success, failed)", ["node", "result"],
            registry=self.registry,
        )
        self.allocate_seconds = Histogram(
            "hami_dcu_plugin_allocate_seconds", "Time to serve one Allocate call, API round trips included",
            ["node"], buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0), registry=self.registry,
        )
        # The kubelet picked slots on other cards than hami-scheduler chose (as in
        # Project-HAMi/HAMi#1741): the scheduler's record wins, and the mismatch is counted here.
        self.device_id_mismatches = Counter(
            "hami_dcu_plugin_device_id_mismatches",
            "Allocate calls whose kubelet device ids are on other cards than the scheduler chose",
            ["node"], registry=self.registry,
        )
        self.unknown_models = Gauge(
            "hami_dcu_plugin_unknown_model_cards", "Cards whose PCI device id maps to no known model",
            ["node"], registry=self.registry,
        )
        self.card_healthy = Gauge(
            "hami_dcu_plugin_card_healthy", "1 when the card is healthy, 0 otherwise", ["node", "card"],
            registry=self.registry,
        )
        self.bound_to_allocated_seconds = bound_to_allocated(self.registry)
        self.vdevs = Gauge("hami_dcu_plugin_vdevs", "Live vDCUs on this node", ["node"], registry=self.registry)
        self.lock_releases = Counter(
            "hami_dcu_plugin_node_lock_releases",
            "Node locks the reconcile released because their holder no longer needed them, by reason",
            ["node", "reason"], registry=self.registry,
        )
        # Each GetPreferredAllocation and Allocate asks the watch-fed cache first (cachereads.py):
        # served from it, fell back to reading the API server, or served and then found stale by
        # the conditioned write (decided again on fresh reads).
        self.cache_reads = Counter(
            "hami_dcu_plugin_cache_reads",
            "Admissions the watch-fed cache was asked about, by outcome (served, fell-back, stale)",
            ["node", "outcome"], registry=self.registry,
        )

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent): for tests and the demo."""
        return self.registry.get_sample_value(name, labels) or 0.0
