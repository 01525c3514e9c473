"""Admission's namespace-quota check (common/quota.py has the rules). The limits and what
the namespace holds come from a `QuotaLookup`: the extender's watch-fed view when the
webhook runs in the extender's process (the chart's layout), none when it runs alone (the
extender still checks at filter time)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hami_dcu.common.keys import ResourceNames
from hami_dcu.common.quota import Amount, QuotaLimits, exceeded, requested
from hami_dcu.common.requests import RequestError, parse_pod_requests, sidecar_positions

JSON = dict[str, Any]
QuotaLookup = Callable[[str], tuple[QuotaLimits, Amount] | None]


def quota_problem(pod: JSON, names: ResourceNames, lookup: QuotaLookup | None) -> str | None:
    """Why the pod would break its namespace's DCU quota, None when it fits or there is none."""
    if lookup is None:
        return None
    meta = pod.get("metadata") or {}
    found = lookup(meta.get("namespace") or "default")
    if found is None:
        return None
    limits, used = found
    try:
        requests = parse_pod_requests(pod, names)
    except RequestError:
        return None  # refused for that reason already
    init_count = len((pod.get("spec") or {}).get("initContainers") or [])
    return exceeded(limits, used, requested(requests, init_count, sidecar_positions(pod)), names)
