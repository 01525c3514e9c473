"""Server-side printing: `meta.k8s.io/v1` Tables, as kube-apiserver answers `kubectl get`.

kubectl asks for a Table in its Accept header and prints the columns it is given; without
one it falls back to NAME and AGE only. The columns are kube's own (pkg/printers/internalversion)
for the resources an operator looks at on the demo cluster: pods, nodes, events and
namespaces; any other resource gets NAME and AGE. Columns with priority 1 show with `-o wide`.
Pure: objects in, a Table out; `now` is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from hami_dcu.cli.localcluster.apiserver.resources import JSON

Column = tuple[str, str, int]  # name, type, priority
Row = Callable[[JSON, datetime], list[object]]


def wants_table(accept: str) -> bool:
    """kubectl offers `application/json;as=Table;v=v1;g=meta.k8s.io` first."""
    for part in accept.split(","):
        params = dict(p.strip().partition("=")[::2] for p in part.split(";")[1:])
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return True
    return False


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration, the AGE column's format."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"


def _age(timestamp: str | None, now: datetime) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    return human_duration((now - moment).total_seconds())


def _meta(obj: JSON) -> JSON:
    return obj.get("metadata") or {}


# --- pods ---------------------------------------------------------------------------------

POD_COLUMNS: list[Column] = [("Name", "string", 0), ("Ready", "string", 0), ("Status", "string", 0),
                             ("Restarts", "string", 0), ("Age", "string", 0), ("IP", "string", 1),
                             ("Node", "string", 1), ("Nominated Node", "string", 1), ("Readiness Gates", "string", 1)]


def pod_status_reason(pod: JSON) -> str:
    """The STATUS column: Terminating, a container's waiting/terminated reason, the pod's
    reason, else its phase (kube's printPod, reduced to the fields the local kubelet sets)."""
    if _meta(pod).get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        for key in ("waiting", "terminated"):
            if (state.get(key) or {}).get("reason"):
                reason = state[key]["reason"]
    if reason == "Pending" and not (pod.get("spec") or {}).get("nodeName"):
        return "Pending"
    return reason


def _pod_row(pod: JSON, now: datetime) -> list[object]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses")
    if statuses:
        ready = sum(1 for c in statuses if c.get("ready"))
        restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    else:
        # The local kubelet sets the pod's Ready condition, not per-container statuses.
        pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        ready, restarts = (len(containers) if pod_ready else 0), 0
    gates = spec.get("readinessGates") or []
    return [_meta(pod).get("name", ""), f"{ready}/{len(containers)}", pod_status_reason(pod), str(restarts),
            _age(_meta(pod).get("creationTimestamp"), now), status.get("podIP") or "<none>",
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
            f"0/{len(gates)}" if gates else "<none>"]


# --- nodes --------------------------------------------------------------------------------

NODE_COLUMNS: list[Column] = [("Name", "string", 0), ("Status", "string", 0), ("Roles", "string", 0),
                              ("Age", "string", 0), ("Version", "string", 0), ("Internal-IP", "string", 1),
                              ("External-IP", "string", 1), ("OS-Image", "string", 1),
                              ("Kernel-Version", "string", 1), ("Container-Runtime", "string", 1)]
ROLE_PREFIX = "node-role.kubernetes.io/"


def _node_row(node: JSON, now: datetime) -> list[object]:
    status = node.get("status") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [_meta(node).get("name", ""), _node_state(node), ",".join(_node_roles(node)),
            _age(_meta(node).get("creationTimestamp"), now),
            info.get("kubeletVersion") or "", addresses.get("InternalIP") or "<none>",
            addresses.get("ExternalIP") or "<none>", info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>"]


def _node_state(node: JSON) -> str:
    """kubectl's STATUS column: the Ready condition, and whether the node is cordoned."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
    state = {"True": "Ready", "False": "NotReady"}.get(ready or "", "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    return state


def _node_roles(node: JSON) -> list[str]:
    labels = _meta(node).get("labels") or {}
    return sorted(k[len(ROLE_PREFIX):] for k in labels if k.startswith(ROLE_PREFIX)) or ["<none>"]


# --- events -------------------------------------------------------------------------------

EVENT_COLUMNS: list[Column] = [("Last Seen", "string", 0), ("Type", "string", 0), ("Reason", "string", 0),
                               ("Object", "string", 0), ("Subobject", "string", 1), ("Source", "string", 1),
                               ("Message", "string", 0), ("First Seen", "string", 1), ("Count", "string", 1),
                               ("Name", "string", 1)]


def _event_row(event: JSON, now: datetime) -> list[object]:
    involved = event.get("involvedObject") or {}
    last = event.get("lastTimestamp") or event.get("eventTime") or _meta(event).get("creationTimestamp")
    first = event.get("firstTimestamp") or event.get("eventTime") or _meta(event).get("creationTimestamp")
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
    return [_age(last, now), event.get("type") or "", event.get("reason") or "",
            f"{(involved.get('kind') or '').lower()}/{involved.get('name') or ''}", involved.get("fieldPath") or "",
            source, (event.get("message") or "").strip(), _age(first, now), str(event.get("count") or 1),
            _meta(event).get("name", "")]


# --- namespaces and the rest --------------------------------------------------------------

NAMESPACE_COLUMNS: list[Column] = [("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)]


def _namespace_row(namespace: JSON, now: datetime) -> list[object]:
    return [_meta(namespace).get("name", ""), (namespace.get("status") or {}).get("phase") or "Active",
            _age(_meta(namespace).get("creationTimestamp"), now)]


DEFAULT_COLUMNS: list[Column] = [("Name", "string", 0), ("Age", "string", 0)]


def _default_row(obj: JSON, now: datetime) -> list[object]:
    return [_meta(obj).get("name", ""), _age(_meta(obj).get("creationTimestamp"), now)]


PRINTERS: dict[str, tuple[list[Column], Row]] = {
    "pods": (POD_COLUMNS, _pod_row),
    "nodes": (NODE_COLUMNS, _node_row),
    "events": (EVENT_COLUMNS, _event_row),
    "namespaces": (NAMESPACE_COLUMNS, _namespace_row),
}


def table(resource: str, items: Sequence[JSON], resource_version: str = "", now: datetime | None = None) -> JSON:
    """A Table of `items`; each row carries the object's metadata (PartialObjectMetadata),
    as kube does by default, so `kubectl get -A` and `--show-labels` work."""
    now = now or datetime.now(UTC)
    columns, row = PRINTERS.get(resource, (DEFAULT_COLUMNS, _default_row))
    definitions = [{"name": name, "type": kind, "format": "name" if name == "Name" else "", "description": "",
                    "priority": priority} for name, kind, priority in columns]
    rows = [{"cells": row(item, now), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                 "metadata": _meta(item)}} for item in items]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": definitions, "rows": rows}
