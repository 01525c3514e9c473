"""DRA mode's side of the usage metrics: what this driver prepared, as a NodeView.

A prepared claim's devices are known by the CDI ids the driver answered with, which the
kubelet reports back per container; a device without a vDCU is a card held whole. Admin
access (monitoring) holds nothing.
"""

from __future__ import annotations

from hami_dcu.common.protocol.dra import names
from hami_dcu.dra.core import DriverCore
from hami_dcu.node.usage import CardFacts, Held, NodeView, VdevFacts


def driver_view(core: DriverCore) -> NodeView:
    served = {c.index: c for c in core.cards.values()}
    cards = tuple(CardFacts(index=c.index, serial=c.card.serial, model=c.card.model, pci_bus_id=c.card.pci_bus_id,
                            memory_mib=c.card.memory_mib) for c in served.values())
    prepared = core.prepared_claims()
    vdevs: list[VdevFacts] = []
    by_cdi: dict[str, Held] = {}
    by_device: dict[tuple[str, str, str], list[Held]] = {}
    for claim in prepared:
        for device in claim.devices:
            if device.admin:
                continue
            index = device.vdev.card_index if device.vdev else core.index_by_bus_id.get(device.pci_bus_id.upper(), -1)
            if index not in served:  # a card no longer served: no series
                continue
            held = Held(index, device.vdev.vdev if device.vdev else None)
            if device.vdev:
                vdevs.append(VdevFacts(vdev=device.vdev.vdev, card_index=index, cu_count=device.vdev.cu_count,
                                       memory_mib=device.vdev.memory_mib))
            by_cdi |= dict.fromkeys(claim.cdi_ids(device), held)
            by_device.setdefault((claim.namespace, claim.name, device.device), []).append(held)
    return NodeView(node=core.node, cards=cards, vdevs=tuple(vdevs), driver=names.DRIVER, by_cdi_id=by_cdi,
                    # by name only where the name is one grant: two requests' shares of one card are not
                    by_claim_device={key: held[0] for key, held in by_device.items() if len(held) == 1})
