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

Real holdings are keyed by pod UID, assumptions by `assumed/<uid>`: an assumption can never
overwrite what a pod really holds, and forgetting one never removes a real holding. A
relist rebuilds every node's holdings from the listed pods and the live assumptions and
counts each difference it repairs in `drift` (exported as hami_dcu_cache_drift_total).

The cache also notices node locks whose holder no longer needs them (lockpurpose.py): a
holder seen finished, running, done or failed with its allocation, bound elsewhere, or
deleted. They queue in `needless_locks` for the service to release.

Every change to a node's holdings bumps its `generation`, which lets `/filter` reuse a
node's fit result until something on that node changes.

Pods not bound yet that ask for DCUs are kept apart, by namespace, with what they ask
(`waiting`): in Volcano mode an admitted pod counts against its namespace's quota from its
admission, not from its placement (scheduler/quotas.py). The quota reservations the webhook
stamped on pods are noted as they are seen (`reservations_seen`): they tell it that a pod it
admitted is stored.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hami_dcu.common import keys
from hami_dcu.common import lockpurpose as purpose
from hami_dcu.common.codec import (
    CodecError,
    LockValue,
    PodDevices,
    decode_lock,
    decode_node_devices,
    decode_pod_devices,
)
from hami_dcu.common.counting import StartOrder, Usage, collapse, start_order
from hami_dcu.common.keys import DCU_NAMING, Naming
from hami_dcu.common.requests import DcuRequest, RequestError, names_dcu, parse_pod_requests, pod_containers
from hami_dcu.scheduler import policy as policies
from hami_dcu.scheduler.cardstates import CardStateTable
from hami_dcu.scheduler.fit import CardSpec, PodFit
from hami_dcu.scheduler.handshake import HANDSHAKE_TTL, HandshakeSeen, allocates_dcu, fresh_until, observe
from hami_dcu.scheduler.seenreservations import SeenReservations

log = logging.getLogger(__name__)

JSON = dict[str, Any]
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_CHANGES_KEPT = 100_000  # node change log entries kept (a reader further behind starts over)
PodKey = tuple[str, str]  # (namespace, name)


@dataclass(slots=True)
class Holding:
    """One pod's (or one assumption's) share of a node: per card id, or why it is unreadable."""

    label: str  # namespace/name, for reasons
    held: dict[str, Usage] | None
    error: str | None = None


@dataclass(slots=True)
class NodeEntry:
    name: str
    present: bool = False  # a Node object exists
    resource_version: str = ""
    register_value: str | None = None
    register_error: str | None = "node not seen yet"
    cards: tuple[CardSpec, ...] = ()
    card_pos: dict[str, int] = field(default_factory=dict)
    handshake: HandshakeSeen | None = None
    handshake_fresh_until: float = float("-inf")  # epoch seconds
    dcu_allocatable: bool = False  # status.allocatable shows DCUs (HAMi's handshake guard)
    lock_value: str | None = None
    holdings: dict[str, Holding] = field(default_factory=dict)  # by pod uid
    used: list[Usage] = field(default_factory=list)  # per card, aligned with `cards`
    degraded: list[str] = field(default_factory=list)
    ignored_claims: list[str] = field(default_factory=list)  # shares of cards the node does not report
    generation: int = 0
    _score: tuple[int, float] = (-1, 0.0)
    # Derived with `used` on every change, for /filter's hot loop (filtering.py): the card
    # states (cardstates.py) of `cards` in order, and the node score.
    card_states: tuple[int, ...] = ()
    node_score: float = 0.0

    def lock(self) -> LockValue | None:
        if not self.lock_value:
            return None
        try:
            return decode_lock(self.lock_value)
        except CodecError:
            return None

    def score(self) -> float:
        """Node utilisation before the next pod (policy.py), cached per generation."""
        if self._score[0] != self.generation:
            slots = sum(c.slots for c in self.cards)
            memory = sum(c.memory for c in self.cards)
            cores = sum(c.cores for c in self.cards)
            value = policies.utilisation(
                sum(u.slots for u in self.used), slots,
                sum(u.memory for u in self.used), memory,
                sum(u.cores for u in self.used), cores,
            )
            self._score = (self.generation, value)
        return self._score[1]


@dataclass(slots=True)
class PodRecord:
    uid: str
    namespace: str
    name: str
    node: str
    allocated: str
    order: StartOrder  # how its containers start: what its allocation holds depends on it
    resource_version: str
    state: purpose.HolderState  # what decides whether a lock it holds is still needed


