"""Node-local vDCU bookkeeping: CU bitsets per card, pipe ids per card, vdev ids per node.

Pure state, no I/O. CUs are taken lowest free bits first and never overlap another live
vDCU; a shortfall is an error, not a silently smaller mask (HAMi's byteAlloc could do
both). State is rebuilt from the vdev directory names after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hami_dcu.common.protocol.errors import NodeError
from hami_dcu.node.vdev import VdevDir

PIPES_PER_CARD = 20
VDEVS_PER_NODE = 200


class AllocationError(NodeError, RuntimeError):
    pass


def lowest_free_bits(used: int, count: int, width: int) -> int:
    """A mask of the `count` lowest bits below `width` that are clear in `used`."""
    mask, bit = 0, 0
    while count and bit < width:
        if not used >> bit & 1:
            mask |= 1 << bit
            count -= 1
        bit += 1
    if count:
        raise AllocationError(f"{count} compute units short")
    return mask


@dataclass
class Grant:
    card_index: int
    cu_mask: int
    pipe: int
    vdev: int


@dataclass
class NodeState:
    """Who holds which CUs, pipes and vdev ids; keyed by the grant's owner (a vdev dir name)."""

    compute_units: dict[int, int]  # card index -> CUs on that card
    cu_used: dict[int, int] = field(default_factory=dict)
    pipes_used: dict[int, set[int]] = field(default_factory=dict)
    vdevs_used: set[int] = field(default_factory=set)

    def allocate(self, card_index: int, cu_count: int) -> Grant:
        width = self.compute_units.get(card_index)
        if width is None:
            raise AllocationError(f"card {card_index} is not served by this plugin")
        used = self.cu_used.get(card_index, 0)
        free = width - bin(used).count("1")
        if cu_count > free:
            raise AllocationError(f"card {card_index}: {cu_count} compute units requested, {free} free of {width}")
        mask = lowest_free_bits(used, cu_count, width)
        pipes = self.pipes_used.setdefault(card_index, set())
        pipe = next((p for p in range(PIPES_PER_CARD) if p not in pipes), None)
        if pipe is None:
            raise AllocationError(f"card {card_index}: all {PIPES_PER_CARD} pipes in use")
        vdev = next((v for v in range(VDEVS_PER_NODE) if v not in self.vdevs_used), None)
        if vdev is None:
            raise AllocationError(f"all {VDEVS_PER_NODE} vdev ids of this node are in use")
        self.cu_used[card_index] = used | mask
        pipes.add(pipe)
        self.vdevs_used.add(vdev)
        return Grant(card_index, mask, pipe, vdev)

    def release(self, grant: Grant | VdevDir) -> None:
        self.cu_used[grant.card_index] = self.cu_used.get(grant.card_index, 0) & ~grant.cu_mask
        self.pipes_used.get(grant.card_index, set()).discard(grant.pipe)
        self.vdevs_used.discard(grant.vdev)

    def restore(self, record: VdevDir) -> None:
        """Take back a grant recorded on disk (after a restart)."""
        self.cu_used[record.card_index] = self.cu_used.get(record.card_index, 0) | record.cu_mask
        self.pipes_used.setdefault(record.card_index, set()).add(record.pipe)
        self.vdevs_used.add(record.vdev)
