"""Which victims on a node actually free a card for a preemptor (pure over the cache).

kube-scheduler's preemption judges a node with its own filters only: for DCUs it sees the
slot count (`dcunum`), never card memory or cores, so the victims it proposes may free
nothing the preemptor needs, and HAMi then evicts pods for nothing (HAMi#1494). The
extender's preempt verb gets kube-scheduler's candidates and
answers, per node:

* the proposed victims, when removing what they hold lets the preemptor fit (fit.py, the
  same rule as /filter);
* else the proposed victims plus the fewest further lower-priority pods holding cards on
  that node (taken in the order given: lowest priority first), when that makes it fit;
  kube-scheduler's own victims are never dropped, its filters needed them;
* else no answer for the node: no eviction there would let the pod run.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_dcu.scheduler.cacherecords import NodeView, is_assumed_key, used_without
from hami_dcu.scheduler.filtering import PodPlan
from hami_dcu.scheduler.fit import PodFit


def fits_without(plan: PodPlan, entry: NodeView, uids: Sequence[str]) -> bool:
    return isinstance(plan.fit(entry.cards, used_without(entry, uids)), PodFit)


def holders(entry: NodeView) -> list[str]:
    """UIDs of the pods holding cards on the node (not placements in flight)."""
    return [uid for uid, holding in entry.holdings.items() if holding.held and not is_assumed_key(uid)]


def choose_victims(plan: PodPlan, entry: NodeView, proposed: Sequence[str],
                   eligible: Sequence[str] = ()) -> list[str] | None:
    """The victims whose removal lets the preemptor fit on `entry`, None when none do.
    `eligible`: further pods that may be evicted (lower priority than the preemptor), in
    the order they should be."""
    victims = list(proposed)
    if fits_without(plan, entry, victims):
        return victims
    added: list[str] = []
    for uid in eligible:
        if uid in victims or uid in added:
            continue
        added.append(uid)
        if fits_without(plan, entry, victims + added):
            break
    else:
        return None
    # Spare every added pod the preemptor does not need gone (the latest added is needed).
    for uid in list(reversed(added[:-1])):
        fewer = [u for u in added if u != uid]
        if fits_without(plan, entry, victims + fewer):
            added = fewer
    return victims + added