@dataclass(frozen=True, slots=True)
class WaitingPod:
    """A DCU pod not bound to a node yet: what it asks (common/quota.py `requested` reads it)."""

    namespace: str
    requests: tuple[DcuRequest | None, ...]
    init_count: int
    sidecars: frozenset[int]


@dataclass(frozen=True, slots=True)
class NeedlessLock:
    """A node lock whose holder no longer needs it; released by its exact value, so a lock
    taken meanwhile by anyone else is never touched."""

    node: str
    value: str
    holder: str  # namespace/name, for logs
    reason: str  # lockpurpose reason, the metric label


@dataclass(slots=True)
class Assumption:
    """What `/filter` chose for a pod that is not bound yet."""

    uid: str
    namespace: str
    name: str
    node: str
    fit: PodFit
    init_count: int
    expires: float  # monotonic seconds
    plan: Any = None  # the filtering.PodPlan it was fitted for, to re-fit at bind time
    bound: bool = False
    created: datetime | None = None  # the pod's creationTimestamp: create-to-bound starts here

    @property
    def key(self) -> str:
        return assumed_key(self.uid)


@dataclass(slots=True)
class PodRelist:
    """What a pod list in progress has shown so far (uids, and names for the locks)."""

    seen: set[str] = field(default_factory=set)
    names: set[PodKey] = field(default_factory=set)


def assumed_key(uid: str) -> str:
    """The holdings key of a pod's assumption (pod UIDs never contain '/')."""
    return f"assumed/{uid}"


def _newer_or_equal(candidate: str, current: str) -> bool:
    """resourceVersions are opaque; etcd's are integers, and a relist must not be undone by a
    late watch event, so compare them as numbers when both are."""
    if candidate.isdigit() and current.isdigit():
        return int(candidate) >= int(current)
    return True


