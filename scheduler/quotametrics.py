"""Namespace DCU quotas on /metrics, collected from the quota book at scrape time: each
limit (HAMi exports `hami_resource_quota_limit`) beside what the namespace holds, counted
exactly as the quota check counts it (placements in flight included)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from hami_dcu.common.protocol.quota import quota_key
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.quotas import QuotaBook, namespace_used


class QuotaMetrics(Collector):
    def __init__(self, book: QuotaBook, cache: ClusterCache) -> None:
        self.book = book
        self.cache = cache

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["namespace", "resource", "quota"]
        limit = GaugeMetricFamily("hami_dcu_quota_limit", "DCU limit a ResourceQuota sets on the namespace "
                                  "(MiB for memory, percent of one card for cores)", labels=labels)
        used = GaugeMetricFamily("hami_dcu_quota_used", "DCU use counted against that limit", labels=labels)
        for namespace in self.book.namespaces():
            limits = self.book.limits(namespace)
            held = namespace_used(self.cache, namespace)
            for resource, found, amount in ((self.book.names.memory, limits.memory, held.memory),
                                            (self.book.names.cores, limits.cores, held.cores)):
                if found is None:
                    continue
                key = [namespace, quota_key(resource), found.quota]
                limit.add_metric(key, found.value)
                used.add_metric(key, amount)
        yield limit
        yield used
