"""What the scheduler's cache keeps, record by record, and the pure rules that read them
(no I/O, no state: cache.py and its parts hold the records).

A node's entry (`NodeEntry`) is handed out as a `NodeView`, the node's view the filter and the
binder read: cards, handshake, lock, and what is held on each card. It is read only there (the
type says so); the cache alone changes it, and says so in its change log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol import lockpurpose as purpose
from hami_dcu.common.protocol.codec import (
    CodecError,
    LockValue,
    PodDevices,
    decode_lock,
    decode_node_devices,
    decode_pod_devices,
)
from hami_dcu.common.protocol.counting import StartOrder, Usage, collapse, start_order
from hami_dcu.common.protocol.keys import Naming
from hami_dcu.common.protocol.requests import DcuRequest, RequestError, names_dcu, parse_pod_requests, pod_containers
from hami_dcu.scheduler import policy as policies
from hami_dcu.scheduler.fit import CardSpec, PodFit, PodMiss
from hami_dcu.scheduler.handshake import HandshakeSeen

JSON = dict[str, Any]
PodKey = tuple[str, str]  # (namespace, name)
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
NOT_SEEN_YET = "node not seen yet"  # a node entry made before its Node object arrived


@dataclass(slots=True)
class Holding:
    """One pod's (or one assumption's) share of a node: per card id, or why it is unreadable."""

    label: str  # namespace/name, for reasons
    held: dict[str, Usage] | None
    error: str | None = None


class FitPlan(Protocol):
    """How a pod is fitted (filtering.PodPlan): kept with its placement so that a bind finding
    the chosen cards taken meanwhile can fit the pod on the node again."""

    def fit(self, cards: Sequence[CardSpec], used: Sequence[Usage]) -> PodFit | PodMiss: ...


class NodeView(Protocol):
    """A node's entry as everything outside the cache reads it (the filter, the binder, the
    metrics): read only, so only the cache changes a node, and logs the change."""

    @property
    def name(self) -> str: ...
    @property
    def present(self) -> bool: ...
    @property
    def resource_version(self) -> str: ...
    @property
    def register_value(self) -> str | None: ...
    @property
    def register_error(self) -> str | None: ...
    @property
    def cards(self) -> tuple[CardSpec, ...]: ...
    @property
    def card_pos(self) -> Mapping[str, int]: ...
    @property
    def handshake(self) -> HandshakeSeen | None: ...
    @property
    def handshake_fresh_until(self) -> float: ...
    @property
    def dcu_allocatable(self) -> bool: ...
    @property
    def lock_value(self) -> str | None: ...
    @property
    def holdings(self) -> Mapping[str, Holding]: ...
    @property
    def used(self) -> Sequence[Usage]: ...
    @property
    def degraded(self) -> Sequence[str]: ...
    @property
    def ignored_claims(self) -> Sequence[str]: ...
    @property
    def generation(self) -> int: ...
    @property
    def card_states(self) -> tuple[int, ...]: ...
    @property
    def node_score(self) -> float: ...
    def lock(self) -> LockValue | None: ...
    def score(self) -> float: ...


@dataclass(slots=True)
class NodeEntry:
    """A node's entry as the cache keeps it (NodeView is what it hands out)."""

    name: str
    present: bool = False  # a Node object exists
    resource_version: str = ""
    register_value: str | None = None
    register_error: str | None = NOT_SEEN_YET
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
    """A DCU pod not bound to a node yet: what it asks (common/protocol/quota.py `requested` reads it)."""

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
    plan: FitPlan | None = None  # what it was fitted for (filtering.PodPlan), to re-fit at bind time
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


def is_assumed_key(key: str) -> bool:
    return key.startswith("assumed/")


def newer_or_equal(candidate: str, current: str) -> bool:
    """resourceVersions are opaque; etcd's are integers, and a relist must not be undone by a
    late watch event, so compare them as numbers when both are."""
    if candidate.isdigit() and current.isdigit():
        return int(candidate) >= int(current)
    return True


def lock_key(lock: LockValue | None) -> PodKey | None:
    """The pod a lock names, or None for a lock naming nobody (legacy, unreadable)."""
    if lock is None or lock.name is None:
        return None
    return (lock.namespace or "", lock.name)


def pod_key(meta: JSON) -> PodKey:
    return (meta.get("namespace") or "default", meta.get("name") or "")


def cards_of(register: str | None, key: str) -> tuple[tuple[CardSpec, ...], str | None, CodecError | None]:
    """The cards a node registers under `key`, why it counts as unregistered (None: it does
    not), and the decoding error to log."""
    if not register:
        return (), f"no {key} annotation", None
    try:
        devices = decode_node_devices(register, key)
    except CodecError as exc:
        return (), f"cannot read {key}: {exc.problem}", exc
    # A negative capacity (HAMi's decoder lets one through) counts as none: such a card never
    # fits anything, rather than fitting a "whole card" of -1 MiB.
    cards = tuple(
        CardSpec(id=d.id, index=d.index, model=d.type, slots=max(d.count, 0), memory=max(d.devmem, 0),
                 cores=max(d.devcore, 0), health=d.health, numa=d.numa)
        for d in devices
    )
    return cards, None if cards else f"{key} lists no card", None


def holding_node(spec: JSON, annotations: JSON) -> str | None:
    """The node a pod's allocation counts on: the one it is bound to, unless its `vgpu-node`
    names another (the Binding sets both at once, so they never differ for a pod we bound);
    an unbound pod holds nothing, whatever its annotations say."""
    node = spec.get("nodeName")
    claimed = annotations.get(keys.POD_NODE)
    return node if node and claimed in (None, node) else None


def listed_differs(record: PodRecord, pod: JSON, allocated_key: str) -> bool:
    """A listed pod is not what the watch left in the cache (a missed update)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    node = holding_node(pod.get("spec") or {}, annotations)
    return (annotations.get(allocated_key) != record.allocated or node != record.node
            or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES)


def waiting_pod(namespace: str, pod: JSON, naming: Naming) -> WaitingPod | None:
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


def assumed_holding(assumption: Assumption) -> Holding:
    return Holding(f"{assumption.namespace}/{assumption.name} (assumed)", assumption.fit.held)


def pod_holding(record: PodRecord, allocated_key: str) -> Holding:
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


def used_without(entry: NodeView, keys: Iterable[str]) -> list[Usage]:
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


def still_fits(entry: NodeView, assumption: Assumption) -> bool:
    """The assumed cards still have room next to everything else on the node."""
    others = used_without(entry, [assumption.key])
    for card_id, share in assumption.fit.held.items():
        pos = entry.card_pos.get(card_id)
        if pos is None:
            return False
        spec, used = entry.cards[pos], others[pos]
        if (used.slots + share.slots > spec.slots or used.memory + share.memory > spec.memory
                or used.cores + share.cores > spec.cores):
            return False
    return True
