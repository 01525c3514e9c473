"""The CDI spec of a prepared claim: pure, no I/O (the core writes it).

One spec per claim (`<cdi dir>/dra.hygon.com-dcu_<claim uid>.json`), so Unprepare removes
one file. What every device of the claim needs once, `/dev/kfd`, `/dev/mkfd` and the driver
directories (read-only), is in the spec's own containerEdits, which a runtime applies once
whichever of its devices a container gets; each CDI device adds its card's DRM nodes and, for
a vDCU, its vdev directory mounted read-only where device-plugin mode mounts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami_dcu.common.protocol.dra import names
from hami_dcu.dra.records import PreparedClaim
from hami_dcu.node import layout

JSON = dict[str, Any]
READ_ONLY_BIND = ["ro", "nosuid", "nodev", "rbind"]


@dataclass(frozen=True)
class HostPaths:
    dev_root: Path
    vdev_dir: Path
    driver_dir: Path
    hyhal_dir: Path


def spec_file_name(claim_uid: str) -> str:
    return f"{names.CDI_VENDOR}-{names.CDI_CLASS}_{claim_uid}.json"


def _node(container_path: str, host_path: str, permissions: str) -> JSON:
    return {"path": container_path, "hostPath": host_path, "permissions": permissions}


def _mount(container_path: str, host_path: str) -> JSON:
    return {"containerPath": container_path, "hostPath": host_path, "options": READ_ONLY_BIND}


def claim_spec(record: PreparedClaim, paths: HostPaths) -> JSON:
    devices = []
    for device in record.devices:
        edits: JSON = {"deviceNodes": [
            _node("/dev/dri/" + Path(host).name, host, "rw") for host in (device.dri_card, device.dri_render)]}
        vdev = device.vdev_spec(record.uid)
        if vdev is not None:
            edits["mounts"] = [_mount(layout.VDEV_CONTAINER_DIR.rstrip("/"), str(paths.vdev_dir / vdev.dirname))]
        devices.append({"name": device.cdi_name(record.uid), "containerEdits": edits})
    shared: JSON = {
        "deviceNodes": [
            _node(p, str(paths.dev_root / p.removeprefix("/dev/")), "rwm") for p in (layout.KFD, layout.MKFD)],
        "mounts": [
            _mount(layout.DRIVER_CONTAINER_DIR, str(paths.driver_dir)), _mount(layout.HYHAL_DIR, str(paths.hyhal_dir))],
    }
    return {"cdiVersion": names.CDI_VERSION, "kind": names.CDI_KIND, "devices": devices, "containerEdits": shared}
