"""The allocation annotations a placement puts on its pod (pure): HAMi's keys, written by the
extender, carried by /bind's Binding and by the Volcano allocate's pod patch alike
(docs/architecture.md, Wire formats)."""

from __future__ import annotations

from datetime import datetime

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import PodDevices, encode_pod_devices, encode_unix_seconds
from hami_dcu.common.protocol.keys import Naming


def allocation_annotations(naming: Naming, devices: PodDevices, node: str, now: datetime) -> dict[str, str]:
    """`dcu-devices-to-allocate` and `-allocated` (the same list: the device plugin erases the
    first entry by entry as it serves), the node, `bind-phase: allocating` and the times."""
    encoded = encode_pod_devices(devices, naming.pod_devices_allocated)
    stamp = encode_unix_seconds(now)
    return {
        naming.pod_devices_to_allocate: encoded,
        naming.pod_devices_allocated: encoded,
        keys.POD_NODE: node,
        keys.POD_TIME: stamp,
        keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
        keys.POD_BIND_TIME: stamp,
    }
