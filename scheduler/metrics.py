"""Prometheus metrics of one scheduler instance (its own registry, so tests can run several).

Latency histograms for /filter, /bind and /preempt, node-lock waits and contention, the
time from a pod's creation to its bind (create-to-bound), locks taken over
or released because their holder no longer needed them (by reason), duplicate binds, and,
collected from the cache at scrape time (never stale): per card its capacity and health
beside what is allocated, so utilisation is one division; per node whether its lock is held
and for how long; per namespace what its pods hold (beside a ResourceQuota);
pods by bind phase; the drift relists repaired; the connections our listeners closed
(common/io/connmetrics.py). With TLS, the serving certificate's expiry (common/io/certmetrics.py).
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from hami_dcu.common.io.certmetrics import CertificateExpiry
from hami_dcu.common.io.connmetrics import ClosedConnections
from hami_dcu.common.io.podlatency import create_to_bound
from hami_dcu.common.protocol.counting import Usage
from hami_dcu.scheduler.cache import ClusterCache

# One request's time in this process: /filter at 5,000 nodes takes a few ms, /bind two API
# round trips (~5-20 ms), a contended bind or lock wait up to the lock wait (20 s by default);
# 30 s is kube-scheduler's default extender timeout, past which nothing is worth telling apart.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class SchedulerMetrics:
    def __init__(self, cache: ClusterCache, wall_clock: Callable[[], float] = time.time) -> None:
        self.registry = CollectorRegistry()
        self.filter_seconds = Histogram(
            "hami_dcu_scheduler_filter_seconds", "Time to answer /filter", ["result"],
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.bind_seconds = Histogram(
            "hami_dcu_scheduler_bind_seconds", "Time to answer /bind", ["result"],
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.prioritize_seconds = Histogram(
            "hami_dcu_scheduler_prioritize_seconds", "Time to answer /prioritize (DRA mode's packing)", ["result"],
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        # /preempt lists a node's pods when kube-scheduler's victims are not enough: API time.
        self.preempt_seconds = Histogram(
            "hami_dcu_scheduler_preempt_seconds", "Time to answer /preempt", ["result"],
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.create_to_bound_seconds = create_to_bound(self.registry)
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
        self.registry.register(CardCollector(cache, wall_clock))
        self.closed_connections = ClosedConnections(self.registry)  # by the listeners of scheduler/command.py

    def watch_certificate(self, cert_file: str, role: str = "serving") -> None:
        """Export the expiry of the certificate this process serves with."""
        self.registry.register(CertificateExpiry({role: cert_file}))


def _add(total: Usage, share: Usage) -> None:
    total.slots += share.slots
    total.memory += share.memory
    total.cores += share.cores


class CardCollector(Collector):
    def __init__(self, cache: ClusterCache, wall_clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self.wall_clock = wall_clock

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["node", "card", "model"]
        memory = GaugeMetricFamily("hami_dcu_card_allocated_memory_mib", "Card memory held by pods", labels=labels)
        cores = GaugeMetricFamily("hami_dcu_card_allocated_cores_percent", "Card cores held by pods", labels=labels)
        slots = GaugeMetricFamily("hami_dcu_card_allocated_slots", "Card slots held by pods", labels=labels)
        memory_total = GaugeMetricFamily("hami_dcu_card_memory_mib", "Card memory the plugin registered",
                                         labels=labels)
        cores_total = GaugeMetricFamily("hami_dcu_card_cores_percent", "Card cores the plugin registered "
                                        "(100 for a whole card)", labels=labels)
        slots_total = GaugeMetricFamily("hami_dcu_card_slots", "Card slots (vDCUs) the plugin registered",
                                        labels=labels)
        healthy = GaugeMetricFamily("hami_dcu_card_healthy", "1 when the plugin registered the card healthy",
                                    labels=labels)
        degraded = GaugeMetricFamily("hami_dcu_node_degraded", "1 when a node holds unknown or unreadable "
                                     "allocations", labels=["node"])
        lock_held = GaugeMetricFamily("hami_dcu_node_lock_held", "1 while the node lock is held", labels=["node"])
        lock_age = GaugeMetricFamily("hami_dcu_node_lock_held_seconds", "How long the current node lock has been "
                                     "held (absent when free)", labels=["node"])
        not_reporting = GaugeMetricFamily("hami_dcu_nodes_not_reporting", "Nodes with registered cards whose device "
                                          "plugin has not reported within the handshake limit: /filter gives them "
                                          "no DCU pod")
        now = self.wall_clock()
        silent = 0
        for entry in self.cache.nodes():
            if entry.present and entry.cards and entry.handshake_fresh_until < now:  # CPU nodes: no cards
                silent += 1
            for spec, used in zip(entry.cards, entry.used, strict=False):
                values = [entry.name, spec.id, spec.model]
                memory.add_metric(values, used.memory)
                cores.add_metric(values, used.cores)
                slots.add_metric(values, used.slots)
                memory_total.add_metric(values, spec.memory)
                cores_total.add_metric(values, spec.cores)
                slots_total.add_metric(values, spec.slots)
                healthy.add_metric(values, 1 if spec.health else 0)
            degraded.add_metric([entry.name], 1 if entry.degraded else 0)
            if entry.present:
                lock = entry.lock()
                lock_held.add_metric([entry.name], 1 if entry.lock_value else 0)
                if lock is not None:
                    lock_age.add_metric([entry.name], max(0.0, now - lock.since.timestamp()))
        yield from self._namespaces()
        phases = GaugeMetricFamily("hami_dcu_pods_bind_phase", "Pods holding DCUs, by hami.io/bind-phase "
                                   "(allocating: bound, waiting for the device plugin)", labels=["phase"])
        for phase, count in sorted(Tally(r.state.bind_phase or "none" for r in self.cache.pods.records())
                                   .items()):
            phases.add_metric([phase], count)
        drift = CounterMetricFamily("hami_dcu_cache_drift", "Differences between the cache and the API that a "
                                    "relist found and repaired", labels=["kind"])
        for kind, count in sorted(self.cache.drift.items()):
            drift.add_metric([kind], count)
        not_reporting.add_metric([], silent)
        yield from (memory, cores, slots, memory_total, cores_total, slots_total, healthy, degraded, lock_held,
                    lock_age, not_reporting, phases, drift)

    def _namespaces(self) -> Iterator[GaugeMetricFamily]:
        """What each namespace's pods hold, summed over cards: set beside a ResourceQuota on
        the DCU resources, or used for chargeback. In-flight assumptions are not counted."""
        held: dict[str, Usage] = {}
        for record in self.cache.pods.records():
            holding = self.cache.pods.holding(record)
            if holding is None or holding.held is None:
                continue
            total = held.setdefault(record.namespace, Usage())
            for share in holding.held.values():
                _add(total, share)
        families = {
            "memory": GaugeMetricFamily("hami_dcu_namespace_allocated_memory_mib", "Card memory held by the "
                                        "namespace's pods", labels=["namespace"]),
            "cores": GaugeMetricFamily("hami_dcu_namespace_allocated_cores_percent", "Card cores held by the "
                                       "namespace's pods (100 per whole card)", labels=["namespace"]),
            "slots": GaugeMetricFamily("hami_dcu_namespace_allocated_slots", "Card slots held by the namespace's "
                                       "pods", labels=["namespace"]),
        }
        for namespace, usage in sorted(held.items()):
            for field, family in families.items():
                family.add_metric([namespace], getattr(usage, field))
        yield from families.values()
