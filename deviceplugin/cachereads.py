"""When the watch-fed copy of the node and its pods (nodecache.py) may stand in for reading
them from the API server, in GetPreferredAllocation and Allocate. Pure: the caller supplies
the clock.

Allocate must prove which pod it serves (core.py): the pod the node lock names, bound here,
Pending, `allocating`, with no other pod here that could be the one admitted. A copy fed by
watches can lag the API server; a lagging copy may show an older lock, or miss the pod the
kubelet is admitting. So the copy serves only when it shows the whole proof, and the proof is
then checked by the write that follows:

* the lock names a pod, was taken less than its timeout minus MARGIN ago, and is not Volcano
  mode's (Volcano binds without the lock, so there a pod can be placed here while the copy
  shows another pod's lock);
* the copy holds that pod, bound here, Pending, `allocating`, with a resourceVersion, and
  neither refusal rule (core.holder_refusal, core.ambiguity) has anything against it:
  a refusal fails a pod or releases a lock, and is only ever decided on fresh reads;
* the pod write that records the container's outcome carries the pod's resourceVersion as a
  precondition. Landed, it proves the pod was, at that moment, exactly as the copy showed it.
  The lock cannot have moved on from a holder in that state: under HAMi's protocol a lock
  passes to another pod only when its holder no longer needs it (gone, finished, running,
  done, failed, unbound past the bind window) or when it expires (excluded above), and each
  of those shows on the pod. No other pod can be waiting here either: it would need the lock
  (or, lockless, Volcano mode). Refused (409, 404), the copy was stale: what the call did is
  undone and it is decided again on fresh reads, as if the copy did not exist.

What is left is what a fresh read has between its answer and its use, over a longer window
(the watch's lag rather than one round trip): a lock removed by another writer while its
holder still needed it (a hand edit, a writer judging from a view staler than the holder's
Binding) and retaken for a pod the kubelet admits first. The copy then serves the old holder
where fresh reads would have refused both pods as ambiguous.

Anything else (no lock in the copy, its holder not in the copy: a watch is behind the
kubelet's), and the plugin waits up to CATCH_UP for its watches to deliver, since the kubelet
calls as soon as its own watch shows the pod bound and ours is usually a few milliseconds
behind; still unproven, it reads from the API server as it always did.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hami_dcu.common.protocol import keys, objects
from hami_dcu.common.protocol.codec import CodecError, LockValue, decode_lock
from hami_dcu.common.protocol.objects import JSON

# A lock this close to its expiry may be taken over by another pod's bind before the write
# lands: such a call reads from the API server.
MARGIN = timedelta(seconds=30)
CATCH_UP = 0.25  # seconds an admission waits for the watches before it reads instead


def trusted_lock(value: str | None, now: datetime, timeout: timedelta) -> LockValue | None:
    """The lock as the copy shows it, when it may name the pod being admitted; else None."""
    if not value:
        return None
    try:
        lock = decode_lock(value)
    except CodecError:
        return None
    if lock.name is None or lock.namespace is None or now - lock.since >= timeout - MARGIN:
        return None
    return lock


def awaiting(pod: JSON, node: str) -> bool:
    """The pod is, in the copy, bound here and waiting for its Allocate; its resourceVersion
    is what the write will be conditioned on."""
    return (objects.node_name(pod) == node and objects.phase(pod) == "Pending"
            and objects.annotations(pod).get(keys.POD_BIND_PHASE) == keys.BIND_PHASE_ALLOCATING
            and bool((pod.get("metadata") or {}).get("resourceVersion")))
