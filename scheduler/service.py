"""One scheduler extender instance: cache + informer + filter + binder, wired together.

The HTTP layer (app.py) only decodes requests and encodes answers; the tests and the
benchmark drive this object directly or through the app.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hami_dcu.common.io.kube import AsyncKube, KubeError
from hami_dcu.common.io.podlatency import DEVICE_PLUGIN, DRA
from hami_dcu.common.protocol.podchecks import CheckSettings, Refusal, Stage, refusal_of
from hami_dcu.common.protocol.requests import RequestError
from hami_dcu.scheduler import filtersteps
from hami_dcu.scheduler.bind import Binder, BindSettings
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cacherecords import NeedlessLock, NodeView
from hami_dcu.scheduler.cardpreemptor import CardPreemptor, PreemptorSettings
from hami_dcu.scheduler.cardvictims import priority_of
from hami_dcu.scheduler.drainformer import DraInformer
from hami_dcu.scheduler.drausage import DraUsage
from hami_dcu.scheduler.events import EventSink
from hami_dcu.scheduler.extender import (
    BindArgs,
    FilterArgs,
    NodeVictims,
    PreemptionArgs,
    preemption_result,
)
from hami_dcu.scheduler.filtering import Filter, FilterSettings, plan_pod
from hami_dcu.scheduler.informer import Informer
from hami_dcu.scheduler.metrics import SchedulerMetrics
from hami_dcu.scheduler.namingwatch import check_naming
from hami_dcu.scheduler.packing import pack
from hami_dcu.scheduler.preemption import choose_victims, holders
from hami_dcu.scheduler.quotametrics import QuotaMetrics
from hami_dcu.scheduler.quotas import QuotaBook
from hami_dcu.scheduler.signal import CacheSignal
from hami_dcu.scheduler.volcano import volcano_owned

log = logging.getLogger(__name__)
JSON = dict[str, Any]
# How often a held /filter looks again at the binds in flight (bindpace.py).
_FILTER_TURN_POLL = 0.02


@dataclass(frozen=True)
class ServiceSettings:
    filter: FilterSettings  # required: it names the naming set (no default set, see FilterSettings)
    bind: BindSettings = field(default_factory=BindSettings)
    resync: float = 300.0
    assume_ttl: float = 120.0
    sync_wait: float = 10.0  # how long /filter waits for the first sync before answering an error
    mode: str = DEVICE_PLUGIN  # dra: /prioritize packs by the DRA view (slices and claims)
    card_preemption: PreemptorSettings = field(default_factory=PreemptorSettings)


class SchedulerService:
    def __init__(
        self,
        kube: AsyncKube | None,
        settings: ServiceSettings,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.wall_clock = wall_clock
        self.monotonic = monotonic
        self.cache = ClusterCache(assume_ttl=self.settings.assume_ttl,
                                  handshake_ttl=timedelta(seconds=self.settings.filter.handshake_ttl_seconds),
                                  naming=self.settings.filter.naming)
        self.filter = Filter(self.cache, self.settings.filter)
        self.checks = CheckSettings(resources=self.settings.filter.resources)
        self.quotas = QuotaBook(self.settings.filter.resources)
        self.metrics = SchedulerMetrics(self.cache)
        self.metrics.registry.register(QuotaMetrics(self.quotas, self.cache))
        self.events = EventSink(self._post_event)
        # Pods kept out by card memory or cores, which kube-scheduler's preemption cannot see.
        self.preemptor = (
            CardPreemptor(kube, self.cache, self.filter, self.settings.card_preemption, self._post_event,
                          self.metrics.registry, wall_clock)
            if kube is not None and self.settings.card_preemption.enabled and self.settings.mode == DEVICE_PLUGIN
            else None
        )
        self.changed = CacheSignal()  # the informer wakes binds waiting on the cache
        self.binder = (
            Binder(kube, self.cache, self.filter, self.settings.bind, self.metrics, self.events, wall_clock, monotonic,
                   changed=self.changed)
            if kube is not None else None
        )
        node_pace = self.binder.node_pace if self.binder is not None else None
        self._filter_env = filtersteps.FilterEnv(
            self.settings.filter, self.checks, self.cache, self.filter, self.quotas, self._emit, monotonic,
            wall_clock, self.preemptor.consider if self.preemptor is not None else None,
            (lambda node: node_pace.limit(node, self.monotonic())) if node_pace is not None else None)
        self.informer = (
            Informer(kube, self.cache, self._release_needless, self.settings.resync, wall_clock=wall_clock,
                     quotas=self.quotas, changed=self.changed)
            if kube is not None else None
        )
        self.dra_usage = DraUsage()
        self.dra_informer = (DraInformer(kube, self.dra_usage, self.settings.resync)
                             if kube is not None and self.settings.mode == DRA else None)
        self._background: set[asyncio.Task[object]] = set()
        self._informer_task: asyncio.Task[None] | None = None
        self._dra_task: asyncio.Task[None] | None = None
        self._sweep_task: asyncio.Task[None] | None = None
        self._naming_check: asyncio.Task[str | None] | None = None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self.informer is not None and self._informer_task is None:
            self._informer_task = asyncio.ensure_future(self.informer.run())
        if self.dra_informer is not None and self._dra_task is None:
            self._dra_task = asyncio.ensure_future(self.dra_informer.run())
        if self.binder is not None and self._sweep_task is None:
            self._sweep_task = asyncio.ensure_future(self.binder.janitor.run(self.settings.bind.sweep_interval))
        if self.kube is not None and self._naming_check is None:
            # Once per start: components of the other naming set would leave pods Pending unexplained.
            self._naming_check = asyncio.ensure_future(check_naming(self.kube, self.settings.filter.naming,
                                                                    self._post_event))
            self._background.add(self._naming_check)
            self._naming_check.add_done_callback(self._background.discard)

    async def stop(self) -> None:
        tasks = [t for t in [self._informer_task, self._dra_task, self._sweep_task, *self._background]
                 if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.preemptor is not None:
            await self.preemptor.stop()
        self._informer_task = None
        self._dra_task = None
        self._sweep_task = None

    @property
    def synced(self) -> bool:
        return self.informer is None or self.informer.synced.is_set()

    async def wait_synced(self, timeout: float) -> bool:
        if self.synced:
            return True
        assert self.informer is not None
        try:
            await asyncio.wait_for(self.informer.synced.wait(), timeout)
        except TimeoutError:
            return False
        return True

    # --- verbs -------------------------------------------------------------------------

    async def filter_turn(self) -> float:
        """Hold a /filter while the binds in flight would take longer than the pace budget to
        end (bindpace.py): kube-scheduler's scheduling loop is serial, so the burst waits in its
        queue rather than in binds that outwait --lock-wait. At most the budget itself, then
        the filter goes ahead. The seconds it was held."""
        if self.binder is None:
            return 0.0
        pace = self.binder.pace
        started = now = self.monotonic()
        while not pace.room(self.cache.placements.unbound_total(), now) and now - started < pace.budget:
            await asyncio.sleep(_FILTER_TURN_POLL)
            now = self.monotonic()
        held = now - started
        if held > 0:
            log.info("filter held %.1f s: %d binds in flight, %.1f binds/s ended", held,
                     self.cache.placements.unbound_total(), pace.rate(now))
        return held

    def filter_pod(self, args: FilterArgs) -> JSON:
        """The whole /filter decision (filtersteps.py), synchronous: nothing can change the
        cache between fitting and recording the assumption."""
        started = self.monotonic()
        answer = filtersteps.decide(self._filter_env, args)
        self.metrics.filter_seconds.labels(answer.outcome).observe(self.monotonic() - started)
        return answer.result

    def prioritize_pod(self, args: FilterArgs) -> list[JSON]:
        """DRA mode: the candidates ranked fullest first (packing.py). A pod without claims,
        or a view not filled yet, gets 0 everywhere: kube-scheduler's own scores decide."""
        started = self.monotonic()
        pod = args.pod
        meta = pod.get("metadata") or {}
        names = args.candidate_names()
        fullness = self.dra_usage.fullness() if self.dra_synced else {}
        if not (pod.get("spec") or {}).get("resourceClaims") or not fullness:
            self.metrics.prioritize_seconds.labels("passthrough").observe(self.monotonic() - started)
            return pack(names, {})
        scores = pack(names, fullness)
        best = max(scores, key=lambda s: s["Score"], default=None)
        if best is not None:
            log.info("prioritize %s/%s: node %s first (%.0f%% full) of %d", meta.get("namespace") or "default",
                     meta.get("name") or "", best["Host"], 100 * fullness.get(best["Host"], 0.0), len(names))
        self.metrics.prioritize_seconds.labels("ok").observe(self.monotonic() - started)
        return scores

    @property
    def dra_synced(self) -> bool:
        return self.dra_informer is not None and self.dra_informer.synced.is_set()

    async def preempt_pod(self, args: PreemptionArgs) -> JSON:
        """kube-scheduler's preemption candidates, kept only where the victims free a card for
        the pod (preemption.py); further lower-priority holders are added where needed."""
        started = self.monotonic()
        outcome = "error"
        try:
            outcome, result = await self._preempt(args)
            return result
        finally:
            self.metrics.preempt_seconds.labels(outcome).observe(self.monotonic() - started)

    async def _preempt(self, args: PreemptionArgs) -> tuple[str, JSON]:
        """The outcome (the histogram's label) and the answer."""
        pod = args.pod
        meta = pod.get("metadata") or {}
        who = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        not_ours = volcano_owned(pod, self.settings.filter.volcano_scheduler)
        if not_ours:
            log.warning("preempt %s: no victims anywhere: %s", who, not_ours)
            return "volcano", preemption_result({})
        refused = self.refusal(pod)
        if refused is not None:
            log.info("preempt %s: refused (%s), no victims anywhere: %s", who, refused.check, refused.message)
            return "refused", preemption_result({})
        try:
            plan = plan_pod(pod, self.settings.filter)
        except RequestError as exc:
            log.info("preempt %s: invalid DCU request, no victims anywhere: %s", who, exc)
            return "invalid", preemption_result({})
        if plan is None:
            return "passthrough", preemption_result(args.nodes)  # asks for no DCU: not ours to judge
        now = self.wall_clock()
        priority = priority_of(pod)
        kept: dict[str, NodeVictims] = {}
        for node, victims in args.nodes.items():
            entry = self.cache.node(node)
            if entry is None or self.filter.usable(entry, now) is not None:
                continue
            chosen = choose_victims(plan, entry, victims.uids)
            if chosen is None and self.kube is not None:
                chosen = choose_victims(plan, entry, victims.uids, await self._evictable(node, entry, priority))
            if chosen is not None:
                kept[node] = NodeVictims(chosen, victims.pdb_violations)
        log.info("preempt %s: victims free a card on %d of %d candidate nodes%s", who, len(kept), len(args.nodes),
                 "".join(f"; {n}: {len(v.uids)} pod(s)" for n, v in sorted(kept.items())[:5]))
        return ("ok" if kept else "no-victims"), preemption_result(kept)

    async def _evictable(self, node: str, entry: NodeView, priority: int) -> list[str]:
        """Pods holding cards on `node` with a lower priority than the preemptor, least
        important first (lowest priority, then the most recently started), as kube-scheduler
        orders victims. Asked of the API: the cache keeps no priorities."""
        assert self.kube is not None
        try:
            pods = (await self.kube.list_pods(field_selector=f"spec.nodeName={node}")).items
        except KubeError as exc:
            log.warning("preempt: cannot list the pods of node %s: %s", node, exc)
            return []
        on_cards = set(holders(entry))
        lower = [p for p in pods if (p.get("metadata") or {}).get("uid") in on_cards and priority_of(p) < priority
                 and not (p.get("metadata") or {}).get("deletionTimestamp")]
        lower.sort(key=lambda p: str((p.get("status") or {}).get("startTime") or ""), reverse=True)
        lower.sort(key=priority_of)
        return [p["metadata"]["uid"] for p in lower]

    async def bind_pod(self, args: BindArgs) -> JSON:
        if self.binder is None:
            return {"Error": "this scheduler has no API access"}
        return {"Error": await self.binder.bind(args)}

    # --- helpers -----------------------------------------------------------------------

    def refusal(self, pod: JSON) -> Refusal | None:
        """Why admission's checks refuse this pod at placement, or None."""
        return refusal_of(pod, self.checks, Stage.PLACE)

    def _emit(self, pod: JSON, reason: str, message: str, event_type: str) -> None:
        task = asyncio.ensure_future(self.events.emit(pod, reason, message, event_type))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _post_event(self, regarding: JSON, reason: str, message: str, event_type: str) -> object:
        if self.kube is None:
            return None
        return await self.kube.create_event(regarding, reason, message, event_type, component="hami-scheduler")

    async def _release_needless(self, lock: NeedlessLock) -> object:
        if self.binder is None:
            return None
        return await self.binder.janitor.release(lock)
