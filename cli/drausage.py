"""What is used where in DRA mode: per card, the claims allocated on it (pure, no I/O).

The inputs are what `hami-dcu status` lists: the ResourceSlices of our driver (one per node,
one device per healthy card, with its `cores` (compute units), `memory` (bytes) and `slices`
(vDCU slots) capacities) and the ResourceClaims. A claim's share of a card is the capacity
kube-scheduler wrote it consumes (`consumedCapacity`); a result without one took the whole
card. Who uses the claim is its `status.reservedFor`.

A card's taints are those its slice publishes (the driver taints an unhealthy card with
`dra.hygon.com/unhealthy`, the reason as value) and those of the DeviceTaintRules that select
it (an operator's maintenance): each says its key, value, effect and, for a rule, the rule.

A result naming a device no slice publishes (the card turned unhealthy on a cluster without
device taints, or its node's driver is gone) is a `problem`, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.dra.quantity import QuantityError, to_int

JSON = dict[str, Any]


@dataclass(frozen=True)
class ClaimShare:
    namespace: str
    claim: str
    pods: tuple[str, ...]  # the pods the claim is reserved for (empty: allocated, not in use yet)
    cores: int  # compute units
    memory_mib: int
    slots: int
    whole: bool

    @property
    def owner(self) -> str:
        return f"{self.namespace}/{self.claim}"


@dataclass(frozen=True)
class DraTaint:
    key: str
    value: str
    effect: str
    time_added: str  # RFC3339, "" when not given
    rule: str | None = None  # the DeviceTaintRule that puts it there; None: the ResourceSlice (the driver)

    @property
    def text(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}" + (f" (DeviceTaintRule {self.rule})" if self.rule else "")


@dataclass
class DraCard:
    node: str
    device: str
    model: str
    serial: str
    cores_total: int
    memory_total_mib: int
    slots_total: int
    cores_used: int = 0
    memory_used_mib: int = 0
    slots_used: int = 0
    shares: list[ClaimShare] = field(default_factory=list)
    pool: str = ""
    taints: list[DraTaint] = field(default_factory=list)


@dataclass
class DraUsage:
    cards: list[DraCard]
    problems: list[str]
    claims: int  # allocated claims of our driver counted on the listed cards


def dra_usage(slices: Iterable[JSON], claims: Iterable[JSON], node_name: str | None = None,
              namespace: str | None = None, rules: Iterable[JSON] = ()) -> DraUsage:
    """Per card (sorted by node and device) the claims on it and its taints. `node_name` keeps
    one node; `namespace` keeps that namespace's claims in the listing, the totals still count
    all. `rules`: the cluster's DeviceTaintRules."""
    problems: list[str] = []
    cards = _published_cards(slices, problems)
    _add_rule_taints(cards, rules)
    counted: set[tuple[str, str]] = set()
    for claim in claims:
        _add_claim(cards, claim, problems, counted)
    listed = [cards[key] for key in sorted(cards, key=lambda k: (cards[k].node, k[1]))
              if node_name is None or cards[key].node == node_name]
    shown = {(s.namespace, s.claim) for card in listed for s in card.shares}
    if namespace is not None:
        for card in listed:
            card.shares = [s for s in card.shares if s.namespace == namespace]
        shown = {key for key in shown if key[0] == namespace}
    return DraUsage(cards=listed, problems=problems, claims=len(shown))


def _published_cards(slices: Iterable[JSON], problems: list[str]) -> dict[tuple[str, str], DraCard]:
    """Our driver's cards by (pool, device), with the taints their slices publish."""
    cards: dict[tuple[str, str], DraCard] = {}
    for piece in slices:
        spec = piece.get("spec") or {}
        if spec.get("driver") != names.DRIVER:
            continue
        pool = str((spec.get("pool") or {}).get("name") or spec.get("nodeName") or "")
        node = str(spec.get("nodeName") or pool)
        for device in spec.get("devices") or []:
            card = _card(node, device, problems)
            if card is not None:
                card.pool = pool
                card.taints = [_taint(t) for t in device.get("taints") or [] if isinstance(t, dict)]
                cards[(pool, card.device)] = card
    return cards


