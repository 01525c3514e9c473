"""Has a node lock outlived its purpose? Pure decisions, no I/O.

A lock `hami.io/mutex.lock = <time>,<ns>,<pod>` exists so the device plugin knows which pod
its next Allocate call is for. Its purpose ends when that pod no longer needs Allocate on
that node. Whoever sees that first (the extender's watch, a bind waiting for the node, the
plugin's reconcile) releases the lock, so a node is never blocked until the 5-minute
expiry by a pod that is done. The reasons double as metric labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from hami_dcu.common.protocol import keys, objects
from hami_dcu.common.protocol.codec import LockValue
from hami_dcu.common.protocol.objects import JSON

# Reasons a lock may be removed by someone other than its holder's own bind or Allocate.
EXPIRED = "expired"  # older than the lock timeout, whoever holds it
MALFORMED = "malformed"  # unreadable: nobody could ever release it by name
HOLDER_GONE = "holder-gone"  # the pod no longer exists
HOLDER_FINISHED = "holder-finished"  # Succeeded or Failed
BOUND_ELSEWHERE = "bound-elsewhere"  # the pod runs on another node: no Allocate here
HOLDER_RUNNING = "holder-running"  # the kubelet admitted it: every Allocate is done
ALLOCATION_DONE = "allocation-done"  # bind-phase success on this node
ALLOCATION_FAILED = "allocation-failed"  # bind-phase failed on this node
HOLDER_UNBOUND = "holder-unbound"  # no Binding within the bind window: its bind died

# The holder's device plugin releases the lock itself beside the pod's outcome (or, for a
# running pod, did so already): whoever else sees these first leaves it a moment to do so.
PLUGIN_RELEASES = frozenset({HOLDER_RUNNING, ALLOCATION_DONE, ALLOCATION_FAILED})
REASONS = (EXPIRED, MALFORMED, HOLDER_GONE, HOLDER_FINISHED, BOUND_ELSEWHERE, HOLDER_RUNNING, ALLOCATION_DONE,
           ALLOCATION_FAILED, HOLDER_UNBOUND)
_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class HolderState:
    """The three facts about a lock holder that decide whether it still needs the lock."""

    phase: str | None
    bound_to: str | None  # spec.nodeName
    bind_phase: str | None  # hami.io/bind-phase

    @classmethod
    def of(cls, pod: JSON) -> HolderState:
        return cls(phase=objects.phase(pod), bound_to=objects.node_name(pod),
                   bind_phase=objects.annotations(pod).get(keys.POD_BIND_PHASE))


def state_reason(pod: JSON | HolderState, node: str) -> str | None:
    """Why the pod no longer needs the lock of `node`, judged from the pod alone; None while
    it may still need it (not bound yet, or bound here and waiting for Allocate)."""
    state = pod if isinstance(pod, HolderState) else HolderState.of(pod)
    if state.phase in _FINISHED_PHASES:
        return HOLDER_FINISHED
    if not state.bound_to:
        # Not bound: its bind may be between the lock and the Binding. A bind-phase seen
        # here is stale (a Binding always rewrites it to allocating), so it proves nothing.
        return None
    if state.bound_to != node:
        return BOUND_ELSEWHERE
    if state.phase == "Running":
        return HOLDER_RUNNING
    if state.bind_phase == keys.BIND_PHASE_SUCCESS:
        return ALLOCATION_DONE
    if state.bind_phase == keys.BIND_PHASE_FAILED:
        return ALLOCATION_FAILED
    return None


def release_reason(
    lock: LockValue | None,
    holder: JSON | None,
    node: str,
    now: datetime,
    timeout: timedelta,
    bind_window: timedelta,
) -> str | None:
    """Why the lock of `node` may be removed now, or None while it serves its holder.

    `lock` None means the value could not be decoded; `holder` None means the pod it names
    does not exist (callers that did not look the pod up use `state_reason` instead).
    `bind_window` bounds how long one bind may hold a lock before its Binding: a lock older
    than that whose pod is still unbound was left by a bind that died (a crashed or
    restarted scheduler, a lost answer)."""
    if lock is None:
        return MALFORMED
    age = now - lock.since
    if age > timeout:
        return EXPIRED
    if lock.name is None:
        return None  # a legacy lock names nobody: only expiry frees it
    if holder is None:
        return HOLDER_GONE
    reason = state_reason(holder, node)
    if reason is not None:
        return reason
    if not objects.node_name(holder) and age > bind_window:
        return HOLDER_UNBOUND
    return None
