"""The extender's own preemption for pods kept out by card memory or cores (the I/O around
cardvictims.py's choice).

When /filter finds no node for a pod, kube-scheduler's preemption runs next. It finds victims
only where DCU slots are full (cardvictims.py says why); when it finds some, it nominates a
node for the pod and the preempt verb refines its victims. This covers the other case: after a
short wait (kube-scheduler's nomination lands within it), a pod that is still unbound and not
nominated, whose priority allows preemption, is checked against the cards of the nodes where
evicting lower-priority holders could make room. The cheapest victims are evicted through the
Eviction API, so a PodDisruptionBudget the choice did not see (or that changed meanwhile) still
refuses; the pod is then placed by kube-scheduler's next attempt (a deleted pod wakes it).

Each pod is considered once at a time, not again while victims evicted for it are still present
(their graceful termination holds the card until they are gone), and after an attempt that
evicted nobody not again for `retry_seconds` (kube-scheduler retries such a pod every few
seconds; each attempt costs a few API reads).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from hami_dcu.common.io.kube import AsyncKube, KubeError, NotFoundError
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cacherecords import NodeView
from hami_dcu.scheduler.cardvictims import Budget, Choice, Holder, choose
from hami_dcu.scheduler.cardvictims import priority_of as _priority
from hami_dcu.scheduler.filtering import Filter, PodPlan
from hami_dcu.scheduler.preemption import fits_without, holders

log = logging.getLogger(__name__)
JSON = dict[str, Any]
Post = Callable[[JSON, str, str, str], Awaitable[object]]  # (regarding, reason, message, type)


@dataclass(frozen=True)
class PreemptorSettings:
    enabled: bool = True
    # How long kube-scheduler gets to nominate the pod through its own preemption first.
    settle_seconds: float = 2.0
    # The most nodes whose pods are read for one pod (each costs one list).
    max_nodes: int = 16
    # After an attempt that evicted nobody (no choice helps, a budget refused, an API error).
    retry_seconds: float = 15.0


class CardPreemptor:
    def __init__(self, kube: AsyncKube, cache: ClusterCache, filter_: Filter, settings: PreemptorSettings,
                 post: Post, registry: CollectorRegistry,
                 wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.cache = cache
        self.filter = filter_
        self.settings = settings
        self.post = post
        self.wall_clock = wall_clock
        self.sleep = sleep
        self.monotonic = monotonic
        self.attempts = Counter(
            "hami_dcu_scheduler_card_preemptions", "Preemptions the extender considered for pods kept out by "
            "card memory or cores, by outcome (evicted, no-victims, nominated, skipped, failed)", ["outcome"],
            registry=registry)
        self.victims = Counter(
            "hami_dcu_scheduler_card_preemption_victims", "Pods evicted so that a higher-priority pod fits a card",
            registry=registry)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._evicted_for: dict[str, set[str]] = {}  # preemptor uid -> victims' uids not gone yet
        self._quiet_until: dict[str, float] = {}  # preemptor uid -> no attempt before (monotonic)

    def consider(self, pod: JSON, plan: PodPlan) -> None:
        """Called by /filter for a pod no node fits: check it in the background, once at a time."""
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or ""
        if not self.settings.enabled or not uid or uid in self._running or _priority(pod) <= 0:
            return
        if self._quiet_until.get(uid, float("-inf")) > self.monotonic():
            return
        if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
            return
        waiting = {v for v in self._evicted_for.get(uid, set()) if v in self.cache.pods}
        if waiting:
            self._evicted_for[uid] = waiting
            return  # its victims still hold the cards: evicting more would be for nothing
        self._evicted_for.pop(uid, None)
        task = asyncio.ensure_future(self._attempt(meta.get("namespace") or "default", meta.get("name") or "",
                                                   uid, plan))
        self._running[uid] = task
        task.add_done_callback(lambda _t: self._running.pop(uid, None))

    async def stop(self) -> None:
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _attempt(self, namespace: str, name: str, uid: str, plan: PodPlan) -> None:
        outcome = "failed"
        try:
            outcome = await self._preempt(namespace, name, uid, plan)
        except KubeError as exc:
            log.warning("card preemption for pod %s/%s: %s", namespace, name, exc)
        finally:
            self.attempts.labels(outcome).inc()
            self._rest(uid, outcome)

    def _rest(self, uid: str, outcome: str) -> None:
        now = self.monotonic()
        if len(self._quiet_until) > 10_000:  # forget the pods long past their rest
            self._quiet_until = {k: t for k, t in self._quiet_until.items() if t > now}
        if outcome != "evicted":
            self._quiet_until[uid] = now + self.settings.retry_seconds

    async def _preempt(self, namespace: str, name: str, uid: str, plan: PodPlan) -> str:
        await self.sleep(self.settings.settle_seconds)
        try:
            pod = await self.kube.get_pod(namespace, name)
        except NotFoundError:
            return "skipped"
        why_not = _not_waiting(pod, uid)
        if why_not:
            log.info("card preemption for pod %s/%s: not needed (%s)", namespace, name, why_not)
            return "nominated" if why_not == "nominated" else "skipped"
        priority = _priority(pod)
        nodes = await self._candidates(plan, priority)
        budgets = await self._budgets({h.namespace for _, hs in nodes for h in hs})
        choice = choose(plan, nodes, priority, budgets)
        if choice is None:
            log.info("card preemption for pod %s/%s: no eviction of lower-priority pods lets it fit on any card "
                     "(%d node(s) considered)", namespace, name, len(nodes))
            return "no-victims"
        return await self._evict(pod, choice)

    async def _candidates(self, plan: PodPlan, priority: int) -> list[tuple[NodeView, Sequence[Holder]]]:
        """Nodes where removing every holder would let the pod fit, with their lower-priority
        holders read from the API (the cache keeps no priorities)."""
        now = self.wall_clock()
        found: list[tuple[NodeView, Sequence[Holder]]] = []
        for entry in self.cache.nodes():
            if len(found) >= self.settings.max_nodes:
                break
            on_cards = holders(entry)
            if not on_cards or self.filter.usable(entry, now) is not None:
                continue
            if not fits_without(plan, entry, on_cards):
                continue
            pods = (await self.kube.list_pods(field_selector=f"spec.nodeName={entry.name}")).items
            lower = [_holder(p) for p in pods
                     if (p.get("metadata") or {}).get("uid") in on_cards and _priority(p) < priority
                     and not (p.get("metadata") or {}).get("deletionTimestamp")]
            if lower:
                found.append((entry, lower))
        return found

    async def _budgets(self, namespaces: set[str]) -> list[Budget]:
        budgets = []
        for namespace in sorted(namespaces):
            for item in (await self.kube.list_disruption_budgets(namespace)).items:
                meta, spec, status = item.get("metadata") or {}, item.get("spec") or {}, item.get("status") or {}
                allowed = status.get("disruptionsAllowed")
                budgets.append(Budget(namespace, meta.get("name") or "", spec.get("selector"),
                                      allowed if isinstance(allowed, int) else 0))
        return budgets

    async def _evict(self, pod: JSON, choice: Choice) -> str:
        meta = pod["metadata"]
        preemptor = f"{meta.get('namespace')}/{meta.get('name')}"
        where = f"node {choice.node}" + (f" card {choice.card}" if choice.card else "")
        gone: list[str] = []
        for victim in choice.victims:
            try:
                await self.kube.evict_pod(victim.namespace, victim.name, victim.uid)
            except NotFoundError:
                gone.append(victim.label)  # already gone: its share is free as well
                continue
            except KubeError as exc:
                # 429: a budget refused now. The victims evicted so far free part of the card.
                log.warning("card preemption for pod %s: eviction of %s refused (%s); %d of %d victims evicted",
                            preemptor, victim.label, exc, len(gone), len(choice.victims))
                return "failed"
            gone.append(victim.label)
            self._evicted_for.setdefault(meta["uid"], set()).add(victim.uid)
            self.victims.inc()
            await self._event(_regarding(victim), "DCUPreempted",
                              f"evicted so that higher-priority pod {preemptor} (priority {_priority(pod)}) fits "
                              f"on {where}: it held card memory or cores that pod needs", "Normal")
        log.info("card preemption for pod %s: evicted %s on %s (%d budget violation(s))", preemptor,
                 ", ".join(gone), where, choice.budget_violations)
        await self._event(pod, "DCUPreemption", f"evicted {len(gone)} lower-priority pod(s) on {where} so that "
                          f"this pod fits: {', '.join(gone)}", "Normal")
        return "evicted"

    async def _event(self, regarding: JSON, reason: str, message: str, event_type: str) -> None:
        try:
            await self.post(regarding, reason, message, event_type)
        except Exception as exc:  # an event is a courtesy: the eviction stands
            log.warning("event %s not recorded: %s", reason, exc)


def _not_waiting(pod: JSON, uid: str) -> str | None:
    """Why a pod needs no preemption now, or None."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if meta.get("uid") != uid:
        return "replaced by another pod of the same name"
    if meta.get("deletionTimestamp"):
        return "being deleted"
    if spec.get("nodeName"):
        return f"bound to {spec['nodeName']}"
    if status.get("nominatedNodeName"):
        return "nominated"
    return None


def _holder(pod: JSON) -> Holder:
    meta = pod.get("metadata") or {}
    return Holder(meta.get("uid") or "", meta.get("namespace") or "default", meta.get("name") or "",
                  _priority(pod), str((pod.get("status") or {}).get("startTime") or ""),
                  dict(meta.get("labels") or {}))


def _regarding(victim: Holder) -> JSON:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": victim.namespace, "name": victim.name, "uid": victim.uid}}


