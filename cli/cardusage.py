"""What is used where: per node and per card, from the API objects alone (pure, no I/O).

The inputs are what `hami-dcu status` lists from the API server: Node objects (the plugin's
`hami.io/node-dcu-register` capacity, its `hami.io/node-handshake-dcu` report, the
`hami.io/mutex.lock`) and Pod objects (`hami.io/dcu-devices-allocated`). Every wire value is
read with the decoders of `hami_dcu.common.protocol.codec`, and a card's totals are counted by the
extender's own rule, given the pod (`hami_dcu.common.protocol.counting.pod_holdings`), so what status
shows is what the extender counts: a pod holds its share while it is not Succeeded/Failed,
terminating pods included, init containers count by their peak, native sidecars beside the
app containers.

Anything that cannot be read (an undecodable annotation, a pod holding a card its node does
not report) becomes a `problem` on the node, never a silently free card.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import (
    CodecError,
    PodDevices,
    decode_handshake,
    decode_lock,
    decode_node_devices,
    decode_pod_devices,
)
from hami_dcu.common.protocol.counting import Usage, pod_holdings
from hami_dcu.common.protocol.requests import names_dcu, pod_containers
from hami_dcu.common.protocol.untrusted import shown

JSON = dict[str, Any]
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class Share:
    """One container's share of one card."""

    namespace: str
    pod: str
    container: str
    memory_mib: int
    cores_percent: int
    bind_phase: str  # hami.io/bind-phase, "" when absent

    @property
    def owner(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container}"


@dataclass
class CardUsage:
    id: str
    model: str
    index: int
    numa: int
    healthy: bool
    slots_total: int
    memory_total_mib: int
    cores_total_percent: int
    slots_used: int = 0
    memory_used_mib: int = 0
    cores_used_percent: int = 0
    shares: list[Share] = field(default_factory=list)


@dataclass(frozen=True)
class LockInfo:
    holder: str  # namespace/name, or a description for a legacy or unreadable lock
    since: datetime | None
    age_seconds: float | None


@dataclass(frozen=True)
class PluginReport:
    state: str  # Reported, Requesting, Deleted or "" (unknown)
    at: datetime | None
    age_seconds: float | None
    by_volcano: bool = False  # the request or deletion was stamped by Volcano's scheduler


@dataclass
class NodeUsage:
    name: str
    cards: list[CardUsage] = field(default_factory=list)
    lock: LockInfo | None = None
    report: PluginReport | None = None
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Summary:
    nodes: int
    cards: int
    healthy_cards: int
    slots_used: int
    slots_total: int
    memory_used_mib: int
    memory_total_mib: int
    cores_used_percent: int
    cores_total_percent: int
    pods: int


@dataclass
class ClusterUsage:
    nodes: list[NodeUsage]
    summary: Summary


def cluster_usage(
    nodes: Iterable[JSON],
    pods: Iterable[JSON],
    now: datetime,
    naming: keys.Naming,
    node_name: str | None = None,
    namespace: str | None = None,
) -> ClusterUsage:
    """Usage per node and card, read from `naming`'s annotations. `node_name` keeps one node;
    `namespace` keeps the shares of that namespace's pods in the listing, while the card
    totals still count every pod (they are what the scheduler sees, whoever asks)."""
    by_name = {
        n["metadata"]["name"]: _node_usage(n, now, naming)
        for n in nodes
        if (n.get("metadata") or {}).get("name") and _is_dcu_node(n, naming)
    }
    pods_on: set[tuple[str, str]] = set()
    for pod in pods:
        _add_pod(by_name, pod, pods_on, naming)
    selected = [by_name[name] for name in sorted(by_name) if node_name is None or name == node_name]
    counted_pods = {key for key in pods_on if any(_holds(n, key) for n in selected)}
    if namespace is not None:
        for node in selected:
            for card in node.cards:
                card.shares = [s for s in card.shares if s.namespace == namespace]
        counted_pods = {key for key in counted_pods if key[0] == namespace}
    return ClusterUsage(nodes=selected, summary=_summary(selected, len(counted_pods)))


def naming_hint(nodes: Iterable[JSON], pods: Iterable[JSON], naming: keys.Naming) -> str | None:
    """The line to say when nothing here speaks `naming` (no node registered or reported in
    it, no pod allocated or asking in it) but something speaks the other set: a status in the
    wrong set would show no card and every waiting pod's request as "-", without a word."""
    node_list, pod_list = list(nodes), list(pods)
    if _speaks(node_list, pod_list, naming):
        return None
    other = keys.other_naming(naming)
    if not _speaks(node_list, pod_list, other):
        return None
    return f"no {naming.name} registrations found; this cluster speaks {other.name}: try --naming {other.name}"


def _speaks(nodes: list[JSON], pods: list[JSON], naming: keys.Naming) -> bool:
    if any((n.get("metadata") or {}).get("name") and _is_dcu_node(n, naming) for n in nodes):
        return True
    for pod in pods:
        if naming.pod_allocation_keys & ((pod.get("metadata") or {}).get("annotations") or {}).keys():
            return True
        if any(isinstance(c, dict) and names_dcu(c, naming.resources) for c in pod_containers(pod)):
            return True
    return False


