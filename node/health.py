"""Card health from the driver, for the kubelet (ListAndWatch), the node registration and the
DRA driver's device taints.

A card is healthy while the SMI layer still reports it (same serial, same PCI bus id) as
healthy and its device nodes and `/dev/kfd` exist. HAMi's plugin always said Healthy:
a card that vanished from SMI stayed schedulable.

`card_problems` says why a card is not healthy: a short reason (a label value, so a DRA device
taint can carry it) and a sentence for logs and events.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from hami_dcu.node.discovery import DcuCard
from hami_dcu.node.smi import Card, SmiBackend, SmiError

log = logging.getLogger(__name__)


# Why a card is unhealthy, as a DRA device taint's value (label values: short, no spaces).
NOT_REPORTED = "NotReportedBySMI"
MOVED = "PCIBusIDChanged"
SMI_UNHEALTHY = "SMIReportsUnhealthy"
KFD_MISSING = "KFDMissing"
DEVICE_NODE_MISSING = "DeviceNodeMissing"
SMI_FAILING = "SMIFailing"


@dataclass(frozen=True)
class Problem:
    """Why a card is unhealthy: `reason` is one of the names above, `message` says it in full."""

    reason: str
    message: str


def card_problems(served: list[DcuCard], reported: list[Card], dev_root: str | Path) -> dict[str, Problem | None]:
    """Card id -> its problem (None: healthy), for every served card."""
    by_serial = {c.serial: c for c in reported}
    kfd = Path(dev_root) / "kfd"
    kfd_present = kfd.exists()
    problems: dict[str, Problem | None] = {}
    for dcu in served:
        now = by_serial.get(dcu.card.serial)
        problem = None
        if now is None:
            problem = Problem(NOT_REPORTED, "no longer reported by SMI")
        elif now.pci_bus_id.upper() != dcu.card.pci_bus_id.upper():
            problem = Problem(MOVED, f"now reported at PCI bus id {now.pci_bus_id}")
        elif not now.healthy:
            problem = Problem(SMI_UNHEALTHY, "reported unhealthy by SMI")
        elif not kfd_present:
            problem = Problem(KFD_MISSING, f"{kfd} is missing")
        elif not (Path(dcu.drm.card).exists() and Path(dcu.drm.render).exists()):
            problem = Problem(DEVICE_NODE_MISSING, f"device node {dcu.drm.card} or {dcu.drm.render} is missing")
        if problem:  # debug: this runs every second; the server logs each change once
            log.debug("card %s (%s): unhealthy, %s", dcu.id, dcu.card.pci_bus_id, problem.message)
        problems[dcu.id] = problem
    return problems


def card_health(served: list[DcuCard], reported: list[Card], dev_root: str | Path) -> dict[str, bool]:
    """Card id -> healthy, for every served card."""
    return {card: problem is None for card, problem in card_problems(served, reported, dev_root).items()}


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
        return {card: problem is None for card, problem in self.problems().items()}

    def problems(self) -> dict[str, Problem | None]:
        """Card id -> why it is unhealthy (None: healthy)."""
        try:
            reported = self.backend.cards()
        except SmiError as exc:
            self.failures += 1
            if self.failures < self.failures_before_unhealthy:
                raise
            log.warning("SMI failed %d times in a row (%s): every card is unhealthy", self.failures, exc)
            # The same problem each time (no count): an unchanged answer republishes nothing.
            failing = Problem(SMI_FAILING, f"SMI failed {self.failures_before_unhealthy} or more times in a row: {exc}")
            return dict.fromkeys((dcu.id for dcu in self.served), failing)
        self.failures = 0
        return card_problems(self.served, reported, self.dev_root)