class ClusterCache:
    def __init__(self, assume_ttl: float = 120.0, bound_ttl: float = 300.0,
                 handshake_ttl: timedelta = HANDSHAKE_TTL, naming: Naming = DCU_NAMING) -> None:
        self.naming = naming  # the set whose registration, handshake and allocation keys are read
        self.handshake_ttl = handshake_ttl
        self.nodes: dict[str, NodeEntry] = {}
        self.pods: dict[str, PodRecord] = {}
        self.pod_uids: dict[PodKey, str] = {}
        self.assumptions: dict[str, Assumption] = {}
        self.assumed_names: dict[PodKey, str] = {}
        # Lock holders we saw on a node whose allocation our pod watch has not shown yet:
        # another scheduler replica's pods. Bind waits for them to settle (see bind.py).
        # Per node: holder -> resourceVersion at which we saw its lock go (None: still held).
        self.unsettled: dict[str, dict[PodKey, str | None]] = {}
        # The newest resourceVersion the pod watch delivered (events and lists).
        self.pods_resource_version = ""
        self.lock_holders: dict[PodKey, set[str]] = {}  # pod -> nodes whose lock names it
        self.needless_locks: list[NeedlessLock] = []
        self.drift: Counter[str] = Counter()  # repairs made by relists, by kind
        # DCU pods not bound yet, by namespace then uid; and the quota reservations
        # (keys.QUOTA_RESERVATION) pods were seen to carry, gone or not.
        self.waiting: dict[str, dict[str, WaitingPod]] = {}
        self._waiting_namespace: dict[str, str] = {}
        self.reservations_seen = SeenReservations(keys.QUOTA_RESERVATION)
        self.card_states = CardStateTable()
        # Names of nodes as they change, oldest first; node_changes_dropped counts the ones
        # cut from the front, so a reader's position (dropped + index) stays valid.
        self.node_changes: list[str] = []
        self.node_changes_dropped = 0
        self.assume_ttl = assume_ttl
        self.bound_ttl = bound_ttl

    # --- nodes ---------------------------------------------------------------------------

    def _entry(self, name: str) -> NodeEntry:
        entry = self.nodes.get(name)
        if entry is None:
            entry = self.nodes[name] = NodeEntry(name=name)
        return entry

    def apply_node(self, node: JSON, now: datetime) -> None:
        meta = node.get("metadata") or {}
        name = meta.get("name")
        if not name:
            return
        entry = self._entry(name)
        rv = str(meta.get("resourceVersion", ""))
        if entry.present and not _newer_or_equal(rv, entry.resource_version):
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
            self._index_lock(entry, lock_value)
            self._judge_new_holder(entry)
        self._note_lock_holder(entry)
        register = annotations.get(self.naming.node_register)
        if register != entry.register_value or entry.register_error == "node not seen yet":
            entry.register_value = register
            self._set_cards(entry, register)
        # A plugin's routine report (every 30 s per node) only moves its deadline later, which
        # /filter notices when the old deadline comes (nodeview.Usability): no log entry, so
        # 5,000 nodes reporting cost /filter nothing. Anything else it must see is logged.
        fresh_until_now = entry.handshake_fresh_until
        if not was_present or fresh_until_now < was_fresh_until or was_fresh_until < now.timestamp():
            self._node_changed(name)

    def _set_cards(self, entry: NodeEntry, register: str | None) -> None:
        key = self.naming.node_register
        if not register:
            entry.cards, entry.register_error = (), f"no {key} annotation"
        else:
            try:
                devices = decode_node_devices(register, key)
            except CodecError as exc:
                entry.cards, entry.register_error = (), f"cannot read {key}: {exc.problem}"
                log.warning("node %s: %s", entry.name, exc)
            else:
                # A negative capacity (HAMi's decoder lets one through) counts as none: such a
                # card never fits anything, rather than fitting a "whole card" of -1 MiB.
                entry.cards = tuple(
                    CardSpec(id=d.id, index=d.index, model=d.type, slots=max(d.count, 0), memory=max(d.devmem, 0),
                             cores=max(d.devcore, 0), health=d.health, numa=d.numa)
                    for d in devices
                )
                entry.register_error = None if entry.cards else f"{key} lists no card"
        entry.card_pos = {c.id: i for i, c in enumerate(entry.cards)}
        self._recompute(entry)

    def delete_node(self, name: str) -> None:
        entry = self.nodes.get(name)
        if entry is None:
            return
        self._index_lock(entry, None)
        if not entry.holdings:
            self.card_states.leave(name, entry.card_states)
            for state in entry.card_states:
                self.card_states.release(state)
            del self.nodes[name]
            self._node_changed(name)
            return
        entry.present = False
        entry.register_value = None
        entry.cards, entry.card_pos = (), {}
        entry.register_error = "node deleted"
        self._recompute(entry)

    def replace_nodes(self, nodes: Iterable[JSON], now: datetime) -> None:
        """A fresh list: apply every node, forget the ones that are gone."""
        seen = set()
        for node in nodes:
            name = (node.get("metadata") or {}).get("name")
            if name:
                seen.add(name)
                entry = self.nodes.get(name)
                if entry is not None:
                    entry.resource_version = ""  # a list is authoritative
                self.apply_node(node, now)
        for name in [n for n, e in self.nodes.items() if e.present and n not in seen]:
            self.delete_node(name)

    def _index_lock(self, entry: NodeEntry, value: str | None) -> None:
        old = entry.lock()
        if old is not None and old.name is not None:
            pending = self.unsettled.get(entry.name)
            old_key = (old.namespace or "", old.name)
            if pending is not None and old_key in pending:
                pending[old_key] = entry.resource_version  # released (or replaced) at this version
            nodes = self.lock_holders.get((old.namespace or "", old.name))
            if nodes is not None:
                nodes.discard(entry.name)
                if not nodes:
                    del self.lock_holders[(old.namespace or "", old.name)]
        entry.lock_value = value
        new = entry.lock()
        if new is not None and new.name is not None:
            self.lock_holders.setdefault((new.namespace or "", new.name), set()).add(entry.name)

    def _judge_new_holder(self, entry: NodeEntry) -> None:
        """A lock just appeared: is its holder one we already know to be done with it?"""
        lock = entry.lock()
        if lock is None or lock.name is None:
            return
        uid = self.pod_uids.get((lock.namespace or "", lock.name))
        if uid is not None:
            self._judge_holder((lock.namespace or "", lock.name), self.pods[uid].state)

    def _judge_holder(self, key: PodKey, state: purpose.HolderState | None) -> None:
        """Queue the locks naming pod `key` that it no longer needs (None: the pod is gone)."""
        for node in sorted(self.lock_holders.get(key, ())):
            entry = self.nodes.get(node)
            if entry is None or not entry.lock_value:
                continue
            reason = purpose.HOLDER_GONE if state is None else purpose.state_reason(state, node)
            if reason is not None:
                self.needless_locks.append(NeedlessLock(node, entry.lock_value, f"{key[0]}/{key[1]}", reason))

    def lock_needless(self, node: str) -> str | None:
        """Why the current lock of `node` is no longer needed, as far as the watch has shown
        its holder (None: needed, or the holder is not known here)."""
        entry = self.nodes.get(node)
        lock = entry.lock() if entry is not None else None
        if lock is None or lock.name is None:
            return None
        uid = self.pod_uids.get((lock.namespace or "", lock.name))
        return purpose.state_reason(self.pods[uid].state, node) if uid is not None else None

    def take_needless_locks(self) -> list[NeedlessLock]:
        found, self.needless_locks = self.needless_locks, []
        return list({(lock.node, lock.value): lock for lock in found}.values())

    def _note_lock_holder(self, entry: NodeEntry) -> None:
        lock = entry.lock()
        if lock is None or lock.name is None:
            return
        key = (lock.namespace or "", lock.name)
        if key in self.assumed_names:
            return  # our own bind
        uid = self.pod_uids.get(key)
        if uid is not None and self.pods[uid].node == entry.name:
            return  # its allocation is already counted
        self.unsettled.setdefault(entry.name, {}).setdefault(key, None)

    # --- pods ----------------------------------------------------------------------------

    def apply_pod(self, pod: JSON) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        namespace, name = meta.get("namespace") or "default", meta.get("name") or ""
        rv = str(meta.get("resourceVersion", ""))
        if rv.isdigit() and (not self.pods_resource_version.isdigit() or int(rv) > int(self.pods_resource_version)):
            self.pods_resource_version = rv
        current = self.pods.get(uid)
        if current is not None and not _newer_or_equal(rv, current.resource_version):
            return
        state = purpose.HolderState.of(pod)
        if (namespace, name) in self.lock_holders:
            self._judge_holder((namespace, name), state)
        spec = pod.get("spec") or {}
        annotations = meta.get("annotations") or {}
        allocated = annotations.get(self.naming.pod_devices_allocated)
        node = _holding_node(spec, annotations)
        self.reservations_seen.note(pod)
        if state.phase in TERMINAL_PHASES:
            self._drop_waiting(uid)
            self._drop_pod(uid)
            self.forget(uid)
            return
        self._note_waiting(uid, namespace, pod)
        if not allocated or not node:
            self._drop_pod(uid)  # not holding anything (yet)
            return
        if current is not None and current.allocated == allocated and current.node == node:
            current.resource_version = rv
            current.state = state
            return
        self._drop_pod(uid)
        record = PodRecord(uid, namespace, name, node, allocated, start_order(pod), rv, state)
        self.pods[uid] = record
        self.pod_uids[(namespace, name)] = uid
        self.forget(uid)  # the real allocation replaces the assumption
        entry = self._entry(node)
        entry.holdings[uid] = _holding(record, self.naming.pod_devices_allocated)
        self._recompute(entry)
        pending = self.unsettled.get(node)
        if pending:
            pending.pop((namespace, name), None)

    def bound_node(self, uid: str | None, namespace: str, name: str) -> str | None:
        """The node this pod is known to be bound to: from its own object (spec.nodeName) or
        from a bind this process completed. None when not known to be bound."""
        found = uid if uid and uid in self.pods else self.pod_uids.get((namespace, name))
        record = self.pods.get(found) if found else None
        if record is not None and record.state.bound_to:
            return record.state.bound_to
        assumption = self.assumption_for(uid, namespace, name)
        return assumption.node if assumption is not None and assumption.bound else None

    def delete_pod(self, pod: JSON) -> None:
        """Forget the pod; a lock it held is queued as needless."""
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        key = (meta.get("namespace") or "default", meta.get("name") or "")
        if uid:
            self._drop_waiting(uid)
            self._drop_pod(uid)
            self.forget(uid)
        for pending in self.unsettled.values():
            pending.pop(key, None)
        self._judge_holder(key, None)

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
                relist.names.add((meta.get("namespace") or "default", meta.get("name") or ""))
                current = self.pods.get(uid)
                if current is not None:
                    current.resource_version = ""
                    if self._listed_differs(current, pod, self.naming.pod_devices_allocated):
                        self.drift["missed-update"] += 1
                self.apply_pod(pod)

    def relist_pods_done(self, relist: PodRelist) -> None:
        for uid in [u for u in self.pods if u not in relist.seen]:
            record = self.pods[uid]
            self.drift["missed-delete"] += 1
            self.delete_pod({"metadata": {"uid": uid, "namespace": record.namespace, "name": record.name}})
        for uid in [u for u in self._waiting_namespace if u not in relist.seen]:
            self._drop_waiting(uid)
        for key in [k for k in self.lock_holders if k not in relist.names]:
            self._judge_holder(key, None)
        self._repair_holdings()

    @staticmethod
    def _listed_differs(record: PodRecord, pod: JSON, allocated_key: str) -> bool:
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        node = _holding_node(pod.get("spec") or {}, annotations)
        return (annotations.get(allocated_key) != record.allocated or node != record.node
                or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES)

    def _repair_holdings(self) -> None:
        """Every node's holdings must be exactly its pods' records plus its live assumptions."""
        expected: dict[str, dict[str, Holding]] = {name: {} for name in self.nodes}
        for uid, record in self.pods.items():
            expected.setdefault(record.node, {})[uid] = _holding(record, self.naming.pod_devices_allocated)
        for assumption in self.assumptions.values():
            expected.setdefault(assumption.node, {})[assumption.key] = _assumed_holding(assumption)
        for name, holdings in expected.items():
            entry = self._entry(name)
            if entry.holdings == holdings:
                continue
            for key in entry.holdings.keys() - holdings.keys():
                self.drift["orphan-holding"] += 1
                log.warning("node %s: cache held %s for %s, which holds nothing there: repaired", name,
                            entry.holdings[key].held, entry.holdings[key].label)
            for key in holdings.keys() - entry.holdings.keys():
                self.drift["missing-holding"] += 1
                log.warning("node %s: cache missed what %s holds: repaired", name, holdings[key].label)
            for key in holdings.keys() & entry.holdings.keys():
                if holdings[key] != entry.holdings[key]:
                    self.drift["holding"] += 1
                    log.warning("node %s: cache counted %s for %s instead of %s: repaired", name,
                                entry.holdings[key].held, holdings[key].label, holdings[key].held)
            entry.holdings = holdings
            self._recompute(entry)

    def _note_waiting(self, uid: str, namespace: str, pod: JSON) -> None:
        """Index what the pod asks while it is not bound."""
        waiting = None if (pod.get("spec") or {}).get("nodeName") else _waiting(namespace, pod, self.naming)
        self._drop_waiting(uid)
        if waiting is not None:
            self.waiting.setdefault(namespace, {})[uid] = waiting
            self._waiting_namespace[uid] = namespace

    def _drop_waiting(self, uid: str) -> None:
        namespace = self._waiting_namespace.pop(uid, None)
        if namespace is None:
            return
        pods = self.waiting.get(namespace)
        if pods is not None:
            pods.pop(uid, None)
            if not pods:
                del self.waiting[namespace]

    def _drop_pod(self, uid: str) -> None:
        record = self.pods.pop(uid, None)
        if record is None:
            return
        self.pod_uids.pop((record.namespace, record.name), None)
        entry = self.nodes.get(record.node)
        if entry is not None and entry.holdings.pop(uid, None) is not None:
            self._recompute(entry)

    # --- assumptions ---------------------------------------------------------------------

    def assume(self, uid: str, namespace: str, name: str, node: str, fit: PodFit, init_count: int,
               now: float, plan: Any = None, created: datetime | None = None) -> Assumption:
        self.forget(uid)
        assumption = Assumption(uid, namespace, name, node, fit, init_count, now + self.assume_ttl, plan,
                                created=created)
        self.assumptions[uid] = assumption
        self.assumed_names[(namespace, name)] = uid
        entry = self._entry(node)
        entry.holdings[assumption.key] = _assumed_holding(assumption)
        self._recompute(entry)
        return assumption

    def mark_bound(self, uid: str, now: float) -> None:
        """Bound: keep counting the assumption until the watch shows the pod's allocation."""
        assumption = self.assumptions.get(uid)
        if assumption is not None:
            assumption.bound = True
            assumption.expires = now + self.bound_ttl

    def forget(self, uid: str) -> None:
        assumption = self.assumptions.pop(uid, None)
        if assumption is None:
            return
        self.assumed_names.pop((assumption.namespace, assumption.name), None)
        entry = self.nodes.get(assumption.node)
        if entry is not None and entry.holdings.pop(assumption.key, None) is not None:
            self._recompute(entry)

    def expire(self, now: float) -> int:
        stale = [uid for uid, a in self.assumptions.items() if a.expires <= now]
        for uid in stale:
            log.info("assumption for %s on node %s expired", self.assumptions[uid].name, self.assumptions[uid].node)
            self.forget(uid)
        return len(stale)

    def assumption_for(self, uid: str | None, namespace: str, name: str) -> Assumption | None:
        if uid and uid in self.assumptions:
            return self.assumptions[uid]
        found = self.assumed_names.get((namespace, name))
        return self.assumptions.get(found) if found else None

    # --- derived -------------------------------------------------------------------------

    def settled(self, node: str) -> bool:
        """True when every earlier lock holder of `node` is accounted for: its allocation is
        in the cache, or its lock went away at a version our pod watch has passed without
        the pod ever showing an allocation (its bind failed). resourceVersions are compared
        as numbers, which etcd's are; anything else counts as unsettled."""
        pending = self.unsettled.get(node)
        if not pending:
            return True
        seen = self.pods_resource_version
        for key, released in list(pending.items()):
            if released is not None and released.isdigit() and seen.isdigit() and int(seen) >= int(released):
                del pending[key]
        return not pending

    def _recompute(self, entry: NodeEntry) -> None:
        used = [Usage() for _ in entry.cards]
        degraded, ignored = [], []
        for holding in entry.holdings.values():
            if holding.held is None:
                degraded.append(f"pod {holding.label}: {holding.error}")
                continue
            for card, share in holding.held.items():
                pos = entry.card_pos.get(card)
                if pos is None:
                    if entry.cards:
                        ignored.append(f"pod {holding.label} holds card {card} that the node does not report")
                    continue
                used[pos].add(share)
        entry.used = used
        entry.degraded = degraded
        entry.ignored_claims = ignored
        entry.generation += 1
        entry.card_states = self.card_states.states_of(entry.name, entry.cards, used, entry.card_states)
        entry.node_score = entry.score()
        self._node_changed(entry.name)

    def _node_changed(self, name: str) -> None:
        """Log a change of the node (what /filter keeps per node follows this log)."""
        self.node_changes.append(name)
        if len(self.node_changes) > _CHANGES_KEPT:
            dropped = len(self.node_changes) // 2
            del self.node_changes[:dropped]
            self.node_changes_dropped += dropped


