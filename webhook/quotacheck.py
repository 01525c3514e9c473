"""Admission's namespace-quota check (common/protocol/quota.py has the rules). The limits and what
the namespace holds come from a `QuotaLookup`: the extender's watch-fed view when the
webhook runs in the extender's process (the chart's layout), none when it runs alone (the
extender still checks at filter time).

In Volcano mode (`Reservations` given) no /filter follows admission for Volcano's pods, so
this check is the only one they meet: the lookup counts the pods already admitted and not
placed yet, a whole card counts the largest card a node registers, and an admitted pod's ask is
returned for the shell to reserve until the watch shows the pod (issue 35, finding 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.quota import Amount, QuotaLimits, Reservations, exceeded, quota_key, requested
from hami_dcu.common.protocol.requests import RequestError, parse_pod_requests, sidecar_positions

JSON = dict[str, Any]
QuotaLookup = Callable[[str], tuple[QuotaLimits, Amount] | None]


@dataclass(frozen=True)
class QuotaVerdict:
    problem: str | None = None  # why the pod is refused; None: it fits, or there is no quota
    reason: str = "quota-exceeded"
    reserve: Amount | None = None  # Volcano mode: what to count for the admitted pod until it is seen


def quota_verdict(pod: JSON, names: ResourceNames, lookup: QuotaLookup | None,
                  reservations: Reservations | None = None) -> QuotaVerdict:
    """The pod against its namespace's DCU quota."""
    if lookup is None:
        return QuotaVerdict()
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    found = lookup(namespace)
    if found is None:
        return QuotaVerdict()
    limits, used = found
    try:
        requests = parse_pod_requests(pod, names)
    except RequestError:
        return QuotaVerdict()  # refused for that reason already
    init_count = len((pod.get("spec") or {}).get("initContainers") or [])
    whole_card = 0
    if reservations is not None:
        largest = reservations.whole_card()
        asks_whole = any(r is not None and r.count > 0 and r.whole_memory for r in requests)
        if largest is None and asks_whole and limits.memory is not None:
            return QuotaVerdict(
                f"pod asks for a whole card, and namespace {namespace} caps DCU memory ({quota_key(names.memory)} "
                f"of a ResourceQuota there), but no node has registered its cards yet, so what a whole card holds "
                f"cannot be counted: ask {names.memory} in MiB, or retry once the device plugins have registered "
                "their nodes", "quota-whole-card-unknown")
        whole_card = largest or 0
    asked = requested(requests, init_count, sidecar_positions(pod), whole_card)
    problem = exceeded(limits, used, asked, names)
    if problem is not None:
        return QuotaVerdict(f"pod {problem}")
    return QuotaVerdict(reserve=asked if reservations is not None else None)



def reservation_patch(obj: JSON, reservation: str) -> JSON:
    """The JSONPatch operation stamping `reservation` on the admitted object (a pod, a claim),
    whatever annotations it had: the watch (or a list of claims) tells by it that the object is
    stored. A value the author wrote under the key is replaced."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict):
        return {"op": "add", "path": "/metadata/annotations", "value": {keys.QUOTA_RESERVATION: reservation}}
    escaped = keys.QUOTA_RESERVATION.replace("~", "~0").replace("/", "~1")
    return {"op": "add", "path": f"/metadata/annotations/{escaped}", "value": reservation}
