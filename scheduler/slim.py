"""The parts of listed nodes and pods the extender reads, and nothing else (pure).

A list of 40,000 pods decodes to gigabytes of dicts (managedFields, env, volumes, status);
the cache reads a dozen fields of each. The informer lists page by page and keeps each
object trimmed to these fields (still a Kubernetes-shaped dict, so the cache reads listed
and watched objects alike), so memory follows the cluster's size in what we use, not in
what the API server stores. Strings that repeat across objects (node names, namespaces,
phases) are interned: one copy each.

What is kept: metadata name, namespace, uid, resourceVersion, deletionTimestamp and the
`hami.io/` annotations (both naming sets' keys start so); for pods spec.nodeName, the init
containers' names (their count places the pod's containers) and status.phase, and for a pod
not bound yet its containers' extended resources (a name with a `/`, such as
`hygon.com/dcumem`: what a pod waiting for a node asks counts against its namespace's quota at
admission in Volcano mode, scheduler/quotas.py); for nodes status.allocatable.
"""

from __future__ import annotations

import sys
from typing import Any

JSON = dict[str, Any]
_OUR_PREFIX = "hami.io/"
_METADATA = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")


def _metadata(meta: JSON) -> JSON:
    kept: JSON = {key: meta[key] for key in _METADATA if key in meta}
    namespace = kept.get("namespace")
    if isinstance(namespace, str):
        kept["namespace"] = sys.intern(namespace)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        ours = {key: value for key, value in annotations.items() if key.startswith(_OUR_PREFIX)}
        if ours:
            kept["annotations"] = ours
    return kept


def _init_container(container: JSON) -> JSON:
    """Its name, and whether it is a native sidecar (it holds its cards beside the app's)."""
    if container.get("restartPolicy") == "Always":
        return {"name": container.get("name"), "restartPolicy": "Always"}
    return {"name": container.get("name")}


def _extended(container: JSON) -> JSON:
    """The container's extended resources (a name with a `/`) in limits and requests."""
    resources = container.get("resources")
    kept: JSON = {}
    if isinstance(resources, dict):
        for section in ("limits", "requests"):
            values = resources.get(section)
            if isinstance(values, dict):
                extended = {k: v for k, v in values.items() if isinstance(k, str) and "/" in k}
                if extended:
                    kept[section] = extended
    return {"resources": kept} if kept else {}


def slim_pod(pod: JSON) -> JSON:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    kept_spec: JSON = {}
    node = spec.get("nodeName")
    if node:
        kept_spec["nodeName"] = sys.intern(node) if isinstance(node, str) else node
    init = spec.get("initContainers")
    if isinstance(init, list) and init:
        kept_spec["initContainers"] = [_init_container(c) if isinstance(c, dict) else c for c in init]
    containers = spec.get("containers")
    if not node and isinstance(containers, list):
        kept_spec.update(_asked(init, containers))
    phase = status.get("phase")
    return {"metadata": _metadata(pod.get("metadata") or {}), "spec": kept_spec,
            "status": {"phase": sys.intern(phase)} if isinstance(phase, str) else {}}


def _asked(init: Any, containers: list[Any]) -> JSON:
    """A pod not bound yet: its containers with what they ask, when any asks an extended
    resource (the cache counts a waiting DCU pod by it); a pod asking none keeps no container."""
    inits = [{**_init_container(c), **_extended(c)} if isinstance(c, dict) else c
             for c in (init if isinstance(init, list) else [])]
    apps = [{"name": c.get("name"), **_extended(c)} if isinstance(c, dict) else c for c in containers]
    if not any(isinstance(c, dict) and "resources" in c for c in inits + apps):
        return {}
    return {"initContainers": inits, "containers": apps} if inits else {"containers": apps}


def slim_node(node: JSON) -> JSON:
    allocatable = (node.get("status") or {}).get("allocatable")
    return {"metadata": _metadata(node.get("metadata") or {}),
            "status": {"allocatable": allocatable} if isinstance(allocatable, dict) else {}}
