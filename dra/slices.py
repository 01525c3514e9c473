"""The node's ResourceSlice, built from its cards: pure, no I/O.

One slice per node, one pool named after the node, one device per card. A card that turns
unhealthy stays in the slice with a device taint (key `dra.hygon.com/unhealthy`, the reason as
its value, effect NoSchedule or, when the operator chose eviction, NoExecute): claims already on
it keep it (NoSchedule) and can see why, new claims avoid it unless their request tolerates the
taint, and the taint goes when the card recovers. Where the API server does not keep device
taints (Kubernetes before 1.36, or DRADeviceTaints off: it drops the field), an unhealthy card
is left out of the slice instead, as before: the scheduler then allocates nothing new on it,
while claims already on it keep their allocation.

Each device allows multiple allocations (consumable capacity, KEP-5075) and has three
capacities with request policies, as Hygon's driver publishes them:
* `cores`: compute units; default all of them, so a claim naming no capacity gets the whole
  card; at least 1 (a vDCU without a compute unit cannot run a kernel);
* `memory`: bytes in whole MiB (the vdev file's unit); default all of it;
* `slices`: the vDCU slots of the card; an allocation takes one unless it asks for more
  (as with Hygon's driver, where asking for all of them keeps others off the card).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.dra.quantity import canonical
from hami_dcu.node.discovery import DcuCard
from hami_dcu.node.health import SMI_UNHEALTHY, Problem

JSON = dict[str, Any]
UNHEALTHY_TAINT = f"{names.DRIVER}/unhealthy"
NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "NoExecute"
TAINT_EFFECTS = (NO_SCHEDULE, NO_EXECUTE)


def _range_policy(default: int, minimum: int, maximum: int, step: int) -> JSON:
    return {"default": str(default), "validRange": {"min": str(minimum), "max": str(maximum), "step": str(step)}}


def _slices_policy(slots: int) -> JSON:
    if slots > 1:
        return _range_policy(1, 1, slots, 1)
    # The API server requires min + step <= value for a range: one slot is a single valid value.
    return {"default": "1", "validValues": ["1"]}


def device(card: DcuCard, slots: int) -> JSON:
    c = card.card
    memory = c.memory_mib * names.MEMORY_STEP
    return {
        "name": names.device_name(c.pci_bus_id),
        "attributes": {
            names.ATTR_TYPE: {"string": names.DEVICE_TYPE},
            names.ATTR_UUID: {"string": c.serial},
            names.ATTR_PRODUCT_NAME: {"string": c.model},
            names.ATTR_ARCHITECTURE: {"string": ""},
            names.ATTR_BRAND: {"string": names.BRAND},
            names.ATTR_MODEL: {"string": c.model},
            names.ATTR_SERIAL: {"string": c.serial},
            names.ATTR_PCI_BUS_ID: {"string": c.pci_bus_id.lower()},
            names.ATTR_NUMA_NODE: {"int": c.numa},
        },
        "capacity": {
            names.CAP_CORES: {"value": str(c.compute_units),
                              "requestPolicy": _range_policy(c.compute_units, 1, c.compute_units, 1)},
            names.CAP_MEMORY: {"value": str(memory),
                               "requestPolicy": _range_policy(memory, names.MEMORY_STEP, memory, names.MEMORY_STEP)},
            names.CAP_SLICES: {"value": str(slots), "requestPolicy": _slices_policy(slots)},
        },
        "allowMultipleAllocations": True,
    }


def unhealthy_taints(cards: list[DcuCard], problems: Mapping[str, Problem | None], effect: str,
                     since: Mapping[str, str], published: JSON | None, now: str) -> dict[str, JSON]:
    """Card id -> the taint of each unhealthy card. `problems` maps card id -> why it is
    unhealthy (None: healthy; a card it does not name is healthy unless SMI said otherwise at
    discovery). timeAdded is when the card turned unhealthy: the published slice's, when it
    already carries this taint with this effect (a restarted driver keeps the time; a new
    effect is a new time, as for a DeviceTaintRule), else `since` (card id -> when this
    driver saw it turn), else `now`."""
    kept = {}
    for piece in ((published or {}).get("spec") or {}).get("devices") or []:
        for taint in piece.get("taints") or []:
            if taint.get("key") == UNHEALTHY_TAINT and taint.get("effect") == effect and taint.get("timeAdded"):
                kept[piece.get("name")] = str(taint["timeAdded"])
    taints = {}
    for card in cards:
        problem = problems[card.id] if card.id in problems else (
            None if card.card.healthy else Problem(SMI_UNHEALTHY, "reported unhealthy by SMI"))
        if problem is None:
            continue
        added = kept.get(names.device_name(card.card.pci_bus_id)) or since.get(card.id) or now
        taints[card.id] = {"key": UNHEALTHY_TAINT, "value": problem.reason, "effect": effect, "timeAdded": added}
    return taints


def slice_spec(node: str, cards: list[DcuCard], taints: Mapping[str, JSON], slots: int, generation: int,
               tainting: bool = True) -> JSON:
    """The slice's spec; `taints` maps card id -> its taint (`unhealthy_taints`). With
    `tainting` off (the API server would drop the taints) a tainted card is left out."""
    devices = []
    for card in sorted(cards, key=lambda c: c.index):
        taint = taints.get(card.id)
        if taint is None:
            devices.append(device(card, slots))
        elif tainting:
            devices.append({**device(card, slots), "taints": [taint]})
    return {
        "driver": names.DRIVER,
        "nodeName": node,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
        "devices": devices,
    }


def has_taints(spec: JSON) -> bool:
    return any(d.get("taints") for d in spec.get("devices") or [])


def taints_dropped(stored: JSON, spec: JSON) -> bool:
    """Whether the API server stored `spec` without its device taints: it does not serve the
    field (DRADeviceTaints off), so a tainted card would look healthy to the scheduler."""
    kept = {d.get("name"): d.get("taints") for d in (stored.get("spec") or {}).get("devices") or []}
    return any(d.get("taints") and not kept.get(d["name"]) for d in spec.get("devices") or [])


def resource_slice(node: str, node_uid: str | None, spec: JSON) -> JSON:
    """The whole object; owned by the Node, so it goes when the node goes."""
    meta: JSON = {"name": names.slice_name(node), "labels": {names.OWNER_LABEL: names.OWNER}}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid,
                                    "controller": True}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": meta, "spec": spec}


def same_devices(published: JSON | None, spec: JSON) -> bool:
    """Whether a published slice already says what `spec` says (the pool generation aside).
    Compares after the API server's canonical quantities: "68702699520" comes back "65520Mi"."""
    if published is None:
        return False
    old = published.get("spec") or {}
    return bool(old.get("nodeName") == spec["nodeName"] and old.get("driver") == spec["driver"]
                and canonical(old.get("devices") or []) == canonical(spec["devices"]))

