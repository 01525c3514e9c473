"""One node, one mode: pure detection of a device plugin serving the same cards.

With both modes on a node the same card would be handed out twice, once by hami-scheduler
through the device plugin and once by kube-scheduler through the ResourceSlice. The kubelet
shows a live device plugin as allocatable DCU slots on the node (it zeroes them when the plugin
goes away), so that is the sign the DRA driver checks before publishing.
"""

from __future__ import annotations

from typing import Any

from hami_dcu.common.protocol import objects
from hami_dcu.common.protocol.dra.quantity import QuantityError, to_int


def device_plugin_serving(node: dict[str, Any], count_resources: tuple[str, ...]) -> str | None:
    """Why the node is already served in device-plugin mode, or None."""
    allocatable = objects.node_status(node).get("allocatable") or {}
    for resource in count_resources:
        try:
            slots = to_int(allocatable.get(resource, "0"), resource)
        except QuantityError:
            continue
        if slots > 0:
            name = objects.name(node)
            return (f"node {name} has {slots} allocatable {resource} from the hami-dcu device plugin: a node is "
                    "served in one mode only (chart value `mode`), so the DRA driver publishes no devices here")
    return None
