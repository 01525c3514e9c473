"""Builders for DRA tests: mock cards on a fake /sys and /dev, and allocated claims."""

from pathlib import Path

from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.dra.core import DraPaths
from hami_dcu.node.discovery import DcuCard, discover
from hami_dcu.node.faketree import lay_out
from hami_dcu.node.smi import Card

NODE = "n1"
CARDS = [
    Card(index=0, serial="SER0", model="K100_AI", memory_mib=65520, compute_units=120, pci_bus_id="0000:3D:00.0",
         numa=0),
    Card(index=1, serial="SER1", model="Z100", memory_mib=32752, compute_units=60, pci_bus_id="0000:9F:00.0", numa=1),
]
DEV0 = names.device_name(CARDS[0].pci_bus_id)
DEV1 = names.device_name(CARDS[1].pci_bus_id)


def node_cards(root: Path, cards: list[Card] = CARDS) -> list[DcuCard]:
    lay_out(cards, root / "sys", root / "dev", other_gpus=1)
    served = discover(cards, root / "sys", root / "dev", DCU_NAMING)
    assert len(served) == len(cards)
    return served


def paths(root: Path) -> DraPaths:
    return DraPaths(vdev_dir=root / "vgpu", etc_vdev=root / "etc-vdev", cdi_dir=root / "cdi", state_dir=root / "state",
                    dev_root=root / "dev", driver_dir=root / "dtk", hyhal_dir=root / "hyhal")


def result(device: str = DEV0, request: str = "dcu", cores: str | None = None, memory: str | None = None,
           pool: str = NODE, driver: str = names.DRIVER, share_id: str | None = "s-1", slices: str = "1") -> dict:
    out = {"request": request, "driver": driver, "pool": pool, "device": device}
    if cores is not None or memory is not None:
        out["consumedCapacity"] = {k: v for k, v in (("cores", cores), ("memory", memory), ("slices", slices)) if v}
        out["shareID"] = share_id
    return out


def claim(uid: str = "uid-1", *results: dict, name: str = "c1", namespace: str = "ns") -> dict:
    body = {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": {"devices": {"requests": []}}}
    if results:
        body["status"] = {"allocation": {"devices": {"results": list(results)}}}
    return body
