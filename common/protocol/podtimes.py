"""When a pod was created and bound, read from the pod object: the starting points of the
create-to-bound and bound-to-allocated histograms. Pure: no I/O, no clock.

Every time here has whole-second resolution (creationTimestamp, the PodScheduled
condition's lastTransitionTime and `hami.io/bind-time` all drop the fraction), so a figure
measured from one of them is late by up to a second; the histograms' buckets say so.
A value that is missing or unreadable gives None: a latency sample is skipped, never
guessed, and nothing a tenant wrote can raise here.
"""

from __future__ import annotations

from datetime import datetime

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import CodecError, decode_unix_seconds
from hami_dcu.common.protocol.objects import JSON


def _rfc3339(value: object) -> datetime | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def created_at(pod: JSON) -> datetime | None:
    meta = pod.get("metadata")
    return _rfc3339(meta.get("creationTimestamp")) if isinstance(meta, dict) else None


def scheduled_at(pod: JSON) -> datetime | None:
    """When the pod's PodScheduled condition turned True (the API server sets it with the Binding)."""
    status = pod.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, dict) and condition.get("type") == "PodScheduled" \
                and condition.get("status") == "True":
            return _rfc3339(condition.get("lastTransitionTime"))
    return None


def bound_at(pod: JSON) -> datetime | None:
    """hami-scheduler's `hami.io/bind-time` (written with the Binding), else PodScheduled's time."""
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    stamp = annotations.get(keys.POD_BIND_TIME) if isinstance(annotations, dict) else None
    if isinstance(stamp, str):
        try:
            return decode_unix_seconds(stamp)
        except CodecError:
            pass
    return scheduled_at(pod)


def seconds_between(start: datetime | None, end: datetime) -> float | None:
    """`end - start` in seconds, never below 0: the two times may come from the clocks of two
    hosts (API server and node) that disagree by a little. None when `start` is unknown."""
    if start is None:
        return None
    return max(0.0, (end - start).total_seconds())
