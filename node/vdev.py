"""The vDCU config file and its directory name: one encoder, one parser, no I/O here
except the atomic file writer at the bottom.

Directory: `<pod uid>_<container>_<card index>_<pipe>_<vdev>_<mask1>_<mask2>` (HAMi's
layout); splitting on `_` is safe because pod UIDs and DNS-1123 container names have none.
File (`vdev0.conf` in that directory with device_id 0; `/etc/vdev/vdev<N>.conf` with the
card index, for the exporter):

    PciBusId: 0000:3D:00.0
    cu_mask: 0x<low 64 bits>
    cu_mask: 0x<high 64 bits>
    cu_count: <CUs>
    mem: <MiB> MiB
    device_id: <0 | card index>
    vdev_id: <N>
    pipe_id: <P>
    enable: 1
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

VDEV_CONF = "vdev0.conf"  # the container's view, in the per-container directory
MASK_BITS = 64
_LOW = (1 << MASK_BITS) - 1


@dataclass(frozen=True)
class VdevSpec:
    pod_uid: str
    container: str
    card_index: int
    pipe: int
    vdev: int
    cu_mask: int  # up to 128 bits: the low 64 go on the first cu_mask line
    cu_count: int
    memory_mib: int
    pci_bus_id: str

    @property
    def mask_words(self) -> tuple[str, str]:
        return f"{self.cu_mask & _LOW:016x}", f"{self.cu_mask >> MASK_BITS & _LOW:016x}"

    @property
    def dirname(self) -> str:
        low, high = self.mask_words
        return f"{self.pod_uid}_{self.container}_{self.card_index}_{self.pipe}_{self.vdev}_{low}_{high}"


def render_conf(spec: VdevSpec, device_id: int) -> str:
    low, high = spec.mask_words
    return (
        f"PciBusId: {spec.pci_bus_id}\n"
        f"cu_mask: 0x{low}\n"
        f"cu_mask: 0x{high}\n"
        f"cu_count: {spec.cu_count}\n"
        f"mem: {spec.memory_mib} MiB\n"
        f"device_id: {device_id}\n"
        f"vdev_id: {spec.vdev}\n"
        f"pipe_id: {spec.pipe}\n"
        "enable: 1\n"
    )


def conf_bus_id(text: str) -> str | None:
    """The `PciBusId` of a vDCU config file (upper case), None when it has none."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "PciBusId" and value.strip():
            return value.strip().upper()
    return None


def conf_share(text: str) -> tuple[int, int] | None:
    """(`cu_count`, `mem` in MiB) of a vDCU config file, None when either is missing or
    malformed."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        values.setdefault(key.strip(), value.strip())
    cu, mem = values.get("cu_count", ""), values.get("mem", "").removesuffix("MiB").strip()
    return (int(cu), int(mem)) if cu.isdigit() and mem.isdigit() else None


@dataclass(frozen=True)
class VdevDir:
    """What a directory name records: enough to rebuild the node state after a restart."""

    pod_uid: str
    container: str
    card_index: int
    pipe: int
    vdev: int
    cu_mask: int


def parse_dirname(name: str) -> VdevDir | None:
    parts = name.split("_")
    if len(parts) != 7:
        return None
    try:
        return VdevDir(pod_uid=parts[0], container=parts[1], card_index=int(parts[2]), pipe=int(parts[3]),
                       vdev=int(parts[4]), cu_mask=int(parts[5], 16) | int(parts[6], 16) << MASK_BITS)
    except ValueError:
        return None


def write_atomic(path: Path, text: str, durable: bool = True) -> None:
    """Write, then rename: a reader never sees half a file. `durable` also fsyncs before the
    rename, so a power loss cannot leave an empty file either (about 1 ms here)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
