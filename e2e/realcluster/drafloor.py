"""The DRA floor of a scale burst (pure): what any DRA driver's pods cost kube-scheduler.

A trivial driver publishes, per fake node, a ResourceSlice with as many devices as the node has
cards and nothing the allocator need evaluate beyond their names: no attributes, no capacity, no
taints. Its DeviceClass selects on the driver alone. Each floor pod has one claim, from one shared
template, for one whole device. Our DRA pods (claims with consumable capacity through the
webhook's rewrite) are judged against these pods, placed by the same kube-scheduler binary.
"""

from __future__ import annotations

from typing import Any

from e2e.realcluster import scalemix

JSON = dict[str, Any]
API_VERSION = "resource.k8s.io/v1"
DRIVER = "floor.example.com"
DEVICE_CLASS = "floor.example.com"
TEMPLATE = "floor-one-device"
CLAIM = "device"


def device_class() -> JSON:
    return {"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def claim_template(namespace: str) -> JSON:
    return {"apiVersion": API_VERSION, "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "one", "exactly": {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount",
                                            "count": 1}}]}}}}


def resource_slice(node: str, devices: int) -> JSON:
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"device-{i}"} for i in range(devices)]}}


def pod(name: str, shape: scalemix.Shape, run: str) -> JSON:
    """The burst's plain twin of `shape`, with one claim for one whole floor device."""
    manifest = scalemix.manifest(name, shape, run, dcu=False)
    manifest["spec"]["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": TEMPLATE}]
    for container in manifest["spec"]["containers"]:
        container.setdefault("resources", {})["claims"] = [{"name": CLAIM}]
    return manifest
