"""The placements in flight: what `/filter` (or a bind fitting a pod itself) chose for a pod
not bound yet, held on the chosen node's cards until the pod's own allocation is seen.

An assumption is reserved by /filter, confirmed by the bind that carries it out (then kept
`bound_ttl` longer, until the watch shows the pod's allocation), forgotten when the pod's
allocation replaces it, when the pod goes away, when its bind fails, or expired after its TTL.
A placement is known by the pod's uid and by its namespace/name. Its holding is keyed
`assumed/<uid>` on the node (cacherecords.assumed_key): it never overwrites what a pod really
holds, and forgetting it never removes a real holding.

A bind asks about *its* placement (the Assumption object it was handed): `is_current` is False
once a newer /filter replaced it or it was forgotten, and `confirm` and `withdraw` then touch
nothing, so an old attempt never undoes a newer one's choice.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime

from hami_dcu.scheduler.cacherecords import Assumption, FitPlan, PodKey, assumed_holding
from hami_dcu.scheduler.fit import PodFit
from hami_dcu.scheduler.nodetable import NodeTable

log = logging.getLogger(__name__)


class Placements:
    def __init__(self, nodes: NodeTable, assume_ttl: float, bound_ttl: float) -> None:
        self._nodes = nodes
        self.assume_ttl = assume_ttl
        self.bound_ttl = bound_ttl
        self._by_uid: dict[str, Assumption] = {}
        self._by_name: dict[PodKey, str] = {}
        # Placements not bound yet, per node: the binds kube-scheduler has in flight there,
        # queued for the node lock or about to be (ClusterCache.busy_nodes).
        self._unbound: Counter[str] = Counter()

    def reserve(self, uid: str, namespace: str, name: str, node: str, fit: PodFit, init_count: int,
                now: float, plan: FitPlan | None = None, created: datetime | None = None) -> Assumption:
        """Hold `fit` on `node` for the pod, replacing any earlier placement of it."""
        self.forget(uid)
        assumption = Assumption(uid, namespace, name, node, fit, init_count, now + self.assume_ttl, plan,
                                created=created)
        self._by_uid[uid] = assumption
        self._by_name[(namespace, name)] = uid
        self._nodes.hold(node, assumption.key, assumed_holding(assumption))
        self._unbound[node] += 1
        return assumption

    def is_current(self, assumption: Assumption) -> bool:
        """This very placement is still the pod's (no newer /filter replaced it, nothing dropped it)."""
        return self._by_uid.get(assumption.uid) is assumption

    def confirm(self, assumption: Assumption, now: float) -> None:
        """Bound: keep counting the placement until the watch shows the pod's allocation (when
        it is still the pod's current one)."""
        if self.is_current(assumption):
            if not assumption.bound:
                self._bind_ended(assumption.node)
            assumption.bound = True
            assumption.expires = now + self.bound_ttl

    def withdraw(self, assumption: Assumption) -> None:
        """A bind's own placement, given up: dropped unless a newer one replaced it or it was bound."""
        if self.is_current(assumption) and not assumption.bound:
            self.forget(assumption.uid)

    def forget(self, uid: str) -> None:
        assumption = self._by_uid.pop(uid, None)
        if assumption is None:
            return
        self._by_name.pop((assumption.namespace, assumption.name), None)
        self._nodes.release(assumption.node, assumption.key)
        if not assumption.bound:
            self._bind_ended(assumption.node)

    def _bind_ended(self, node: str) -> None:
        self._unbound[node] -= 1
        if self._unbound[node] <= 0:
            del self._unbound[node]

    def in_flight(self, node: str) -> int:
        """Placements on `node` whose bind has not ended yet."""
        return self._unbound.get(node, 0)

    def unbound_total(self) -> int:
        """Placements whose bind has not ended, on every node: the binds in flight."""
        return sum(self._unbound.values())

    def unbound(self) -> list[tuple[str, int]]:
        """(node, placements whose bind has not ended) for every node that has some."""
        return list(self._unbound.items())

    def expire(self, now: float) -> int:
        stale = [uid for uid, a in self._by_uid.items() if a.expires <= now]
        for uid in stale:
            log.info("assumption for %s on node %s expired", self._by_uid[uid].name, self._by_uid[uid].node)
            self.forget(uid)
        return len(stale)

    def find(self, uid: str | None, namespace: str, name: str) -> Assumption | None:
        """The pod's placement, by its uid or else by its name."""
        if uid and uid in self._by_uid:
            return self._by_uid[uid]
        found = self._by_name.get((namespace, name))
        return self._by_uid.get(found) if found else None

    def knows(self, key: PodKey) -> bool:
        """A placement in flight is the pod's of this namespace/name."""
        return key in self._by_name

    def all(self) -> list[Assumption]:
        return list(self._by_uid.values())

    def __len__(self) -> int:
        return len(self._by_uid)