def _add_rule_taints(cards: dict[tuple[str, str], DraCard], rules: Iterable[JSON]) -> None:
    for rule in rules:
        for card in cards.values():
            if rule_selects(rule, names.DRIVER, card.pool, card.device):
                taint = ((rule.get("spec") or {}).get("taint")) or {}
                card.taints.append(_taint(taint, str((rule.get("metadata") or {}).get("name") or "?")))


def _card(node: str, device: JSON, problems: list[str]) -> DraCard | None:
    name = str(device.get("name") or "")
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    try:
        cores = to_int((capacity.get(names.CAP_CORES) or {}).get("value", "0"), f"device {name} cores")
        memory = to_int((capacity.get(names.CAP_MEMORY) or {}).get("value", "0"), f"device {name} memory")
        slots = to_int((capacity.get(names.CAP_SLICES) or {}).get("value", "1"), f"device {name} slices")
    except QuantityError as exc:
        problems.append(f"node {node}: {exc}")
        return None
    return DraCard(node=node, device=name, model=_attribute(attributes, names.ATTR_MODEL),
                   serial=_attribute(attributes, names.ATTR_SERIAL), cores_total=cores,
                   memory_total_mib=memory // names.MEMORY_STEP, slots_total=slots)


def rule_selects(rule: JSON, driver: str, pool: str, device: str) -> bool:
    """Whether a DeviceTaintRule's selector picks this device: every field it sets matches; no
    selector picks nothing (the API's rule), an empty one everything."""
    selector = (rule.get("spec") or {}).get("deviceSelector")
    if not isinstance(selector, dict):
        return False
    wanted = {"driver": driver, "pool": pool, "device": device}
    return all(selector.get(k) in (None, v) for k, v in wanted.items())


def _taint(taint: JSON, rule: str | None = None) -> DraTaint:
    return DraTaint(key=str(taint.get("key") or ""), value=str(taint.get("value") or ""),
                    effect=str(taint.get("effect") or ""), time_added=str(taint.get("timeAdded") or ""), rule=rule)


def _attribute(attributes: JSON, key: str) -> str:
    value = attributes.get(key) or {}
    return str(next(iter(value.values()), "")) if isinstance(value, dict) and value else ""


def _add_claim(cards: dict[tuple[str, str], DraCard], claim: JSON, problems: list[str],
               counted: set[tuple[str, str]]) -> None:
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    namespace, name = meta.get("namespace") or "default", meta.get("name") or "?"
    pods = tuple(sorted(str(r.get("name")) for r in status.get("reservedFor") or []
                        if isinstance(r, dict) and r.get("resource") == "pods"))
    for result in results:
        if not isinstance(result, dict) or result.get("driver") != names.DRIVER:
            continue
        card = cards.get((str(result.get("pool")), str(result.get("device"))))
        if card is None:
            problems.append(f"claim {namespace}/{name} holds device {result.get('device')} in pool "
                            f"{result.get('pool')}, which no ResourceSlice publishes")
            continue
        share = _share(card, namespace, name, pods, result, problems)
        if share is None:
            continue
        card.cores_used += share.cores
        card.memory_used_mib += share.memory_mib
        card.slots_used += share.slots
        card.shares.append(share)
        counted.add((namespace, name))


def _share(card: DraCard, namespace: str, claim: str, pods: tuple[str, ...], result: JSON,
           problems: list[str]) -> ClaimShare | None:
    consumed = result.get("consumedCapacity")
    if not consumed or result.get("adminAccess"):
        # Admin access watches the card without holding any of it; no consumed capacity is a whole card.
        held = (0, 0, 0) if result.get("adminAccess") else (card.cores_total, card.memory_total_mib, card.slots_total)
        return ClaimShare(namespace, claim, pods, *held, whole=not result.get("adminAccess"))
    try:
        cores = to_int(consumed.get(names.CAP_CORES, card.cores_total), "cores")
        memory = to_int(consumed.get(names.CAP_MEMORY, card.memory_total_mib * names.MEMORY_STEP), "memory")
        slots = to_int(consumed.get(names.CAP_SLICES, 1), "slices")
    except QuantityError as exc:
        problems.append(f"claim {namespace}/{claim} on {card.device}: consumed {exc}")
        return None
    memory_mib = memory // names.MEMORY_STEP
    whole = cores >= card.cores_total and memory_mib >= card.memory_total_mib
    return ClaimShare(namespace, claim, pods, cores, memory_mib, slots, whole)
