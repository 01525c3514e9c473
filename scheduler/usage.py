"""What a pod's allocation holds on each card: the one accounting rule of the scheduler.

Init containers run one after another and before the app containers, so a pod holds, per
card, the larger of its biggest init-container share and the sum of its app-container
shares (memory and cores alike). Native sidecars (init containers with `restartPolicy:
Always`) start in that order but keep running: their shares add to the app containers', and
to every init container that starts after them. Slots: one per container running at once on
the card. The cache (what running pods hold) and the fit (what a new pod will hold) both use
`collapse`, so they can never disagree.
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


def collapse(pod_devices: PodDevices, init_count: int, sidecars: frozenset[int] = frozenset()) -> dict[str, Usage]:
    """Per card id, what the pod holds. `init_count` = how many leading entries are init
    containers (codec order puts them first); `sidecars`: the positions among them that are
    native sidecars."""
    running: dict[str, Usage] = {}  # sidecars started so far, then the app containers beside them
    init_peak: dict[str, Usage] = {}  # each ordinary init container beside the sidecars before it
    for position, container in enumerate(pod_devices):
        ordinary_init = position < init_count and position not in sidecars
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
