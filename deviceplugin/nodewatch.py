"""Two watches feeding the plugin's NodeCache, as the kubelet's own reflectors follow its node
and its pods: the node by `metadata.name`, the pods by `spec.nodeName`. With them, what the
plugin reads per pod (the node and its lock, the Pending pods, the lock's holder) comes from
memory; the API server is asked only when the cache is out of sync or shows the admission
unproven (service.py, cachereads.py).

Each watch lists, then watches from the list's resourceVersion. A stream the server closes (its
timeout) is resumed from the last resourceVersion seen; a broken one marks the cache out of
sync, waits a second and resumes the same way; a 410 Gone (that version compacted away) lists
again. Logs name the node.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from hami_dcu.common.io.kube import GoneError, Kube, KubeError
from hami_dcu.deviceplugin.nodecache import NODE, PODS, NodeCache

log = logging.getLogger(__name__)
JSON = dict[str, Any]
WATCH_SECONDS = 300  # the server ends each stream after this; it is resumed at once
RETRY_SECONDS = 1.0


class NodeWatch:
    def __init__(self, kube: Kube, node: str, cache: NodeCache, watch_seconds: int = WATCH_SECONDS,
                 retry_seconds: float = RETRY_SECONDS) -> None:
        self.kube = kube
        self.node = node
        self.cache = cache
        self.watch_seconds = watch_seconds
        self.retry_seconds = retry_seconds
        self.stopping = threading.Event()
        self.versions = {NODE: "", PODS: ""}  # where each watch resumes; "" lists first
        self._threads = [threading.Thread(target=self.follow, args=(kind,), name=f"watch-{kind}-{node}", daemon=True)
                         for kind in (NODE, PODS)]

    def start(self) -> NodeWatch:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop after the streams under way end (daemon threads: a process exit does not wait)."""
        self.stopping.set()

    # --- one kind --------------------------------------------------------------------------

    def follow(self, kind: str) -> None:
        while not self.stopping.is_set():
            try:
                self.step(kind)
            except GoneError:
                log.info("node %s: the %s watch's version %s is gone (410), listing again", self.node, kind,
                         self.versions[kind])
                self.cache.lost(kind)
                self.versions[kind] = ""
            except KubeError as exc:
                log.warning("node %s: the %s watch broke (%s), resuming from version %s in %.0fs", self.node, kind,
                            exc, self.versions[kind] or "(a new list)", self.retry_seconds)
                self.cache.lost(kind)
                self.stopping.wait(self.retry_seconds)

    def step(self, kind: str) -> None:
        """List when there is no version to resume from, then follow one watch stream to its
        end, keeping the last version seen (a list's too: a stream that breaks at once resumes
        from it). Raises what the API server answered."""
        if not self.versions[kind]:
            self.versions[kind] = self._list(kind)
        for event in self._watch(kind, self.versions[kind]):
            obj = event.get("object") or {}
            self.versions[kind] = str((obj.get("metadata") or {}).get("resourceVersion") or self.versions[kind])
            self._apply(kind, str(event.get("type", "")), obj)
            if self.stopping.is_set():
                break

    def _list(self, kind: str) -> str:
        if kind == NODE:
            body = self.kube.request("GET", "/api/v1/nodes", query={"fieldSelector": f"metadata.name={self.node}"})
            items = list(body.get("items") or [])
            self.cache.replace_node(items[0] if items else None)
            return str((body.get("metadata") or {}).get("resourceVersion") or "")
        listed = self.kube.list_pods(field_selector=f"spec.nodeName={self.node}")
        self.cache.replace_pods(listed.items)
        return listed.resource_version

    def _watch(self, kind: str, version: str) -> Iterator[JSON]:
        if kind == NODE:
            return self.kube.watch("/api/v1/nodes", version, self.watch_seconds,
                                   field_selector=f"metadata.name={self.node}")
        return self.kube.watch_pods(version, self.watch_seconds, field_selector=f"spec.nodeName={self.node}")

    def _apply(self, kind: str, event_type: str, obj: JSON) -> None:
        if event_type == "BOOKMARK":
            self.cache.resumed(kind)
            return
        apply: Callable[[str, JSON], None] = self.cache.node_event if kind == NODE else self.cache.pod_event
        apply(event_type, obj)
