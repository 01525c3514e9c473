"""hami-dcu as upstream Volcano's DCU extender (issue 34): the decisions behind Volcano's
extender plugin verbs, over the same cache and fit as `/filter`. No I/O: the HTTP shell
(volcanoapp.py) parses, asks here, and writes what it is told to.

Volcano keeps its queues, gangs and binding; we decide the cards. Within a scheduling
session Volcano asks `predicate` for each (task, node), calls `allocateFunc` when its session
puts a task on a node, and `deallocateFunc` when it takes that back (a gang that does not fit
as a whole is discarded; an allocate any plugin refused is rolled back too). Every allocate of
a session is followed either by a deallocate or by the session's commit, after which Volcano
binds the pod itself (a plain Binding, spec.nodeName only).

* `allocate` fits the pod on the session's node again, reserves those cards in the cache
  (`placements`, as /filter does: the next predicate of the same session, say for the next
  member of a gang on the same node, sees them taken) and answers the annotations to write on
  the pod: HAMi's allocation, in the layout our device plugin's lockless path serves for a
  Volcano pod (deviceplugin/lockless.py: one entry per app container that names the count or
  the memory resource in its limits). No node lock: several members of a gang share a node
  between bind and Allocate, and the plugin proves which pod an Allocate serves without one.
* `deallocate` undoes exactly that: the reservation, and the annotations if the pod still
  carries what was written and is not bound.
* A session's close forgets what it allocated: those were committed and Volcano binds them;
  their reservations stay until the pod watch shows the pod bound with its allocation (which
  replaces them) or they expire.
* `preemptable` and `reclaimable` answer which evictees free a card for the evictor
  (volcanoevict.py). Volcano's eviction in a session calls deallocateFunc with the evictee
  Releasing (an undone one calls allocateFunc with it Running again): those pods count as
  gone for the session's later answers, and after its close until the watch shows them gone.
  An evictor pipelined on a node (allocateFunc, Pipelined) is refused unless it fits a card
  there with those pods gone: Volcano then undoes the node's evictions, so nobody is evicted
  for a card that would still not take it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hami_dcu.common.protocol import objects
from hami_dcu.common.protocol.codec import PodDevices
from hami_dcu.common.protocol.errors import SchedulerError
from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.podchecks import CheckSettings, Stage, refusal_of
from hami_dcu.common.protocol.podtimes import created_at
from hami_dcu.common.protocol.requests import RequestError
from hami_dcu.scheduler.allocation import allocation_annotations
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cacherecords import Assumption
from hami_dcu.scheduler.filtering import Filter, FilterSettings, PodPlan, plan_pod
from hami_dcu.scheduler.fit import PodFit
from hami_dcu.scheduler.volcanoevict import EvictAnswer, Purpose, beside, decide, fit_now
from hami_dcu.scheduler.volcanowire import (
    ABSTAIN,
    ALLOCATED,
    PIPELINED,
    REJECT,
    RELEASING,
    UNRESOLVABLE,
    UNSCHEDULABLE,
    EvictArgs,
    Task,
)

log = logging.getLogger(__name__)
JSON = dict[str, Any]
# How long an evicted pod counts as going after its session, at most: its grace period and a
# kubelet's final delete are seconds; the watch showing it gone ends it sooner.
RELEASE_TTL = 600.0


class VolcanoRefused(SchedulerError, ValueError):
    """What cannot work for this task; `code` is the predicate's api.Status code."""

    def __init__(self, message: str, code: int = UNRESOLVABLE) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class Write:
    """The annotations allocate puts on the pod (a merge patch by the extender's identity)."""

    uid: str
    namespace: str
    name: str
    node: str
    annotations: dict[str, str]
    assumption: Assumption


@dataclass(frozen=True)
class Undo:
    """What deallocate removes from the pod: the keys `written`, only while the pod still
    carries exactly those values and is not bound."""

    namespace: str
    name: str
    node: str
    written: dict[str, str]


def volcano_entries(pod: JSON, devices: PodDevices, names: ResourceNames) -> PodDevices:
    """`devices` (one entry per container, init containers first: fit's order) in the layout
    the device plugin reads for a Volcano pod: one entry per app container naming the count or
    the memory resource in its limits (deviceplugin/lockless.py, hcu_containers). Raises
    VolcanoRefused when a container asking for a DCU has no entry in that layout."""
    init = objects.init_containers(pod)
    for index, container in enumerate(init):
        if devices[index]:
            raise VolcanoRefused(f"init container {container.get('name')} asks for a DCU: the device plugin serves a "
                                 "Volcano pod's app containers only")
    entries = []
    for index, container in enumerate(objects.containers(pod)):
        held = devices[len(init) + index]
        limits = (container.get("resources") or {}).get("limits") or {}
        if names.count in limits or names.memory in limits:
            entries.append(held)
        elif held:
            raise VolcanoRefused(f"container {container.get('name')} asks for a DCU without {names.count} or "
                                 f"{names.memory} in its limits: the device plugin finds no entry for it in a Volcano "
                                 "pod's allocation")
    return entries