def _holding_node(spec: JSON, annotations: JSON) -> str | None:
    """The node a pod's allocation counts on: the one it is bound to, unless its `vgpu-node`
    names another (the Binding sets both at once, so they never differ for a pod we bound);
    an unbound pod holds nothing, whatever its annotations say."""
    node = spec.get("nodeName")
    claimed = annotations.get(keys.POD_NODE)
    return node if node and claimed in (None, node) else None


def _waiting(namespace: str, pod: JSON, naming: Naming) -> WaitingPod | None:
    """What a pod not bound yet asks, when it asks for a DCU (None otherwise, and for a request
    admission refuses: such a pod is never placed)."""
    resources = naming.resources
    if not any(isinstance(c, dict) and names_dcu(c, resources) for c in pod_containers(pod)):
        return None
    try:
        requests = tuple(parse_pod_requests(pod, resources))
    except RequestError:
        return None
    if not any(r is not None and r.count > 0 for r in requests):
        return None
    order = start_order(pod)
    return WaitingPod(namespace, requests, order.init_count, order.sidecars)


def _assumed_holding(assumption: Assumption) -> Holding:
    return Holding(f"{assumption.namespace}/{assumption.name} (assumed)", assumption.fit.held)


def _holding(record: PodRecord, allocated_key: str) -> Holding:
    label = f"{record.namespace}/{record.name}"
    try:
        devices: PodDevices = decode_pod_devices(record.allocated, allocated_key)
    except CodecError as exc:
        return Holding(label, None, f"unreadable {allocated_key}: {exc.problem}")
    negative = next((d for entry in devices for d in entry if d.usedmem < 0 or d.usedcores < 0), None)
    if negative is not None:
        # It would hand capacity back that nobody freed: the node is degraded instead.
        return Holding(label, None, f"negative share in {allocated_key} on card {negative.uuid}")
    return Holding(label, collapse(devices, record.order))


def used_without(entry: NodeEntry, keys: Iterable[str]) -> list[Usage]:
    """The node's per-card holdings with some holdings given back: an assumption's key (to
    re-check its own placement at bind), or preemption victims' uids."""
    used = [Usage(u.slots, u.memory, u.cores) for u in entry.used]
    for key in keys:
        holding = entry.holdings.get(key)
        if holding is None or not holding.held:
            continue
        for card, share in holding.held.items():
            pos = entry.card_pos.get(card)
            if pos is not None:
                used[pos].slots -= share.slots
                used[pos].memory -= share.memory
                used[pos].cores -= share.cores
    return used