def _is_dcu_node(node: JSON, naming: keys.Naming) -> bool:
    """A node a DCU plugin runs on: it registered cards, or at least reported."""
    annotations = node["metadata"].get("annotations") or {}
    return naming.node_register in annotations or naming.node_handshake in annotations


def _holds(node: NodeUsage, key: tuple[str, str]) -> bool:
    return any((s.namespace, s.pod) == key for card in node.cards for s in card.shares)


def _node_usage(node: JSON, now: datetime, naming: keys.Naming) -> NodeUsage:
    meta = node["metadata"]
    annotations = meta.get("annotations") or {}
    usage = NodeUsage(name=meta["name"])
    register = annotations.get(naming.node_register)
    devices = []
    if not register:
        usage.problems.append(f"no {naming.node_register} annotation: the device plugin registered no card")
    else:
        try:
            devices = decode_node_devices(register, naming.node_register)
        except CodecError as exc:
            usage.problems.append(f"cannot read {naming.node_register}: {exc.problem}")
    usage.cards = [
        CardUsage(id=d.id, model=d.type, index=d.index, numa=d.numa, healthy=d.health, slots_total=d.count,
                  memory_total_mib=d.devmem, cores_total_percent=d.devcore)
        for d in devices
    ]
    lock_value = annotations.get(keys.NODE_LOCK)
    if lock_value:
        try:
            lock = decode_lock(lock_value)
        except CodecError as exc:
            usage.lock = LockInfo(holder=f"unreadable lock '{shown(lock_value)}'", since=None, age_seconds=None)
            usage.problems.append(str(exc))
        else:
            usage.lock = LockInfo(holder=lock.holder, since=lock.since,
                                  age_seconds=(now - lock.since).total_seconds())
    handshake = annotations.get(naming.node_handshake)
    if handshake:
        seen = decode_handshake(handshake)
        usage.report = PluginReport(state=seen.state, at=seen.at,
                                    age_seconds=(now - seen.at).total_seconds() if seen.at else None,
                                    by_volcano=seen.by_volcano)
    else:
        usage.problems.append(f"no {naming.node_handshake} annotation: the device plugin never reported")
    return usage


def _container_names(pod: JSON) -> list[str]:
    """Container names in codec order: init containers first (the position of an entry in
    the pod device list is its container)."""
    spec = pod.get("spec") or {}
    return [c.get("name") or "?" for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]


def _add_pod(by_name: dict[str, NodeUsage], pod: JSON, pods_on: set[tuple[str, str]], naming: keys.Naming) -> None:
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    key = naming.pod_devices_allocated
    allocated = annotations.get(key)
    if not allocated:
        return
    node = _holding_node(by_name, pod, annotations)
    if node is None:
        return
    namespace, name = meta.get("namespace") or "default", meta.get("name") or "?"
    try:
        devices = decode_pod_devices(allocated, key)
    except CodecError as exc:
        node.problems.append(f"pod {namespace}/{name}: cannot read {key}: {exc.problem}")
        return
    cards = {card.id: card for card in node.cards}
    _count_holdings(node, cards, pod, devices, f"{namespace}/{name}")
    names = _container_names(pod)
    bind_phase = shown(annotations.get(keys.POD_BIND_PHASE, ""), 20)
    for position, container_devices in enumerate(devices):
        container = names[position] if position < len(names) else f"#{position}"
        for device in container_devices:
            card = cards.get(device.uuid)
            if card is not None:
                card.shares.append(Share(namespace, name, container, device.usedmem, device.usedcores, bind_phase))
    pods_on.add((namespace, name))


def _holding_node(by_name: dict[str, NodeUsage], pod: JSON, annotations: JSON) -> NodeUsage | None:
    """The listed node a live pod runs on; None for a finished pod or one on no listed node."""
    node_name = (pod.get("spec") or {}).get("nodeName") or annotations.get(keys.POD_NODE)
    if not node_name or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    return by_name.get(node_name)  # None: a node that is gone or never registered cards, nothing to show it on


def _count_holdings(node: NodeUsage, cards: dict[str, CardUsage], pod: JSON, devices: PodDevices,
                    owner: str) -> None:
    held = pod_holdings(pod, devices)
    unknown = sorted(card_id for card_id in held if card_id not in cards)
    if unknown:
        node.problems.append(f"pod {owner} holds {', '.join(unknown)}, which the node does not report")
    for card_id, usage in held.items():
        if card_id in cards:
            _count(cards[card_id], usage)


def _count(card: CardUsage, usage: Usage) -> None:
    card.slots_used += usage.slots
    card.memory_used_mib += usage.memory
    card.cores_used_percent += usage.cores


def _summary(nodes: list[NodeUsage], pods: int) -> Summary:
    cards = [card for node in nodes for card in node.cards]
    return Summary(
        nodes=len(nodes),
        cards=len(cards),
        healthy_cards=sum(1 for c in cards if c.healthy),
        slots_used=sum(c.slots_used for c in cards),
        slots_total=sum(c.slots_total for c in cards),
        memory_used_mib=sum(c.memory_used_mib for c in cards),
        memory_total_mib=sum(c.memory_total_mib for c in cards),
        cores_used_percent=sum(c.cores_used_percent for c in cards),
        cores_total_percent=sum(c.cores_total_percent for c in cards),
        pods=pods,
    )
