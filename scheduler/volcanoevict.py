"""Which running shares upstream Volcano may evict for a task: the answers of its extender
plugin's `preemptable` and `reclaimable` verbs, card-aware (pure: no I/O, no clock).

What Volcano v1.15.1 does with them (pkg/scheduler/framework/session_plugins.go, Preemptable
and Reclaimable; actions/preempt, actions/reclaim):

* It asks every plugin of a tier that has the function with the same evictees (the tasks on
  one node its action may evict: Running or Bound, preemptable; for preempt, of other jobs of
  the same queue, or of the same job; for reclaim, of other, reclaimable queues). A status of
  ABSTAIN (0) skips the plugin; PERMIT (1) or REJECT (-1) with victims intersects them, by
  UID, with the other plugins' (the first answering plugin's TaskInfos are kept, so ours
  should not come first); any answer with no victims ends the tier undecided, and the next
  tier's plugins decide instead. The first tier that decides wins: with Volcano's default
  tiers (priority, gang, conformance first) a plugin of the second tier is never asked.
* It then evicts the victims, lowest priority first, only until the task fits the node's
  totals (its own resource fit) and its queue may take it, and pipelines the task on the node;
  that pipelining calls the allocate event handlers, whose error rolls the node's evictions
  back (volcanoverbs.py checks there that they free a card).

kube-scheduler-like node totals do not say whether a card is free: four cards with 10 GiB
free are 40 GiB on the node (cardvictims.py). So for a task asking a DCU share that fits no
card of the node as it is, the answer is the fewest evictees of one card whose going lets it
fit that card (memory, cores and a slot, fit.py's rule), lowest priority first
(cardvictims.py's choice). Eligible for a preemption: evictees of lower task priority than the
evictor (what the priority plugin compares; Volcano's Job controller gives pods their job's
priority class); for a reclaim: any evictee (reclaim is between queues, not priorities).
REJECT with none when no eviction on the node frees a card for it. ABSTAIN where the cards
need no say: the task asks no DCU, or it fits a card of the node already (what it lacks is
elsewhere, CPU say), or no evictee was sent.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from hami_dcu.common.protocol.counting import Usage
from hami_dcu.scheduler.cacherecords import FitPlan, NodeView, used_without
from hami_dcu.scheduler.cardvictims import Holder, cheapest, eligible_choices
from hami_dcu.scheduler.fit import CardSpec, PodFit, PodMiss
from hami_dcu.scheduler.volcanowire import ABSTAIN, PERMIT, REJECT, Task


class Purpose(Enum):
    PREEMPT = "preemptable"
    RECLAIM = "reclaimable"


@dataclass(frozen=True)
class EvictAnswer:
    status: int  # PERMIT, REJECT or ABSTAIN
    victims: tuple[str, ...]  # UIDs of the evictees Volcano may evict
    why: str  # for the log


@dataclass(frozen=True)
class Beside:
    """A task's plan fitted beside the tasks Volcano pipelined on the node in this session
    (their cards are not reserved in the cache: they wait for their victims to go), so two
    evictors are never promised the same freed card."""

    plan: FitPlan
    card_pos: Mapping[str, int]  # the node's card ids -> their place in `cards`
    pipelined: Sequence[PodFit]

    def fit(self, cards: Sequence[CardSpec], used: Sequence[Usage]) -> PodFit | PodMiss:
        if not self.pipelined:
            return self.plan.fit(cards, used)
        total = [Usage(u.slots, u.memory, u.cores) for u in used]
        for fit in self.pipelined:
            for card, share in fit.held.items():
                if card in self.card_pos:
                    total[self.card_pos[card]].add(share)
        return self.plan.fit(cards, total)


def beside(plan: FitPlan, entry: NodeView, pipelined: Sequence[PodFit]) -> Beside:
    return Beside(plan, entry.card_pos, pipelined)


def fit_now(plan: FitPlan, entry: NodeView, gone: Collection[str]) -> PodFit | PodMiss:
    """The task on the node's cards with the pods `gone` counted as gone."""
    return plan.fit(entry.cards, used_without(entry, list(gone)))


def fits(plan: FitPlan, entry: NodeView, gone: Collection[str]) -> bool:
    return isinstance(fit_now(plan, entry, gone), PodFit)


def holder(task: Task) -> Holder:
    """An evictee as cardvictims.py weighs it: its priority, latest started first among equals."""
    status = task.pod.get("status") or {}
    labels = (task.pod.get("metadata") or {}).get("labels") or {}
    return Holder(task.uid, task.namespace, task.name, task.priority, str(status.get("startTime") or ""),
                  dict(labels) if isinstance(labels, dict) else {})


def eligible(purpose: Purpose, evictor: Task, evictees: Sequence[Task]) -> list[Task]:
    if purpose is Purpose.PREEMPT:
        return [t for t in evictees if t.priority < evictor.priority]
    return list(evictees)


def decide(purpose: Purpose, plan: FitPlan | None, evictor: Task, evictees: Sequence[Task],
           node_view: Callable[[str], NodeView | None], gone: Callable[[str], Collection[str]],
           pipelined: Callable[[str], Sequence[PodFit]] = lambda _node: ()) -> EvictAnswer:
    """The answer for `evictor` (whose DCU plan is `plan`, None when it asks none) among
    `evictees`; `gone(node)`: the pods of that node Volcano is evicting or has evicted and
    are not gone yet; `pipelined(node)`: what the tasks Volcano pipelined there in this
    session will hold."""
    if plan is None:
        return EvictAnswer(ABSTAIN, (), "asks for no DCU")
    nodes = sorted({t.node for t in evictees if t.node})
    if not nodes:
        return EvictAnswer(ABSTAIN, (), "no evictee on a node")
    victims: list[str] = []
    reasons: list[str] = []
    needed = False
    for node in nodes:
        on_node = [t for t in evictees if t.node == node]
        entry = node_view(node)
        if entry is None:
            needed = True
            reasons.append(f"node {node} unknown to the extender")
            continue
        already = gone(node)
        placed = beside(plan, entry, pipelined(node))
        if fits(placed, entry, already):
            # The cards are not what it lacks here: the other plugins' victims stand.
            victims.extend(t.uid for t in on_node)
            reasons.append(f"fits a card of node {node} already")
            continue
        needed = True
        allowed = eligible(purpose, evictor, on_node)
        choice = cheapest(eligible_choices(placed, entry, [holder(t) for t in allowed], (), list(already)))
        if choice is None:
            reasons.append(f"no eviction of {len(allowed)} eligible evictee(s) frees a card of node {node} for it")
            continue
        victims.extend(v.uid for v in choice.victims)
        where = f"card {choice.card}" if choice.card else "its cards"
        reasons.append(f"{', '.join(v.label for v in choice.victims)} free {where} of node {node}")
    if not needed:
        return EvictAnswer(ABSTAIN, (), "; ".join(reasons))
    if not victims:
        return EvictAnswer(REJECT, (), "; ".join(reasons))
    return EvictAnswer(PERMIT, tuple(victims), "; ".join(reasons))


__all__ = ["Beside", "EvictAnswer", "Purpose", "beside", "decide", "eligible", "fit_now", "fits", "holder"]
