"""The pods of a scale burst (pure): a fixed mix of DCU shapes, and each pod's plain twin.

A burst of n pods takes the shapes of MIX in rotation, so any burst of at least len(MIX) pods
holds every shape in the same proportions: shares of one card (small to half a card), the
same shares under a per-pod device or node policy, whole cards, and pods of two and four whole
cards. The plain twin of a pod is the same manifest without DCU limits: what the baseline
schedules through the default profile.

Every pod tolerates kwok's taint and selects the fake nodes, so neither kind lands on the
stand-in node that runs the chart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hami_dcu.cli.localcluster.pods import Ctr, pod_manifest
from hami_dcu.common.protocol import keys

JSON = dict[str, Any]
FAKE_NODE_LABEL = "hami-dcu.io/fake-node"  # set on every kwok node: "kwok"
RUN_LABEL = "hami-dcu.io/scale-run"


@dataclass(frozen=True)
class Shape:
    name: str
    cards: int
    memory: int | None = None  # MiB of one card; None with cores None: whole cards
    cores: int | None = None  # % of one card
    annotations: tuple[tuple[str, str], ...] = ()

    @property
    def slots(self) -> int:
        """Card slots (vDCUs) it takes: one per card."""
        return self.cards


MIX: tuple[Shape, ...] = (
    Shape("share-2g-10", 1, 2000, 10),
    Shape("share-4g-15", 1, 4000, 15),
    Shape("share-8g-25", 1, 8000, 25),
    Shape("whole-1", 1),
    Shape("share-2g-10", 1, 2000, 10),
    Shape("share-16g-50", 1, 16000, 50),
    Shape("share-4g-20-binpack", 1, 4000, 20, ((keys.DEVICE_SCHEDULER_POLICY, "binpack"),)),
    Shape("whole-2", 2),
    Shape("share-2g-5", 1, 2000, 5),
    Shape("share-8g-30-spread", 1, 8000, 30, ((keys.NODE_SCHEDULER_POLICY, "spread"),)),
    Shape("share-4g-15", 1, 4000, 15),
    Shape("whole-1", 1),
    Shape("share-2g-10-card-spread", 1, 2000, 10, ((keys.DEVICE_SCHEDULER_POLICY, "spread"),)),
    Shape("share-12g-40", 1, 12000, 40),
    Shape("whole-4", 4),
    Shape("share-2g-10", 1, 2000, 10),
)


def shapes(count: int) -> list[Shape]:
    return [MIX[i % len(MIX)] for i in range(count)]


def manifest(name: str, shape: Shape, run: str, dcu: bool) -> JSON:
    """The pod `name` of burst `run`: with the shape's DCU limits, or its plain twin."""
    if not dcu:
        containers = [Ctr("main")]
    elif shape.memory is None and shape.cores is None:
        containers = [Ctr("main", shape.cards)]
    else:
        containers = [Ctr("main", shape.cards, shape.memory, shape.cores)]
    pod = pod_manifest(name, containers, annotations=dict(shape.annotations))
    pod["metadata"]["labels"] = {RUN_LABEL: run}
    pod["spec"]["nodeSelector"] = {FAKE_NODE_LABEL: "kwok"}
    pod["spec"]["tolerations"] = [{"key": "kwok.x-k8s.io/node", "operator": "Equal", "value": "fake",
                                   "effect": "NoSchedule"}]
    return pod


def fewest_nodes(burst: list[Shape], cards_per_node: int, card_memory: int = 65520,
                 slots_per_card: int = keys.DEFAULT_SLOTS_PER_CARD) -> int:
    """A lower bound on the nodes the burst needs: whole cards, plus the cards the shares need
    at the least (by slots, cores or memory, whichever binds), over the cards of one node."""
    whole = sum(s.cards for s in burst if s.memory is None and s.cores is None)
    shares = [s for s in burst if s.memory is not None or s.cores is not None]
    share_cards = max(-(-len(shares) // slots_per_card), -(-sum(s.cores or 100 for s in shares) // 100),
                      -(-sum(s.memory or card_memory for s in shares) // card_memory))
    return -(-(whole + share_cards) // cards_per_node)
