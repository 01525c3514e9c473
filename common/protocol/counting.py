"""The counting rule: what a pod's allocation holds on each card, shared by construction.

The extender's cache (what running pods hold), its fit (what a new pod will hold) and
`hami-dcu status` all count with this module, and the entry point takes the pod itself, so
no caller can count it with the wrong container layout.

Init containers run one after another and before the app containers, so a pod holds, per
card, the larger of its biggest init-container share and the sum of its app-container
shares (memory and cores alike). Native sidecars (init containers with `restartPolicy:
Always`) start in that order but keep running: their shares add to the app containers', and
to every init container that starts after them. Slots: one per container running at once on
the card. Pure: no I/O.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from hami_dcu.common.protocol import objects
from hami_dcu.common.protocol.codec import PodDevices


@dataclass(slots=True)
class Usage:
    slots: int = 0
    memory: int = 0  # MiB
    cores: int = 0  # percent of the card

    def add(self, other: Usage) -> None:
        self.slots += other.slots
        self.memory += other.memory
        self.cores += other.cores


@dataclass(frozen=True, slots=True)
class StartOrder:
    """How a pod's containers start, in codec order (init containers first): how many
    leading entries are init containers, and which of them are native sidecars."""

    init_count: int = 0
    sidecars: frozenset[int] = frozenset()

    def ordinary_init(self, position: int) -> bool:
        """An init container whose share ends before the next container starts."""
        return position < self.init_count and position not in self.sidecars


def start_order(pod: dict[str, Any]) -> StartOrder:
    """The pod's start order, read from its spec (the only way a caller should get one)."""
    init = objects.init_containers(pod)
    sidecars = frozenset(i for i, c in enumerate(init) if isinstance(c, dict) and c.get("restartPolicy") == "Always")
    return _shared(len(init), sidecars)


@functools.lru_cache(maxsize=256)
def _shared(init_count: int, sidecars: frozenset[int]) -> StartOrder:
    # The cache keeps one per pod: pods of the same shape share one object.
    return StartOrder(init_count, sidecars)


def collapse(pod_devices: PodDevices, order: StartOrder) -> dict[str, Usage]:
    """Per card id, what a pod whose containers start in `order` holds with `pod_devices`."""
    running: dict[str, Usage] = {}  # sidecars started so far, then the app containers beside them
    init_peak: dict[str, Usage] = {}  # each ordinary init container beside the sidecars before it
    for position, container in enumerate(pod_devices):
        ordinary_init = order.ordinary_init(position)
        for device in container:
            beside = running.get(device.uuid)
            if ordinary_init:
                peak = init_peak.setdefault(device.uuid, Usage())
                before = beside or Usage()
                peak.slots = max(peak.slots, before.slots + 1)
                peak.memory = max(peak.memory, before.memory + device.usedmem)
                peak.cores = max(peak.cores, before.cores + device.usedcores)
            else:
                total = beside if beside is not None else running.setdefault(device.uuid, Usage())
                total.slots += 1
                total.memory += device.usedmem
                total.cores += device.usedcores
    held: dict[str, Usage] = {}
    for card in init_peak.keys() | running.keys():
        init, app = init_peak.get(card, Usage()), running.get(card, Usage())
        held[card] = Usage(max(init.slots, app.slots), max(init.memory, app.memory), max(init.cores, app.cores))
    return held


def pod_holdings(pod: dict[str, Any], pod_devices: PodDevices) -> dict[str, Usage]:
    """Per card id, what `pod` holds with its allocation `pod_devices`."""
    return collapse(pod_devices, start_order(pod))
