"""The reliability invariants (no card over capacity, in DRA mode no device over its capacity;
no overlapping CU masks, no lock left behind, no pod Pending that a card could hold, no pod
failed without an event), as pure checks over snapshots of the cluster.

Each check takes plain API objects (and the vdev files of each node) and returns the
violations in words, empty when the invariant holds. No I/O here: the fault test and
`bench/faults.py` take the snapshots and report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import decode_node_devices, decode_pod_devices
from hami_dcu.common.protocol.dra.quantity import to_int

JSON = dict[str, Any]
FINISHED = ("Succeeded", "Failed")
DCU = keys.DCU_NAMING  # the naming set of the fault runs' local cluster


@dataclass
class CardRoom:
    """A card's capacity and what live pods hold on it."""

    slots: int
    memory: int
    cores: int
    used_slots: int = 0
    used_memory: int = 0
    used_cores: int = 0

    def fits(self, memory: int, cores: int) -> bool:
        return (self.used_slots < self.slots and self.used_memory + memory <= self.memory
                and self.used_cores + cores <= self.cores)


def card_rooms(nodes: Iterable[JSON], pods: Iterable[JSON]) -> dict[str, CardRoom]:
    """Per card id: capacity from the node registrations, usage from live pods' allocations."""
    rooms: dict[str, CardRoom] = {}
    for node in nodes:
        value = ((node.get("metadata") or {}).get("annotations") or {}).get(DCU.node_register)
        if not value:
            continue
        for card in decode_node_devices(value, DCU.node_register):
            if card.health:
                rooms[card.id] = CardRoom(card.count, card.devmem, card.devcore)
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in FINISHED:
            continue
        value = ((pod.get("metadata") or {}).get("annotations") or {}).get(DCU.pod_devices_allocated)
        for container in decode_pod_devices(value or "", DCU.pod_devices_allocated):
            for device in container:
                room = rooms.setdefault(device.uuid, CardRoom(0, 0, 0))
                room.used_slots += 1
                room.used_memory += device.usedmem
                room.used_cores += device.usedcores
    return rooms


def over_capacity(nodes: Iterable[JSON], pods: Iterable[JSON]) -> list[str]:
    return [f"card {card}: {r.used_slots}/{r.slots} slots, {r.used_memory}/{r.memory} MiB, "
            f"{r.used_cores}/{r.cores}% cores"
            for card, r in sorted(card_rooms(nodes, pods).items())
            if r.used_slots > r.slots or r.used_memory > r.memory or r.used_cores > r.cores]


def claims_over_capacity(slices: Iterable[JSON], claims: Iterable[JSON]) -> list[str]:
    """DRA mode: per device of the ResourceSlices, what the allocated claims consume of each
    capacity (a result without consumed capacity holds the whole device), against what the
    device has; and no device allocated that no slice publishes."""
    capacity: dict[tuple[str, str, str], dict[str, int]] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        for device in spec.get("devices") or []:
            key = (spec.get("driver") or "", (spec.get("pool") or {}).get("name") or "", device.get("name") or "")
            capacity[key] = {name: to_int(c.get("value"), name) for name, c in (device.get("capacity") or {}).items()}
    used: dict[tuple[str, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("adminAccess"):
                continue
            key = (result.get("driver") or "", result.get("pool") or "", result.get("device") or "")
            consumed = result.get("consumedCapacity") or capacity.get(key, {})
            amounts = used[key]  # named even when nothing is known of what it consumes
            for name, value in consumed.items():
                amounts[name] += to_int(value, name)
    found = []
    for key, amounts in sorted(used.items()):
        if key not in capacity:
            found.append(f"device {'/'.join(key)}: allocated, but in no ResourceSlice")
            continue
        over = {n: f"{v}/{capacity[key].get(n, 0)}" for n, v in amounts.items() if v > capacity[key].get(n, 0)}
        if over:
            found.append(f"device {'/'.join(key)}: {over}")
    return found


def overlapping_masks(vdev_files: Mapping[str, Mapping[str, str]]) -> list[str]:
    """vdev_files: node -> {vdev directory: its vdev0.conf}. Two live vDCUs on one card
    (same PciBusId) must not share a compute unit."""
    problems = []
    for node, files in sorted(vdev_files.items()):
        taken: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for dirname, text in sorted(files.items()):
            bus_id, mask = _bus_and_mask(text)
            if bus_id is None:
                continue
            for other, other_mask in taken[bus_id]:
                if mask & other_mask:
                    problems.append(f"node {node} card {bus_id}: {dirname} and {other} share CUs "
                                    f"{mask & other_mask:#x}")
            taken[bus_id].append((dirname, mask))
    return problems


def _bus_and_mask(text: str) -> tuple[str | None, int]:
    bus_id, mask, halves = None, 0, 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "PciBusId":
            bus_id = value.strip()
        elif key.strip() == "cu_mask":
            mask |= int(value.strip(), 16) << (64 * halves)  # the second line holds CUs 64..127
            halves += 1
    return bus_id, mask


def locks_left(nodes: Iterable[JSON]) -> list[str]:
    return [f"node {(n.get('metadata') or {}).get('name')} locked: {lock}" for n in nodes
            if (lock := ((n.get("metadata") or {}).get("annotations") or {}).get(keys.NODE_LOCK))]


def request_of(pod: JSON) -> tuple[int, int, int] | None:
    """(cards, MiB, %) of a single-DCU-container pod, None for anything else."""
    containers = (pod.get("spec") or {}).get("containers") or []
    asks = [((c.get("resources") or {}).get("limits") or {}) for c in containers]
    names = DCU.resources
    asks = [a for a in asks if names.count in a]
    if len(asks) != 1:
        return None
    limits = asks[0]
    try:
        return int(limits[names.count]), int(limits.get(names.memory, 0)), int(limits.get(names.cores, 0))
    except (TypeError, ValueError):
        return None


def pending_that_fit(nodes: Iterable[JSON], pods: list[JSON]) -> list[str]:
    """Unbound Pending pods (one card each) that some card has room for right now."""
    rooms = card_rooms(nodes, pods)
    problems = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Pending" or (pod.get("spec") or {}).get("nodeName"):
            continue
        request = request_of(pod)
        if request is None or request[0] != 1:
            continue
        _count, memory, cores = request
        room = next((card for card, r in sorted(rooms.items()) if r.fits(memory, cores)), None)
        if room is not None:
            problems.append(f"pod {pod['metadata']['name']} ({memory} MiB, {cores}%) Pending, card {room} has room")
    return problems


def failed_without_event(pods: Iterable[JSON], events: Iterable[JSON]) -> list[str]:
    """Every Failed pod has at least one Warning event that says why."""
    warned = {(e.get("involvedObject") or {}).get("name") for e in events if e.get("type") == "Warning"}
    return [f"pod {p['metadata']['name']} Failed without an event ({(p.get('status') or {}).get('message')})"
            for p in pods if (p.get("status") or {}).get("phase") == "Failed" and p["metadata"]["name"] not in warned]

