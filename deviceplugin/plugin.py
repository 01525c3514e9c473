"""The device plugin's node-side work: Allocate, node registration, reconcile. All node-local
state (CU bitsets, pipes, vdev ids, vdev files) changes under one lock.

The gRPC servicer (server.py) only translates between this class and the wire.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hami_dcu.common import keys
from hami_dcu.common import lockpurpose as purpose
from hami_dcu.common.codec import (
    CodecError,
    LockValue,
    NodeDevice,
    decode_lock,
    encode_node_devices,
    encode_reported,
)
from hami_dcu.common.errors import DevicePluginError, judge
from hami_dcu.common.failures import Component
from hami_dcu.common.keys import DCU_NAMING, Naming
from hami_dcu.common.kube import ConflictError, Kube, KubeError, NotFoundError, UnreachableError
from hami_dcu.common.nodelock import LockError, NodeLock, lock_annotation
from hami_dcu.common.podchecks import CheckSettings, Stage, refusal_of
from hami_dcu.common.podlatency import DEVICE_PLUGIN
from hami_dcu.common.podtimes import bound_at, seconds_between
from hami_dcu.deviceplugin import advicereads, lockless
from hami_dcu.deviceplugin import plan as planning
from hami_dcu.deviceplugin.grantstore import GrantStore
from hami_dcu.deviceplugin.kubeletids import KubeletIds
from hami_dcu.deviceplugin.metrics import PluginMetrics
from hami_dcu.node import layout
from hami_dcu.node.allocator import AllocationError, Grant, NodeState
from hami_dcu.node.discovery import DcuCard
from hami_dcu.node.smi import FALLBACK_MODEL
from hami_dcu.node.vdev import (
    VDEV_CONF,
    VdevDir,
    VdevSpec,
    render_conf,
    write_atomic,
)

log = logging.getLogger(__name__)
FINISHED = ("Succeeded", "Failed")
NODE_READ_ATTEMPTS = 3
WRITE_ATTEMPTS = 5  # a pod write, event or lock release that failed transiently is tried this often
UNSERVED_CARD = -1  # card index of a restored grant whose card this plugin no longer serves


def _transient(exc: KubeError) -> bool:
    """Worth repeating: the server was busy, lost the answer, or raced another write."""
    return isinstance(exc, ConflictError | UnreachableError) or exc.status == 429 or exc.status >= 500


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


# Pauses before listing a node's pods again when several await an Allocate without a lock
# (Volcano mode): the kubelet's status write for a pod it just failed lands within these.
AMBIGUITY_RELISTS = (0.2, 0.4, 0.8)


class PluginCore:
    def __init__(
        self,
        kube: Kube,
        node: str,
        cards: list[DcuCard],
        paths: Paths | None = None,
        slots_per_card: int = keys.DEFAULT_SLOTS_PER_CARD,
        lock_timeout_seconds: int = 300,
        metrics: PluginMetrics | None = None,
        naming: Naming = DCU_NAMING,  # the set whose keys and resources this plugin speaks (cli --naming)
        resource: str | None = None,  # the naming set's count resource when not given
        volcano_scheduler: str = "",  # Volcano mode (deviceplugin/lockless.py): its schedulerName
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.wall_clock = wall_clock
        self.sleep = sleep
        self.kube = kube
        self.node = node
        self.cards = {c.id: c for c in cards}
        self.by_index = {c.index: c for c in cards}
        self.index_by_bus_id = {c.card.pci_bus_id.upper(): c.index for c in cards}
        self.paths = paths or Paths()
        self.slots_per_card = slots_per_card
        self.naming = naming
        self.resource = resource or naming.resources.count
        self.names = keys.ResourceNames(self.resource, naming.resources.memory, naming.resources.cores)
        self.volcano_scheduler = volcano_scheduler
        self._advertised: dict[str, dict[str, str]] | None = None  # Volcano mode: node status last written
        self.checks = CheckSettings(self.names)  # admission's checks, again before serving (common/podchecks.py)
        self.node_lock = NodeLock(kube, timeout=timedelta(seconds=lock_timeout_seconds))
        self.state = NodeState(compute_units={c.index: c.card.compute_units for c in cards})
        self.lock = threading.Lock()
        # API calls of one Allocate that overlap other work: the pod list beside the node read,
        # the last pod write and the lock release beside the files
        # (the release may finish after the answer).
        self._io = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"allocate-{node}")
        # GetPreferredAllocation's reads, for the Allocate that follows it (advicereads.py), and
        # the count of steps here that change the node lock, which makes older reads unusable.
        self._advice_reads: advicereads.AdviceReads | None = None
        self._lock_steps = 0
        self.metrics = metrics or PluginMetrics()
        self.metrics.unknown_models.labels(node).set(sum(1 for c in cards if c.card.model == FALLBACK_MODEL))
        self.grants = GrantStore(self.paths.state_dir)
        # Beside each grant record (<dirname>.ids): the kubelet ids it serves, for usage metrics.
        self.kubelet_ids = KubeletIds(self.paths.state_dir)
        self.rebuild()

    # --- restart safety ------------------------------------------------------------------

    def rebuild(self) -> int:
        """Take back every grant recorded in the plugin's own state dir (run at start); the
        reconcile then drops those of pods no longer live on this node."""
        restored = 0
        with self.lock:
            self.grants.adopt_legacy(self.paths.vdev_dir)
            for dirname, record in self._named_records():
                # Restored even for a card no longer served: its vdev id stays taken until the
                # pod goes, so /etc/vdev/vdev<N>.conf is never shared by two live vDCUs.
                self.state.restore(record)
                self._restore_conf(dirname)
                restored += 1
            self.metrics.vdevs.labels(self.node).set(len(self.state.vdevs_used))
        if restored:
            log.info("node %s: restored %d vDCU grants from %s", self.node, restored, self.paths.state_dir)
        return restored

    def _restore_conf(self, dirname: str) -> None:
        """The container's vdev0.conf is written without fsync (Allocate's critical path);
        the grant record is durable. After a crash, or a tenant's edit, the container's copy
        is put back from the record before the kubelet restarts anything on this node."""
        text = self.grants.conf_text(dirname)
        conf = self.paths.vdev_dir / dirname / VDEV_CONF
        if text is None or not conf.parent.is_dir():
            return
        try:
            if conf.read_text() == text:
                return
        except OSError:
            pass
        log.warning("node %s: vdev %s: configuration restored from the plugin's record", self.node, dirname)
        write_atomic(conf, text)

    def _records(self) -> list[VdevDir]:
        return [record for _, record in self._named_records()]

    def _named_records(self) -> list[tuple[str, VdevDir]]:
        # From the state dir only: the vdev dirs are mounted into containers.
        return [(name, self._current_index(name, record, bus_id)) for name, record, bus_id in self.grants.records()]

    def _current_index(self, dirname: str, record: VdevDir, bus_id: str | None) -> VdevDir:
        """The record with the card index this plugin now uses for that card. SMI indices shift
        when a card disappears; the PCI bus id in the grant's own record does not."""
        if bus_id is None:
            return record
        # A card no longer served: its grant is kept apart (index -1) so its CUs and pipe are
        # never charged to the card that took over its old index.
        index = self.index_by_bus_id.get(bus_id, UNSERVED_CARD)
        if index == record.card_index:
            return record
        log.warning("node %s: vdev %s is on card %s, %s (its name says index %d)", self.node, dirname, bus_id,
                    "no longer served" if index == UNSERVED_CARD else f"now index {index}", record.card_index)
        return replace(record, card_index=index)

    # --- Allocate ------------------------------------------------------------------------

    def allocate(self, requests: list[list[str]]) -> list[ContainerResponse]:
        """Serve one kubelet Allocate call (one entry per container request). Raises
        AllocateFailed with a message for the kubelet, or a bug as it was raised; either way
        the pod is marked failed, the lock released and nothing of this call is left on disk
        or in the state."""
        started = time.perf_counter()
        self.lock.acquire()
        releasing: Future[None] | None = None
        try:
            reads, self._advice_reads = self._advice_reads, None
            usable = advicereads.reusable(reads, requests, self._lock_steps, time.monotonic())
            self._lock_steps += 1
            responses, releasing = self._allocate_locked(requests, reads if usable else None)
        except Exception:
            self.metrics.allocations.labels(self.node, "failed").inc()
            raise
        finally:
            self.metrics.allocate_seconds.labels(self.node).observe(time.perf_counter() - started)
            if releasing is None:
                self._end_allocate()
            else:
                # The node lock's release may still be under way at the answer: the container's
                # start does not wait for it, the next Allocate on this node does (it needs the
                # lock free to tell its pod apart from this one).
                releasing.add_done_callback(lambda _done: self._end_allocate())
        self.metrics.allocations.labels(self.node, "success").inc()
        return responses

    def _end_allocate(self) -> None:
        # Counted at the end too: advice read while this Allocate was under way saw the node
        # lock before its release, and must not serve the next call.
        self._lock_steps += 1
        self.lock.release()

    def idle(self, timeout: float | None = None) -> bool:
        """Wait until no Allocate is in progress here, its lock release included."""
        if not self.lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        self.lock.release()
        return True

    def _allocate_locked(self, requests: list[list[str]], advised: advicereads.AdviceReads | None = None
                         ) -> tuple[list[ContainerResponse], Future[None] | None]:
        if advised is not None:  # what GetPreferredAllocation read for this very call
            listing: Future[list[dict]] = Future()
            listing.set_result(advised.pending)
            node_obj = advised.node
        else:
            # The two reads do not depend on each other: one round trip of waiting, not two.
            listing = self._io.submit(self._list_pending)
            node_obj = self._read_node()
        lockless = bool(self.volcano_scheduler) and not lock_annotation(node_obj)
        if lockless:
            pod = self._identify_lockless(listing, requests)
            namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        else:
            namespace, name = self._lock_holder(node_obj)
            pending = self._pending_pods(namespace, name, listing)
            holder = (namespace, name)
            found = next((p for p in pending if (p["metadata"].get("namespace"), p["metadata"].get("name")) == holder),
                         None)
            # Not Pending on this node: read it to say exactly why (the slow path).
            pod = found if found is not None else self._read_holder(namespace, name)
            self._refuse_if_not_for_holder(pod, node_obj)
            self._refuse_if_ambiguous(pod, pending)
        entry_containers = self._entry_containers(pod)
        bound = bound_at(pod)  # read before the writes below: they return the pod without status
        finished = False
        responses: list[ContainerResponse] = []
        written: list[tuple[Grant, VdevSpec]] = []
        release: Future[None] | None = None
        last_write: Future[dict] | None = None
        try:
            if not requests:
                raise planning.AllocateRefused("the kubelet sent an Allocate call without container requests")
            refused = refusal_of(pod, self.checks, Stage.SERVE)
            if refused is not None:
                # The pod came without the webhook and past the extender (a pod bound by
                # another scheduler that holds a stale lock, an extender of an older version):
                # what it asks for cannot be enforced, so nothing is served.
                raise planning.AllocateRefused(f"pod {namespace}/{name}: refused ({refused.check}): "
                                               f"{refused.message}")
            for ids in requests:
                container_plan = planning.plan_container(pod, self.node, ids, self.cards, self.naming,
                                                         entry_containers)
                if lockless and not container_plan.ids_match:
                    raise planning.AllocateRefused(
                        f"pod {namespace}/{name} container {container_plan.container}: the kubelet passed "
                        f"{','.join(ids)}, not slots of {','.join(d.uuid for d in container_plan.devices)}: without "
                        "a node lock only matching cards prove the call is this pod's")
                if not container_plan.ids_match:
                    self.metrics.device_id_mismatches.labels(self.node).inc()
                    log.warning(
                        "pod %s/%s container %s on node %s: the kubelet chose %s, hami-scheduler chose %s; "
                        "serving the scheduler's cards",
                        namespace, name, container_plan.container, self.node, ",".join(ids),
                        ",".join(d.uuid for d in container_plan.devices),
                    )
                to_allocate = self.naming.pod_devices_to_allocate
                update: dict[str, str | None] = {to_allocate: planning.erased_annotation(container_plan, to_allocate)}
                if container_plan.done:
                    # The last container: its pod write ("erased" and "success" in one) and the
                    # lock release go out together while its files are written, so the next
                    # bind to this node need not wait for one write after the other. Released
                    # before "success" lands is safe: the kubelet admits its next pod only after
                    # this answer, which waits for the pod write, and the next Allocate here
                    # waits for both (see allocate); a failure before then still marks this pod
                    # failed, which no lock is needed for.
                    update[keys.POD_BIND_PHASE] = keys.BIND_PHASE_SUCCESS
                    last_write = self._io.submit(self._patch_pod, namespace, name, update)
                    release = self._io.submit(self._release, namespace, name, node_obj)
                    responses.append(self._serve_container(pod, container_plan, written, ids))
                    pod = last_write.result()
                    finished = True
                else:  # the next container's plan reads what this write erased
                    responses.append(self._serve_container(pod, container_plan, written, ids))
                    pod = self._patch_pod(namespace, name, update)
                log.info(
                    "pod %s/%s container %s: allocated %s on node %s",
                    namespace,
                    name,
                    container_plan.container,
                    ",".join(d.uuid for d in container_plan.devices),
                    self.node,
                )
        except Exception as exc:  # any failure, expected or a bug: undo, mark failed, release
            self._undo(written)
            failure = judge(exc, Component.DEVICE_PLUGIN)  # the one rule (common/errors.py)
            for pending_write in (release, last_write):  # "failed" must land after them
                if pending_write is not None:
                    with contextlib.suppress(Exception):
                        pending_write.result()
            self._mark_failed(namespace, name, failure.message)
            if not failure.expected:
                exc.add_note(f"while serving Allocate for pod {namespace}/{name} on node {self.node}")
                raise  # the server logs its traceback, counts it and answers INTERNAL
            raise AllocateFailed(failure.message) from exc
        self.metrics.vdevs.labels(self.node).set(len(self.state.vdevs_used))
        waited = seconds_between(bound, self.wall_clock()) if finished else None
        if waited is not None:  # the pod's last container: its DCUs are all handed out now
            self.metrics.bound_to_allocated_seconds.labels(self.node, DEVICE_PLUGIN).observe(waited)
        return responses, release  # _release retries and never raises

    def _identify_lockless(self, listing: Future[list[dict]], requests: list[list[str]]) -> dict:
        """Volcano mode, no node lock: the one pod that proves this call is its own
        (lockless.py), or a refusal that fails no pod's allocation: which pod the kubelet is
        admitting is exactly what is unknown."""
        # The kubelet fails the pod a refusal hit and writes that status a moment after it
        # calls Allocate for its next pod: judged on a list taken before the status landed,
        # two pods placed together would refuse each other round after round. So an ambiguous
        # call is judged again on fresher lists (same rule, newer facts) before it is refused.
        for delay in (*AMBIGUITY_RELISTS, None):
            try:
                pending = listing.result()
                return lockless.identify(pending, self.node, requests[0] if requests else [], self.resource,
                                         self.volcano_scheduler, self.naming.pod_devices_to_allocate)
            except KubeError as exc:
                raise AllocateFailed(f"cannot list the pods of node {self.node}: {exc}") from exc
            except lockless.LocklessRefused as exc:
                if exc.ambiguous and delay is not None:
                    self.sleep(delay)
                    listing = self._io.submit(self._list_pending)
                    continue
                why = str(exc)
                log.error("node %s: %s", self.node, why)
                self._node_event("DCUAllocationAmbiguous" if exc.ambiguous else "DCUAllocationRefused", why)
                raise (Ambiguous(why) if exc.ambiguous else AllocateFailed(why)) from None
        raise AssertionError("unreachable")

    def _entry_containers(self, pod: dict) -> list[dict] | None:
        """The containers the pod's entries belong to: Volcano's pods have entries only for
        their HCU containers; None means HAMi's layout (every container)."""
        if self.volcano_scheduler and (pod.get("spec") or {}).get("schedulerName") == self.volcano_scheduler:
            return lockless.hcu_containers(pod, self.names)
        return None

    def _list_pending(self) -> list[dict]:
        return self.kube.list_pods(field_selector=f"spec.nodeName={self.node},status.phase=Pending").items

    def _pending_pods(self, namespace: str, name: str, listing: Future[list[dict]]) -> list[dict]:
        """This node's Pending pods: the holder (normally) and any pod that could be the one
        admitted instead. One list, filtered by the server, serves both."""
        try:
            return listing.result()
        except KubeError as exc:
            self._mark_failed(namespace, name, f"cannot list the pods of node {self.node}: {exc}")
            raise AllocateFailed(f"cannot list the pods of node {self.node}: {exc}") from exc

    def _read_holder(self, namespace: str, name: str) -> dict:
        try:
            return self.kube.get_pod(namespace, name)
        except NotFoundError:
            self._release(namespace, name)
            raise AllocateFailed(f"pod {namespace}/{name} holding the lock of node {self.node} was deleted") from None
        except KubeError as exc:
            self._mark_failed(namespace, name, f"cannot read the pod: {exc}")
            raise AllocateFailed(f"pod {namespace}/{name}: cannot read the pod: {exc}") from exc

    def _refuse_if_not_for_holder(self, holder: dict, node_obj: dict) -> None:
        """The lock names a pod that is not waiting for Allocate here, so this call is some
        other pod's. Refused without marking the holder failed: it may be running, or
        running elsewhere, or still between its lock and its Binding."""
        namespace, name = holder["metadata"]["namespace"], holder["metadata"]["name"]
        reason = purpose.state_reason(holder, self.node)
        if reason is not None:
            value = lock_annotation(node_obj)
            why = (f"the lock of node {self.node} names {namespace}/{name}, which no longer needs it ({reason}): "
                   "this Allocate is for a pod hami-scheduler did not bind here just now")
            log.error("node %s: %s", self.node, why)
            if value and self._release_value(value, node_obj):
                self.metrics.lock_releases.labels(self.node, reason).inc()
            self._node_event("DCUAllocationRefused", why)
            raise AllocateFailed(why)
        if not (holder.get("spec") or {}).get("nodeName"):
            why = (f"the lock of node {self.node} names {namespace}/{name}, which is not bound yet (its bind is in "
                   "flight): this Allocate is for another pod")
            log.error("node %s: %s", self.node, why)
            self._node_event("DCUAllocationRefused", why)
            raise AllocateFailed(why)

    def _release_value(self, value: str, known: dict | None = None) -> bool:
        try:
            return self.node_lock.release_value(self.node, value, known)
        except (LockError, KubeError) as exc:  # the reconcile tries again
            log.warning("node %s: could not release the lock %r: %s", self.node, value, exc)
            return False

    def _node_event(self, reason: str, message: str) -> None:
        self._post_event({"kind": "Node", "metadata": {"name": self.node}}, reason, message)

    def _refuse_if_ambiguous(self, holder: dict, pending: list[dict]) -> None:
        """Serve the holder only when no other pod on this node may be the one admitted. An
        ambiguous call is refused without consuming or failing the holder's allocation: if the
        call was the other pod's, the holder's own call comes later and succeeds."""
        namespace, name = holder["metadata"]["namespace"], holder["metadata"]["name"]
        rivals = planning.rival_pods(pending, holder["metadata"]["uid"], self.node, self.resource)
        if not rivals:
            return
        why = (f"cannot tell which pod this Allocate is for: {namespace}/{name} holds the lock of node {self.node}, "
               f"but {'; '.join(rivals)} also wait(s) for {self.resource} here. Refused rather than guessed")
        log.error("node %s: %s", self.node, why)
        self._event(namespace, name, "DCUAllocationAmbiguous", why)
        raise Ambiguous(why)

    def _read_node(self) -> dict:
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
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def _undo(self, written: list[tuple[Grant, VdevSpec]]) -> None:
        for grant, spec in written:
            try:
                self._remove_vdev(spec.dirname, grant.vdev)
            except OSError as exc:  # reconcile removes it later: the pod is failed, not live
                log.warning("node %s: could not remove vdev %s: %s", self.node, spec.dirname, exc)
            self.state.release(grant)

    def _lock_holder(self, node_obj: dict | None = None) -> tuple[str, str]:
        node_obj = node_obj if node_obj is not None else self.kube.get_node(self.node)
        annotations = (node_obj.get("metadata") or {}).get("annotations") or {}
        value = annotations.get(keys.NODE_LOCK)
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

    def _serve_container(
        self, pod: dict, container_plan: planning.ContainerPlan, written: list[tuple[Grant, VdevSpec]],
        kubelet_ids: list[str],
    ) -> ContainerResponse:
        response = ContainerResponse()
        for path in (layout.KFD, layout.MKFD):
            response.devices.append((path, str(self.paths.dev_root / path.removeprefix("/dev/")), "rwm"))
        for device in container_plan.devices:
            card = self.cards[device.uuid]
            for host in (card.drm.card, card.drm.render):
                response.devices.append(("/dev/dri/" + Path(host).name, host, "rw"))
        if planning.is_shared(container_plan.devices, self.cards):
            device = container_plan.devices[0]
            card = self.cards[device.uuid]
            count = planning.cu_count(device.usedcores, card.card.compute_units)
            try:
                grant = self.state.allocate(card.index, count)
            except AllocationError:
                # The scheduler frees a deleted pod's share at once; our cleanup runs every
                # cycle. Before calling it a shortfall, clean up now and try once more.
                if not self._reconcile_locked():
                    raise
                grant = self.state.allocate(card.index, count)
            spec = VdevSpec(
                pod_uid=pod["metadata"]["uid"],
                container=container_plan.container,
                card_index=card.index,
                pipe=grant.pipe,
                vdev=grant.vdev,
                cu_mask=grant.cu_mask,
                cu_count=count,
                memory_mib=device.usedmem,
                pci_bus_id=card.card.pci_bus_id,
            )
            written.append((grant, spec))
            self.grants.save(spec)  # first: a vdev dir never exists without the plugin's record
            self.kubelet_ids.save(spec.dirname, kubelet_ids)
            host_dir = self.paths.vdev_dir / spec.dirname
            # The record just written is the durable copy (rebuild restores this one from it):
            # no fsync here, on the Allocate's critical path.
            write_atomic(host_dir / VDEV_CONF, render_conf(spec, device_id=0), durable=False)
            # The exporter's copy is not what the container reads: atomic is enough, no fsync.
            write_atomic(self.paths.etc_vdev / f"vdev{grant.vdev}.conf", render_conf(spec, device_id=card.index),
                         durable=False)
            # Read-only, like the driver: nothing a container writes is read back or executed.
            response.mounts.append((layout.VDEV_CONTAINER_DIR, str(host_dir), True))
        response.mounts.append((layout.DRIVER_CONTAINER_DIR, str(self.paths.driver_dir), True))
        response.mounts.append((layout.HYHAL_DIR, str(self.paths.hyhal_dir), True))
        return response

    def _patch_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> dict:
        """Merge-patch the pod's annotations, retrying transient errors: the patch sets
        absolute values, so repeating one that landed (its answer lost) changes nothing."""
        for attempt in range(WRITE_ATTEMPTS):
            try:
                return self.kube.patch_pod_metadata(namespace, name, annotations=annotations)
            except KubeError as exc:
                if not _transient(exc) or attempt + 1 == WRITE_ATTEMPTS:
                    raise
                log.info("pod %s/%s on node %s: annotation write failed (%s), retrying", namespace, name,
                         self.node, exc)
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def _mark_failed(self, namespace: str, name: str, why: str) -> None:
        log.error("pod %s/%s: allocation on node %s failed: %s", namespace, name, self.node, why)
        try:
            self._patch_pod(namespace, name, {keys.POD_BIND_PHASE: keys.BIND_PHASE_FAILED})
        except KubeError as exc:
            log.warning("pod %s/%s: could not mark %s=failed: %s", namespace, name, keys.POD_BIND_PHASE, exc)
        self._event(namespace, name, "DCUAllocationFailed", f"node {self.node}: {why}")
        self._release(namespace, name)

    def _event(self, namespace: str, name: str, reason: str, message: str) -> None:
        self._post_event({"kind": "Pod", "metadata": {"namespace": namespace, "name": name}}, reason, message)

    def _post_event(self, regarding: dict, reason: str, message: str) -> None:
        """A Warning event, retried a little: it is what tells the user why a pod failed."""
        meta = regarding["metadata"]
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self.kube.create_event(regarding, reason, message, "Warning", component="hami-dcu-device-plugin")
                return
            except KubeError as exc:
                if not _transient(exc) or attempt + 1 == WRITE_ATTEMPTS:
                    log.warning("%s %s on node %s: could not record event %s: %s", regarding["kind"],
                                meta.get("name"), self.node, reason, exc)
                    return
                time.sleep(0.05 * 2**attempt)

    def _release(self, namespace: str, name: str, known: dict | None = None) -> None:
        """Release the pod's lock, retrying a failure: a lock left behind blocks every other
        pod's bind to this node. If it still fails, the reconcile (and the extender, which
        watches the pod's bind-phase) release it once they see the pod done with it."""
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self.node_lock.release(self.node, namespace, name, known)
                return
            except (LockError, KubeError) as exc:
                known = None
                log.warning("node %s: could not release the lock of %s/%s (attempt %d): %s", self.node, namespace,
                            name, attempt + 1, exc)
                time.sleep(0.05 * 2**attempt)
            except Exception as exc:  # never hide the allocation's own outcome behind this
                log.warning("node %s: could not release the lock of %s/%s: %r", self.node, namespace, name, exc)
                return

    # --- GetPreferredAllocation ------------------------------------------------------------

    def preferred(self, available: list[str], must_include: list[str], size: int) -> list[str]:
        """The cards of the pod the lock names. The kubelet calls this just before each
        Allocate: its two reads go out together, and are kept for that Allocate, which takes
        them only when they can describe nothing but its own admission (advicereads.py)."""
        steps, taken = self._lock_steps, time.monotonic()
        listing = self._io.submit(self._list_pending)
        reads: tuple[dict, list[dict]] | None = None
        try:
            node_obj = self.kube.get_node(self.node)
            pending = listing.result()
            if self.volcano_scheduler and not lock_annotation(node_obj):
                # Steered only when one pod awaits: with several, any advice would be a guess.
                awaiting = lockless.awaiting_pods(pending, self.node, self.resource,
                                                  self.naming.pod_devices_to_allocate)
                pod = awaiting[0].pod if len(awaiting) == 1 else {}
            else:
                holder = self._lock_holder(node_obj)
                # Not Pending on this node (not bound yet, or done): no advice to give.
                pod = next((p for p in pending
                            if (p["metadata"].get("namespace"), p["metadata"].get("name")) == holder), {})
                if pod:  # the lock's pod is Pending here: the reads can serve its Allocate
                    reads = (node_obj, pending)
        except (AllocateFailed, KubeError):
            pod = {}
        advice = planning.preferred_ids(pod, available, must_include, size, self.naming.pod_devices_to_allocate)
        self._advice_reads = (advicereads.AdviceReads(taken, steps, reads[0], reads[1], tuple(advice))
                              if reads is not None else None)
        return advice

    # --- reconcile -------------------------------------------------------------------------

    def reconcile(self) -> list[str]:
        """Remove vdev directories (and /etc/vdev files) of pods that are gone or finished, and
        the node lock if its holder no longer needs it. One pod list scoped to this node per
        cycle. Returns the removed directory names."""
        with self.lock:
            self._lock_steps += 1  # it may release the lock: advice read before is for nobody now
            pods = self.kube.list_pods(field_selector=f"spec.nodeName={self.node}").items
            removed = self._reconcile_locked(pods)
            self._release_needless_lock(pods)
            return removed

    def _release_needless_lock(self, pods: list[dict]) -> None:
        """A holder that is done here (running, allocation done or failed, finished), bound
        elsewhere, gone, or never bound within the bind window will never call Allocate on
        this node; without this the node stays locked until the lock expires (5 min)."""
        node_obj = self.kube.get_node(self.node)
        value = lock_annotation(node_obj)
        if not value:
            return
        try:
            lock: LockValue | None = decode_lock(value)
        except CodecError:
            lock = None
        holder = None
        if lock is not None and lock.name is not None:
            holder = next((p for p in pods if (p["metadata"].get("namespace"), p["metadata"].get("name"))
                           == (lock.namespace, lock.name)), None)
            if holder is None:  # not bound here: unbound, elsewhere, or gone
                try:
                    holder = self.kube.get_pod(lock.namespace or "", lock.name)
                except NotFoundError:
                    holder = None
        reason = purpose.release_reason(lock, holder, self.node, datetime.now(UTC), self.node_lock.timeout,
                                        self.node_lock.bind_window)
        if reason is None:
            return
        if self._release_value(value, node_obj):
            self.metrics.lock_releases.labels(self.node, reason).inc()
            log.info("node %s: released the lock %r, whose holder no longer needs it (%s)", self.node, value, reason)

    def _reconcile_locked(self, pods: list[dict] | None = None) -> list[str]:
        # The list is taken under the lock: a pod allocated between a list and the cleanup
        # would otherwise look gone and lose its live vdev directory.
        if pods is None:
            pods = self.kube.list_pods(field_selector=f"spec.nodeName={self.node}").items
        live = {p["metadata"]["uid"] for p in pods if (p.get("status") or {}).get("phase") not in FINISHED}
        removed = []
        for dirname, record in self._named_records():
            if record.pod_uid in live:
                continue
            self._remove_vdev(dirname, record.vdev)
            self.state.release(record)
            removed.append(dirname)
            log.info("node %s: removed vdev %s of a pod that is gone or finished", self.node, dirname)
        removed += self._remove_unrecorded_vdevs()
        self.metrics.vdevs.labels(self.node).set(len(self.state.vdevs_used))
        return removed

    def _remove_unrecorded_vdevs(self) -> list[str]:
        """vdev dirs the plugin holds no record of were not made by it (or their grant is gone):
        never taken for a grant, removed."""
        recorded = {name for name, _, _ in self.grants.records()}
        try:
            stray = sorted(p.name for p in self.paths.vdev_dir.iterdir() if p.is_dir() and p.name not in recorded)
        except FileNotFoundError:
            return []
        for name in stray:
            shutil.rmtree(self.paths.vdev_dir / name, ignore_errors=True)
            log.warning("node %s: removed vdev dir %s, of which the plugin holds no record", self.node, name)
        return stray

    def _remove_vdev(self, dirname: str, vdev: int) -> None:
        self.grants.remove(dirname)
        self.kubelet_ids.remove(dirname)
        shutil.rmtree(self.paths.vdev_dir / dirname, ignore_errors=True)
        (self.paths.etc_vdev / f"vdev{vdev}.conf").unlink(missing_ok=True)

    # --- node registration -----------------------------------------------------------------

    def node_devices(self, health: dict[str, bool] | None = None) -> list[NodeDevice]:
        health = health or {}
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

    def register_node(self, health: dict[str, bool] | None = None, now: datetime | None = None) -> None:
        """Publish the cards and the handshake on the node (what hami-scheduler reads); in
        Volcano mode also memory and cores as node resources (what Volcano's fit reads)."""
        for device in self.node_devices(health):
            self.metrics.card_healthy.labels(self.node, device.id).set(1 if device.health else 0)
        self.kube.patch_node_metadata(
            self.node,
            annotations={
                self.naming.node_register: encode_node_devices(self.node_devices(health), self.naming.node_register),
                self.naming.node_handshake: encode_reported(now or datetime.now(UTC)),
            },
        )
        if self.volcano_scheduler:
            self._advertise_shares(health or {})

    def _advertise_shares(self, health: dict[str, bool]) -> None:
        """Volcano counts `hcumem` and `hcucores` as plain node resources: memory in MiB (the
        unit Hygon's plugin registers and Volcano's fit compares), cores in percent of a card.
        They are too many to list as kubelet devices, so they go into the node's status, as
        Hygon's plugin does; written again only when they change."""
        status = lockless.share_resources(
            [(c.card.memory_mib, health.get(c.id, c.card.healthy)) for c in self.cards.values()], self.names)
        if status == self._advertised:
            return
        self.kube.patch_node_status(self.node, status)
        self._advertised = status
        log.info("node %s: advertised %s for Volcano", self.node,
                 ", ".join(f"{k}={v}" for k, v in sorted(status["allocatable"].items())))
