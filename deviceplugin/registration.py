"""The node's registration: the cards and the handshake hami-scheduler reads (node
annotations), and in Volcano mode memory and cores as node resources Volcano's fit reads (node
status). What to publish is core.py's decision; this writes it and keeps the card health gauge.
"""

from __future__ import annotations

import logging
from datetime import datetime

from hami_dcu.deviceplugin.core import PluginCore
from hami_dcu.deviceplugin.metrics import PluginMetrics
from hami_dcu.deviceplugin.nodeapi import NodeApi

log = logging.getLogger(__name__)


class NodeRegistration:
    def __init__(self, core: PluginCore, api: NodeApi, metrics: PluginMetrics) -> None:
        self.core = core
        self.api = api
        self.metrics = metrics
        self._advertised: dict[str, dict[str, str]] | None = None  # Volcano mode: node status last written

    def publish(self, health: dict[str, bool], now: datetime) -> None:
        node = self.core.node
        for device in self.core.node_devices(health):
            self.metrics.card_healthy.labels(node, device.id).set(1 if device.health else 0)
        self.api.annotate_node(self.core.registration(health, now))
        if self.core.volcano_scheduler:
            self._advertise_shares(health)

    def _advertise_shares(self, health: dict[str, bool]) -> None:
        """Volcano counts `hcumem` and `hcucores` as plain node resources: memory in MiB (the
        unit Hygon's plugin registers and Volcano's fit compares), cores in percent of a card.
        They are too many to list as kubelet devices, so they go into the node's status, as
        Hygon's plugin does; written again only when they change."""
        status = self.core.share_resources(health)
        if status == self._advertised:
            return
        self.api.write_node_status(status)
        self._advertised = status
        log.info("node %s: advertised %s for Volcano", self.core.node,
                 ", ".join(f"{k}={v}" for k, v in sorted(status["allocatable"].items())))
