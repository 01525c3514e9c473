"""Volcano mode's admission check: the memory unit of pods Volcano places (pure, no I/O).

hami-dcu advertises `hcumem` in MiB (the unit Hygon's plugin registers as `devmem` and
Volcano's fit compares the request with). The fork's documentation says GiB (its demo asks
`hcumem: 2` for "2GiB"), and a GiB figure read as MiB gives a vDCU of a few MiB that never
does what was meant. So a value below SMALLEST_MIB is refused with what to write instead (a
suffixed quantity such as `2Gi` is refused by the usual request rules).
"""

from __future__ import annotations

from typing import Any

from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.requests import RequestError, parse_container_request

JSON = dict[str, Any]
# Every Hygon card has at most 64 GiB, so a GiB figure is at most 64: anything below this is
# a GiB figure (or a vDCU too small to load a model), never a deliberate MiB share.
SMALLEST_MIB = 128


def memory_unit_problem(pod: JSON, names: ResourceNames) -> str | None:
    """Why a Volcano pod's memory request cannot be MiB, None when it can."""
    spec = pod.get("spec") or {}
    for container in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
        resources = container.get("resources") or {}
        if not any(names.memory in (resources.get(s) or {}) for s in ("limits", "requests")):
            continue
        cname = container.get("name")
        try:
            request = parse_container_request(container, names)
        except RequestError:
            return None  # the usual rules say what is wrong with it
        if request is not None and 0 < request.memory_mib < SMALLEST_MIB:
            return (f"container {cname}: {names.memory} {request.memory_mib} is read as MiB (the unit Hygon's plugin "
                    f"and Volcano's fit use), not GiB as the Volcano fork's documentation says: for "
                    f"{request.memory_mib} GiB write {request.memory_mib * 1024}")
    return None
