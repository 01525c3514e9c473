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

from hami_dcu.dra import names
from hami_dcu.dra.quantity import QuantityError, to_int

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
    def __init__(self) -> None:
        self.devices: dict[DeviceKey, Device] = {}
        self._by_slice: dict[str, list[DeviceKey]] = {}
        self._claims: dict[str, list[Consumed]] = {}
        self._fullness: dict[str, float] | None = None  # computed on demand, dropped on any change

    # --- slices ----------------------------------------------------------------------------

    def apply_slice(self, obj: JSON) -> None:
        self._fullness = None
        name = _name(obj)
        for key in self._by_slice.pop(name, []):
            self.devices.pop(key, None)
        found = slice_devices(obj)
        if found:
            self._by_slice[name] = list(found)
            self.devices.update(found)

    def delete_slice(self, obj: JSON) -> None:
        self._fullness = None
        for key in self._by_slice.pop(_name(obj), []):
            self.devices.pop(key, None)

    def replace_slices(self, objs: list[JSON]) -> None:
        self._fullness = None
        self.devices, self._by_slice = {}, {}
        for obj in objs:
            self.apply_slice(obj)

    # --- claims ----------------------------------------------------------------------------

    def apply_claim(self, obj: JSON) -> None:
        self._fullness = None
        held = claim_consumption(obj)
        if held:
            self._claims[_uid(obj)] = held
        else:
            self._claims.pop(_uid(obj), None)

    def delete_claim(self, obj: JSON) -> None:
        self._fullness = None
        self._claims.pop(_uid(obj), None)

    def replace_claims(self, objs: list[JSON]) -> None:
        self._fullness = None
        self._claims = {}
        for obj in objs:
            self.apply_claim(obj)

    # --- the answer ------------------------------------------------------------------------

    def fullness(self) -> dict[str, float]:
        """Per node with our devices: mean of its cores and memory fractions in use, 0..1."""
        if self._fullness is None:
            self._fullness = self._compute()
        return self._fullness

    def _compute(self) -> dict[str, float]:
        capacity: dict[str, list[int]] = {}
        for published in self.devices.values():
            total = capacity.setdefault(published.node, [0, 0, 0, 0])
            total[0] += published.capacity.cores
            total[1] += published.capacity.memory
        for held in self._claims.values():
            for consumed in held:
                device = self.devices.get(consumed.key)
                if device is None:
                    continue  # a slice not seen yet, or gone: nothing to weigh it against
                total = capacity[device.node]
                total[2] += min(device.capacity.cores, consumed.cores if consumed.cores is not None
                                else device.capacity.cores)
                total[3] += min(device.capacity.memory, consumed.memory if consumed.memory is not None
                                else device.capacity.memory)
        return {node: min(1.0, (t[2] / t[0] + t[3] / t[1]) / 2) for node, t in capacity.items()}
