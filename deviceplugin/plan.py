"""Which pod and container a kubelet Allocate call serves, and what it gets: pure decisions.

The kubelet names no pod, so the pod is the one the node lock names, and it must prove it:
bound to this node, Pending, `bind-phase: allocating`, with a next container in
`hami.io/dcu-devices-to-allocate` whose card count equals the kubelet's request and whose
cards this plugin serves. Anything else fails closed with a message naming the likely cause.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hami_dcu.common.protocol import keys, objects
from hami_dcu.common.protocol.codec import (
    CodecError,
    ContainerDevice,
    PodDevices,
    decode_pod_devices,
    encode_pod_devices,
)
from hami_dcu.common.protocol.errors import DevicePluginError
from hami_dcu.common.protocol.keys import Naming
from hami_dcu.common.protocol.objects import JSON
from hami_dcu.common.protocol.requests import pod_asks_for_count, pod_containers
from hami_dcu.node.discovery import DcuCard


class AllocateRefused(DevicePluginError, RuntimeError):
    """The request cannot be tied to a pod that proves it is the one being admitted."""


def fake_device_id(card_id: str, slot: int) -> str:
    return f"{card_id}-fake-{slot}"


def card_of_fake_id(fake_id: str) -> str:
    return fake_id.rsplit("-fake-", 1)[0]


@dataclass(frozen=True)
class ContainerPlan:
    index: int  # position in the pod device list (init containers first)
    container: str
    devices: list[ContainerDevice]
    remaining: PodDevices  # the to-allocate list with this entry erased
    # False when the kubelet's slots are on other cards than the scheduler chose: the
    # scheduler's record is what the container gets (it is what the scheduler accounted).
    ids_match: bool = True

    @property
    def done(self) -> bool:
        return not any(self.remaining)


def who(pod: JSON) -> str:
    return f"{objects.namespace(pod)}/{objects.name(pod)}"


def plan_container(pod: JSON, node: str, request_ids: list[str], cards: dict[str, DcuCard], naming: Naming,
                   entry_containers: list[JSON] | None = None) -> ContainerPlan:
    """`naming`: the set whose allocation keys are read. `entry_containers`: the containers
    the pod's entries belong to, in order; by default every container, init containers first
    (HAMi's layout). Volcano's Hygon deviceshare writes entries only for the containers that
    request HCU (lockless.hcu_containers)."""
    annotations = objects.annotations(pod)
    _refuse_unless_being_admitted(pod, node, annotations)
    entries, index = _next_entry(pod, annotations, naming)
    _refuse_unless_recorded(pod, annotations, entries, index, naming)
    containers = pod_containers(pod) if entry_containers is None else entry_containers
    if index >= len(containers):
        raise AllocateRefused(
            f"pod {who(pod)}: {naming.pod_devices_to_allocate} names container #{index}, the pod has "
            f"{len(containers)}"
        )
    devices = entries[index]
    cname = containers[index].get("name", f"#{index}")
    _refuse_unless_served_here(pod, cname, node, devices, request_ids, cards)
    _refuse_split_share(pod, cname, devices, cards)
    ids_match = Counter(map(card_of_fake_id, request_ids)) == Counter(d.uuid for d in devices)
    remaining = [list(e) for e in entries]
    remaining[index] = []
    return ContainerPlan(index=index, container=cname, devices=devices, remaining=remaining, ids_match=ids_match)


def _refuse_unless_being_admitted(pod: JSON, node: str, annotations: JSON) -> None:
    """Bound here, Pending, and marked by hami-scheduler's bind as awaiting its allocation."""
    bound = objects.node_name(pod)
    if bound != node:
        raise AllocateRefused(f"pod {who(pod)} holds the lock of node {node} but is bound to {bound or 'no node'}")
    phase = objects.phase(pod)
    if phase != "Pending":
        raise AllocateRefused(f"pod {who(pod)} is {phase}, not Pending: it is not being admitted")
    bind_phase = annotations.get(keys.POD_BIND_PHASE)
    if bind_phase != keys.BIND_PHASE_ALLOCATING:
        raise AllocateRefused(
            f"pod {who(pod)} has {keys.POD_BIND_PHASE}={bind_phase!r}, not "
            f"{keys.BIND_PHASE_ALLOCATING!r}: it was not bound by hami-scheduler just now"
        )


def _next_entry(pod: JSON, annotations: JSON, naming: Naming) -> tuple[PodDevices, int]:
    """The pod's to-allocate entries and the index of the first one not served yet."""
    to_allocate = naming.pod_devices_to_allocate
    value = annotations.get(to_allocate)
    if value is None:
        raise AllocateRefused(
            f"pod {who(pod)} has no {to_allocate}: it bypassed hami-scheduler "
            "(spec.nodeName set by hand, or another scheduler)"
        )
    try:
        entries = decode_pod_devices(value, to_allocate)
    except CodecError as exc:
        raise AllocateRefused(f"pod {who(pod)}: {exc}") from exc
    index = next((i for i, entry in enumerate(entries) if entry), None)
    if index is None:
        raise AllocateRefused(f"pod {who(pod)}: every container already got its DCU, none left for this request")
    return entries, index


def _refuse_unless_served_here(pod: JSON, cname: str, node: str, devices: list[ContainerDevice],
                               request_ids: list[str], cards: dict[str, DcuCard]) -> None:
    """As many devices as the kubelet asks for, on cards this plugin serves, with shares that
    are not negative, and kubelet ids this plugin advertises."""
    if len(devices) != len(request_ids):
        raise AllocateRefused(
            f"pod {who(pod)} container {cname}: the kubelet asks for {len(request_ids)} "
            f"device(s), hami-scheduler allocated {len(devices)}"
        )
    for device in devices:
        if device.uuid not in cards:
            raise AllocateRefused(f"pod {who(pod)} container {cname}: card {device.uuid} is not served on node {node}")
        if device.usedmem < 0 or device.usedcores < 0:
            raise AllocateRefused(f"pod {who(pod)} container {cname}: negative share of card {device.uuid}")
    for fake_id in request_ids:
        if "-fake-" not in fake_id or card_of_fake_id(fake_id) not in cards:
            raise AllocateRefused(
                f"pod {who(pod)} container {cname}: the kubelet asks for device {fake_id!r}, which this plugin "
                f"does not advertise on node {node}"
            )


def _refuse_unless_recorded(pod: JSON, annotations: JSON, entries: PodDevices, index: int, naming: Naming) -> None:
    """What is served must be what hami-scheduler recorded: `dcu-devices-to-allocate` is
    erased entry by entry as containers are served, `dcu-devices-allocated` keeps every entry
    and is written only by the scheduler (admission refuses anyone else). An entry that differs
    was edited after the bind (a whole card, more memory, another card): refused."""
    allocated = naming.pod_devices_allocated
    value = annotations.get(allocated)
    if value is None:
        raise AllocateRefused(f"pod {who(pod)} has no {allocated}: it was not bound by hami-scheduler")
    try:
        recorded = decode_pod_devices(value, allocated)
    except CodecError as exc:
        raise AllocateRefused(f"pod {who(pod)}: {exc}") from exc
    wanted = entries[index]
    if index >= len(recorded) or recorded[index] != wanted:
        scheduled = encode_pod_devices([recorded[index]] if index < len(recorded) else [[]])
        raise AllocateRefused(
            f"pod {who(pod)} container #{index}: {naming.pod_devices_to_allocate} ({encode_pod_devices([wanted])}) "
            f"disagrees with {allocated} ({scheduled}), which only hami-scheduler writes: "
            "refused, nothing is served that the scheduler did not account for"
        )


def _refuse_split_share(pod: JSON, cname: str, devices: list[ContainerDevice], cards: dict[str, DcuCard]) -> None:
    """Several cards each with part of its memory or cores: a share no vdev file can describe
    (a container gets one vDCU), which served as it is would hand over whole cards unlimited
    while the scheduler charges only the parts (issue 21)."""
    if len(devices) < 2:
        return
    partial = [d.uuid for d in devices if d.usedmem < cards[d.uuid].card.memory_mib or d.usedcores < 100]
    if partial:
        raise AllocateRefused(
            f"pod {who(pod)} container {cname}: a share of {len(devices)} cards ({', '.join(partial)} in part) "
            "cannot be enforced: one container gets one shared vDCU, or several whole cards"
        )


def rival_pods(pods: list[JSON], holder_uid: str, node: str, resource: str) -> list[str]:
    """Pods besides the lock holder that this Allocate call may be for: bound to this node,
    Pending, not being deleted, asking the kubelet for more than 0 of `resource` (it calls no
    Allocate for 0), and still expecting an Allocate: never bound by hami-scheduler (no
    bind-phase), or `allocating` without holding the lock (it expired and passed on). The
    kubelet names no pod, so while such a pod exists the holder's allocation could go to the
    wrong pod (as in Project-HAMi/HAMi#920, #3096, #338)."""
    rivals = []
    for pod in pods:
        meta = objects.metadata(pod)
        if meta.get("uid") == holder_uid or meta.get("deletionTimestamp"):
            continue
        if objects.node_name(pod) != node or objects.phase(pod) != "Pending":
            continue
        if not pod_asks_for_count(pod, resource):  # the kubelet calls Allocate for no count of 0
            continue
        bind_phase = (meta.get("annotations") or {}).get(keys.POD_BIND_PHASE)
        if bind_phase is None:
            rivals.append(f"{who(pod)} (not bound by hami-scheduler: spec.nodeName set by hand or another scheduler)")
        elif bind_phase == keys.BIND_PHASE_ALLOCATING:
            rivals.append(f"{who(pod)} ({keys.POD_BIND_PHASE}={bind_phase} without the node lock: the lock expired?)")
    return rivals


def erased_annotation(plan: ContainerPlan, to_allocate: str) -> str:
    """The naming set's to-allocate annotation (`to_allocate`) with the planned entry erased."""
    return encode_pod_devices(plan.remaining, to_allocate)


def is_shared(devices: list[ContainerDevice], cards: dict[str, DcuCard]) -> bool:
    """A vDCU: one card, and less than its memory or less than all its cores."""
    if len(devices) != 1:
        return False
    device = devices[0]
    return device.usedmem < cards[device.uuid].card.memory_mib or device.usedcores < 100


def cu_count(usedcores: int, compute_units: int) -> int:
    return min(usedcores, 100) * compute_units // 100


def preferred_ids(pod: JSON, available: list[str], must_include: list[str], size: int, to_allocate: str) -> list[str]:
    """Advice for the kubelet: slots on the cards the next container was scheduled to
    (`to_allocate`: the naming set's annotation that names them)."""
    annotations = objects.annotations(pod)
    try:
        entries = decode_pod_devices(annotations.get(to_allocate, ""), to_allocate)
    except CodecError:
        entries = []
    wanted = [d.uuid for d in next((e for e in entries if e), [])]
    chosen = list(must_include)[:size]
    for card_id in wanted:
        if len(chosen) >= size:
            break
        if any(card_of_fake_id(c) == card_id for c in chosen):
            continue
        slot = next((a for a in available if card_of_fake_id(a) == card_id and a not in chosen), None)
        if slot:
            chosen.append(slot)
    for slot in available:
        if len(chosen) >= size:
            break
        if slot not in chosen:
            chosen.append(slot)
    return chosen
