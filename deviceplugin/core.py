"""The device plugin's decisions: which pod a kubelet Allocate serves, what each of its
containers gets, what the node registers, which grants are stale. Pure: the caller hands in a
snapshot (the node object, the node's pods, the cards served, the grant records) and acts on
the answer. No Kubernetes client, no gRPC, no threads, no files, no clock.

The rules themselves live in the pure modules beside this one (plan.py: which pod proves it
is the one and what a container gets; lockless.py: Volcano mode without a node lock;
advicereads.py: when GetPreferredAllocation's reads may serve the Allocate after it;
cachereads.py: when the watch-fed copy of the node and its pods may serve them); this
class binds them to one node's facts. service.py reads and writes around it, server.py speaks
gRPC around that (docs/architecture.md, Layers).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from hami_dcu.common.protocol import keys, objects
from hami_dcu.common.protocol import lockpurpose as purpose
from hami_dcu.common.protocol.codec import (
    CodecError,
    LockValue,
    NodeDevice,
    decode_lock,
    encode_node_devices,
    encode_reported,
)
from hami_dcu.common.protocol.errors import DevicePluginError
from hami_dcu.common.protocol.keys import Naming
from hami_dcu.common.protocol.objects import JSON
from hami_dcu.common.protocol.podchecks import CheckSettings, Stage, refusal_of
from hami_dcu.deviceplugin import cachereads, lockless
from hami_dcu.deviceplugin import plan as planning
from hami_dcu.deviceplugin.admitting import AdmittingRefused
from hami_dcu.node import layout
from hami_dcu.node.allocator import Grant
from hami_dcu.node.discovery import DcuCard
from hami_dcu.node.vdev import VdevDir, VdevSpec

FINISHED = ("Succeeded", "Failed")
UNSERVED_CARD = -1  # card index of a restored grant whose card this plugin no longer serves


class AllocateFailed(DevicePluginError, RuntimeError):
    """Allocate could not be served; the message goes back to the kubelet and the pod."""


class Ambiguous(AllocateFailed):
    """The call could be for the lock holder or another pod: refused, the holder untouched."""


@dataclass(frozen=True)
class Paths:
    vdev_dir: Path = Path("/usr/local/vgpu/dcu")
    etc_vdev: Path = Path("/etc/vdev")
    # The plugin's own record of its grants: never mounted into a container (the vdev dirs
    # are, read-only, so nothing a tenant can write is what a restart rebuilds from).
    state_dir: Path = Path("/var/lib/hami-dcu/state")
    dev_root: Path = Path("/dev")
    driver_dir: Path = Path("/opt/dtk")
    hyhal_dir: Path = Path(layout.HYHAL_DIR)


@dataclass
class ContainerResponse:
    devices: list[tuple[str, str, str]] = field(default_factory=list)  # container path, host path, permissions
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)  # container path, host path, read-only
    envs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HolderRefusal:
    """The lock names a pod this Allocate cannot be for: why, and the reason to count when the
    lock goes with the refusal (None: the holder may still need it, the lock stays)."""

    why: str
    release_reason: str | None


@dataclass(frozen=True)
class VdevShare:
    """A container's part of one card, to be served as a vDCU."""

    card: DcuCard
    cu_count: int
    memory_mib: int


@dataclass(frozen=True)
class ContainerDecision:
    """What one container request gets: its plan, the pod annotations to write once it is
    served, and its share of a card when it gets a vDCU (None: whole cards)."""

    plan: planning.ContainerPlan
    update: dict[str, str | None]
    share: VdevShare | None


def pod_key(pod: JSON) -> tuple[str | None, str | None]:
    return objects.namespace(pod), objects.name(pod)


def find_pod(pods: Iterable[JSON], namespace: str | None, name: str | None) -> JSON | None:
    return next((p for p in pods if pod_key(p) == (namespace, name)), None)


def lock_value(node_obj: JSON) -> str | None:
    """The node lock's value on `node_obj` (common/io/nodelock.py reads it the same way; that
    module also writes the lock, through the client this one never imports)."""
    value = objects.annotations(node_obj).get(keys.NODE_LOCK)
    return value if isinstance(value, str) else None


def parsed_lock(value: str) -> LockValue | None:
    """The lock's parts; None for a value that cannot be parsed (taken over, never obeyed)."""
    try:
        return decode_lock(value)
    except CodecError:
        return None


