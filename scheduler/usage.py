"""What a pod's allocation holds on each card: the one accounting rule of the scheduler.

Init containers run one after another and before the app containers, so a pod holds, per
card, the larger of its biggest init-container share and the sum of its app-container
shares (memory and cores alike). Slots: one per app container on the card, at least one
when only an init container uses it. The cache (what running pods hold) and the fit (what
a new pod will hold) both use `collapse`, so they can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_dcu.common.codec import PodDevices


@dataclass(slots=True)
class Usage:
    slots: int = 0
    memory: int = 0  # MiB
    cores: int = 0  # percent of the card

    def add(self, other: Usage) -> None:
        self.slots += other.slots
        self.memory += other.memory
        self.cores += other.cores


def collapse(pod_devices: PodDevices, init_count: int) -> dict[str, Usage]:
    """Per card id, what the pod holds. `init_count` = how many leading entries are init
    containers (codec order puts them first)."""
    init_peak: dict[str, Usage] = {}
    app_sum: dict[str, Usage] = {}
    for position, container in enumerate(pod_devices):
        is_init = position < init_count
        for device in container:
            if is_init:
                peak = init_peak.setdefault(device.uuid, Usage())
                peak.slots = 1
                peak.memory = max(peak.memory, device.usedmem)
                peak.cores = max(peak.cores, device.usedcores)
            else:
                total = app_sum.setdefault(device.uuid, Usage())
                total.slots += 1
                total.memory += device.usedmem
                total.cores += device.usedcores
    held: dict[str, Usage] = {}
    for card in init_peak.keys() | app_sum.keys():
        init, app = init_peak.get(card, Usage()), app_sum.get(card, Usage())
        held[card] = Usage(max(init.slots, app.slots), max(init.memory, app.memory), max(init.cores, app.cores))
    return held
