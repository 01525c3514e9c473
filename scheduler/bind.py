"""`POST /bind`: lock the node, check the placement on the freshest state, bind with the
allocation carried by the Binding itself.

Common case, two API round trips:
1. the node lock, a merge patch with the resourceVersion our node watch last saw
   (a compare-and-swap: a stale version gets 409 and we fall back to NodeLock's
   read-then-swap, which also handles expired and orphaned locks);
2. the Binding, whose `metadata.annotations` carry `dcu-devices-to-allocate`,
   `dcu-devices-allocated`, `vgpu-node`, `vgpu-time`, `bind-phase: allocating` and
   `bind-time`: the API server merges them into the pod atomically with `spec.nodeName`
   (k8s-protocols.md §4.1), so the device plugin never sees a half-written pod.
HAMi also sets a `hami.io/vgpu-node` *label*; nothing in hami-dcu or in HAMi's DCU plugin
selects on it, and a Binding cannot carry labels, so we leave it out rather than pay a third
round trip on every bind.

Between 1 and 2 the placement is checked against the freshest state: the node watch must
have delivered our own lock (so every earlier lock of that node is known), and every pod
that held the lock before us (another scheduler replica's) must have its allocation in
the cache; if the watches lag we wait a little, then list the node's pods (a third round
trip, only then). If the chosen cards no longer fit, the pod is re-fitted on the node.

On contention the bind waits (bounded) for the lock to be released, watching the cache
rather than polling the API, so bursts and gangs aimed at one node succeed. Every failure
releases our lock (only ours), forgets the assumption, records a BindingFailed event and
answers `{"Error": ...}`. Nothing else needs undoing: the Binding is atomic.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hami_dcu.common import keys
from hami_dcu.common.codec import LockValue, encode_lock, encode_pod_devices
from hami_dcu.common.kube import AsyncKube, ConflictError, KubeError, NotFoundError, UnreachableError
from hami_dcu.common.nodelock import LockContention, LockError, NodeLock
from hami_dcu.common.requests import RequestError
from hami_dcu.scheduler.cache import Assumption, ClusterCache
from hami_dcu.scheduler.events import EventSink
from hami_dcu.scheduler.extender import BindArgs
from hami_dcu.scheduler.filtering import Filter, PodPlan, plan_pod
from hami_dcu.scheduler.fit import PodFit, PodMiss, fit_pod
from hami_dcu.scheduler.metrics import SchedulerMetrics
from hami_dcu.scheduler.reasons import NodeRejection

log = logging.getLogger(__name__)


class BindError(RuntimeError):
    """Why a bind failed, in words for the pod's event and the extender's Error."""


@dataclass(frozen=True)
class BindSettings:
    lock_timeout: timedelta = timedelta(seconds=300)  # a lock older than this is expired
    lock_wait: float = 20.0  # how long a bind waits for a locked node
    settle_wait: float = 2.0  # how long to wait for the watches before listing the node's pods
    poll: float = 0.01  # cache polling interval while waiting


@dataclass
class _Progress:
    api_calls: int = 0
    locked: bool = False
    contended: bool = False


class Binder:
    def __init__(
        self,
        kube: AsyncKube,
        cache: ClusterCache,
        filter_: Filter,
        settings: BindSettings,
        metrics: SchedulerMetrics,
        events: EventSink,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.filter = filter_
        self.settings = settings
        self.metrics = metrics
        self.events = events
        self.wall_clock = wall_clock
        self.monotonic = monotonic
        self.lock = NodeLock(kube.kube, settings.lock_timeout, clock=wall_clock)
        # Binds of one process to one node queue here instead of racing on the API lock.
        self._node_queues: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def bind(self, args: BindArgs) -> str:
        """'' on success, else the error for ExtenderBindingResult."""
        started = self.monotonic()
        progress = _Progress()
        try:
            await self._bind(args, progress)
        except BindError as exc:
            await self._undo(args, progress)
            log.warning("bind %s to node %s failed: %s", args.pod, args.node, exc)
            self.metrics.bind_seconds.labels("error").observe(self.monotonic() - started)
            pod = {"kind": "Pod", "metadata": {"name": args.pod_name, "namespace": args.namespace, "uid": args.uid}}
            await self.events.emit(pod, "BindingFailed", f"node {args.node}: {exc}", "Warning", limited=False)
            return str(exc)
        except BaseException:
            # Cancelled (the caller went away) or a bug: still leave no lock and no assumption.
            await asyncio.shield(self._undo(args, progress))
            self.metrics.bind_seconds.labels("error").observe(self.monotonic() - started)
            raise
        self.metrics.bind_seconds.labels("ok").observe(self.monotonic() - started)
        self.metrics.bind_round_trips.observe(progress.api_calls)
        log.info("bound %s to node %s (%d API calls)", args.pod, args.node, progress.api_calls)
        return ""

    async def _bind(self, args: BindArgs, progress: _Progress) -> None:
        assumption = self.cache.assumption_for(args.uid, args.namespace, args.pod_name)
        if assumption is None or assumption.node != args.node:
            assumption = await self._assume_now(args, progress)
            if assumption is None:  # not a DCU pod: a plain bind
                await self._create_binding(args, None, progress)
                return
        async with self._node_queues[args.node]:
            await self._acquire(args, progress)
            await self._settle(args, progress)
            assumption = self._verify(args, assumption)
            await self._create_binding(args, assumption, progress)
        self.cache.mark_bound(assumption.uid, self.monotonic())

    # --- assumption --------------------------------------------------------------------

    async def _assume_now(self, args: BindArgs, progress: _Progress) -> Assumption | None:
        """No /filter choice for this pod and node (scheduler restarted in between, or
        kube-scheduler picked another node): fit it on the node now."""
        try:
            pod = await self.kube.get_pod(args.namespace, args.pod_name)
        except NotFoundError as exc:
            raise BindError(f"pod {args.pod} not found") from exc
        except KubeError as exc:
            raise BindError(f"cannot read pod {args.pod}: {exc}") from exc
        finally:
            progress.api_calls += 1
        try:
            plan = plan_pod(pod, self.filter.settings)
        except RequestError as exc:
            raise BindError(str(exc)) from exc
        if plan is None:
            return None
        result = self.filter.fit_node(args.node, plan, self.wall_clock())
        if isinstance(result, NodeRejection):
            raise BindError(f"pod does not fit node {args.node}: {result.message}")
        uid = (pod.get("metadata") or {}).get("uid") or args.uid
        log.info("bind %s: no filter result for node %s, fitted at bind time", args.pod, args.node)
        return self.cache.assume(uid, args.namespace, args.pod_name, args.node, result, plan.init_count,
                                 self.monotonic(), plan)

    # --- the node lock -----------------------------------------------------------------

    async def _acquire(self, args: BindArgs, progress: _Progress) -> None:
        started = self.monotonic()
        deadline = started + self.settings.lock_wait
        next_slow_check = started
        try_fast = True
        try:
            while True:
                entry = self.cache.nodes.get(args.node)
                cached = entry.lock() if entry is not None else None
                now = self.monotonic()
                other_holds = (cached is not None and not cached.held_by(args.namespace, args.pod_name)
                               and self.wall_clock() - cached.since <= self.settings.lock_timeout)
                if other_holds:
                    # Locked by a live-looking holder: wait for the watch to show the release,
                    # checking through the API once a second for an orphaned holder.
                    progress.contended = True
                    try_fast = True
                    if now < next_slow_check:
                        self._check_deadline(args, deadline, cached.holder if cached else "another pod")
                        await asyncio.sleep(self.settings.poll)
                        continue
                elif try_fast and entry is not None and entry.present and not entry.lock_value \
                        and entry.resource_version:
                    if await self._fast_lock(args, entry.resource_version, progress):
                        return
                    try_fast = False
                elif now < next_slow_check:
                    self._check_deadline(args, deadline, "another pod")
                    await asyncio.sleep(self.settings.poll)
                    continue
                # Read-then-swap through NodeLock: takes over expired/orphaned locks too.
                try:
                    takeover = await self.kube.call(self.lock.acquire, args.node, args.namespace, args.pod_name)
                except LockContention as exc:
                    progress.api_calls += 1
                    progress.contended = True
                    next_slow_check = self.monotonic() + 1.0
                    try_fast = False
                    if self.monotonic() >= deadline:
                        raise BindError(f"{exc} (waited {self.settings.lock_wait:.0f}s)") from exc
                    await asyncio.sleep(self.settings.poll)
                    continue
                except (LockError, KubeError) as exc:
                    raise BindError(f"cannot lock node {args.node}: {exc}") from exc
                progress.api_calls += 2
                progress.locked = True
                if takeover is not None:
                    self.metrics.lock_takeovers.labels(takeover.reason).inc()
                return
        finally:
            self.metrics.lock_wait_seconds.observe(self.monotonic() - started)
            if progress.contended:
                self.metrics.lock_contention.inc()

    def _check_deadline(self, args: BindArgs, deadline: float, holder: str) -> None:
        if self.monotonic() >= deadline:
            raise BindError(f"node {args.node} stayed locked by {holder} for {self.settings.lock_wait:.0f}s")

    async def _fast_lock(self, args: BindArgs, resource_version: str, progress: _Progress) -> bool:
        value = encode_lock(LockValue(since=self.wall_clock(), namespace=args.namespace, name=args.pod_name))
        progress.api_calls += 1
        try:
            await self.kube.patch_node_metadata(args.node, annotations={keys.NODE_LOCK: value},
                                                resource_version=resource_version)
        except ConflictError:
            return False  # our view of the node is stale: take the read-then-swap path
        except KubeError as exc:
            raise BindError(f"cannot lock node {args.node}: {exc}") from exc
        progress.locked = True
        return True

    # --- freshest state ----------------------------------------------------------------

    async def _settle(self, args: BindArgs, progress: _Progress) -> None:
        deadline = self.monotonic() + self.settings.settle_wait
        while self.monotonic() < deadline:
            entry = self.cache.nodes.get(args.node)
            lock = entry.lock() if entry is not None else None
            if lock is not None and lock.held_by(args.namespace, args.pod_name) and self.cache.settled(args.node):
                return
            await asyncio.sleep(self.settings.poll)
        # The watches lag (or a previous holder never bound): read the node's pods directly.
        log.info("bind %s: watches not settled for node %s, listing its pods", args.pod, args.node)
        try:
            listed = await self.kube.list_pods(field_selector=f"spec.nodeName={args.node}")
        except KubeError as exc:
            raise BindError(f"cannot list pods of node {args.node}: {exc}") from exc
        finally:
            progress.api_calls += 1
        for pod in listed.items:
            self.cache.apply_pod(pod)
        self.cache.unsettled.pop(args.node, None)

    def _verify(self, args: BindArgs, assumption: Assumption) -> Assumption:
        """The assumed cards must still have room next to everything else on the node."""
        entry = self.cache.nodes.get(args.node)
        problem = self.filter.usable(entry, self.wall_clock())
        if problem is not None:
            raise BindError(f"node {args.node} unusable: {problem.message}")
        assert entry is not None
        others = self.cache.used_without(entry, assumption.uid)
        still_fits = True
        for card_id, share in assumption.fit.held.items():
            pos = entry.card_pos.get(card_id)
            if pos is None:
                still_fits = False
                break
            spec, used = entry.cards[pos], others[pos]
            if (used.slots + share.slots > spec.slots or used.memory + share.memory > spec.memory
                    or used.cores + share.cores > spec.cores):
                still_fits = False
                break
        if still_fits:
            return assumption
        plan: PodPlan | None = assumption.plan
        if plan is None:
            raise BindError(f"cards chosen on node {args.node} were taken meanwhile")
        result = fit_pod(entry.cards, others, plan.requests, plan.names, plan.init_count, plan.selection,
                         plan.card_policy)
        if isinstance(result, PodMiss):
            raise BindError(f"node {args.node} no longer fits: {result.message}")
        log.info("bind %s: cards on node %s were taken meanwhile, re-fitted", args.pod, args.node)
        return self.cache.assume(assumption.uid, assumption.namespace, assumption.name, args.node, result,
                                 assumption.init_count, self.monotonic(), plan)

    # --- the Binding -------------------------------------------------------------------

    def allocation_annotations(self, fit: PodFit, node: str) -> dict[str, str]:
        devices = encode_pod_devices(fit.devices)
        stamp = str(int(self.wall_clock().timestamp()))
        return {
            keys.POD_DEVICES_TO_ALLOCATE: devices,
            keys.POD_DEVICES_ALLOCATED: devices,
            keys.POD_NODE: node,
            keys.POD_TIME: stamp,
            keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
            keys.POD_BIND_TIME: stamp,
        }

    async def _create_binding(self, args: BindArgs, assumption: Assumption | None, progress: _Progress) -> None:
        annotations = self.allocation_annotations(assumption.fit, args.node) if assumption else None
        progress.api_calls += 1
        try:
            await self.kube.create_binding(args.namespace, args.pod_name, args.node, args.uid or None, annotations)
        except (UnreachableError, ConflictError) as exc:
            # A timed-out or retried bind may have happened already: believe the pod.
            if await self._already_bound(args, annotations, progress):
                return
            raise BindError(f"binding rejected: {exc}") from exc
        except KubeError as exc:
            if exc.status >= 500 and await self._already_bound(args, annotations, progress):
                return
            raise BindError(f"binding rejected: {exc}") from exc

    async def _already_bound(self, args: BindArgs, annotations: dict[str, str] | None, progress: _Progress) -> bool:
        progress.api_calls += 1
        try:
            pod = await self.kube.get_pod(args.namespace, args.pod_name)
        except KubeError:
            return False
        self.cache.apply_pod(pod)  # the freshest word on this pod: count what it really holds
        meta = pod.get("metadata") or {}
        on_node = (pod.get("spec") or {}).get("nodeName") == args.node
        ours = annotations is None or (meta.get("annotations") or {}).get(keys.POD_DEVICES_ALLOCATED) == annotations[
            keys.POD_DEVICES_ALLOCATED]
        return on_node and ours

    # --- undo --------------------------------------------------------------------------

    async def _undo(self, args: BindArgs, progress: _Progress) -> None:
        assumption = self.cache.assumption_for(args.uid, args.namespace, args.pod_name)
        if assumption is not None and not assumption.bound:  # a bound one is a pod that really holds cards
            self.cache.forget(assumption.uid)
        if progress.locked:
            await self.release(args.node, args.namespace, args.pod_name)

    async def release(self, node: str, namespace: str, name: str) -> bool:
        """Remove the lock of namespace/name on node, if it still holds it."""
        for attempt in range(3):
            try:
                return await self.kube.call(self.lock.release, node, namespace, name)
            except (LockError, KubeError) as exc:
                log.warning("node %s: releasing lock of %s/%s failed (attempt %d): %s", node, namespace, name,
                            attempt + 1, exc)
                await asyncio.sleep(0.1 * (attempt + 1))
        return False
