"""Small builders shared by the device plugin tests."""

from hami_dcu.common.protocol.codec import ContainerDevice

# The mock cards of the test node (conftest lays them out; tests import them from here, as
# `from conftest import` resolves to another folder's conftest when folders run together).
CARDS = [
    {"serial": "S1", "model": "K100_AI", "memory_mib": 65520, "compute_units": 120, "pci_bus_id": "0000:3d:00.0"},
    {"serial": "S2", "model": "K100_AI", "memory_mib": 65520, "compute_units": 120, "pci_bus_id": "0000:9f:00.0"},
]


def dev(card: str, mem: int, cores: int) -> ContainerDevice:
    return ContainerDevice(uuid=f"DCU-{card}", type="DCU", usedmem=mem, usedcores=cores)
