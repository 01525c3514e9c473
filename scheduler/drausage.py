"""DRA mode: how full each node's DCUs are, from the driver's ResourceSlices and the
allocated ResourceClaims, for /prioritize (packing). Pure: the objects come in, fractions go
out.

A device's capacity is what its slice publishes (`cores` in compute units, `memory` in
bytes); a claim's result of our driver holds what it consumed (`consumedCapacity`), or the
whole device when it names none. A node's fullness is the mean of its cores and memory
fractions over all its devices: the same measure whichever dimension a pod asks more of.

Only the driver's own objects count, and anything unreadable in one is skipped (a device
without capacity, a result naming a device no slice publishes): a tenant's claim can at most
make a node look fuller or emptier to the ranking, never break it, since kube-scheduler's own
DRA filter decides what fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.dra.quantity import QuantityError, to_int

JSON = dict[str, Any]
DeviceKey = tuple[str, str]  # (pool, device)


@dataclass(frozen=True)
class Capacity:
    cores: int
    memory: int


@dataclass(frozen=True)
class Device:
    node: str
    capacity: Capacity


def _name(obj: JSON) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _uid(obj: JSON) -> str:
    meta = obj.get("metadata")
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""


def _quantity(capacity: object, key: str) -> int | None:
    entry = capacity.get(key) if isinstance(capacity, dict) else None
    value = entry.get("value") if isinstance(entry, dict) else entry
    try:
        return to_int(value, key)
    except QuantityError:
        return None


def slice_devices(obj: JSON) -> dict[DeviceKey, Device]:
    """The devices a ResourceSlice of our driver publishes for one node; {} for any other."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("driver") != names.DRIVER:
        return {}
    node, pool = spec.get("nodeName"), spec.get("pool")
    pool_name = pool.get("name") if isinstance(pool, dict) else None
    devices = spec.get("devices")
    if not isinstance(node, str) or not node or not isinstance(pool_name, str) or not isinstance(devices, list):
        return {}
    found = {}
    for device in devices:
        if not isinstance(device, dict) or not isinstance(device.get("name"), str):
            continue
        cores = _quantity(device.get("capacity"), names.CAP_CORES)
        memory = _quantity(device.get("capacity"), names.CAP_MEMORY)
        if cores and memory:
            found[(pool_name, device["name"])] = Device(node, Capacity(cores, memory))
    return found


@dataclass(frozen=True)
class Consumed:
    key: DeviceKey
    cores: int | None  # None: the whole device
    memory: int | None


def claim_consumption(obj: JSON) -> list[Consumed]:
    """What an allocated claim holds on our driver's devices; [] when unallocated."""
    status = obj.get("status")
    allocation = status.get("allocation") if isinstance(status, dict) else None
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    results = devices.get("results") if isinstance(devices, dict) else None
    held = []
    for result in results if isinstance(results, list) else []:
        if not isinstance(result, dict) or result.get("driver") != names.DRIVER or result.get("adminAccess"):
            continue  # adminAccess watches a card, it holds none of it
        pool, device = result.get("pool"), result.get("device")
        if not isinstance(pool, str) or not isinstance(device, str):
            continue
        consumed = result.get("consumedCapacity")
        if isinstance(consumed, dict) and consumed:
            held.append(Consumed((pool, device), _quantity(consumed, names.CAP_CORES),
                                 _quantity(consumed, names.CAP_MEMORY)))
        else:
            held.append(Consumed((pool, device), None, None))
    return held


