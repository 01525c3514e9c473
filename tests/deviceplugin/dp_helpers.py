"""Small builders shared by the device plugin tests."""

from hami_dcu.common.codec import ContainerDevice


def dev(card: str, mem: int, cores: int) -> ContainerDevice:
    return ContainerDevice(uuid=f"DCU-{card}", type="DCU", usedmem=mem, usedcores=cores)
