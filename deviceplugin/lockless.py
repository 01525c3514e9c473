"""Which pod an Allocate call serves when no node lock names one: pure decisions, no I/O.

Volcano's Hygon deviceshare (HYGON-AI/volcano, `deviceshare.VHCUEnable`) writes a pod's
allocation itself and binds it; its node lock is off by default, and when on it is deleted
right after the pod patch, before the Binding (docs/architecture.md, Volcano mode). So the
kubelet's Allocate finds no lock. Hygon's own plugin then takes the first Pending pod with
`bind-phase: allocating`, which confuses two pods allocating on one node at once.

Here the pod must prove it is the one: among the pods bound to this node that still await an
Allocate (Pending, not being deleted, asking for more than 0 of the count resource: the kubelet
calls no Allocate for 0, and either `allocating` with an entry left to serve or never bound by
a scheduler that writes bind-phase), exactly one may exist, it must be the Volcano scheduler's
and `allocating` with `hami.io/vgpu-node` naming this node, and its next entry must name the
cards the kubelet passed (GetPreferredAllocation steers the kubelet there). With two or more
awaiting (a Volcano gang placed together through our extender's allocate), the kubelet's choice
of device ids names no pod, so a card match between several candidates proves nothing: the
kubelet's pod resources List, asked during the call, names the pod it is admitting
(admitting.py), and that pod must then pass the same checks. When the answer names none, or
cannot be had, the call is refused as ambiguous, never guessed. GetPreferredAllocation asks the
same List, so it steers the kubelet to that pod's cards.

The fork writes an entry only for containers that request HCU (`hcunum` or `hcumem` in their
limits; it has no vHCU in init containers), without the trailing `;`: entry i belongs to the
i-th such app container, not to pod container i as in HAMi's layout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from hami_dcu.common.protocol import keys, objects
from hami_dcu.common.protocol.codec import CodecError, decode_pod_devices
from hami_dcu.common.protocol.errors import DevicePluginError
from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.objects import JSON
from hami_dcu.common.protocol.requests import pod_asks_for_count
from hami_dcu.deviceplugin.admitting import AdmittingRefused
from hami_dcu.deviceplugin.plan import card_of_fake_id, who


class LocklessRefused(DevicePluginError, RuntimeError):
    """No pod, or more than one, can be the one this lockless Allocate call is for."""

    def __init__(self, message: str, ambiguous: bool = False) -> None:
        self.ambiguous = ambiguous
        super().__init__(message)


@dataclass(frozen=True)
class Awaiting:
    """A pod on this node that still expects an Allocate."""

    pod: JSON
    why: str  # how it shows that, for messages


def hcu_containers(pod: JSON, names: ResourceNames) -> list[JSON]:
    """The app containers the fork writes an entry for, in order (its `checkVHCUResourcesInPod`
    rule per container: the count or the memory resource in limits)."""
    found = []
    for container in objects.containers(pod):
        limits = (container.get("resources") or {}).get("limits") or {}
        if names.count in limits or names.memory in limits:
            found.append(container)
    return found


def _entries_left(pod: JSON, to_allocate: str) -> bool:
    value = objects.annotations(pod).get(to_allocate)
    if value is None:
        return False
    try:
        return any(decode_pod_devices(value, to_allocate))
    except CodecError:
        return True  # unreadable: it may still await; its Allocate says why it cannot be served


def awaiting_pods(pods: list[JSON], node: str, resource: str, to_allocate: str) -> list[Awaiting]:
    """The pods of `pods` bound to `node` that may be the one the kubelet is admitting
    (`resource`, `to_allocate`: the naming set's count resource and to-allocate annotation)."""
    found = []
    for pod in pods:
        meta = objects.metadata(pod)
        if meta.get("deletionTimestamp"):
            continue
        if objects.node_name(pod) != node or objects.phase(pod) != "Pending":
            continue
        if not pod_asks_for_count(pod, resource):  # the kubelet calls Allocate for no count of 0
            continue
        bind_phase = (meta.get("annotations") or {}).get(keys.POD_BIND_PHASE)
        if bind_phase is None:
            found.append(Awaiting(pod, "bound without a bind-phase (spec.nodeName set by hand, or another scheduler)"))
        elif bind_phase == keys.BIND_PHASE_ALLOCATING and _entries_left(pod, to_allocate):
            found.append(Awaiting(pod, f"{keys.POD_BIND_PHASE}={bind_phase}"))
    return found


def identify(pods: list[JSON], node: str, request_ids: list[str], resource: str, volcano_scheduler: str,
             to_allocate: str, admitting: Callable[[list[JSON]], JSON] | None = None) -> JSON:
    """The one pod this lockless Allocate call (for a container asking `request_ids`) serves;
    raises LocklessRefused otherwise, `ambiguous` when several pods await and `admitting` (the
    kubelet's pod resources answer, read by admitting.py's `admitting_pod`) names none of them."""
    awaiting = awaiting_pods(pods, node, resource, to_allocate)
    if not awaiting:
        raise LocklessRefused(
            f"no node lock on node {node} and no pod bound here awaits a {resource} allocation "
            f"({keys.POD_BIND_PHASE}={keys.BIND_PHASE_ALLOCATING} with an entry left in "
            f"{to_allocate}): the pod was not placed by a scheduler that allocates cards")
    sole = awaiting[0] if len(awaiting) == 1 else _named(awaiting, node, resource, admitting)
    pod = sole.pod
    scheduler = objects.scheduler_name(pod)
    if scheduler != volcano_scheduler:
        raise LocklessRefused(
            f"no node lock on node {node}, and the pod awaiting a {resource} allocation, {who(pod)}, is "
            f"{sole.why} with schedulerName {scheduler!r}: only {volcano_scheduler!r} allocates without "
            "the lock")
    placed_on = objects.annotations(pod).get(keys.POD_NODE)
    if placed_on != node:
        raise LocklessRefused(
            f"pod {who(pod)} is bound to node {node} but its {keys.POD_NODE} names {placed_on!r}: its allocation "
            "was made for another node")
    wanted = next_entry_cards(pod, to_allocate)
    passed = Counter(card_of_fake_id(i) for i in request_ids)
    if wanted is not None and wanted != passed:
        raise LocklessRefused(
            f"pod {who(pod)}: the kubelet passed devices on {_cards(passed)}, its {to_allocate} "
            f"names {_cards(wanted)}: without a node lock only matching cards prove the call is this pod's")
    return pod


def _named(awaiting: list[Awaiting], node: str, resource: str,
           admitting: Callable[[list[JSON]], JSON] | None) -> Awaiting:
    """The one of several awaiting pods the kubelet's pod resources answer names as the one it
    is admitting; LocklessRefused (with the answer's reason) when it names none, or when there
    is no answer to ask."""
    listed = "; ".join(f"{who(a.pod)} ({a.why})" for a in awaiting)
    head = f"no node lock on node {node} and {len(awaiting)} pods await a {resource} allocation here: {listed}. "
    if admitting is None:
        raise LocklessRefused(
            head + "The kubelet's call names no pod, so which one it admits cannot be proven: refused rather than "
            "guessed (the refused pod fails and its controller creates it again)", ambiguous=True)
    try:
        pod = admitting([a.pod for a in awaiting])
    except AdmittingRefused as exc:
        raise LocklessRefused(
            head + f"The kubelet's call names no pod, and its pod resources answer does not prove which one it "
            f"admits: {exc}. Refused rather than guessed (the refused pod fails and its controller creates it "
            "again)", ambiguous=exc.ambiguous) from None
    return next(a for a in awaiting if a.pod is pod)


def next_entry_cards(pod: JSON, to_allocate: str) -> Counter[str] | None:
    """The cards of the pod's next entry to serve; None when unreadable (plan.py says why)."""
    value = objects.annotations(pod).get(to_allocate, "")
    try:
        entries = decode_pod_devices(value, to_allocate)
    except CodecError:
        return None
    entry = next((e for e in entries if e), [])
    return Counter(d.uuid for d in entry)


def _cards(counted: Counter[str]) -> str:
    return ", ".join(f"{card} x{n}" if n > 1 else card for card, n in sorted(counted.items())) or "no card"


def share_resources(cards: list[tuple[int, bool]], names: ResourceNames) -> dict[str, dict[str, str]]:
    """Node status for Volcano: capacity of every card (memory MiB, 100 cores each),
    allocatable of the healthy ones. `cards`: (memory MiB, healthy) per card."""
    def totals(chosen: list[int]) -> dict[str, str]:
        return {names.memory: str(sum(chosen)), names.cores: str(100 * len(chosen))}

    return {"capacity": totals([memory for memory, _ in cards]),
            "allocatable": totals([memory for memory, healthy in cards if healthy])}
