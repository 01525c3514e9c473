"""Preemption on what a card lacks: which lower-priority pods to evict so that a pod kept out
by card memory or cores fits (pure: no I/O, no clock).

kube-scheduler's preemption cannot find these victims. Its dry run checks the pod against a
node with its own filters, and those see DCU slots (`dcunum`), never a card's memory or
cores: on a node whose cards all have a free slot the pod "fits" with nobody removed, so the
node is no candidate and the extender's preempt verb is never asked. Reporting node totals of
memory and cores would not help either: four cards with 10 GiB free each make 40 GiB free on
the node, and a 40 GiB pod needs it on one card. So the extender chooses these victims itself,
from its per-card view, as kube-scheduler would choose slot victims:

* only pods of lower priority than the preemptor, holding a share of the card;
* per card: the fewest such pods on that one card whose removal lets the pod fit (never pods
  on other cards: they free nothing the pod can use there);
* across cards and nodes: the choice that breaks the fewest PodDisruptionBudgets, then the
  fewest victims, then the lowest highest victim priority, then the lowest priority sum;
* no choice at all when no set of victims lets the pod fit: nobody is evicted for nothing.

A pod asking several cards is served card by card too: if no single card's victims let it fit,
the victims are taken from the node's cards in the order that frees the most first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_dcu.scheduler.cacherecords import FitPlan as Fits
from hami_dcu.scheduler.cacherecords import NodeView, used_without
from hami_dcu.scheduler.fit import PodFit

JSON = dict[str, Any]

@dataclass(frozen=True)
class Holder:
    """A pod holding a share of a node's cards, as the preemption sees it."""

    uid: str
    namespace: str
    name: str
    priority: int
    started: str  # status.startTime (RFC 3339 sorts as text); "" when unknown
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget: which pods it covers and how many of them may go now."""

    namespace: str
    name: str
    selector: JSON | None  # spec.selector; None selects nothing, {} every pod of the namespace
    allowed: int  # status.disruptionsAllowed

    def covers(self, holder: Holder) -> bool:
        return holder.namespace == self.namespace and selects(self.selector, holder.labels)


@dataclass(frozen=True)
class Choice:
    node: str
    card: str | None  # the one card the victims free; None when they come from several
    victims: tuple[Holder, ...]
    budget_violations: int

    @property
    def rank(self) -> tuple[int, int, int, int]:
        priorities = [v.priority for v in self.victims]
        return (self.budget_violations, len(self.victims), max(priorities, default=0), sum(priorities))


def priority_of(pod: JSON) -> int:
    """spec.priority as the API server resolved it from the PriorityClass (0 without one)."""
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def selects(selector: JSON | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector's verdict on `labels` (policy/v1: an empty selector selects
    every pod, a missing one none)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False  # an operator we cannot read protects rather than exposes
    return True


def budget_violations(victims: Iterable[Holder], budgets: Sequence[Budget]) -> int:
    """How many of the victims' evictions a budget forbids (kube-scheduler's count: each
    budget allows `allowed` evictions, every further covered victim breaks it)."""
    chosen = list(victims)
    return sum(max(0, sum(1 for v in chosen if b.covers(v)) - b.allowed) for b in budgets)


def _fits_without(plan: Fits, entry: NodeView, uids: Sequence[str], gone: Sequence[str] = ()) -> bool:
    return isinstance(plan.fit(entry.cards, used_without(entry, [*gone, *uids])), PodFit)


def _order(holders: Iterable[Holder], budgets: Sequence[Budget]) -> list[Holder]:
    """Least costly first: not covered by an exhausted budget, lowest priority, latest start."""
    def exhausted(h: Holder) -> bool:
        return any(b.covers(h) and b.allowed <= 0 for b in budgets)

    ordered = sorted(holders, key=lambda h: h.started, reverse=True)
    return sorted(ordered, key=lambda h: (exhausted(h), h.priority))


def _fewest(plan: Fits, entry: NodeView, ordered: Sequence[Holder], gone: Sequence[str] = ()) -> list[Holder] | None:
    """The fewest of `ordered` (taken in that order) whose removal, beside the pods `gone`
    already, lets the pod fit."""
    taken: list[Holder] = []
    for holder in ordered:
        taken.append(holder)
        if _fits_without(plan, entry, [h.uid for h in taken], gone):
            break
    else:
        return None
    # Spare every pod the fit does not need gone, latest taken first (the last one is needed).
    for holder in list(reversed(taken[:-1])):
        fewer = [h for h in taken if h is not holder]
        if _fits_without(plan, entry, [h.uid for h in fewer], gone):
            taken = fewer
    return taken


def _cards_of(entry: NodeView, holder: Holder) -> set[str]:
    holding = entry.holdings.get(holder.uid)
    return set(holding.held) if holding is not None and holding.held else set()


def node_choices(plan: Fits, entry: NodeView, holders: Sequence[Holder], priority: int,
                 budgets: Sequence[Budget]) -> list[Choice]:
    """Every card's cheapest victims on this node (or, for a pod no single card can take,
    the node's), for a preemptor of `priority`."""
    return eligible_choices(plan, entry, [h for h in holders if h.priority < priority], budgets)


def eligible_choices(plan: Fits, entry: NodeView, eligible: Sequence[Holder], budgets: Sequence[Budget],
                     gone: Sequence[str] = ()) -> list[Choice]:
    """Every card's cheapest victims among `eligible` on this node (or, for a pod no single
    card can take, the node's), the pods `gone` counted as gone already (evicted, still
    terminating). Who is eligible is the caller's rule: lower priority for a preemption,
    any share of another queue for Volcano's reclaim."""
    lower = [h for h in eligible if _cards_of(entry, h) and h.uid not in gone]
    if not lower or not _fits_without(plan, entry, [h.uid for h in lower], gone):
        return []  # even every eligible pod gone leaves no room: nothing to choose here
    choices = []
    for card in entry.card_pos:
        on_card = [h for h in lower if card in _cards_of(entry, h)]
        victims = _fewest(plan, entry, _order(on_card, budgets), gone) if on_card else None
        if victims is not None:
            choices.append(Choice(entry.name, card, tuple(victims), budget_violations(victims, budgets)))
    if choices:
        return choices
    victims = _fewest(plan, entry, _order(lower, budgets), gone)
    assert victims is not None  # every eligible pod gone lets it fit (checked above)
    return [Choice(entry.name, None, tuple(victims), budget_violations(victims, budgets))]


def cheapest(choices: Sequence[Choice]) -> Choice | None:
    """The choice of the module docstring's order, None when there is none."""
    return min(choices, key=lambda c: (c.rank, c.node, c.card or ""), default=None)


def choose(plan: Fits, nodes: Sequence[tuple[NodeView, Sequence[Holder]]], priority: int,
           budgets: Sequence[Budget]) -> Choice | None:
    """The cheapest victims over all nodes (module docstring), or None: no eviction helps."""
    return cheapest([c for entry, holders in nodes for c in node_choices(plan, entry, holders, priority, budgets)])
