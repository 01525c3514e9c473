"""Mock cards and pod shapes for the local cluster: what the demo submits, and what every
test backend builds its pods and nodes from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hami_dcu.common.io.kube import Kube
from hami_dcu.common.protocol import keys

JSON = dict[str, Any]
# The image every example pod names. The local cluster's kubelet never runs it; kind has no
# registry to pull from, so e2e/kind/build.sh makes this image from Debian's busybox-static and
# preloads it on the nodes. A fixed tag (not latest), so the kubelet never tries to pull it.
POD_IMAGE = "hami-dcu-e2e/busybox:1"


@dataclass(frozen=True)
class MockCard:
    serial: str
    model: str = "K100_AI"
    memory_mib: int = 65520
    compute_units: int = 120
    pci_bus_id: str = "0000:3D:00.0"
    numa: int = 0

    @property
    def id(self) -> str:
        """The card's id in the dcu set, the one the shared scenarios run in."""
        return self.id_in(keys.DCU_NAMING)

    def id_in(self, naming: keys.Naming) -> str:
        return naming.id_prefix + self.serial

    def as_mock_entry(self) -> JSON:
        return {
            "serial": self.serial,
            "model": self.model,
            "memory_mib": self.memory_mib,
            "compute_units": self.compute_units,
            "pci_bus_id": self.pci_bus_id,
            "numa": self.numa,
        }


def default_cards(node: str, count: int = 2, model: str = "K100_AI") -> list[MockCard]:
    """Distinct serials and PCI bus ids per node, so a mix-up between cards shows."""
    return [
        MockCard(serial=f"{node.upper()}S{i}", model=model, pci_bus_id=f"0000:{0x3D + i:02X}:00.0")
        for i in range(count)
    ]


@dataclass
class Ctr:
    name: str
    count: int | None = None
    memory: int | None = None
    cores: int | None = None
    init: bool = False
    names: keys.ResourceNames = keys.DCU_NAMING.resources  # the naming set the container is written in

    def manifest(self) -> JSON:
        limits: JSON = {}
        if self.count is not None:
            limits[self.names.count] = str(self.count)
        if self.memory is not None:
            limits[self.names.memory] = str(self.memory)
        if self.cores is not None:
            limits[self.names.cores] = str(self.cores)
        return {
            "name": self.name,
            "image": POD_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sleep", "infinity"],
            "resources": {"limits": limits},
        }


def pod_manifest(name: str, containers: list[Ctr], annotations: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "initContainers": [c.manifest() for c in containers if c.init],
            "containers": [c.manifest() for c in containers if not c.init],
            # Above zero, so a DELETE only marks a bound pod and its kubelet finishes it, as on
            # a real cluster (zero would delete at once); short, so kind's busybox goes quickly.
            "terminationGracePeriodSeconds": 1,
        },
    }


def events_for(kube: Kube, namespace: str, name: str) -> list[JSON]:
    items = kube.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]
