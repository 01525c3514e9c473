"""Device-plugin mode's side of the usage metrics: what this plugin granted, as a NodeView.

Every slot id of a card stands for the card held whole; the ids recorded at Allocate for a
vDCU (kubeletids.py) stand for that vDCU. Read from the plugin's own state dir at each scrape:
nothing a container can write decides whose usage a series is.
"""

from __future__ import annotations

from hami_dcu.deviceplugin.plan import fake_device_id
from hami_dcu.deviceplugin.service import PluginService
from hami_dcu.node.usage import CardFacts, Held, NodeView, VdevFacts
from hami_dcu.node.vdev import conf_share


def plugin_view(service: PluginService) -> NodeView:
    core, grants = service.core, service.vdevs.grants
    cards = tuple(CardFacts(index=c.index, serial=c.card.serial, model=c.card.model, pci_bus_id=c.card.pci_bus_id,
                            memory_mib=c.card.memory_mib) for c in core.cards.values())
    by_id: dict[str, Held] = {fake_device_id(c.id, slot): Held(c.index)
                              for c in core.cards.values() for slot in range(core.slots_per_card)}
    vdevs: list[VdevFacts] = []
    held: dict[str, Held] = {}
    for dirname, record, bus_id in grants.records():
        # The card by its PCI bus id, as the plugin's rebuild does: SMI indices shift when a
        # card goes. A card no longer served has no series.
        index = core.index_by_bus_id.get(bus_id.upper(), -1) if bus_id else record.card_index
        if index not in core.by_index:
            continue
        text = grants.conf_text(dirname)
        # A grant adopted by its directory name records no configuration: its CUs are its
        # mask's, its memory unknown.
        cu_count, memory_mib = (conf_share(text) if text else None) or (record.cu_mask.bit_count(), 0)
        vdevs.append(VdevFacts(vdev=record.vdev, card_index=index, cu_count=cu_count, memory_mib=memory_mib))
        held[dirname] = Held(index, record.vdev)
    by_id |= {kubelet_id: held[dirname] for kubelet_id, dirname in service.vdevs.kubelet_ids.load().items()
              if dirname in held}
    return NodeView(node=core.node, cards=cards, vdevs=tuple(vdevs), resource=core.resource, by_device_id=by_id)