def live_pod_uids(pods: Iterable[JSON]) -> set[str]:
    """The pods whose vDCUs must stay: every pod listed that has not finished."""
    return {p["metadata"]["uid"] for p in pods if objects.phase(p) not in FINISHED}


def stale_records(records: Iterable[tuple[str, VdevDir]], pods: Iterable[JSON]) -> list[tuple[str, VdevDir]]:
    """The grants of pods gone or finished, judged on a list of the node's pods taken while no
    Allocate can run (a pod allocated after the list would otherwise look gone)."""
    live = live_pod_uids(pods)
    return [(dirname, record) for dirname, record in records if record.pod_uid not in live]


class PluginCore:
    """One node's facts (its name, the cards served, the naming set spoken) and the
    decisions made from them."""

    def __init__(
        self,
        node: str,
        cards: list[DcuCard],
        naming: Naming,
        paths: Paths | None = None,
        slots_per_card: int = keys.DEFAULT_SLOTS_PER_CARD,
        resource: str | None = None,  # the naming set's count resource when not given
        volcano_scheduler: str = "",  # Volcano mode (deviceplugin/lockless.py): its schedulerName
    ) -> None:
        self.node = node
        self.cards: dict[str, DcuCard] = {c.id: c for c in cards}
        self.by_index: dict[int, DcuCard] = {c.index: c for c in cards}
        self.index_by_bus_id: dict[str, int] = {c.card.pci_bus_id.upper(): c.index for c in cards}
        self.paths = paths or Paths()
        self.slots_per_card = slots_per_card
        self.naming = naming
        self.resource = resource or naming.resources.count
        self.names = keys.ResourceNames(self.resource, naming.resources.memory, naming.resources.cores)
        self.volcano_scheduler = volcano_scheduler
        # admission's checks, again before serving (common/protocol/podchecks.py)
        self.checks = CheckSettings(self.names)

    # --- which pod ---------------------------------------------------------------------------

    def lockless(self, node_obj: JSON) -> bool:
        """Volcano mode with no lock on the node: the pod must prove itself without one."""
        return bool(self.volcano_scheduler) and not lock_value(node_obj)

    def lock_holder(self, node_obj: JSON) -> tuple[str, str]:
        """The pod the node lock names; AllocateFailed when no lock names one."""
        value = lock_value(node_obj)
        if not value:
            raise AllocateFailed(
                f"no pod holds the node lock {keys.NODE_LOCK} of node {self.node}: the pod was not "
                "bound by hami-scheduler (spec.nodeName set by hand?) or its lock expired"
            )
        try:
            lock = decode_lock(value)
        except CodecError as exc:
            raise AllocateFailed(f"node {self.node}: {exc}") from exc
        if lock.name is None or lock.namespace is None:
            raise AllocateFailed(f"node {self.node}: the lock {value!r} names no pod (legacy lock)")
        return lock.namespace, lock.name

    def holder_refusal(self, holder: JSON) -> HolderRefusal | None:
        """The lock names a pod that is not waiting for Allocate here, so this call is some
        other pod's. Refused without failing the holder: it may be running, or running
        elsewhere, or still between its lock and its Binding."""
        namespace, name = holder["metadata"]["namespace"], holder["metadata"]["name"]
        reason = purpose.state_reason(holder, self.node)
        if reason is not None:
            return HolderRefusal(
                f"the lock of node {self.node} names {namespace}/{name}, which no longer needs it ({reason}): "
                "this Allocate is for a pod hami-scheduler did not bind here just now", reason)
        if not objects.node_name(holder):
            return HolderRefusal(
                f"the lock of node {self.node} names {namespace}/{name}, which is not bound yet (its bind is in "
                "flight): this Allocate is for another pod", None)
        return None

    def ambiguity(self, holder: JSON, pending: list[JSON]) -> str | None:
        """Why the holder cannot be told apart from another pod this call may be for; None
        when no other pod on this node may be the one admitted."""
        namespace, name = holder["metadata"]["namespace"], holder["metadata"]["name"]
        rivals = planning.rival_pods(pending, holder["metadata"]["uid"], self.node, self.resource)
        if not rivals:
            return None
        return (f"cannot tell which pod this Allocate is for: {namespace}/{name} holds the lock of node "
                f"{self.node}, but {'; '.join(rivals)} also wait(s) for {self.resource} here. Refused rather "
                "than guessed")

    def cached_holder(self, node_obj: JSON, pending: list[JSON], now: datetime, timeout: timedelta) -> JSON | None:
        """The pod a watch-fed copy of the node and its Pending pods shows this call to be for,
        when the copy shows the whole proof (cachereads.py); None: read from the API server."""
        if self.volcano_scheduler:
            return None
        lock = cachereads.trusted_lock(lock_value(node_obj), now, timeout)
        holder = find_pod(pending, lock.namespace, lock.name) if lock is not None else None
        if holder is None or not cachereads.awaiting(holder, self.node):
            return None
        if self.holder_refusal(holder) is not None or self.ambiguity(holder, pending) is not None:
            return None
        return holder

    def lockless_pod(self, pending: list[JSON], requests: list[list[str]],
                     admitting: Callable[[list[JSON]], JSON] | None = None) -> JSON:
        """Volcano mode, no node lock: the one pod that proves this call is its own;
        lockless.LocklessRefused otherwise. `admitting`: which of several awaiting pods the
        kubelet's pod resources answer names (admissions.py); None: several are refused."""
        return lockless.identify(pending, self.node, requests[0] if requests else [], self.resource,
                                 self.volcano_scheduler, self.naming.pod_devices_to_allocate, admitting)

    # --- what each container gets ----------------------------------------------------------

    def entry_containers(self, pod: JSON) -> list[JSON] | None:
        """The containers the pod's entries belong to: Volcano's pods have entries only for
        their HCU containers; None means HAMi's layout (every container)."""
        if self.volcano_scheduler and objects.scheduler_name(pod) == self.volcano_scheduler:
            return lockless.hcu_containers(pod, self.names)
        return None

    def serve_refusal(self, pod: JSON, requests: list[list[str]]) -> str | None:
        """Why nothing of this call may be served to `pod` at all; None when it may."""
        if not requests:
            return "the kubelet sent an Allocate call without container requests"
        refused = refusal_of(pod, self.checks, Stage.SERVE)
        if refused is None:
            return None
        # The pod came without the webhook and past the extender (a pod bound by another
        # scheduler that holds a stale lock, an extender of an older version): what it asks
        # for cannot be enforced, so nothing is served.
        namespace, name = pod_key(pod)
        return f"pod {namespace}/{name}: refused ({refused.check}): {refused.message}"

    def decide_container(self, pod: JSON, request_ids: list[str], entry_containers: list[JSON] | None,
                         lockless_call: bool) -> ContainerDecision:
        """The next container of `pod` for a request of `request_ids`; AllocateRefused when
        it cannot be served."""
        plan = planning.plan_container(pod, self.node, request_ids, self.cards, self.naming, entry_containers)
        if lockless_call and not plan.ids_match:
            namespace, name = pod_key(pod)
            raise planning.AllocateRefused(
                f"pod {namespace}/{name} container {plan.container}: the kubelet passed {','.join(request_ids)}, "
                f"not slots of {','.join(d.uuid for d in plan.devices)}: without a node lock only matching cards "
                "prove the call is this pod's")
        to_allocate = self.naming.pod_devices_to_allocate
        update: dict[str, str | None] = {to_allocate: planning.erased_annotation(plan, to_allocate)}
        if plan.done:  # the last container: "erased" and "success" in one write
            update[keys.POD_BIND_PHASE] = keys.BIND_PHASE_SUCCESS
        return ContainerDecision(plan, update, self._share(plan))

    def _share(self, plan: planning.ContainerPlan) -> VdevShare | None:
        if not planning.is_shared(plan.devices, self.cards):
            return None
        device = plan.devices[0]
        card = self.cards[device.uuid]
        return VdevShare(card, planning.cu_count(device.usedcores, card.card.compute_units), device.usedmem)

    def vdev_spec(self, pod: JSON, plan: planning.ContainerPlan, share: VdevShare, grant: Grant) -> VdevSpec:
        return VdevSpec(
            pod_uid=pod["metadata"]["uid"],
            container=plan.container,
            card_index=share.card.index,
            pipe=grant.pipe,
            vdev=grant.vdev,
            cu_mask=grant.cu_mask,
            cu_count=share.cu_count,
            memory_mib=share.memory_mib,
            pci_bus_id=share.card.card.pci_bus_id,
        )

    def container_response(self, plan: planning.ContainerPlan, vdev_host_dir: Path | None) -> ContainerResponse:
        """The devices and mounts of a served container; `vdev_host_dir`: its vDCU's directory
        when it got one."""
        response = ContainerResponse()
        for path in (layout.KFD, layout.MKFD):
            response.devices.append((path, str(self.paths.dev_root / path.removeprefix("/dev/")), "rwm"))
        for device in plan.devices:
            card = self.cards[device.uuid]
            for host in (card.drm.card, card.drm.render):
                response.devices.append(("/dev/dri/" + Path(host).name, host, "rw"))
        if vdev_host_dir is not None:
            # Read-only, like the driver: nothing a container writes is read back or executed.
            response.mounts.append((layout.VDEV_CONTAINER_DIR, str(vdev_host_dir), True))
        response.mounts.append((layout.DRIVER_CONTAINER_DIR, str(self.paths.driver_dir), True))
        response.mounts.append((layout.HYHAL_DIR, str(self.paths.hyhal_dir), True))
        return response

    # --- GetPreferredAllocation --------------------------------------------------------------

    def advice_target(self, node_obj: JSON, pending: list[JSON],
                      admitting: Callable[[list[JSON]], JSON] | None = None) -> tuple[JSON, bool]:
        """The pod whose next container the advice is for ({} for none) and whether these
        reads may serve the Allocate that follows (advicereads.py). AllocateFailed when the
        lock names no pod. `admitting`: as for lockless_pod."""
        if self.lockless(node_obj):
            # Steered when one pod awaits, or when the kubelet's answer names one of several:
            # else any advice would be a guess.
            awaiting = lockless.awaiting_pods(pending, self.node, self.resource, self.naming.pod_devices_to_allocate)
            if len(awaiting) == 1:
                return awaiting[0].pod, False
            if len(awaiting) > 1 and admitting is not None:
                with contextlib.suppress(AdmittingRefused):
                    return admitting([a.pod for a in awaiting]), False
            return {}, False
        namespace, name = self.lock_holder(node_obj)
        # Not Pending on this node (not bound yet, or done): no advice to give.
        pod = find_pod(pending, namespace, name)
        return (pod, True) if pod else ({}, False)

    def preferred_ids(self, pod: JSON, available: list[str], must_include: list[str], size: int) -> list[str]:
        return planning.preferred_ids(pod, available, must_include, size, self.naming.pod_devices_to_allocate)

    # --- node registration -----------------------------------------------------------------

    def node_devices(self, health: Mapping[str, bool]) -> list[NodeDevice]:
        return [
            NodeDevice(
                id=c.id,
                count=self.slots_per_card,
                devmem=c.card.memory_mib,
                devcore=100,
                type=self.naming.model_prefix + c.card.model,
                numa=c.card.numa,
                health=health.get(c.id, c.card.healthy),
                index=c.index,
                mode=keys.DEVICE_MODE,
            )
            for c in sorted(self.cards.values(), key=lambda c: c.index)
        ]

    def registration(self, health: Mapping[str, bool], now: datetime) -> dict[str, str | None]:
        """The node annotations hami-scheduler reads: the cards and the handshake."""
        return {
            self.naming.node_register: encode_node_devices(self.node_devices(health), self.naming.node_register),
            self.naming.node_handshake: encode_reported(now),
        }

    def share_resources(self, health: Mapping[str, bool]) -> dict[str, dict[str, str]]:
        """Volcano mode's node status: memory and cores as plain node resources."""
        return lockless.share_resources(
            [(c.card.memory_mib, health.get(c.id, c.card.healthy)) for c in self.cards.values()], self.names)

    # --- grants after a restart ------------------------------------------------------------

    def current_index(self, record: VdevDir, bus_id: str | None) -> VdevDir:
        """The record with the card index this plugin now uses for its card. SMI indices shift
        when a card disappears; the PCI bus id in the grant's own record does not. A card no
        longer served gets UNSERVED_CARD, so its CUs and pipe are never charged to the card
        that took over its old index."""
        if bus_id is None:
            return record
        index = self.index_by_bus_id.get(bus_id, UNSERVED_CARD)
        return record if index == record.card_index else replace(record, card_index=index)
