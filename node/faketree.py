"""Lay out fake `/sys` and `/dev` trees for mock cards, so the real discovery code runs on them.

Under `sys_root`: `devices/pci0000:00/<bus id>/{vendor,numa_node}` per card,
`bus/pci/devices/<bus id>` and `class/drm/{cardN,renderD(128+N)}/device` links to it.
Under `dev_root`: `kfd`, `mkfd` and `dri/cardN`, `dri/renderD(128+N)`. `other_gpus` adds
non-Hygon cards first, so tests prove that mapping is by PCI bus id and not by position.
With `char_devices=True` the device files are character devices with /dev/null's numbers
(what a container runtime accepts on kind); otherwise they are empty regular files.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hami_dcu.common.protocol import keys
from hami_dcu.node.smi import Card

OTHER_VENDOR = "0x1002"


def _device_file(path: Path, char_devices: bool) -> None:
    if path.exists():
        return
    if char_devices:
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
            return
        except PermissionError:
            pass  # no CAP_MKNOD here: a regular file still lets discovery and tests run
    path.touch()


def lay_out(cards: list[Card], sys_root: str | Path, dev_root: str | Path, other_gpus: int = 0,
            char_devices: bool = False) -> None:
    sys_root, dev_root = Path(sys_root), Path(dev_root)
    drm_class = sys_root / "class" / "drm"
    drm_class.mkdir(parents=True, exist_ok=True)
    (dev_root / "dri").mkdir(parents=True, exist_ok=True)
    for name in ("kfd", "mkfd"):
        _device_file(dev_root / name, char_devices)
    entries = [(f"0000:{0x10 + i:02x}:00.0", OTHER_VENDOR, -1) for i in range(other_gpus)]
    entries += [(card.pci_bus_id.lower(), keys.HYGON_PCI_VENDOR, card.numa) for card in cards]
    bus_dir = sys_root / "bus" / "pci" / "devices"
    bus_dir.mkdir(parents=True, exist_ok=True)
    for number, (bus_id, vendor, numa) in enumerate(entries):
        pci = sys_root / "devices" / "pci0000:00" / bus_id
        pci.mkdir(parents=True, exist_ok=True)
        (pci / "vendor").write_text(vendor + "\n")
        (pci / "numa_node").write_text(f"{numa}\n")
        if not (bus_dir / bus_id).is_symlink():
            (bus_dir / bus_id).symlink_to(os.path.relpath(pci, bus_dir))
        for name in (f"card{number}", f"renderD{128 + number}"):
            entry = drm_class / name
            entry.mkdir(exist_ok=True)
            link = entry / "device"
            if not link.is_symlink():
                link.symlink_to(os.path.relpath(pci, entry))
            _device_file(dev_root / "dri" / name, char_devices)
