"""The scheduler's picture of the cluster, fed by the node and pod watches (no I/O here).

Per node: its cards (from `hami.io/node-dcu-register`), the plugin handshake, the node lock,
and per card what live pods hold. A pod holds its share while it is not Succeeded/Failed
and not deleted (terminating pods still hold theirs), read from its
`hami.io/dcu-devices-allocated` annotation; `/filter` adds in-memory assumptions on top,
dropped when the pod's own allocation is seen, when the pod goes away, when bind fails, or
after a TTL. A pod holds only on the node it is bound to, and not at all when its `vgpu-node`
names another (a pod never scheduled, or bound elsewhere, holds nothing: issue 11). An
allocation that cannot be decoded makes the node degraded: unusable, with the reason, never
"free"; a card the node does not report counts nowhere (that pod's claim is listed in
`ignored_claims`), so no pod can make a node unusable by naming a card that does not exist.

The cache is the one seam between the watches and the decisions. The informer feeds it
(`apply_*`, `delete_*`, `replace_*`); `/filter`, `/bind` and `/preempt` ask it questions: a
node's view (`node`), whether a pod is bound (`bound_node`), whether the lock holders of a
node are settled (`settled`, `lock_needless`), and through `placements` (placements.py) a
pod's placement in flight: reserve, confirm, withdraw, forget. Its tables are its own: the
nodes (nodetable.py: entries, card states, the change log), the pods (podtable.py), the
placements and the lock holders (lockholders.py); every change to one goes through here or
through the placements, so the node entries always add up.

Real holdings are keyed by pod UID, assumptions by `assumed/<uid>`: an assumption can never
overwrite what a pod really holds, and forgetting one never removes a real holding. A relist
rebuilds every node's holdings from the listed pods and the live assumptions and counts each
difference it repairs in `drift` (exported as hami_dcu_cache_drift_total).

The quota reservations the webhook stamped on pods are noted as they are seen
(`reservations_seen`): they tell it that a pod it admitted is stored.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from datetime import datetime, timedelta

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol import lockpurpose as purpose
from hami_dcu.common.protocol.counting import start_order
from hami_dcu.common.protocol.keys import Naming
from hami_dcu.scheduler.cacherecords import (
    JSON,
    NOT_SEEN_YET,
    TERMINAL_PHASES,
    Holding,
    NeedlessLock,
    NodeEntry,
    NodeView,
    PodRecord,
    PodRelist,
    assumed_holding,
    cards_of,
    holding_node,
    listed_differs,
    newer_or_equal,
    pod_key,
    waiting_pod,
)
from hami_dcu.scheduler.cardstates import CardStateTable
from hami_dcu.scheduler.handshake import HANDSHAKE_TTL, allocates_dcu, fresh_until, observe
from hami_dcu.scheduler.lockholders import LockHolders
from hami_dcu.scheduler.nodetable import ChangeLog, NodeTable
from hami_dcu.scheduler.placements import Placements
from hami_dcu.scheduler.podtable import PodsView, PodTable, WaitingPods, WaitingView
from hami_dcu.scheduler.seenreservations import SeenReservations

log = logging.getLogger(__name__)


class ClusterCache:
    def __init__(self, assume_ttl: float = 120.0, bound_ttl: float = 300.0,
                 handshake_ttl: timedelta = HANDSHAKE_TTL, *, naming: Naming) -> None:
        self.naming = naming  # the set whose registration, handshake and allocation keys are read
        self.handshake_ttl = handshake_ttl
        self._nodes = NodeTable()
        self._pods = PodTable(self._nodes, naming.pod_devices_allocated)
        self.placements = Placements(self._nodes, assume_ttl, bound_ttl)
        self._locks = LockHolders(self._nodes, self._pods, self.placements)
        self._waiting = WaitingPods()
        # Read only outside the cache: the pods holding (metrics, quotas.py) and the DCU pods
        # not bound yet (quotas.py, Volcano mode).
        self.pods: PodsView = self._pods
        self.waiting: WaitingView = self._waiting
        self.reservations_seen = SeenReservations(keys.QUOTA_RESERVATION)
        self._drift: Counter[str] = Counter()  # repairs made by relists, by kind
        # A node's view, None when no watch showed it. The node table's own lookup, no Python
        # frame around it: /filter asks once per failing node, thousands of times a request.
        self.node: Callable[[str], NodeView | None] = self._nodes.get

    # --- what the filter, the binder and the metrics read ---------------------------------

    def nodes(self) -> list[NodeView]:
        return list(self._nodes.entries())

    def node_names(self) -> Collection[str]:
        return self._nodes.names()

    @property
    def card_states(self) -> CardStateTable:
        return self._nodes.card_states

    @property
    def changes(self) -> ChangeLog:
        """Names of nodes as they change (what /filter keeps per node follows it: nodeview.py)."""
        return self._nodes.changes

    @property
    def drift(self) -> dict[str, int]:
        """Repairs made by relists, by kind (a copy)."""
        return dict(self._drift)

    def bound_node(self, uid: str | None, namespace: str, name: str) -> str | None:
        """The node this pod is known to be bound to: from its own object (spec.nodeName) or
        from a bind this process completed. None when not known to be bound."""
        record = (self._pods.get(uid) if uid else None) or self._pods.named((namespace, name))
        if record is not None and record.state.bound_to:
            return record.state.bound_to
        assumption = self.placements.find(uid, namespace, name)
        return assumption.node if assumption is not None and assumption.bound else None

    def busy_nodes(self, limit: Callable[[str], int]) -> frozenset[str]:
        """Nodes with at least `limit(node)` binds in flight (a limit of 0: none): placements not
        bound yet, and the pod the node's lock names once it is bound (its Allocate is still to
        come). /filter passes over them while another node fits (FilterSettings.bind_queue)."""
        found = []
        for node, count in self.placements.unbound():
            most = limit(node)
            if most > 0 and count + self._allocating(node) >= most:
                found.append(node)
        return frozenset(found)

    def _allocating(self, node: str) -> int:
        """1 when `node`'s lock names a pod not counted among its unbound placements and still
        in need of it (its Allocate under way), else 0."""
        entry = self.node(node)
        lock = entry.lock() if entry is not None and entry.lock_value else None
        if lock is None or self._locks.needless(node):
            return 0
        if lock.name is not None and lock.namespace is not None:
            placed = self.placements.find(None, lock.namespace, lock.name)
            if placed is not None and not placed.bound and placed.node == node:
                return 0  # its bind is under way: counted among the unbound placements
        return 1

    def lock_needless(self, node: str) -> str | None:
        """Why the current lock of `node` is no longer needed, as far as the watch has shown
        its holder (None: needed, or the holder is not known here)."""
        return self._locks.needless(node)

    def settled(self, node: str) -> bool:
        """True when every earlier lock holder of `node` is accounted for: its allocation is
        in the cache, or its lock went away at a version our pod watch has passed without
        the pod ever showing an allocation (its bind failed)."""
        return self._locks.settled(node)

    def take_needless_locks(self) -> list[NeedlessLock]:
        """The locks found needless since the last call, each once (lockholders.py)."""
        return self._locks.take_needless()

    # --- nodes ---------------------------------------------------------------------------

    def apply_node(self, node: JSON, now: datetime) -> None:
        meta = node.get("metadata") or {}
        name = meta.get("name")
        if not name:
            return
        entry = self._nodes.entry(name)
        rv = str(meta.get("resourceVersion", ""))
        if entry.present and not newer_or_equal(rv, entry.resource_version):
            return
        was_present, was_fresh_until = entry.present, entry.handshake_fresh_until
        entry.present = True
        entry.resource_version = rv
        annotations = meta.get("annotations") or {}
        seen = observe(annotations.get(self.naming.node_handshake), entry.handshake, now)
        allocatable = allocates_dcu(node, self.naming.resources.count)
        if seen is not entry.handshake or allocatable != entry.dcu_allocatable:
            entry.handshake = seen
            entry.dcu_allocatable = allocatable
            entry.handshake_fresh_until = fresh_until(seen, self.handshake_ttl, allocatable)
        lock_value = annotations.get(keys.NODE_LOCK)
        if lock_value != entry.lock_value:
            self._locks.lock_changed(entry, lock_value)
            self._locks.judge_new_holder(entry)
        self._locks.note_holder(entry)
        register = annotations.get(self.naming.node_register)
        if register != entry.register_value or entry.register_error == NOT_SEEN_YET:
            entry.register_value = register
            self._set_cards(entry, register)
        # A plugin's routine report (every 30 s per node) only moves its deadline later, which
        # /filter notices when the old deadline comes (nodeview.Usability): no log entry, so
        # 5,000 nodes reporting cost /filter nothing. Anything else it must see is logged.
        fresh_until_now = entry.handshake_fresh_until
        if not was_present or fresh_until_now < was_fresh_until or was_fresh_until < now.timestamp():
            self._nodes.changes.append(name)

    def _set_cards(self, entry: NodeEntry, register: str | None) -> None:
        entry.cards, entry.register_error, problem = cards_of(register, self.naming.node_register)
        if problem is not None:
            log.warning("node %s: %s", entry.name, problem)
        entry.card_pos = {c.id: i for i, c in enumerate(entry.cards)}
        self._nodes.recompute(entry)

    def delete_node(self, name: str) -> None:
        entry = self._nodes.get(name)
        if entry is None:
            return
        self._locks.lock_changed(entry, None)
        if not entry.holdings:
            self._nodes.remove(entry)
            return
        entry.present = False
        entry.register_value = None
        entry.cards, entry.card_pos = (), {}
        entry.register_error = "node deleted"
        self._nodes.recompute(entry)

    def replace_nodes(self, nodes: Iterable[JSON], now: datetime) -> None:
        """A fresh list: apply every node, forget the ones that are gone."""
        seen = set()
        for node in nodes:
            name = (node.get("metadata") or {}).get("name")
            if name:
                seen.add(name)
                entry = self._nodes.get(name)
                if entry is not None:
                    entry.resource_version = ""  # a list is authoritative
                self.apply_node(node, now)
        for entry in self._nodes.entries():
            if entry.present and entry.name not in seen:
                self.delete_node(entry.name)

    # --- pods ----------------------------------------------------------------------------

    def pods_listed_at(self, resource_version: str) -> None:
        """The pod watch is at `resource_version` (a list's, or a bookmark's)."""
        self._pods.resource_version = resource_version

    def apply_pod(self, pod: JSON) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        key = pod_key(meta)
        rv = str(meta.get("resourceVersion", ""))
        self._pods.saw_version(rv)
        current = self._pods.get(uid)
        if current is not None and not newer_or_equal(rv, current.resource_version):
            return
        state = purpose.HolderState.of(pod)
        if self._locks.locks_any(key):
            self._locks.judge(key, state)
        annotations = meta.get("annotations") or {}
        allocated = annotations.get(self.naming.pod_devices_allocated)
        node = holding_node(pod.get("spec") or {}, annotations)
        self.reservations_seen.note(pod)
        if state.phase in TERMINAL_PHASES:
            self._forget_pod(uid)
            return
        self._waiting.put(uid, None if (pod.get("spec") or {}).get("nodeName") else
                         waiting_pod(key[0], pod, self.naming))
        if not allocated or not node:
            self._pods.drop(uid)  # not holding anything (yet)
            return
        if current is not None and current.allocated == allocated and current.node == node:
            current.resource_version = rv
            current.state = state
            return
        self._pods.drop(uid)
        self.placements.forget(uid)  # the real allocation replaces the assumption
        self._pods.put(PodRecord(uid, key[0], key[1], node, allocated, start_order(pod), rv, state))
        self._locks.counted(node, key)

    def _forget_pod(self, uid: str) -> None:
        self._waiting.drop(uid)
        self._pods.drop(uid)
        self.placements.forget(uid)

    def delete_pod(self, pod: JSON) -> None:
        """Forget the pod; a lock it held is queued as needless."""
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        key = pod_key(meta)
        if uid:
            self._forget_pod(uid)
        self._locks.gone(key)
        self._locks.judge(key, None)

    def take_listed_pods(self, node: str, pods: Iterable[JSON]) -> None:
        """The node's pods as just read from the API (a bind that could not wait for the
        watches): counted, and every earlier holder of the node's lock is accounted for."""
        for pod in pods:
            self.apply_pod(pod)
        self._locks.stop_waiting(node)

    def replace_pods(self, pods: Iterable[JSON]) -> None:
        """A fresh list: apply every pod, drop the ones that are gone, rebuild every node's
        holdings from the result and count what had drifted. Locks whose holder is not in
        the list are queued as needless."""
        relist = PodRelist()
        self.relist_pods_page(relist, pods)
        self.relist_pods_done(relist)

    def relist_pods_page(self, relist: PodRelist, pods: Iterable[JSON]) -> None:
        """One page of a paged list (replace_pods in steps: the informer applies each page as
        it arrives, so a list of 40,000 pods is never in memory whole). Until
        `relist_pods_done`, pods missing from the list are still counted, as with a watch
        that has not caught up yet."""
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = meta.get("uid")
            if uid:
                relist.seen.add(uid)
                relist.names.add(pod_key(meta))
                current = self._pods.get(uid)
                if current is not None:
                    current.resource_version = ""
                    if listed_differs(current, pod, self.naming.pod_devices_allocated):
                        self._drift["missed-update"] += 1
                self.apply_pod(pod)

    def relist_pods_done(self, relist: PodRelist) -> None:
        for record in self._pods.records():
            if record.uid not in relist.seen:
                self._drift["missed-delete"] += 1
                self.delete_pod({"metadata": {"uid": record.uid, "namespace": record.namespace,
                                              "name": record.name}})
        for uid in self._waiting.uids():
            if uid not in relist.seen:
                self._waiting.drop(uid)
        for key in self._locks.holders():
            if key not in relist.names:
                self._locks.judge(key, None)
        # Every node's holdings must be exactly its pods' records plus its live assumptions.
        expected: dict[str, dict[str, Holding]] = {}
        for record in self._pods.records():
            expected.setdefault(record.node, {})[record.uid] = self._pods.expected_holding(record)
        for assumption in self.placements.all():
            expected.setdefault(assumption.node, {})[assumption.key] = assumed_holding(assumption)
        self._nodes.repair(expected, self._drift)