class VolcanoVerbs:
    def __init__(self, cache: ClusterCache, filter_: Filter, settings: FilterSettings,
                 monotonic: Callable[[], float], wall_clock: Callable[[], datetime]) -> None:
        self.cache = cache
        self.filter = filter_
        self.settings = settings
        self.checks = CheckSettings(resources=settings.resources)
        self.monotonic = monotonic
        self.wall_clock = wall_clock
        # The allocations of the session in progress, by pod UID: what deallocate may undo.
        self._session: dict[str, Write] = {}
        # Pods Volcano evicts in the session in progress (uid -> node), and those evicted in
        # earlier sessions, not gone yet (uid -> (node, when the session ended)).
        self._evicting: dict[str, str] = {}
        self._released: dict[str, tuple[str, float]] = {}
        # Tasks Volcano pipelined in the session in progress (uid -> node, the cards it will
        # hold): later answers count those cards taken.
        self._pipelines: dict[str, tuple[str, PodFit]] = {}

    # --- the pod ---------------------------------------------------------------------------

    def plan(self, task: Task) -> PodPlan | None:
        """The task's DCU plan, None when it asks for no DCU; VolcanoRefused when it cannot be
        placed by us for Volcano."""
        pod = task.pod
        try:
            plan = plan_pod(pod, self.settings)
        except RequestError as exc:
            raise VolcanoRefused(f"pod {task.who}: invalid DCU request: {exc}") from exc
        if plan is None:
            return None
        wanted = self.settings.volcano_scheduler
        if wanted and objects.scheduler_name(pod) != wanted:
            raise VolcanoRefused(f"pod {task.who}: schedulerName {objects.scheduler_name(pod)!r}, not {wanted!r}: the "
                                 "device plugin serves without a node lock only the pods of Volcano's schedulerName")
        refused = refusal_of(pod, self.checks, Stage.PLACE)
        if refused is not None:
            raise VolcanoRefused(f"pod {task.who}: refused ({refused.check}): {refused.message}")
        return plan

    def _fit(self, task: Task, plan: PodPlan, node: str) -> PodFit:
        result = self.filter.fit_node(node, plan, self.wall_clock())
        if isinstance(result, PodFit):
            return result
        raise VolcanoRefused(f"pod {task.who} does not fit node {node}: {result.message}", UNSCHEDULABLE)

    # --- verbs -----------------------------------------------------------------------------

    def predicate(self, task: Task, node: str) -> None:
        """Passes, or raises VolcanoRefused with the reason and its api.Status code."""
        plan = self.plan(task)
        if plan is not None:
            self._fit(task, plan, node)

    def prioritize(self, task: Task, nodes: list[str]) -> dict[str, float]:
        """No preference of ours: Volcano's nodeorder and binpack rank the nodes that passed."""
        return dict.fromkeys(nodes, 0.0)

    def allocate(self, task: Task) -> Write | None:
        """The annotations to write for the session's placement of `task` (its cards now
        reserved), None when there is nothing to write; VolcanoRefused when it cannot work."""
        if task.status == PIPELINED:
            self._pipelined(task)
            return None
        if task.status != ALLOCATED:
            # A Running or Bound task an eviction's rollback gives back: it is not going now.
            if self._evicting.pop(task.uid, None) is not None:
                log.info("volcano eviction of %s undone", task.who)
            return None
        if not task.node:
            raise VolcanoRefused(f"pod {task.who}: allocateFunc names no node (TaskInfo.NodeName empty)")
        plan = self.plan(task)
        if plan is None:
            return None
        self._drop(task.uid)
        earlier = self.cache.placements.find(task.uid, task.namespace, task.name)
        if earlier is not None and not earlier.bound:  # an earlier session's, its bind failed: not against it
            self.cache.placements.forget(earlier.uid)
        fit = self._fit(task, plan, task.node)
        entries = volcano_entries(task.pod, fit.devices, self.settings.resources)
        annotations = allocation_annotations(self.settings.naming, entries, task.node, self.wall_clock())
        assumption = self.cache.placements.reserve(task.uid, task.namespace, task.name, task.node, fit,
                                                   plan.init_count, self.monotonic(), plan,
                                                   created=created_at(task.pod))
        write = Write(task.uid, task.namespace, task.name, task.node, annotations, assumption)
        self._session[task.uid] = write
        log.info("volcano allocate %s to node %s: cards %s", task.who, task.node, ",".join(sorted(fit.held)))
        return write

    def write_failed(self, write: Write) -> None:
        """The pod could not be written: its reservation goes (Volcano rolls the task back)."""
        if self._session.get(write.uid) is write:
            del self._session[write.uid]
        self.cache.placements.withdraw(write.assumption)

    def _pipelined(self, task: Task) -> None:
        """Volcano pipelines a task on a node where its evictions made room (or where pods
        are releasing): refused unless a card there takes it once they are gone, beside the
        tasks pipelined there before it in the session. Its cards are chosen when a later
        session allocates it; until the session ends they count as taken for the others."""
        plan = self.plan(task)
        self._pipelines.pop(task.uid, None)
        if plan is None or not task.node:
            return
        entry = self.cache.node(task.node)
        if entry is None:
            raise VolcanoRefused(f"pod {task.who}: pipelined on node {task.node}, unknown to the extender",
                                 UNSCHEDULABLE)
        gone = self.going(task.node)
        fit = fit_now(beside(plan, entry, self.pipelined(task.node)), entry, gone)
        if not isinstance(fit, PodFit):
            raise VolcanoRefused(f"pod {task.who}: pipelined on node {task.node}, but no card there takes it even "
                                 f"with the {len(gone)} pod(s) being evicted there gone", UNSCHEDULABLE)
        self._pipelines[task.uid] = (task.node, fit)
        log.info("volcano pipelines %s on node %s: a card there takes it once %d pod(s) being evicted are gone",
                 task.who, task.node, len(gone))

    def pipelined(self, node: str) -> list[PodFit]:
        """What the tasks pipelined on `node` in this session will hold."""
        return [fit for where, fit in self._pipelines.values() if where == node]

    def deallocate(self, task: Task) -> Undo | None:
        """What to remove from the pod, None when this session allocated nothing to it."""
        self._pipelines.pop(task.uid, None)  # a pipeline undone
        write = self._session.pop(task.uid, None)
        if write is None:
            if task.status == RELEASING and task.node:
                self._evicting[task.uid] = task.node  # Volcano evicts it in this session
            return None
        self.cache.placements.withdraw(write.assumption)
        log.info("volcano deallocate %s from node %s: its cards released", task.who, write.node)
        return Undo(write.namespace, write.name, write.node, write.annotations)

    def _drop(self, uid: str) -> None:
        write = self._session.pop(uid, None)
        if write is not None:
            self.cache.placements.withdraw(write.assumption)

    def evictable(self, purpose: Purpose, args: EvictArgs) -> EvictAnswer:
        """preemptable / reclaimable (volcanoevict.py)."""
        try:
            plan = self.plan(args.evictor)
        except VolcanoRefused as exc:
            return EvictAnswer(REJECT, (), str(exc))  # nothing evicted makes room for what cannot be placed
        if args.evictor.uid in self._evicting:
            return EvictAnswer(ABSTAIN, (), "the evictor is being evicted itself")
        return decide(purpose, plan, args.evictor, args.evictees, self.cache.node, self.going, self.pipelined)

    def going(self, node: str) -> list[str]:
        """The pods of `node` Volcano is evicting or has evicted, still held in the cache."""
        now = self.monotonic()
        for uid, (_, since) in list(self._released.items()):
            if uid not in self.cache.pods or now - since > RELEASE_TTL:
                del self._released[uid]
        going = [uid for uid, where in self._evicting.items() if where == node]
        return going + [uid for uid, (where, _) in self._released.items() if where == node]

    def session_open(self) -> None:
        self._settle("opened")

    def session_close(self) -> None:
        self._settle("closed")

    def _settle(self, how: str) -> None:
        """Allocations still in the ledger were committed: Volcano binds them now. Their
        reservations stay until the watch shows their allocation bound, or expire."""
        if self._session:
            log.info("volcano session %s: %d pod(s) allocated for Volcano to bind: %s", how, len(self._session),
                     ", ".join(f"{w.namespace}/{w.name} on {w.node}" for w in list(self._session.values())[:10]))
        self._session.clear()
        # Evictions still in the ledger were committed: Volcano deletes those pods now.
        now = self.monotonic()
        for uid, node in self._evicting.items():
            self._released[uid] = (node, now)
        if self._evicting:
            log.info("volcano session %s: %d pod(s) evicted, counted as going until gone", how, len(self._evicting))
        self._evicting.clear()
        self._pipelines.clear()

    @property
    def in_session(self) -> int:
        return len(self._session)
