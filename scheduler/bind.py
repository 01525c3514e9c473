"""`POST /bind`: lock the node, check the placement on the freshest state, bind with the
allocation carried by the Binding itself.

Common case, two API round trips:
1. the node lock, a merge patch with the resourceVersion our node watch last saw
   (a compare-and-swap: a stale version gets 409 and we fall back to NodeLock's
   read-then-swap, which also takes over locks whose holder no longer needs them);
2. the Binding, whose `metadata.annotations` carry `dcu-devices-to-allocate`,
   `dcu-devices-allocated`, `vgpu-node`, `vgpu-time`, `bind-phase: allocating` and
   `bind-time`: the API server merges them into the pod atomically with `spec.nodeName`
   (docs/architecture.md, Wire formats), so the device plugin never sees a half-written pod.
HAMi also sets a `hami.io/vgpu-node` *label*; nothing in hami-dcu or in HAMi's DCU plugin
selects on it, and a Binding cannot carry labels, so we leave it out rather than pay a third
round trip on every bind.

Between 1 and 2 the placement is checked against the freshest state: the node watch must
have delivered our own lock (so every earlier lock of that node is known; a lock written on
the very version the cache holds is applied from the write's answer, without waiting for
the watch's echo: nothing can have happened to the node in between), and every pod
that held the lock before us (another scheduler replica's) must have its allocation in
the cache; if the watches lag we wait a little, then list the node's pods (a third round
trip, only then). If the chosen cards no longer fit, the pod is re-fitted on the node.

On contention the bind waits (bounded: one deadline covers this process's queue for the
node and the lock) for the lock to be released, watching the cache rather than polling
the API, so bursts and gangs aimed at one node succeed. The informer wakes the binds waiting
on a node after every event about that node (signal.py), so the next bind writes its lock as soon as the watch
shows the release, with the version the watch showed: a contended bind, too, costs two
round trips. A lock the cache shows held by a live bind is not asked about (the API would
say the same); a lock write that finds the node changed waits for the watch to catch up
rather than reading the node.

Duplicates and retries (kube-scheduler retries a bind after its extender timeout and never
cancels the first call; another replica may get the retry):
* one attempt per pod at a time in this process: a duplicate joins the attempt in flight;
* a pod already bound answers from the API's truth (its `spec.nodeName`), never from an
  earlier assumption, and takes no lock;
* an attempt owns only the lock value it wrote. A lock naming the same pod but written by
  another attempt is waited on like any other, so no attempt's cleanup ever removes a lock
  another attempt's Allocate still needs;
* a write whose answer is lost is read back (NodeLock, and the pod for the Binding) before
  it counts as done or undone;
* a bind whose placement a newer /filter replaced gives up before locking or binding.
Every failure releases our lock (only ours), forgets our assumption, records a
BindingFailed event and answers `{"Error": ...}`. Nothing else needs undoing: the Binding
is atomic.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hami_dcu.common.io.kube import AsyncKube, ConflictError, KubeError, UnreachableError
from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.io.podlatency import DEVICE_PLUGIN  # the extender binds only device-plugin pods
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.podchecks import CheckSettings, Stage, refusal_of
from hami_dcu.common.protocol.podtimes import created_at, seconds_between
from hami_dcu.common.protocol.requests import RequestError
from hami_dcu.scheduler.allocation import allocation_annotations
from hami_dcu.scheduler.bindattempt import (
    AlreadyBound,
    Attempt,
    BindError,
    BindSettings,
    check_current,
    read_pod,
)
from hami_dcu.scheduler.bindlock import NodeLocking
from hami_dcu.scheduler.bindpace import BindPace
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cacherecords import Assumption, still_fits, used_without
from hami_dcu.scheduler.events import EventSink
from hami_dcu.scheduler.extender import BindArgs
from hami_dcu.scheduler.filtering import Filter, plan_pod
from hami_dcu.scheduler.fit import PodFit, PodMiss
from hami_dcu.scheduler.lockjanitor import LockJanitor
from hami_dcu.scheduler.metrics import SchedulerMetrics
from hami_dcu.scheduler.nodepace import NodePace
from hami_dcu.scheduler.reasons import NodeRejection
from hami_dcu.scheduler.signal import CacheSignal
from hami_dcu.scheduler.volcano import volcano_owned

log = logging.getLogger(__name__)
JSON = dict[str, Any]
PodKey = tuple[str, str]
_BINDING_ATTEMPTS = 3  # Binding calls per bind while the pod stays unbound and the server is busy


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
        changed: CacheSignal | None = None,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.filter = filter_
        self.settings = settings
        self.metrics = metrics
        self.events = events
        self.wall_clock = wall_clock
        self.monotonic = monotonic
        self.naming = filter_.settings.naming  # the set whose allocation keys a Binding writes
        self.checks = CheckSettings(resources=filter_.settings.resources)  # admission's, again (podchecks.py)
        self.lock = NodeLock(kube.kube, settings.lock_timeout, clock=wall_clock, bind_window=settings.bind_window)
        self.locking = NodeLocking(kube, cache, self.lock, settings, metrics, wall_clock, monotonic, changed)
        self.janitor = LockJanitor(kube, cache, self.lock, metrics, wall_clock, settings.plugin_release_grace)
        # The pace binds end at: /filter holds new binds back when those in flight outrun it.
        self.pace = BindPace(settings.lock_wait * settings.pace_share, settings.pace_floor)
        # Each node's pace: /filter prefers another node when a node's queue outruns it.
        self.node_pace = NodePace(settings.lock_wait * settings.node_pace_share)
        # Binds of one process to one node queue here instead of racing on the API lock.
        self._node_queues: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # The attempt in flight per pod, and the node it binds to.
        self._in_flight: dict[PodKey, tuple[str, asyncio.Task[str]]] = {}

    @property
    def in_flight(self) -> int:
        """Bind attempts still running (their callers may have gone: an attempt always ends)."""
        return sum(1 for _node, task in self._in_flight.values() if not task.done())

    async def bind(self, args: BindArgs) -> str:
        """'' on success, else the error for ExtenderBindingResult."""
        key = (args.namespace, args.pod_name)
        running = self._in_flight.get(key)
        if running is not None and not running[1].done():
            # kube-scheduler retried (its extender timeout) without cancelling the first call:
            # one attempt per pod, so a second one can never race the first for the lock.
            self.metrics.duplicate_binds.inc()
            log.info("bind %s to node %s: joins the bind to node %s already in flight", args.pod, args.node,
                     running[0])
            result = await asyncio.shield(running[1])
            if running[0] == args.node:
                return result
        task = asyncio.ensure_future(self._attempt(args))
        entry = (args.node, task)
        self._in_flight[key] = entry

        def done(_task: asyncio.Task[str]) -> None:
            if self._in_flight.get(key) is entry:
                del self._in_flight[key]

        task.add_done_callback(done)
        # Shielded: a caller that goes away must not cut an attempt between its lock and
        # its Binding; the attempt finishes (or undoes itself) either way.
        return await asyncio.shield(task)

    async def _attempt(self, args: BindArgs) -> str:
        started = self.monotonic()
        attempt = Attempt(args, deadline=started + self.settings.lock_wait)
        try:
            await self._bind(attempt)
        except BindError as exc:
            await self._undo(attempt)
            log.warning("bind %s to node %s failed: %s", args.pod, args.node, exc)
            self.metrics.bind_seconds.labels("error").observe(self.monotonic() - started)
            pod = {"kind": "Pod", "metadata": {"name": args.pod_name, "namespace": args.namespace, "uid": args.uid}}
            await self.events.emit(pod, "BindingFailed", f"node {args.node}: {exc}", "Warning", limited=False)
            return str(exc)
        except BaseException:
            # Cancelled (the service stops) or a bug: still leave no lock and no assumption.
            await asyncio.shield(self._undo(attempt))
            self.metrics.bind_seconds.labels("error").observe(self.monotonic() - started)
            raise
        self.metrics.bind_seconds.labels("ok").observe(self.monotonic() - started)
        self.pace.ended(self.monotonic())
        self.metrics.bind_round_trips.observe(attempt.api_calls)
        if attempt.bound_here and attempt.assumption is not None:
            waited = seconds_between(attempt.assumption.created, self.wall_clock())
            if waited is not None:
                self.metrics.create_to_bound_seconds.labels(DEVICE_PLUGIN).observe(waited)
        log.info("bound %s to node %s (%d API calls)", args.pod, args.node, attempt.api_calls)
        return ""

    async def _bind(self, attempt: Attempt) -> None:
        args = attempt.args
        try:
            if self.cache.bound_node(args.uid, args.namespace, args.pod_name) is not None:
                pod = await read_pod(self.kube, attempt)  # the cache says bound: the pod has the last word
                if (pod.get("spec") or {}).get("nodeName"):
                    raise AlreadyBound(pod)
            await self._place(attempt)
        except AlreadyBound as found:
            await self._answer_from_pod(attempt, found.pod)

    async def _place(self, attempt: Attempt) -> None:
        args = attempt.args
        assumption = self.cache.placements.find(args.uid, args.namespace, args.pod_name)
        if assumption is None or assumption.node != args.node or assumption.bound:
            assumption = await self._assume_now(attempt)
            if assumption is None:  # not a DCU pod: a plain bind
                await self._create_binding(attempt, None)
                return
        attempt.assumption = assumption
        queue = self._node_queues[args.node]
        queued = queue.locked()  # behind another bind of this process to the node
        try:
            await asyncio.wait_for(queue.acquire(), max(0.0, attempt.deadline - self.monotonic()))
        except TimeoutError:
            raise BindError(f"node {args.node} stayed busy with other binds for "
                            f"{self.settings.lock_wait:.0f}s") from None
        try:
            await self.locking.acquire(attempt)
            self.node_pace.took(args.node, self.monotonic(), queued or attempt.waited_for_holder)
            await self.locking.settle(attempt)
            fit = self._verify(attempt)
            await self._create_binding(attempt, fit)
        finally:
            queue.release()
        self.cache.placements.confirm(attempt.assumption, self.monotonic())

    # --- the pod's own truth -------------------------------------------------------------

    async def _answer_from_pod(self, attempt: Attempt, pod: JSON) -> None:
        """Another attempt bound the pod: its spec.nodeName is the answer. What this attempt
        wrote is nobody's to keep."""
        args = attempt.args
        self._forget_own(attempt)
        if attempt.lock_value is not None:
            await self.janitor.release_value(args.node, attempt.lock_value)
            attempt.lock_value = None
        self.cache.apply_pod(pod)  # the freshest word on this pod: count what it really holds
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to != args.node:
            raise BindError(f"pod {args.pod} is already bound to node {bound_to}")
        log.info("bind %s to node %s: already bound there (an earlier attempt); nothing to do", args.pod, args.node)

    # --- assumption --------------------------------------------------------------------

    async def _assume_now(self, attempt: Attempt) -> Assumption | None:
        """No /filter choice for this pod and node (scheduler restarted in between, or
        kube-scheduler picked another node): fit it on the node now. None: not a DCU pod."""
        args = attempt.args
        pod = await read_pod(self.kube, attempt)
        if (pod.get("spec") or {}).get("nodeName"):
            raise AlreadyBound(pod)
        # /filter never assumes a Volcano pod, so every bind of one comes through here.
        not_ours = volcano_owned(pod, self.filter.settings.volcano_scheduler)
        if not_ours:
            raise BindError(not_ours)
        refused = refusal_of(pod, self.checks, Stage.PLACE)
        if refused is not None:
            raise BindError(f"refused ({refused.check}): {refused.message}")
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
        return self.cache.placements.reserve(uid, args.namespace, args.pod_name, args.node, result,
                                             plan.init_count, self.monotonic(), plan, created=created_at(pod))

    # --- freshest state ----------------------------------------------------------------

    def _verify(self, attempt: Attempt) -> PodFit:
        """The assumed cards must still have room next to everything else on the node."""
        args = attempt.args
        check_current(self.cache, attempt)
        assumption = attempt.assumption
        assert assumption is not None
        entry = self.cache.node(args.node)
        problem = self.filter.usable(entry, self.wall_clock())
        if problem is not None:
            raise BindError(f"node {args.node} unusable: {problem.message}")
        assert entry is not None
        if still_fits(entry, assumption):
            return assumption.fit
        plan = assumption.plan
        if plan is None:
            raise BindError(f"cards chosen on node {args.node} were taken meanwhile")
        result = plan.fit(entry.cards, used_without(entry, [assumption.key]))
        if isinstance(result, PodMiss):
            raise BindError(f"node {args.node} no longer fits: {result.message}")
        log.info("bind %s: cards on node %s were taken meanwhile, re-fitted", args.pod, args.node)
        attempt.assumption = self.cache.placements.reserve(assumption.uid, assumption.namespace, assumption.name,
                                                           args.node, result, assumption.init_count, self.monotonic(),
                                                           plan, created=assumption.created)
        return result

    # --- the Binding -------------------------------------------------------------------

    def allocation_annotations(self, fit: PodFit, node: str) -> dict[str, str]:
        return allocation_annotations(self.naming, fit.devices, node, self.wall_clock())

    async def _create_binding(self, attempt: Attempt, fit: PodFit | None) -> None:
        args = attempt.args
        annotations = self.allocation_annotations(fit, args.node) if fit is not None else None
        for round_ in range(1, _BINDING_ATTEMPTS + 1):
            attempt.api_calls += 1
            try:
                await self.kube.create_binding(args.namespace, args.pod_name, args.node, args.uid or None,
                                               annotations)
                attempt.bound_here = True
                return
            except KubeError as exc:
                if not isinstance(exc, UnreachableError | ConflictError) and exc.status < 500:
                    raise BindError(f"binding rejected: {exc}") from exc
                # A lost answer, a pod already bound (by us or by another attempt), or a busy
                # server: the pod says which.
                if await self._binding_landed(attempt, annotations):
                    attempt.bound_here = True
                    return
                if round_ == _BINDING_ATTEMPTS:
                    raise BindError(f"binding rejected: {exc}") from exc
                # Not bound, and we still hold the lock on a verified placement: try again
                # rather than send the pod through kube-scheduler's backoff.
                log.info("bind %s to node %s: Binding failed (%s), pod still unbound: retrying", args.pod, args.node,
                         exc)
                await asyncio.sleep(0.02 * round_)

    async def _binding_landed(self, attempt: Attempt, annotations: dict[str, str] | None) -> bool:
        """After a Binding without a clear answer: True when it is ours and in place, False
        when the pod is still unbound; raises AlreadyBound when another attempt bound it."""
        pod = await read_pod(self.kube, attempt)
        meta = pod.get("metadata") or {}
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if not bound_to:
            return False
        found = meta.get("annotations") or {}
        ours = bound_to == attempt.args.node and (annotations is None or all(
            found.get(key) == annotations[key] for key in (self.naming.pod_devices_allocated, keys.POD_BIND_TIME)))
        if not ours:
            raise AlreadyBound(pod)
        self.cache.apply_pod(pod)  # our Binding landed although its answer was lost
        return True

    # --- undo --------------------------------------------------------------------------

    def _forget_own(self, attempt: Attempt) -> None:
        """Drop this attempt's assumption, never a newer one another /filter made."""
        if attempt.assumption is not None:
            self.cache.placements.withdraw(attempt.assumption)

    async def _undo(self, attempt: Attempt) -> None:
        self._forget_own(attempt)
        if attempt.lock_value is not None:
            await self.janitor.release_value(attempt.args.node, attempt.lock_value)
