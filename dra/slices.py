"""The node's ResourceSlice, built from its cards: pure, no I/O.

One slice per node, one pool named after the node, one device per healthy card. A card that
turns unhealthy is left out of the slice (rather than tainted): the scheduler then allocates
nothing new on it on every DRA version, while claims already on it keep their allocation.

Each device allows multiple allocations (consumable capacity, KEP-5075) and has three
capacities with request policies, as Hygon's driver publishes them:
* `cores`: compute units; default all of them, so a claim naming no capacity gets the whole
  card; at least 1 (a vDCU without a compute unit cannot run a kernel);
* `memory`: bytes in whole MiB (the vdev file's unit); default all of it;
* `slices`: the vDCU slots of the card; an allocation takes one unless it asks for more
  (as with Hygon's driver, where asking for all of them keeps others off the card).
"""

from __future__ import annotations

from typing import Any

from hami_dcu.dra import names
from hami_dcu.dra.quantity import canonical
from hami_dcu.node.discovery import DcuCard

JSON = dict[str, Any]


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


def slice_spec(node: str, cards: list[DcuCard], health: dict[str, bool], slots: int, generation: int) -> JSON:
    """The slice's spec; `health` maps card id -> healthy (a card it does not name is healthy
    unless SMI said otherwise)."""
    served = [c for c in sorted(cards, key=lambda c: c.index) if health.get(c.id, c.card.healthy)]
    return {
        "driver": names.DRIVER,
        "nodeName": node,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
        "devices": [device(c, slots) for c in served],
    }


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

