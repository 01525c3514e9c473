"""The plugin's own node and the pods bound to it, as its watches (nodewatch.py) last showed
them and as its own writes returned them. Holds state, decides nothing, does no I/O.

A copy is `synced` while its watch is known to follow the API server: after a list, and after
the first event of a watch resumed from where a broken one stopped. Out of sync (a watch
broken, not yet resumed), the snapshot is None and the plugin reads from the API server.

A write of the plugin's own answers with the object as stored; it is taken in at once, so the
next Allocate on this node sees the progress it made without waiting for its watch. Newer
wins: an event or an answer older than what is held (by resourceVersion) is dropped, so an
answer taken in is never rolled back by the watch's older events behind it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]
NODE, PODS = "node", "pods"


def resource_version(obj: JSON) -> int | None:
    """The object's resourceVersion as a number; None when absent or not a number (then it
    is never compared, and a watch event is taken as it comes, in the watch's order)."""
    value = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(value) if value.isdigit() else None


def _older(incoming: JSON, held: JSON | None) -> bool:
    if held is None:
        return False
    new, old = resource_version(incoming), resource_version(held)
    return new is not None and old is not None and new < old


@dataclass(frozen=True)
class Snapshot:
    node: JSON
    pending: list[JSON]  # the node's pods in phase Pending, as the server's status.phase filter gives


class NodeCache:
    def __init__(self, node: str) -> None:
        self.node = node
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified on every change taken in
        self._node_obj: JSON | None = None
        self._pods: dict[str, JSON] = {}  # uid -> pod
        self._synced = {NODE: False, PODS: False}

    # --- fed by the watches ------------------------------------------------------------

    def replace_node(self, node_obj: JSON | None) -> None:
        """A fresh list of the node (None: it does not exist)."""
        with self._lock:
            self._node_obj = node_obj
            self._synced[NODE] = node_obj is not None
            self._changed.notify_all()

    def replace_pods(self, pods: list[JSON]) -> None:
        """A fresh list of the node's pods: everything held before is replaced."""
        with self._lock:
            self._pods = {p["metadata"]["uid"]: p for p in pods if (p.get("metadata") or {}).get("uid")}
            self._synced[PODS] = True
            self._changed.notify_all()

    def node_event(self, kind: str, node_obj: JSON) -> None:
        with self._lock:
            self._synced[NODE] = kind != "DELETED"
            if kind == "DELETED":
                self._node_obj = None
            elif not _older(node_obj, self._node_obj):
                self._node_obj = node_obj
            self._changed.notify_all()

    def pod_event(self, kind: str, pod: JSON) -> None:
        uid = (pod.get("metadata") or {}).get("uid")
        with self._lock:
            self._synced[PODS] = True
            if not uid:
                return
            if kind == "DELETED":
                self._pods.pop(uid, None)
            elif not _older(pod, self._pods.get(uid)):
                self._pods[uid] = pod
            self._changed.notify_all()

    def resumed(self, kind: str) -> None:
        """A resumed watch delivered its first event (a bookmark too): it follows again."""
        with self._lock:
            self._synced[kind] = kind == PODS or self._node_obj is not None
            self._changed.notify_all()

    def lost(self, kind: str) -> None:
        """The watch of `kind` broke: what is held may miss changes until it resumes."""
        with self._lock:
            self._synced[kind] = False

    # --- the plugin's own writes -------------------------------------------------------

    def wrote_pod(self, pod: JSON) -> None:
        """A pod as our write stored it; taken only for a pod bound here that is held or newer."""
        uid = (pod.get("metadata") or {}).get("uid")
        if not uid or (pod.get("spec") or {}).get("nodeName") != self.node:
            return
        with self._lock:
            if not _older(pod, self._pods.get(uid)):
                self._pods[uid] = pod

    # --- read by the plugin ------------------------------------------------------------

    def snapshot(self) -> Snapshot | None:
        """The node and its Pending pods, or None while either watch is out of sync."""
        with self._lock:
            if not all(self._synced.values()) or self._node_obj is None:
                return None
            pending = [p for p in self._pods.values() if (p.get("status") or {}).get("phase") == "Pending"]
            return Snapshot(self._node_obj, pending)

    def wait_for_change(self, timeout: float) -> None:
        """Return at the next change taken in, or after `timeout` seconds."""
        with self._changed:
            self._changed.wait(timeout)

    def node_object(self) -> JSON | None:
        with self._lock:
            return self._node_obj if self._synced[NODE] else None

    def pods(self) -> list[JSON] | None:
        """Every pod bound here, or None while the pod watch is out of sync."""
        with self._lock:
            return list(self._pods.values()) if self._synced[PODS] else None
