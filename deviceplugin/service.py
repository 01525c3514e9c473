"""The device plugin's node-side work: Allocate, GetPreferredAllocation's advice, reconcile,
node registration (registration.py). It reads what core.py decides from (the node, its pods),
acts on the answer (the pod's annotations, events, the lock's release through nodeapi.py; the
vDCU's records and files through vdevs.py) and keeps the plugin's own state consistent: all
node-local state (CU bitsets, pipes, vdev ids, vdev files) changes under one lock.

Given a NodeCache (fed by nodewatch.py), an admission the cache shows whole is served without
reading (cachereads.py): its pod write is conditioned on the pod's cached version, and a
refused write undoes the call and decides it again on fresh reads.

The gRPC servicer (server.py) only translates between this class and the wire.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hami_dcu.common.io.failures import Component
from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError
from hami_dcu.common.io.podlatency import DEVICE_PLUGIN
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol import lockpurpose as purpose
from hami_dcu.common.protocol.codec import LockValue
from hami_dcu.common.protocol.errors import Failure, judge
from hami_dcu.common.protocol.keys import Naming
from hami_dcu.common.protocol.podtimes import bound_at, seconds_between
from hami_dcu.deviceplugin import advicereads, cachereads, lockless
from hami_dcu.deviceplugin import plan as planning
from hami_dcu.deviceplugin.admissions import Answer, KubeletAdmissions
from hami_dcu.deviceplugin.core import (
    AllocateFailed,
    Ambiguous,
    ContainerResponse,
    Paths,
    PluginCore,
    VdevShare,
    find_pod,
    lock_value,
    parsed_lock,
    stale_records,
)
from hami_dcu.deviceplugin.metrics import PluginMetrics
from hami_dcu.deviceplugin.nodeapi import NodeApi, StaleCache
from hami_dcu.deviceplugin.nodecache import NodeCache
from hami_dcu.deviceplugin.registration import NodeRegistration
from hami_dcu.deviceplugin.vdevs import Vdevs
from hami_dcu.node.allocator import AllocationError, Grant
from hami_dcu.node.discovery import DcuCard
from hami_dcu.node.podresources import PodResourcesClient
from hami_dcu.node.smi import FALLBACK_MODEL
from hami_dcu.node.vdev import VdevSpec

log = logging.getLogger(__name__)
JSON = dict[str, Any]

# Pauses before listing a node's pods again when several await an Allocate without a lock
# (Volcano mode): the kubelet's status write for a pod it just failed lands within these.
AMBIGUITY_RELISTS = (0.2, 0.4, 0.8)


@dataclass
class Serving:
    """One Allocate call's pod and what serving it has done so far (what a failure undoes)."""

    pod: JSON
    node_obj: JSON
    lockless: bool
    expect: str | None = None  # served from the cache: the pod's cached version, until a write proves it
    entry_containers: list[JSON] | None = None
    responses: list[ContainerResponse] = field(default_factory=list)
    written: list[tuple[Grant, VdevSpec]] = field(default_factory=list)
    release: Future[None] | None = None  # the lock release after the last container
    last_write: Future[JSON] | None = None  # the last container's pod write
    finished: bool = False  # every container of the pod is served

    def __post_init__(self) -> None:
        # Fixed at the start: the pod is replaced by what each write returns.
        self.namespace: str = self.pod["metadata"]["namespace"]
        self.name: str = self.pod["metadata"]["name"]


def _proven(call: Serving) -> bool:
    """Did the call's conditioned pod write land (the pod proven its own), though the call
    failed after sending it? Then the failure is the pod's, handled as any other."""
    if call.last_write is None:
        return False
    try:
        call.pod = call.last_write.result()
    except Exception:  # refused (stale) or failed: nothing is proven
        return False
    call.expect = None
    return True


