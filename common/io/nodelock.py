"""The node lock `hami.io/mutex.lock`: which pod is between /bind and the plugin's Allocate.

The kubelet's Allocate call names no pod, so the scheduler locks the node for the pod it
binds and the device plugin serves the pod the lock names (docs/architecture.md, The node
lock). Value and key are HAMi's, byte for byte: `<RFC3339>,<namespace>,<name>`. What we do
differently:

* every write is a compare-and-swap on the node's resourceVersion, and the lock is read
  again before every retry, so a lock another replica just took is never overwritten;
* a lock belongs to the attempt that wrote it: `take` returns the exact value written, and
  `release_value` removes that value only. A lock naming the same pod but written by
  another attempt (a duplicate /bind, another replica) is contention, never "ours", so one
  attempt's cleanup can never remove the lock another attempt's Allocate still needs;
* a write whose answer is lost (500 or no answer after the server applied it) is read
  back before it counts as done or not done; if even that fails, `LockUncertain` carries
  the value so the caller can still remove it;
* a lock whose holder no longer needs it (lockpurpose.py: expired, holder gone, finished,
  running, bound elsewhere, allocation done or failed, unbound past the bind window) is
  taken over, and the reason is reported for metrics;
* contention raises `LockContention`, which names the holder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hami_dcu.common.io.kube import JSON, ConflictError, Kube, KubeError, NotFoundError, UnreachableError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol import lockpurpose as purpose
from hami_dcu.common.protocol.codec import CodecError, LockValue, decode_lock, encode_lock
from hami_dcu.common.protocol.errors import HamiDcuError

log = logging.getLogger(__name__)

DEFAULT_LOCK_TIMEOUT = timedelta(seconds=300)
# How long one bind may hold a lock before its Binding lands; an unbound holder of an older
# lock was left behind by a bind that died. Far above a real bind's lock-to-Binding time
# (two API calls and a bounded settle wait).
DEFAULT_BIND_WINDOW = timedelta(seconds=30)
# Compare-and-swap attempts when the node changes under us for unrelated reasons
# (another annotation written between our read and our patch), or a write fails.
_CAS_ATTEMPTS = 8
_READ_BACK_ATTEMPTS = 3


class LockContention(HamiDcuError, RuntimeError):
    """The node is locked by a live holder. `same_pod`: the lock names the pod we want to
    lock for, written by another attempt (a duplicate /bind), which owns it."""

    http_status = 409
    grpc_code = "ABORTED"

    def __init__(self, node: str, lock: LockValue, same_pod: bool = False) -> None:
        self.node = node
        self.lock = lock
        self.same_pod = same_pod
        owner = "another bind attempt of the same pod" if same_pod else lock.holder
        super().__init__(f"node {node} is locked by {owner} since {lock.since.isoformat()}")


class LockError(HamiDcuError, RuntimeError):
    """The lock could not be written (the node kept changing, or is gone)."""

    http_status = 409
    grpc_code = "ABORTED"


class LockStale(LockError):
    """`take(read_on_conflict=False)`: the node changed since the version the caller saw it
    unlocked at; nothing was written. `calls`: the round trips spent."""

    def __init__(self, node: str, calls: int) -> None:
        self.node = node
        self.calls = calls
        super().__init__(f"node {node} changed since it was seen unlocked")


class LockUncertain(LockError):
    """A lock write got no usable answer and could not be read back: it may be in place.
    `value` is what was written; remove it with `release_value` once the API answers."""

    def __init__(self, node: str, value: str, cause: Exception) -> None:
        self.node = node
        self.value = value
        super().__init__(f"node {node}: lock write of {value!r} has an unknown outcome: {cause}")


@dataclass(frozen=True)
class Takeover:
    """Why an existing lock was replaced; logged and returned for metrics."""

    previous: str
    reason: str  # one of lockpurpose.REASONS


@dataclass(frozen=True)
class Held:
    """A lock this caller wrote. Its exact value is the identity of the attempt."""

    node: str
    value: str
    takeover: Takeover | None = None
    calls: int = 0  # API round trips it took
    written: JSON | None = None  # the node as the write returned it (None: its answer was lost)


def _ambiguous(exc: KubeError) -> bool:
    """An error after which the write may or may not have been applied."""
    return isinstance(exc, UnreachableError) or exc.status >= 500


def lock_annotation(node_obj: JSON) -> str | None:
    return ((node_obj.get("metadata") or {}).get("annotations") or {}).get(keys.NODE_LOCK)


class NodeLock:
    def __init__(
        self,
        kube: Kube,
        timeout: timedelta = DEFAULT_LOCK_TIMEOUT,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        bind_window: timedelta = DEFAULT_BIND_WINDOW,
    ) -> None:
        self.kube = kube
        self.timeout = timeout
        self.clock = clock
        self.bind_window = bind_window

    # --- taking ------------------------------------------------------------------------

    def take(self, node: str, namespace: str, name: str, resource_version: str | None = None,
             read_on_conflict: bool = True) -> Held:
        """Write a fresh lock for pod namespace/name and return it. Raises LockContention
        while any live lock is in place, one naming the same pod included.
        `resource_version`: the node's version as the caller last saw it *unlocked*; the
        first write then goes out without a read (one round trip when the view is current).
        `read_on_conflict=False`: when that version is stale, raise LockStale instead of
        reading the node (a caller with a watch-fed view waits for it to catch up: cheaper
        than a read when the node is about to be locked by someone else anyway)."""
        calls = 0
        for _ in range(_CAS_ATTEMPTS):
            takeover = None
            if resource_version is None:
                current = self.kube.get_node(node)
                calls += 1
                resource_version = (current.get("metadata") or {}).get("resourceVersion")
                previous = lock_annotation(current)
                if previous:
                    takeover = self._judge(node, previous, namespace, name)
                    calls += 1
            value = encode_lock(LockValue(since=self.clock(), namespace=namespace, name=name))
            calls += 1
            written: JSON | None = None
            try:
                written = self.kube.patch_node_metadata(node, annotations={keys.NODE_LOCK: value},
                                                        resource_version=resource_version)
            except ConflictError:
                if not read_on_conflict:
                    raise LockStale(node, calls) from None
                resource_version = None  # the node changed since we saw it: read the lock again
                continue
            except KubeError as exc:
                if not _ambiguous(exc):
                    raise
                calls += 1
                resource_version = None
                if self._read_back(node, value, exc) != value:
                    continue  # not applied: judge the node afresh
            if takeover:
                log.warning("node %s: took over lock %r (%s) for %s/%s", node, takeover.previous, takeover.reason,
                            namespace, name)
            return Held(node, value, takeover, calls, written)
        raise LockError(f"node {node}: lock not written after {_CAS_ATTEMPTS} attempts (node keeps changing)")

    def acquire(self, node: str, namespace: str, name: str) -> Takeover | None:
        """HAMi's LockNode: like `take`, but a lock already naming the pod is success (for
        callers that lock once per pod and never release on another attempt's behalf)."""
        try:
            return self.take(node, namespace, name).takeover
        except LockContention as exc:
            if exc.same_pod:
                return None
            raise

    def _read_back(self, node: str, value: str, cause: KubeError) -> str | None:
        """The lock value now in place, after a write with an unknown outcome."""
        for _ in range(_READ_BACK_ATTEMPTS):
            try:
                return lock_annotation(self.kube.get_node(node))
            except NotFoundError:
                return None
            except KubeError:
                continue
        raise LockUncertain(node, value, cause)

    def _judge(self, node: str, value: str, namespace: str, name: str) -> Takeover:
        """A Takeover when the lock in place may be replaced; raise LockContention otherwise."""
        try:
            lock: LockValue | None = decode_lock(value)
        except CodecError:
            lock = None
        holder = None
        if lock is not None and lock.name is not None:
            holder = self._pod(lock.namespace or "", lock.name)
        reason = purpose.release_reason(lock, holder, node, self.clock(), self.timeout, self.bind_window)
        if reason is not None:
            return Takeover(previous=value, reason=reason)
        assert lock is not None
        raise LockContention(node, lock, same_pod=lock.held_by(namespace, name))

    def _pod(self, namespace: str, name: str) -> JSON | None:
        try:
            return self.kube.get_pod(namespace, name)
        except NotFoundError:
            return None

    # --- releasing -----------------------------------------------------------------------

    def release_value(self, node: str, value: str, known: JSON | None = None) -> bool:
        """Remove the lock if its value is exactly `value` (the one an attempt wrote, or the
        one a caller judged obsolete). True when it is gone because of this call."""
        return self._remove_if(node, lambda current: current == value, f"lock {value!r}", known)

    def release(self, node: str, namespace: str, name: str, known: JSON | None = None) -> bool:
        """Remove the lock if (and only if) pod namespace/name holds it, whichever attempt
        wrote it (the device plugin, done with that pod's Allocate). True when removed; False
        also when the node is gone (its lock went with it; HAMi calls that an error).
        `known` is a node object the caller already read: it saves a GET when still current."""

        suffix = f",{namespace},{name}"

        def held_by_pod(current: str) -> bool:
            # HAMi's owner check: only the ",<ns>,<name>" suffix counts, so a lock naming
            # this pod is released even when its time part is unreadable. A legacy bare
            # timestamp names nobody and is kept (unlike HAMi): Volcano's own lock helper
            # writes that form for its pods, and only expiry proves it is not needed.
            return current.count(",") == 2 and current.endswith(suffix)

        return self._remove_if(node, held_by_pod, f"lock of {namespace}/{name}", known)

    def _remove_if(self, node: str, ours: Callable[[str], bool], what: str, known: JSON | None) -> bool:
        removed_maybe = False  # a delete of ours may have landed without us hearing so
        for _ in range(_CAS_ATTEMPTS):
            try:
                current, known = (known, None) if known is not None else (self.kube.get_node(node), None)
            except NotFoundError:
                return removed_maybe
            value = lock_annotation(current)
            if not value or not ours(value):
                if value and not removed_maybe:
                    log.info("node %s: %s not released: the node is locked by %r", node, what, value)
                return removed_maybe
            try:
                self.kube.patch_node_metadata(
                    node, annotations={keys.NODE_LOCK: None},
                    resource_version=(current.get("metadata") or {}).get("resourceVersion"),
                )
            except ConflictError:
                continue
            except KubeError as exc:
                if not _ambiguous(exc):
                    raise
                removed_maybe = True  # read again: gone means removed
                continue
            return True
        raise LockError(f"node {node}: {what} not released after {_CAS_ATTEMPTS} attempts")

    # --- reading -------------------------------------------------------------------------

    def holder(self, node: str) -> LockValue | None:
        """The current lock of `node`, None when unlocked or unreadable."""
        value = lock_annotation(self.kube.get_node(node))
        if not value:
            return None
        try:
            return decode_lock(value)
        except CodecError:
            return None
