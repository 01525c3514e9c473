"""Namespace DCU quotas in the extender: the ResourceQuota objects the watch delivers, and
what each namespace's live DCU pods hold (no I/O; the rules are in common/protocol/quota.py).

`/filter` checks every fitting node's placement against the namespace's limits (a whole
card counts its real memory there); the filter is synchronous and records its choice as an
assumption at once, so two pods racing for the last of a quota cannot both pass. When the
webhook runs in this process it asks `admission_view` the same question at admission.

Volcano mode (`waiting=True`): Volcano's pods never pass /filter, so admission is their only
check, and what placed pods hold is not enough (issue 35, finding 2: with a 4,000 MiB quota,
three Volcano pods of 4,000 MiB and a whole card were all admitted). There an admitted pod
counts from its admission: by what it asks while the watch shows it unbound (the cache's
`waiting`), and before the watch shows it at all by the reservation the webhook made when it
admitted it (`reserve`), kept until the watch has shown the pod carry its reservation id (even
if it is gone since) or RESERVATION_TTL passes (a pod refused after us, by another webhook or a policy, is never
stored). A whole card counts the largest card any node registers: Volcano may put it on any
of them. The reservations live in this process: the chart's one scheduler replica decides
every admission (README, Volcano mode).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.quota import Amount, QuotaLimits, Reservations, exceeded, limits_from, requested
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
    for record in cache.pods.records():
        if record.namespace != namespace:
            continue
        holding = cache.pods.holding(record)
        if holding is not None and holding.held:
            memory += sum(share.memory for share in holding.held.values())
            cores += sum(share.cores for share in holding.held.values())
    for assumption in cache.placements.all():
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


RESERVATION_TTL = 30.0  # seconds an admitted pod counts by its reservation before the watch shows it


def largest_card(cache: ClusterCache) -> int | None:
    """The memory (MiB) of the largest card any node registers; None when none registers one."""
    return max((card.memory for entry in cache.nodes() if entry.present for card in entry.cards),
               default=None)


def waiting_total(cache: ClusterCache, namespace: str, whole_card: int) -> Amount:
    """What the namespace's DCU pods not bound yet ask (a whole card as `whole_card` MiB)."""
    total = Amount()
    for pod in cache.waiting.in_namespace(namespace):
        total = total + requested(pod.requests, pod.init_count, pod.sidecars, whole_card)
    return total


@dataclass(slots=True)
class _Reserved:
    namespace: str
    amount: Amount
    expires: float  # monotonic seconds


class AdmissionView:
    """For the webhook in this process: a namespace's limits and what it holds, None when it
    has no DCU quota. With `waiting` (Volcano mode), also what its admitted pods not placed
    yet ask, and the reservations of pods admitted here that the watch has not shown yet."""

    def __init__(self, book: QuotaBook, cache: ClusterCache, waiting: bool = False,
                 clock: Callable[[], float] = time.monotonic, ttl: float = RESERVATION_TTL) -> None:
        self.book = book
        self.cache = cache
        self.waiting = waiting
        self.clock = clock
        self.ttl = ttl
        self._reserved: dict[str, _Reserved] = {}  # by reservation id (the review's uid)

    def __call__(self, namespace: str) -> tuple[QuotaLimits, Amount] | None:
        limits = self.book.limits(namespace)
        if not limits:
            return None
        used = namespace_used(self.cache, namespace)
        if self.waiting:
            used = used + waiting_total(self.cache, namespace, largest_card(self.cache) or 0)
            used = used + self.in_flight(namespace)
        return limits, used

    @property
    def reservations(self) -> Reservations | None:
        """What the webhook's decision needs in Volcano mode; None otherwise."""
        return Reservations(lambda: largest_card(self.cache), self.reserve) if self.waiting else None

    def reserve(self, namespace: str, reservation: str, amount: Amount) -> None:
        self._reserved[reservation] = _Reserved(namespace, amount, self.clock() + self.ttl)

    def in_flight(self, namespace: str) -> Amount:
        """The reservations of `namespace` the watch has not shown yet (the others are dropped)."""
        now, seen = self.clock(), self.cache.reservations_seen
        for reservation in [r for r, held in self._reserved.items() if held.expires <= now or r in seen]:
            del self._reserved[reservation]
        total = Amount()
        for held in self._reserved.values():
            if held.namespace == namespace:
                total = total + held.amount
        return total


def admission_view(book: QuotaBook, cache: ClusterCache, waiting: bool = False,
                   clock: Callable[[], float] = time.monotonic) -> AdmissionView:
    return AdmissionView(book, cache, waiting, clock)
