"""Prometheus metrics of one scheduler instance (its own registry, so tests can run several).

Latency histograms for /filter and /bind, node-lock waits and contention, locks taken over
or released because their holder no longer needed them (by reason), duplicate binds, and
per card what the cache counts as allocated plus the drift relists repaired (collected
from the cache at scrape time, never stale).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from hami_dcu.scheduler.cache import ClusterCache

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class SchedulerMetrics:
    def __init__(self, cache: ClusterCache) -> None:
        self.registry = CollectorRegistry()
        self.filter_seconds = Histogram(
            "hami_dcu_scheduler_filter_seconds", "Time to answer /filter", ["result"],
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.bind_seconds = Histogram(
            "hami_dcu_scheduler_bind_seconds", "Time to answer /bind", ["result"],
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.lock_wait_seconds = Histogram(
            "hami_dcu_scheduler_node_lock_wait_seconds", "Time /bind waited for the node lock",
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.lock_contention = Counter(
            "hami_dcu_scheduler_node_lock_contention", "Times /bind found the node locked by another pod",
            registry=self.registry)
        self.lock_takeovers = Counter(
            "hami_dcu_scheduler_node_lock_takeovers", "Expired or orphaned node locks replaced", ["reason"],
            registry=self.registry)
        self.lock_releases = Counter(
            "hami_dcu_scheduler_node_lock_releases", "Node locks released because their holder no longer needed "
            "them (finished, running, allocation done or failed, bound elsewhere, gone, unbound)", ["reason"],
            registry=self.registry)
        self.duplicate_binds = Counter(
            "hami_dcu_scheduler_duplicate_binds", "/bind calls for a pod whose bind was still in flight (joined it)",
            registry=self.registry)
        self.bind_round_trips = Histogram(
            "hami_dcu_scheduler_bind_api_calls", "API calls made by one successful /bind",
            buckets=(1, 2, 3, 4, 5, 8), registry=self.registry)
        self.registry.register(CardCollector(cache))


class CardCollector(Collector):
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["node", "card", "model"]
        memory = GaugeMetricFamily("hami_dcu_card_allocated_memory_mib", "Card memory held by pods", labels=labels)
        cores = GaugeMetricFamily("hami_dcu_card_allocated_cores_percent", "Card cores held by pods", labels=labels)
        slots = GaugeMetricFamily("hami_dcu_card_allocated_slots", "Card slots held by pods", labels=labels)
        degraded = GaugeMetricFamily("hami_dcu_node_degraded", "1 when a node holds unknown or unreadable "
                                     "allocations", labels=["node"])
        for entry in list(self.cache.nodes.values()):
            for spec, used in zip(entry.cards, entry.used, strict=False):
                values = [entry.name, spec.id, spec.model]
                memory.add_metric(values, used.memory)
                cores.add_metric(values, used.cores)
                slots.add_metric(values, used.slots)
            degraded.add_metric([entry.name], 1 if entry.degraded else 0)
        drift = CounterMetricFamily("hami_dcu_cache_drift", "Differences between the cache and the API that a "
                                    "relist found and repaired", labels=["kind"])
        for kind, count in sorted(self.cache.drift.items()):
            drift.add_metric([kind], count)
        yield from (memory, cores, slots, degraded, drift)
