"""Card health from the driver, for the kubelet (ListAndWatch) and the node registration.

A card is healthy while the SMI layer still reports it (same serial, same PCI bus id) as
healthy and its device nodes and `/dev/kfd` exist. HAMi's plugin always said Healthy:
a card that vanished from SMI stayed schedulable.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hami_dcu.node.discovery import DcuCard
from hami_dcu.node.smi import Card, SmiBackend, SmiError

log = logging.getLogger(__name__)


def card_health(served: list[DcuCard], reported: list[Card], dev_root: str | Path) -> dict[str, bool]:
    """Card id -> healthy, for every served card."""
    by_serial = {c.serial: c for c in reported}
    kfd_present = (Path(dev_root) / "kfd").exists()
    health = {}
    for dcu in served:
        now = by_serial.get(dcu.card.serial)
        problem = None
        if now is None:
            problem = "no longer reported by SMI"
        elif now.pci_bus_id.upper() != dcu.card.pci_bus_id.upper():
            problem = f"now reported at PCI bus id {now.pci_bus_id}"
        elif not now.healthy:
            problem = "reported unhealthy by SMI"
        elif not kfd_present:
            problem = f"{Path(dev_root) / 'kfd'} is missing"
        elif not (Path(dcu.drm.card).exists() and Path(dcu.drm.render).exists()):
            problem = f"device node {dcu.drm.card} or {dcu.drm.render} is missing"
        if problem:  # debug: this runs every second; the server logs each change once
            log.debug("card %s (%s): unhealthy, %s", dcu.id, dcu.card.pci_bus_id, problem)
        health[dcu.id] = problem is None
    return health


class SmiHealth:
    """`card_health` over a live SMI backend. One failed SMI query keeps the last answer (the
    caller sees the error); `failures_before_unhealthy` in a row mark every card unhealthy, so
    a driver that stopped answering does not leave its cards schedulable."""

    def __init__(self, backend: SmiBackend, served: list[DcuCard], dev_root: str | Path,
                 failures_before_unhealthy: int = 3) -> None:
        self.backend = backend
        self.served = served
        self.dev_root = dev_root
        self.failures_before_unhealthy = failures_before_unhealthy
        self.failures = 0

    def __call__(self) -> dict[str, bool]:
        try:
            reported = self.backend.cards()
        except SmiError as exc:
            self.failures += 1
            if self.failures < self.failures_before_unhealthy:
                raise
            log.warning("SMI failed %d times in a row (%s): every card is unhealthy", self.failures, exc)
            return {dcu.id: False for dcu in self.served}
        self.failures = 0
        return card_health(self.served, reported, self.dev_root)
