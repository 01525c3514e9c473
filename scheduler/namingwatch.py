"""The scheduler's start-up look for components of the other naming set (common/protocol/namingcheck.py):
one list of nodes and one of Pending pods, a log line and Warning events on what shows it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from hami_dcu.common.io.kube import AsyncKube, KubeError
from hami_dcu.common.protocol.keys import Naming
from hami_dcu.common.protocol.namingcheck import EVENT_REASON, find_traces, report

log = logging.getLogger(__name__)
JSON = dict[str, Any]
EventPoster = Callable[[JSON, str, str, str], Awaitable[object]]
_EVENTS_MAX = 5  # a handful of objects carry the event; the log line names the count


async def check_naming(kube: AsyncKube, naming: Naming, post_event: EventPoster) -> str | None:
    """The mismatch message, None when the cluster shows nothing of the other set."""
    try:
        nodes = (await kube.list_nodes()).items
        pods = (await kube.list_pods(field_selector="status.phase=Pending")).items
    except KubeError as exc:
        log.warning("could not look for components of the other naming set: %s", exc)
        return None
    traces = find_traces(nodes, pods, naming)
    if not traces:
        return None
    message = report("scheduler", naming, traces)
    log.warning("%s", message)
    by_name = {(n.get("metadata") or {}).get("name"): n for n in nodes}
    regarding = [by_name[name] for name in (traces.registering + traces.requested) if name in by_name]
    regarding += [p for p in pods if _key(p) in set(traces.pending)]
    for obj in regarding[:_EVENTS_MAX]:
        try:
            await post_event(obj, EVENT_REASON, message, "Warning")
        except KubeError as exc:
            log.warning("could not record the naming mismatch: %s", exc)
    return message


def _key(pod: JSON) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
