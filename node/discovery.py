"""Which /dev nodes belong to which card: sysfs DRM entries matched by PCI bus id.

A card is never mapped by list position (a VM with another vendor's GPU shifts the
numbering: Project-HAMi/dcu-vgpu-device-plugin#9): every `card*` / `renderD*` entry of
`<sys>/class/drm` names its PCI device, whose `vendor` must be Hygon's.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.keys import Naming
from hami_dcu.node.numa import read_numa_node
from hami_dcu.node.smi import Card

log = logging.getLogger(__name__)
_DRM_NAME = re.compile(r"(card|renderD)(\d+)")
# What SMI tools print when a serial cannot be read: HAMi turned these into "DCU-N/A" on every
# card, i.e. duplicate ids across the cluster.
UNUSABLE_SERIALS = frozenset({"", "N/A", "NA", "UNKNOWN"})


@dataclass(frozen=True)
class DrmNodes:
    card: str  # "/dev/dri/card1" (container path == host path)
    render: str  # "/dev/dri/renderD129"


@dataclass(frozen=True)
class DcuCard:
    """A card this plugin serves: SMI facts, its scheduler id and its device nodes."""

    card: Card
    drm: DrmNodes
    id_prefix: str  # the naming set's (keys.Naming.id_prefix)

    @property
    def id(self) -> str:
        return self.id_prefix + self.card.serial

    @property
    def index(self) -> int:
        return self.card.index


def drm_nodes_by_bus_id(sys_root: str | Path, dev_root: str | Path) -> dict[str, DrmNodes]:
    """PCI bus id (upper case) -> the Hygon card's DRM nodes, from sysfs."""
    drm_dir = Path(sys_root) / "class" / "drm"
    found: dict[str, dict[str, str]] = {}
    try:
        entries = sorted(os.listdir(drm_dir))
    except OSError as exc:
        log.warning("cannot list %s: %s", drm_dir, exc)
        return {}
    for name in entries:
        match = _DRM_NAME.fullmatch(name)
        if not match:
            continue
        device = drm_dir / name / "device"
        try:
            vendor = (device / "vendor").read_text().strip().lower()
            bus_id = os.path.basename(os.path.realpath(device)).upper()
        except OSError:
            continue
        if vendor != keys.HYGON_PCI_VENDOR:
            continue
        found.setdefault(bus_id, {})[match.group(1)] = str(Path(dev_root) / "dri" / name)
    nodes = {}
    for bus_id, kinds in found.items():
        if "card" in kinds and "renderD" in kinds:
            nodes[bus_id] = DrmNodes(card=kinds["card"], render=kinds["renderD"])
        else:
            log.warning("PCI device %s has no complete card/renderD pair in %s: %s", bus_id, drm_dir, kinds)
    return nodes


def discover(cards: list[Card], sys_root: str | Path, dev_root: str | Path, naming: Naming) -> list[DcuCard]:
    """The cards we can serve. A card with an empty or duplicate serial, or without DRM nodes,
    is refused with a log line: serving it would give the scheduler an ambiguous id."""
    nodes = drm_nodes_by_bus_id(sys_root, dev_root)
    counts: dict[str, int] = {}
    for card in cards:
        counts[card.serial] = counts.get(card.serial, 0) + 1
    served = []
    for card in cards:
        if card.serial.strip().upper() in UNUSABLE_SERIALS:
            log.error("card %d (%s): no serial number (%r), not served", card.index, card.pci_bus_id, card.serial)
            continue
        if counts[card.serial] > 1:
            log.error("card %d (%s): serial %s is not unique on this node, not served", card.index,
                      card.pci_bus_id, card.serial)
            continue
        if card.memory_mib <= 0:
            log.error("card %d (%s): no memory reported, not served", card.index, card.pci_bus_id)
            continue
        drm = nodes.get(card.pci_bus_id.upper())
        if drm is None:
            log.error("card %d (%s): no Hygon DRM device with that PCI bus id under %s, not served",
                      card.index, card.pci_bus_id, sys_root)
            continue
        numa = read_numa_node(sys_root, card.pci_bus_id)
        if numa is not None and numa != card.numa:
            card = replace(card, numa=numa)  # the kernel knows; the SMI layer does not
        served.append(DcuCard(card=card, drm=drm, id_prefix=naming.id_prefix))
    return served
