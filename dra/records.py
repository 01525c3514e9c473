"""What the driver prepared, per claim: the durable record a restart rebuilds from.

One JSON file per claim UID in the driver's state directory (mounted into no container).
It is written before any file a container sees and removed after them, so it is the truth:
after a crash the vdev files and CDI specs are rewritten from it. `encode`/`decode` are pure.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami_dcu.common.errors import DraError
from hami_dcu.dra import names
from hami_dcu.node.vdev import VdevDir, VdevSpec, write_atomic

log = logging.getLogger(__name__)
JSON = dict[str, Any]
RECORD_VERSION = 1


@dataclass(frozen=True)
class VdevGrant:
    """A vDCU: the allocator's grant and what its vdev file says."""

    card_index: int
    cu_mask: int
    pipe: int
    vdev: int
    cu_count: int
    memory_mib: int


@dataclass(frozen=True)
class PreparedDevice:
    request: str
    pool: str
    device: str
    share_id: str | None
    pci_bus_id: str
    dri_card: str  # host paths of the card's DRM nodes
    dri_render: str
    vdev: VdevGrant | None  # None: the whole card
    # adminAccess (monitoring): the card's nodes without holding it; absent from older records.
    admin: bool = False

    def cdi_name(self, claim_uid: str) -> str:
        # CDI device names allow [A-Za-z0-9_.:-]; the request may be "request/subrequest".
        return f"{claim_uid}-{self.device}-{self.request.replace('/', '.')}"

    def vdev_spec(self, claim_uid: str) -> VdevSpec | None:
        if self.vdev is None:
            return None
        g = self.vdev
        # The vdev directory names the claim where device-plugin mode names the pod, and the
        # request where it names the container: both are DNS labels without "_".
        return VdevSpec(pod_uid=claim_uid, container=self.request.replace("/", "-"), card_index=g.card_index,
                        pipe=g.pipe, vdev=g.vdev, cu_mask=g.cu_mask, cu_count=g.cu_count, memory_mib=g.memory_mib,
                        pci_bus_id=self.pci_bus_id)

    def vdev_dir(self, claim_uid: str) -> VdevDir | None:
        """The grant in the allocator's terms, to take back or free it."""
        if self.vdev is None:
            return None
        g = self.vdev
        return VdevDir(pod_uid=claim_uid, container=self.request, card_index=g.card_index, pipe=g.pipe, vdev=g.vdev,
                       cu_mask=g.cu_mask)


@dataclass(frozen=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]

    def cdi_ids(self, device: PreparedDevice) -> list[str]:
        return [f"{names.CDI_KIND}={device.cdi_name(self.uid)}"]


class RecordError(DraError, ValueError):
    pass


def encode(record: PreparedClaim) -> str:
    def grant(g: VdevGrant | None) -> JSON | None:
        if g is None:
            return None
        return {"cardIndex": g.card_index, "cuMask": hex(g.cu_mask), "pipe": g.pipe, "vdev": g.vdev,
                "cuCount": g.cu_count, "memoryMiB": g.memory_mib}

    return json.dumps({
        "version": RECORD_VERSION, "uid": record.uid, "namespace": record.namespace, "name": record.name,
        "devices": [{"request": d.request, "pool": d.pool, "device": d.device, "shareID": d.share_id,
                     "pciBusID": d.pci_bus_id, "driCard": d.dri_card, "driRender": d.dri_render,
                     "vdev": grant(d.vdev), **({"adminAccess": True} if d.admin else {})}
                    for d in record.devices],
    }, indent=1, sort_keys=True) + "\n"


def decode(text: str) -> PreparedClaim:
    try:
        data = json.loads(text)
        if data.get("version") != RECORD_VERSION:
            raise RecordError(f"record version {data.get('version')!r}, expected {RECORD_VERSION}")
        devices = []
        for d in data["devices"]:
            g = d.get("vdev")
            grant = None if g is None else VdevGrant(
                card_index=int(g["cardIndex"]), cu_mask=int(g["cuMask"], 16), pipe=int(g["pipe"]),
                vdev=int(g["vdev"]), cu_count=int(g["cuCount"]), memory_mib=int(g["memoryMiB"]))
            devices.append(PreparedDevice(
                request=str(d["request"]), pool=str(d["pool"]), device=str(d["device"]),
                share_id=None if d.get("shareID") is None else str(d["shareID"]), pci_bus_id=str(d["pciBusID"]),
                dri_card=str(d["driCard"]), dri_render=str(d["driRender"]), vdev=grant,
                admin=d.get("adminAccess") is True))
        return PreparedClaim(uid=str(data["uid"]), namespace=str(data["namespace"]), name=str(data["name"]),
                             devices=tuple(devices))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, RecordError):
            raise
        raise RecordError(f"malformed record: {exc!r}") from exc


class RecordStore:
    """The records on disk: `<dir>/<claim uid>.json`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, uid: str) -> Path:
        return self.directory / f"{uid}.json"

    def save(self, record: PreparedClaim) -> None:
        write_atomic(self.path(record.uid), encode(record))

    def remove(self, uid: str) -> None:
        self.path(uid).unlink(missing_ok=True)

    def load_all(self) -> list[PreparedClaim]:
        """Every readable record; an unreadable one is logged and kept on disk for a person."""
        try:
            files = sorted(self.directory.glob("*.json"))
        except OSError:
            return []
        records = []
        for path in files:
            try:
                record = decode(path.read_text())
            except (OSError, RecordError) as exc:
                log.error("DRA record %s cannot be read, ignored: %s", path, exc)
                continue
            if record.uid != path.stem:
                log.error("DRA record %s names claim %s, ignored", path, record.uid)
                continue
            records.append(record)
        return records
