"""What the device plugin reads from and writes to the API server about its node and the pods
bound to it, each retried as its failure deserves: the node and its pods, the pod annotations
that mark an allocation's progress, Warning events, the node lock's release, the node's
registration. Decides nothing (core.py does); service.py calls it.

With a NodeCache (fed by nodewatch.py), the pods this node's writes return are put in it, and
the reconcile's reads come from it while it is in sync.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from hami_dcu.common.io.kube import ConflictError, Kube, KubeError, NotFoundError, UnreachableError
from hami_dcu.common.io.nodelock import LockError, NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.errors import DevicePluginError
from hami_dcu.deviceplugin.core import AllocateFailed
from hami_dcu.deviceplugin.nodecache import NodeCache, Snapshot

log = logging.getLogger(__name__)
JSON = dict[str, Any]
NODE_READ_ATTEMPTS = 3
WRITE_ATTEMPTS = 5  # a pod write, event or lock release that failed transiently is tried this often
EVENT_COMPONENT = "hami-dcu-device-plugin"


def _transient(exc: KubeError) -> bool:
    """Worth repeating: the server was busy, lost the answer, or raced another write."""
    return isinstance(exc, ConflictError | UnreachableError) or exc.status == 429 or exc.status >= 500


def _backoff(attempt: int) -> None:
    time.sleep(0.05 * 2**attempt)


class StaleCache(DevicePluginError, RuntimeError):
    """A write conditioned on the cached pod's resourceVersion was refused: the cache was
    behind the API server (cachereads.py). Not a failure anyone is told of: service.py
    catches it and decides the call again on fresh reads."""


def _applied(pod: JSON, annotations: dict[str, str | None]) -> bool:
    held = (pod.get("metadata") or {}).get("annotations") or {}
    return all(held.get(key) == value for key, value in annotations.items())


class NodeApi:
    def __init__(self, kube: Kube, node: str, lock_timeout: timedelta, cache: NodeCache | None = None) -> None:
        self.kube = kube
        self.node = node
        self.node_lock = NodeLock(kube, timeout=lock_timeout)
        self.cache = cache

    # --- the watch-fed copy --------------------------------------------------------------

    def cached(self) -> Snapshot | None:
        return self.cache.snapshot() if self.cache is not None else None

    def known_node(self) -> JSON:
        """The node from the copy while in sync, else read (the reconcile: what it removes is a
        compare-and-swap on exactly the version it judged, so an old copy only delays it)."""
        node_obj = self.cache.node_object() if self.cache is not None else None
        return node_obj if node_obj is not None else self.node_object()

    def known_pods(self) -> list[JSON]:
        """The node's pods from the copy while in sync, else listed. The copy holds every pod
        this plugin served (its writes are put in it), so none looks gone that is not."""
        pods = self.cache.pods() if self.cache is not None else None
        return pods if pods is not None else self.node_pods()

    # --- reads -------------------------------------------------------------------------------

    def node_object(self) -> JSON:
        return self.kube.get_node(self.node)

    def node_for_allocate(self) -> JSON:
        """The node, with two quick retries: without it the pod being admitted is unknown, so a
        failure can mark no pod failed and release no lock (the lock then waits for expiry)."""
        for attempt in range(NODE_READ_ATTEMPTS):
            try:
                return self.kube.get_node(self.node)
            except NotFoundError as exc:
                raise AllocateFailed(f"node {self.node} does not exist in the API server") from exc
            except KubeError as exc:
                if attempt + 1 == NODE_READ_ATTEMPTS:
                    raise AllocateFailed(
                        f"cannot read node {self.node} to find the pod being admitted: {exc}"
                    ) from exc
                _backoff(attempt)
        raise AssertionError("unreachable")

    def pending_pods(self) -> list[JSON]:
        """This node's Pending pods, filtered by the server: one list shows the pod being
        admitted and every pod that could be the one instead."""
        pods: list[JSON] = self.kube.list_pods(field_selector=f"spec.nodeName={self.node},status.phase=Pending").items
        return pods

    def node_pods(self) -> list[JSON]:
        pods: list[JSON] = self.kube.list_pods(field_selector=f"spec.nodeName={self.node}").items
        return pods

    def pod(self, namespace: str, name: str) -> JSON:
        return self.kube.get_pod(namespace, name)

    # --- pod writes and events -----------------------------------------------------------------

    def patch_pod(self, namespace: str, name: str, annotations: dict[str, str | None],
                  expect: str | None = None) -> JSON:
        """Merge-patch the pod's annotations, retrying transient errors: the patch sets
        absolute values, so repeating one that landed (its answer lost) changes nothing.
        With `expect` (a resourceVersion from the cache) the write is conditioned on it:
        StaleCache when the pod has changed or is gone."""
        for attempt in range(WRITE_ATTEMPTS):
            try:
                pod = self.kube.patch_pod_metadata(namespace, name, annotations=annotations, resource_version=expect)
            except (ConflictError, NotFoundError) as exc:
                if expect is not None:
                    raise StaleCache(f"pod {namespace}/{name} is no longer at version {expect}: {exc}") from exc
                if isinstance(exc, NotFoundError) or attempt + 1 == WRITE_ATTEMPTS:
                    raise
                failed: KubeError = exc
            except KubeError as exc:
                if not _transient(exc) or attempt + 1 == WRITE_ATTEMPTS:
                    raise
                failed = exc
                if expect is not None:  # the outcome is unknown: did our conditioned write land?
                    landed = self._landed(namespace, name, annotations, expect)
                    if landed is not None:
                        return landed
            else:
                if self.cache is not None:
                    self.cache.wrote_pod(pod)
                return pod
            log.info("pod %s/%s on node %s: annotation write failed (%s), retrying", namespace, name, self.node,
                     failed)
            _backoff(attempt)
        raise AssertionError("unreachable")

    def _landed(self, namespace: str, name: str, annotations: dict[str, str | None], expect: str) -> JSON | None:
        """After a conditioned write with an unknown outcome: the pod if it landed, None if the
        pod is still at `expect` (write again); StaleCache when someone else changed it."""
        try:
            pod = self.kube.get_pod(namespace, name)
        except NotFoundError as exc:
            raise StaleCache(f"pod {namespace}/{name} is gone") from exc
        if (pod.get("metadata") or {}).get("resourceVersion") == expect:
            return None
        if _applied(pod, annotations):
            if self.cache is not None:
                self.cache.wrote_pod(pod)
            return pod
        raise StaleCache(f"pod {namespace}/{name} changed since version {expect}")

    def mark_failed(self, namespace: str, name: str, why: str) -> None:
        """The pod's allocation failed: say so on the pod (bind-phase, an event) and free the
        node for the next bind."""
        log.error("pod %s/%s: allocation on node %s failed: %s", namespace, name, self.node, why)
        try:
            self.patch_pod(namespace, name, {keys.POD_BIND_PHASE: keys.BIND_PHASE_FAILED})
        except KubeError as exc:
            log.warning("pod %s/%s: could not mark %s=failed: %s", namespace, name, keys.POD_BIND_PHASE, exc)
        self.pod_event(namespace, name, "DCUAllocationFailed", f"node {self.node}: {why}")
        self.release(namespace, name)

    def pod_event(self, namespace: str, name: str, reason: str, message: str) -> None:
        self._post_event({"kind": "Pod", "metadata": {"namespace": namespace, "name": name}}, reason, message)

    def node_event(self, reason: str, message: str) -> None:
        self._post_event({"kind": "Node", "metadata": {"name": self.node}}, reason, message)

    def _post_event(self, regarding: JSON, reason: str, message: str) -> None:
        """A Warning event, retried a little: it is what tells the user why a pod failed."""
        meta = regarding["metadata"]
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self.kube.create_event(regarding, reason, message, "Warning", component=EVENT_COMPONENT)
                return
            except KubeError as exc:
                if not _transient(exc) or attempt + 1 == WRITE_ATTEMPTS:
                    log.warning("%s %s on node %s: could not record event %s: %s", regarding["kind"],
                                meta.get("name"), self.node, reason, exc)
                    return
                _backoff(attempt)

    # --- the node lock -----------------------------------------------------------------------

    def release(self, namespace: str, name: str, known: JSON | None = None) -> None:
        """Release the pod's lock, retrying a failure: a lock left behind blocks every other
        pod's bind to this node. If it still fails, the reconcile (and the extender, which
        watches the pod's bind-phase) release it once they see the pod done with it. Never
        raises: the allocation's own outcome is what the caller reports."""
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self.node_lock.release(self.node, namespace, name, known)
                return
            except (LockError, KubeError) as exc:
                known = None
                log.warning("node %s: could not release the lock of %s/%s (attempt %d): %s", self.node, namespace,
                            name, attempt + 1, exc)
                _backoff(attempt)
            except Exception as exc:  # never hide the allocation's own outcome behind this
                log.warning("node %s: could not release the lock of %s/%s: %r", self.node, namespace, name, exc)
                return

    def release_value(self, value: str, known: JSON | None = None) -> bool:
        """Remove the lock if it still holds exactly `value`; False when it could not."""
        try:
            return self.node_lock.release_value(self.node, value, known)
        except (LockError, KubeError) as exc:  # the reconcile tries again
            log.warning("node %s: could not release the lock %r: %s", self.node, value, exc)
            return False

    # --- registration ------------------------------------------------------------------------

    def annotate_node(self, annotations: dict[str, str | None]) -> None:
        self.kube.patch_node_metadata(self.node, annotations=annotations)

    def write_node_status(self, status: dict[str, dict[str, str]]) -> None:
        self.kube.patch_node_status(self.node, status)