class PluginService:
    def __init__(
        self,
        kube: Kube,
        node: str,
        cards: list[DcuCard],
        paths: Paths | None = None,
        slots_per_card: int = keys.DEFAULT_SLOTS_PER_CARD,
        lock_timeout_seconds: int = 300,
        metrics: PluginMetrics | None = None,
        *,
        naming: Naming,  # the set whose keys and resources this plugin speaks (cli --naming)
        resource: str | None = None,  # the naming set's count resource when not given
        volcano_scheduler: str = "",  # Volcano mode (deviceplugin/lockless.py): its schedulerName
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], None] = time.sleep,
        cache: NodeCache | None = None,  # the watch-fed copy of the node and its pods (nodewatch.py)
        # Volcano mode: the kubelet's pod resources List, as it came (default: its socket)
        pod_resources: Answer | None = None,
    ) -> None:
        self.core = PluginCore(node, cards, naming, paths, slots_per_card, resource, volcano_scheduler)
        self.node = node
        self.kube = kube
        self.api = NodeApi(kube, node, timedelta(seconds=lock_timeout_seconds), cache)
        self.vdevs = Vdevs(self.core)
        self.wall_clock = wall_clock
        self.sleep = sleep
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
        self.registration = NodeRegistration(self.core, self.api, self.metrics)
        # Which of several pods awaiting an Allocate without a lock the kubelet admits (admissions.py).
        self.admissions = (KubeletAdmissions(pod_resources or PodResourcesClient().answer, self.api.node_pods, node,
                                             self.core.resource) if volcano_scheduler else None)
        self.rebuild()

    def rebuild(self) -> int:
        """Take back every grant recorded in the plugin's own state dir (run at start)."""
        with self.lock:
            restored = self.vdevs.rebuild()
            self.metrics.vdevs.labels(self.node).set(self.vdevs.live)
        return restored

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

    def _allocate_locked(self, requests: list[list[str]], advised: advicereads.AdviceReads | None
                         ) -> tuple[list[ContainerResponse], Future[None] | None]:
        if advised is not None:  # what GetPreferredAllocation read for this very call
            listing: Future[list[JSON]] = Future()
            listing.set_result(advised.pending)
            node_obj = advised.node
        else:
            cached = self._cached_holder() if len(requests) == 1 else None
            if cached is not None:
                node_obj, pod = cached
                try:
                    return self._serve(Serving(pod, node_obj, lockless=False,
                                               expect=pod["metadata"]["resourceVersion"]), requests)
                except StaleCache as exc:
                    self.metrics.cache_reads.labels(self.node, "stale").inc()
                    log.info("node %s: the cached view was behind the API server (%s); deciding again on fresh "
                             "reads", self.node, exc)
            # The two reads do not depend on each other: one round trip of waiting, not two.
            listing = self._io.submit(self.api.pending_pods)
            node_obj = self.api.node_for_allocate()
        return self._serve(self._admit(node_obj, listing, requests), requests)

    def _admit(self, node_obj: JSON, listing: Future[list[JSON]], requests: list[list[str]]) -> Serving:
        """The pod this call is for, once it has proven it is the one; raises otherwise."""
        if self.core.lockless(node_obj):
            return Serving(self._identify_lockless(listing, requests), node_obj, lockless=True)
        namespace, name = self.core.lock_holder(node_obj)
        pending = self._pending_pods(namespace, name, listing)
        found = find_pod(pending, namespace, name)
        # Not Pending on this node: read it to say exactly why (the slow path).
        pod = found if found is not None else self._read_holder(namespace, name)
        self._refuse_if_not_for_holder(pod, node_obj)
        self._refuse_if_ambiguous(pod, pending)
        return Serving(pod, node_obj, lockless=False)

    def _identify_lockless(self, listing: Future[list[JSON]], requests: list[list[str]]) -> JSON:
        """Volcano mode, no node lock: the one pod that proves this call is its own
        (lockless.py), or a refusal that fails no pod's allocation: which pod the kubelet is
        admitting is exactly what is unknown."""
        # The kubelet fails the pod a refusal hit and writes that status a moment after it
        # calls Allocate for its next pod: judged on a list taken before the status landed,
        # two pods placed together would refuse each other round after round. So an ambiguous
        # call is judged again on fresher lists (same rule, newer facts) before it is refused.
        chooser = self.admissions.chooser(len(requests[0]) if requests else 0) if self.admissions else None
        for delay in (*AMBIGUITY_RELISTS, None):
            try:
                return self.core.lockless_pod(listing.result(), requests, chooser)
            except KubeError as exc:
                raise AllocateFailed(f"cannot list the pods of node {self.node}: {exc}") from exc
            except lockless.LocklessRefused as exc:
                if exc.ambiguous and delay is not None:
                    self.sleep(delay)
                    listing = self._io.submit(self.api.pending_pods)
                    continue
                why = str(exc)
                log.error("node %s: %s", self.node, why)
                self.api.node_event("DCUAllocationAmbiguous" if exc.ambiguous else "DCUAllocationRefused", why)
                raise (Ambiguous(why) if exc.ambiguous else AllocateFailed(why)) from None
        raise AssertionError("unreachable")

    def _pending_pods(self, namespace: str, name: str, listing: Future[list[JSON]]) -> list[JSON]:
        """This node's Pending pods: the holder (normally) and any pod that could be the one
        admitted instead. One list, filtered by the server, serves both."""
        try:
            return listing.result()
        except KubeError as exc:
            self.api.mark_failed(namespace, name, f"cannot list the pods of node {self.node}: {exc}")
            raise AllocateFailed(f"cannot list the pods of node {self.node}: {exc}") from exc

    def _read_holder(self, namespace: str, name: str) -> JSON:
        try:
            return self.api.pod(namespace, name)
        except NotFoundError:
            self.api.release(namespace, name)
            raise AllocateFailed(f"pod {namespace}/{name} holding the lock of node {self.node} was deleted") from None
        except KubeError as exc:
            self.api.mark_failed(namespace, name, f"cannot read the pod: {exc}")
            raise AllocateFailed(f"pod {namespace}/{name}: cannot read the pod: {exc}") from exc

    def _refuse_if_not_for_holder(self, holder: JSON, node_obj: JSON) -> None:
        refusal = self.core.holder_refusal(holder)
        if refusal is None:
            return
        log.error("node %s: %s", self.node, refusal.why)
        if refusal.release_reason is not None:
            value = lock_value(node_obj)
            if value and self.api.release_value(value, node_obj):
                self.metrics.lock_releases.labels(self.node, refusal.release_reason).inc()
        self.api.node_event("DCUAllocationRefused", refusal.why)
        raise AllocateFailed(refusal.why)

    def _refuse_if_ambiguous(self, holder: JSON, pending: list[JSON]) -> None:
        """Serve the holder only when no other pod on this node may be the one admitted. An
        ambiguous call is refused without consuming or failing the holder's allocation: if the
        call was the other pod's, the holder's own call comes later and succeeds."""
        why = self.core.ambiguity(holder, pending)
        if why is None:
            return
        log.error("node %s: %s", self.node, why)
        self.api.pod_event(holder["metadata"]["namespace"], holder["metadata"]["name"], "DCUAllocationAmbiguous",
                           why)
        raise Ambiguous(why)

    def _serve(self, call: Serving, requests: list[list[str]]) -> tuple[list[ContainerResponse], Future[None] | None]:
        call.entry_containers = self.core.entry_containers(call.pod)
        bound = bound_at(call.pod)  # read before the writes below: they return the pod without status
        try:
            refusal = self.core.serve_refusal(call.pod, requests)
            if refusal is not None:
                raise planning.AllocateRefused(refusal)
            for ids in requests:
                self._serve_request(call, ids)
        except Exception as exc:
            if call.expect is not None and not _proven(call):  # judged on the cache alone: fresh reads judge it
                self.vdevs.undo(call.written)
                if isinstance(exc, StaleCache):
                    raise
                raise StaleCache(f"pod {call.namespace}/{call.name}: {exc}") from exc
            # any failure, expected or a bug: undo, mark failed, release
            failure = self._fail(call, exc)
            if not failure.expected:
                exc.add_note(f"while serving Allocate for pod {call.namespace}/{call.name} on node {self.node}")
                raise  # the server logs its traceback, counts it and answers INTERNAL
            raise AllocateFailed(failure.message) from exc
        self.metrics.vdevs.labels(self.node).set(self.vdevs.live)
        if call.finished:  # the pod's last container: its DCUs are all handed out now
            waited = seconds_between(bound, self.wall_clock())
            if waited is not None:
                self.metrics.bound_to_allocated_seconds.labels(self.node, DEVICE_PLUGIN).observe(waited)
        return call.responses, call.release  # the release retries and never raises

    def _serve_request(self, call: Serving, ids: list[str]) -> None:
        decision = self.core.decide_container(call.pod, ids, call.entry_containers, call.lockless)
        plan = decision.plan
        if not plan.ids_match:
            self.metrics.device_id_mismatches.labels(self.node).inc()
            log.warning(
                "pod %s/%s container %s on node %s: the kubelet chose %s, hami-scheduler chose %s; "
                "serving the scheduler's cards",
                call.namespace, call.name, plan.container, self.node, ",".join(ids),
                ",".join(d.uuid for d in plan.devices),
            )
        if plan.done:
            # The last container: its pod write ("erased" and "success" in one) and the lock
            # release go out together while its files are written, so the next bind to this
            # node need not wait for one write after the other. Released before "success"
            # lands is safe: the kubelet admits its next pod only after this answer, which
            # waits for the pod write, and the next Allocate here waits for both (see
            # allocate); a failure before then still marks this pod failed, which no lock is
            # needed for.
            # Served from the cache, the release waits for the write that proves the pod.
            call.last_write = self._io.submit(self.api.patch_pod, call.namespace, call.name, decision.update,
                                              call.expect)
            if call.expect is None:
                call.release = self._io.submit(self.api.release, call.namespace, call.name, call.node_obj)
            call.responses.append(self._serve_container(call, plan, decision.share, ids))
            call.pod = call.last_write.result()
            call.expect = None
            if call.release is None:
                call.release = self._io.submit(self.api.release, call.namespace, call.name, call.node_obj)
            call.finished = True
        else:  # the next container's plan reads what this write erased
            call.responses.append(self._serve_container(call, plan, decision.share, ids))
            call.pod = self.api.patch_pod(call.namespace, call.name, decision.update, call.expect)
            call.expect = None
        log.info("pod %s/%s container %s: allocated %s on node %s", call.namespace, call.name, plan.container,
                 ",".join(d.uuid for d in plan.devices), self.node)

    def _serve_container(self, call: Serving, plan: planning.ContainerPlan, share: VdevShare | None,
                         kubelet_ids: list[str]) -> ContainerResponse:
        host_dir: Path | None = None
        if share is not None:
            grant = self._grant(share)
            spec = self.core.vdev_spec(call.pod, plan, share, grant)
            call.written.append((grant, spec))  # before any file: a failure undoes it
            host_dir = self.vdevs.write(spec, kubelet_ids)
        return self.core.container_response(plan, host_dir)

    def _grant(self, share: VdevShare) -> Grant:
        try:
            return self.vdevs.state.allocate(share.card.index, share.cu_count)
        except AllocationError:
            # The scheduler frees a deleted pod's share at once; our cleanup runs every
            # cycle. Before calling it a shortfall, clean up now and try once more.
            if not self._reconcile_locked():
                raise
            return self.vdevs.state.allocate(share.card.index, share.cu_count)

    def _fail(self, call: Serving, exc: Exception) -> Failure:
        """Undo what this call granted and mark its pod failed; how `exc` is answered."""
        self.vdevs.undo(call.written)
        failure = judge(exc, Component.DEVICE_PLUGIN)  # the one rule (common/protocol/errors.py)
        for pending_write in (call.release, call.last_write):  # "failed" must land after them
            if pending_write is not None:
                with contextlib.suppress(Exception):
                    pending_write.result()
        self.api.mark_failed(call.namespace, call.name, failure.message)
        return failure

    # --- GetPreferredAllocation ------------------------------------------------------------

    def preferred(self, available: list[str], must_include: list[str], size: int) -> list[str]:
        """The cards of the pod the lock names. The kubelet calls this just before each
        Allocate: its two reads go out together, and are kept for that Allocate, which takes
        them only when they can describe nothing but its own admission (advicereads.py). When the
        cache shows the admission whole, no read: the Allocate consults the cache again."""
        cached = self._cached_holder()
        if cached is not None:
            self._advice_reads = None
            return self.core.preferred_ids(cached[1], available, must_include, size)
        steps, taken = self._lock_steps, time.monotonic()
        listing = self._io.submit(self.api.pending_pods)
        reads: tuple[JSON, list[JSON]] | None = None
        try:
            node_obj = self.api.node_object()
            pending = listing.result()
            pod, keep = self.core.advice_target(node_obj, pending,
                                                self.admissions.chooser(size) if self.admissions else None)
            if keep:  # the lock's pod is Pending here: the reads can serve its Allocate
                reads = (node_obj, pending)
        except (AllocateFailed, KubeError):
            pod = {}
        advice = self.core.preferred_ids(pod, available, must_include, size)
        self._advice_reads = (advicereads.AdviceReads(taken, steps, reads[0], reads[1], tuple(advice))
                              if reads is not None else None)
        return advice

    def _cached_holder(self) -> tuple[JSON, JSON] | None:
        """The node and the pod the cache shows the kubelet's call to be for (cachereads.py),
        waiting up to CATCH_UP for watches a little behind the kubelet's; None: read."""
        cache = self.api.cache
        if cache is None or self.core.volcano_scheduler:
            return None
        deadline = time.monotonic() + cachereads.CATCH_UP
        while True:
            snapshot = cache.snapshot()
            holder = (self.core.cached_holder(snapshot.node, snapshot.pending, self.wall_clock(),
                                              self.api.node_lock.timeout) if snapshot is not None else None)
            left = deadline - time.monotonic()
            if holder is not None or snapshot is None or left <= 0:
                break
            cache.wait_for_change(left)
        self.metrics.cache_reads.labels(self.node, "fell-back" if holder is None else "served").inc()
        return (snapshot.node, holder) if snapshot is not None and holder is not None else None

    # --- reconcile -------------------------------------------------------------------------

    def reconcile(self) -> list[str]:
        """Remove vdev directories (and /etc/vdev files) of pods that are gone or finished, and
        the node lock if its holder no longer needs it. One pod list scoped to this node per
        cycle. Returns the removed directory names."""
        with self.lock:
            self._lock_steps += 1  # it may release the lock: advice read before is for nobody now
            pods = self.api.known_pods()
            removed = self._reconcile_locked(pods)
            self._release_needless_lock(pods)
            return removed

    def _reconcile_locked(self, pods: list[JSON] | None = None) -> list[str]:
        # The list is taken under the lock: a pod allocated between a list and the cleanup
        # would otherwise look gone and lose its live vdev directory.
        if pods is None:
            pods = self.api.node_pods()
        removed = self.vdevs.remove(stale_records(self.vdevs.named_records(), pods))
        removed += self.vdevs.remove_unrecorded()
        self.metrics.vdevs.labels(self.node).set(self.vdevs.live)
        return removed

    def _release_needless_lock(self, pods: list[JSON]) -> None:
        """A holder that is done here (running, allocation done or failed, finished), bound
        elsewhere, gone, or never bound within the bind window will never call Allocate on
        this node; without this the node stays locked until the lock expires (5 min)."""
        node_obj = self.api.known_node()
        value = lock_value(node_obj)
        if not value:
            return
        lock = parsed_lock(value)
        holder = self._lock_holder_pod(pods, lock) if lock is not None and lock.name is not None else None
        node_lock = self.api.node_lock
        reason = purpose.release_reason(lock, holder, self.node, datetime.now(UTC), node_lock.timeout,
                                        node_lock.bind_window)
        if reason is None:
            return
        if self.api.release_value(value, node_obj):
            self.metrics.lock_releases.labels(self.node, reason).inc()
            log.info("node %s: released the lock %r, whose holder no longer needs it (%s)", self.node, value, reason)

    def _lock_holder_pod(self, pods: list[JSON], lock: LockValue) -> JSON | None:
        """The pod a lock names, from the node's list or else from the API (unbound, bound
        elsewhere); None when it does not exist."""
        found = find_pod(pods, lock.namespace, lock.name)
        if found is not None or lock.name is None:
            return found
        try:
            return self.api.pod(lock.namespace or "", lock.name)
        except NotFoundError:
            return None

    # --- node registration -----------------------------------------------------------------

    def register_node(self, health: dict[str, bool] | None = None, now: datetime | None = None) -> None:
        """Publish the cards and the handshake on the node (what hami-scheduler reads); in
        Volcano mode also memory and cores as node resources (what Volcano's fit reads)."""
        self.registration.publish(health or {}, now or datetime.now(UTC))