class DraUsage:
    """Kept current object by object; a node's fullness is recomputed only when something on
    it changed (its slice, or a claim holding one of its devices). Recomputing every node on
    every /prioritize made the call cost O(devices + claims) of the whole cluster: at 1,000
    nodes x 8 cards it was most of the extender's CPU per DRA pod, since during a burst a claim
    changes between any two calls."""

    def __init__(self) -> None:
        self.devices: dict[DeviceKey, Device] = {}
        self._by_slice: dict[str, list[DeviceKey]] = {}
        self._claims: dict[str, list[Consumed]] = {}
        self._on_device: dict[DeviceKey, dict[str, list[Consumed]]] = {}  # what each claim holds there
        self._node_devices: dict[str, set[DeviceKey]] = {}
        self._fullness: dict[str, float] = {}
        self._dirty: set[str] = set()  # nodes whose fullness is out of date

    # --- slices ----------------------------------------------------------------------------

    def apply_slice(self, obj: JSON) -> None:
        name = _name(obj)
        self._forget_slice(name)
        found = slice_devices(obj)
        if found:
            self._by_slice[name] = list(found)
            for key, device in found.items():
                self._drop_device(key)
                self.devices[key] = device
                self._node_devices.setdefault(device.node, set()).add(key)
                self._dirty.add(device.node)

    def delete_slice(self, obj: JSON) -> None:
        self._forget_slice(_name(obj))

    def replace_slices(self, objs: list[JSON]) -> None:
        self._dirty.update(self._node_devices)
        self.devices, self._by_slice, self._node_devices = {}, {}, {}
        for obj in objs:
            self.apply_slice(obj)

    def _forget_slice(self, name: str) -> None:
        for key in self._by_slice.pop(name, []):
            self._drop_device(key)

    def _drop_device(self, key: DeviceKey) -> None:
        device = self.devices.pop(key, None)
        if device is not None:
            self._node_devices.get(device.node, set()).discard(key)
            self._dirty.add(device.node)

    # --- claims ----------------------------------------------------------------------------

    def apply_claim(self, obj: JSON) -> None:
        uid = _uid(obj)
        self._forget_claim(uid)
        held = claim_consumption(obj)
        if held:
            self._claims[uid] = held
            for consumed in held:
                self._on_device.setdefault(consumed.key, {}).setdefault(uid, []).append(consumed)
                self._touch(consumed.key)

    def delete_claim(self, obj: JSON) -> None:
        self._forget_claim(_uid(obj))

    def replace_claims(self, objs: list[JSON]) -> None:
        self._dirty.update(self._node_devices)
        self._claims, self._on_device = {}, {}
        for obj in objs:
            self.apply_claim(obj)

    def _forget_claim(self, uid: str) -> None:
        for consumed in self._claims.pop(uid, []):
            holders = self._on_device.get(consumed.key)
            if holders is not None:
                holders.pop(uid, None)
                if not holders:
                    del self._on_device[consumed.key]
            self._touch(consumed.key)

    def _touch(self, key: DeviceKey) -> None:
        device = self.devices.get(key)
        if device is not None:  # a device no slice publishes (yet) weighs on no node
            self._dirty.add(device.node)

    # --- the answer ------------------------------------------------------------------------

    def fullness(self) -> dict[str, float]:
        """Per node with our devices: mean of its cores and memory fractions in use, 0..1.
        The dict is the view's own: read it, do not keep it across changes."""
        for node in self._dirty:
            keys = self._node_devices.get(node)
            if keys:
                self._fullness[node] = self._node_fullness(keys)
            else:
                self._node_devices.pop(node, None)
                self._fullness.pop(node, None)
        self._dirty.clear()
        return self._fullness

    def _node_fullness(self, keys: set[DeviceKey]) -> float:
        cores = memory = used_cores = used_memory = 0
        for key in keys:
            capacity = self.devices[key].capacity
            cores += capacity.cores
            memory += capacity.memory
            for held in self._on_device.get(key, {}).values():
                for consumed in held:
                    used_cores += min(capacity.cores, consumed.cores if consumed.cores is not None else capacity.cores)
                    used_memory += min(capacity.memory, consumed.memory if consumed.memory is not None
                                       else capacity.memory)
        return min(1.0, (used_cores / cores + used_memory / memory) / 2)
