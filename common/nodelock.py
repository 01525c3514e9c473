"""The node lock `hami.io/mutex.lock`: which pod is between /bind and the plugin's Allocate.

The kubelet's Allocate call names no pod, so the scheduler locks the node for the pod it
binds and the device plugin serves the pod the lock names. Value and key are HAMi's
(reference §4.8); what we do differently:

* every write is a compare-and-swap on the node's resourceVersion, and the lock is read
  again before every retry, so a lock another replica just took is never overwritten;
* a lock older than the timeout, or whose holder pod no longer exists, is taken over;
* a lock held by the same pod is success (idempotent re-lock);
* contention raises `LockContention`, which names the holder;
* release only ever removes the caller's own lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hami_dcu.common import keys
from hami_dcu.common.codec import CodecError, LockValue, decode_lock, encode_lock
from hami_dcu.common.kube import ConflictError, Kube, NotFoundError

log = logging.getLogger(__name__)

DEFAULT_LOCK_TIMEOUT = timedelta(seconds=300)
# Compare-and-swap attempts when the node changes under us for unrelated reasons
# (another annotation written between our read and our patch).
_CAS_ATTEMPTS = 8


class LockContention(RuntimeError):
    """The node is locked by another live pod."""

    def __init__(self, node: str, lock: LockValue) -> None:
        self.node = node
        self.lock = lock
        super().__init__(f"node {node} is locked by {lock.holder} since {lock.since.isoformat()}")


class LockError(RuntimeError):
    """The lock could not be written (the node kept changing, or is gone)."""


@dataclass(frozen=True)
class Takeover:
    """Why an existing lock was replaced; logged and returned for metrics."""

    previous: str
    reason: str  # "expired" | "holder-gone" | "malformed"


class NodeLock:
    def __init__(
        self,
        kube: Kube,
        timeout: timedelta = DEFAULT_LOCK_TIMEOUT,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.timeout = timeout
        self.clock = clock

    def acquire(self, node: str, namespace: str, name: str) -> Takeover | None:
        """Lock `node` for pod namespace/name. Returns what was taken over, if anything.
        Raises LockContention when a live pod holds a fresh lock."""
        for _ in range(_CAS_ATTEMPTS):
            current = self.kube.get_node(node)
            meta = current.get("metadata") or {}
            value = (meta.get("annotations") or {}).get(keys.NODE_LOCK)
            takeover = None
            if value:
                takeover = self._judge(node, value, namespace, name)
                if takeover is None:
                    return None  # already ours
            lock = LockValue(since=self.clock(), namespace=namespace, name=name)
            try:
                self.kube.patch_node_metadata(
                    node, annotations={keys.NODE_LOCK: encode_lock(lock)}, resource_version=meta.get("resourceVersion")
                )
            except ConflictError:
                continue  # the node changed since we read it: read the lock again
            if takeover:
                log.warning("node %s: took over lock %r from a %s holder for %s/%s", node, takeover.previous,
                            takeover.reason, namespace, name)
            return takeover
        raise LockError(f"node {node}: lock not written after {_CAS_ATTEMPTS} attempts (node keeps changing)")

    def _judge(self, node: str, value: str, namespace: str, name: str) -> Takeover | None:
        """None when the lock is already ours; a Takeover when it may be replaced; raise otherwise."""
        try:
            lock = decode_lock(value)
        except CodecError:
            # Nobody can ever release a lock nobody can read: replacing it is the only way on.
            return Takeover(previous=value, reason="malformed")
        if lock.held_by(namespace, name):
            return None
        if self.clock() - lock.since > self.timeout:
            return Takeover(previous=value, reason="expired")
        if lock.name is not None and not self._pod_exists(lock.namespace or "", lock.name):
            return Takeover(previous=value, reason="holder-gone")
        raise LockContention(node, lock)

    def _pod_exists(self, namespace: str, name: str) -> bool:
        try:
            self.kube.get_pod(namespace, name)
        except NotFoundError:
            return False
        return True

    def release(self, node: str, namespace: str, name: str, known: dict | None = None) -> bool:
        """Remove the lock if (and only if) pod namespace/name holds it. True when removed.
        `known` is a node object the caller already read: it saves a GET when still current."""
        for _ in range(_CAS_ATTEMPTS):
            try:
                current, known = (known, None) if known is not None else (self.kube.get_node(node), None)
            except NotFoundError:
                return False
            meta = current.get("metadata") or {}
            value = (meta.get("annotations") or {}).get(keys.NODE_LOCK)
            if not value:
                return False
            try:
                lock = decode_lock(value)
            except CodecError:
                return False
            if not lock.held_by(namespace, name):
                log.info("node %s: lock held by %s, not released for %s/%s", node, lock.holder, namespace, name)
                return False
            try:
                self.kube.patch_node_metadata(
                    node, annotations={keys.NODE_LOCK: None}, resource_version=meta.get("resourceVersion")
                )
            except ConflictError:
                continue
            return True
        raise LockError(f"node {node}: lock of {namespace}/{name} not released after {_CAS_ATTEMPTS} attempts")

    def holder(self, node: str) -> LockValue | None:
        """The current lock of `node`, None when unlocked or unreadable."""
        value = ((self.kube.get_node(node).get("metadata") or {}).get("annotations") or {}).get(keys.NODE_LOCK)
        if not value:
            return None
        try:
            return decode_lock(value)
        except CodecError:
            return None
