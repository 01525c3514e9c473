"""Namespace DCU quotas in the extender: the ResourceQuota objects the watch delivers, and
what each namespace's live DCU pods hold (no I/O; the rules are in common/quota.py).

`/filter` checks every fitting node's placement against the namespace's limits (a whole
card counts its real memory there); the filter is synchronous and records its choice as an
assumption at once, so two pods racing for the last of a quota cannot both pass. When the
webhook runs in this process it asks `admission_view` the same question at admission.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from hami_dcu.common.keys import ResourceNames
from hami_dcu.common.quota import Amount, QuotaLimits, exceeded, limits_from
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.fit import PodFit
from hami_dcu.scheduler.reasons import Code, NodeRejection

JSON = dict[str, Any]
QuotaGate = Callable[[PodFit], NodeRejection | None]


class QuotaBook:
    """ResourceQuota objects by namespace and name, and the DCU limits they set."""

    def __init__(self, names: ResourceNames) -> None:
        self.names = names
        self._objects: dict[str, dict[str, JSON]] = {}
        self._limits: dict[str, QuotaLimits] = {}

    def apply(self, quota: JSON) -> None:
        meta = quota.get("metadata") or {}
        namespace, name = meta.get("namespace") or "default", meta.get("name") or ""
        self._objects.setdefault(namespace, {})[name] = quota
        self._limits.pop(namespace, None)

    def delete(self, quota: JSON) -> None:
        meta = quota.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        self._objects.get(namespace, {}).pop(meta.get("name") or "", None)
        self._limits.pop(namespace, None)

    def replace(self, quotas: Iterable[JSON]) -> None:
        self._objects.clear()
        self._limits.clear()
        for quota in quotas:
            self.apply(quota)

    def limits(self, namespace: str) -> QuotaLimits:
        found = self._limits.get(namespace)
        if found is None:
            found = self._limits[namespace] = limits_from(self._objects.get(namespace, {}).values(), self.names)
        return found

    def namespaces(self) -> list[str]:
        return sorted(ns for ns in self._objects if self.limits(ns))


def namespace_used(cache: ClusterCache, namespace: str) -> Amount:
    """What the namespace's live DCU pods and in-flight placements hold, over all cards.
    A pod is in the cache either with its allocation or as an assumption, never both."""
    memory = cores = 0
    for uid, record in cache.pods.items():
        if record.namespace != namespace:
            continue
        entry = cache.nodes.get(record.node)
        holding = entry.holdings.get(uid) if entry is not None else None
        if holding is not None and holding.held:
            memory += sum(share.memory for share in holding.held.values())
            cores += sum(share.cores for share in holding.held.values())
    for assumption in cache.assumptions.values():
        if assumption.namespace == namespace:
            memory += sum(share.memory for share in assumption.fit.held.values())
            cores += sum(share.cores for share in assumption.fit.held.values())
    return Amount(memory, cores)


def held_total(fit: PodFit) -> Amount:
    return Amount(sum(share.memory for share in fit.held.values()), sum(share.cores for share in fit.held.values()))


def quota_gate(limits: QuotaLimits, used: Amount, names: ResourceNames) -> QuotaGate:
    """A check of one node's placement against the namespace's limits."""

    def gate(fit: PodFit) -> NodeRejection | None:
        problem = exceeded(limits, used, held_total(fit), names)
        return NodeRejection(Code.POD_QUOTA_EXCEEDED, f"namespace DCU quota: {problem}") if problem else None

    return gate


def admission_view(book: QuotaBook, cache: ClusterCache) -> Callable[[str], tuple[QuotaLimits, Amount] | None]:
    """For the webhook in this process: a namespace's limits and what it holds, None when
    it has no DCU quota."""

    def view(namespace: str) -> tuple[QuotaLimits, Amount] | None:
        limits = book.limits(namespace)
        return (limits, namespace_used(cache, namespace)) if limits else None

    return view
