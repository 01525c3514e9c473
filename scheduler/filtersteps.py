"""`POST /filter`, step by step: the rules asked in order, the first answer standing (as
the webhook's admission STEPS, webhook/decision.py), and a pod no rule settles placed on the
best node (filtering.py) with its placement reserved in the cache.

Each step reads the request and answers (`FilterAnswer`: the extender's result and the
outcome label of hami_dcu_filter_seconds) or passes (None). The whole decision runs without
an await: nothing can change the cache between fitting and recording the placement.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from hami_dcu.common.protocol.podchecks import CheckSettings, Stage, refusal_of
from hami_dcu.common.protocol.podtimes import created_at
from hami_dcu.common.protocol.requests import RequestError
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.extender import FilterArgs, filter_result
from hami_dcu.scheduler.filtering import (
    Filter,
    FilterOutcome,
    FilterSettings,
    PodPlan,
    invalid_request,
    plan_pod,
    refused_everywhere,
)
from hami_dcu.scheduler.quotas import QuotaBook, namespace_used, quota_gate
from hami_dcu.scheduler.reasons import summarise
from hami_dcu.scheduler.volcano import volcano_owned

# /filter's lines keep the service's logger name, as before the steps were declared.
log = logging.getLogger("hami_dcu.scheduler.service")
JSON = dict[str, Any]
Emit = Callable[[JSON, str, str, str], None]  # (pod, reason, message, event type): an event about the pod
NoFit = Callable[[JSON, PodPlan], None]  # told of a pod no node fits (the card preemption, cardpreemptor.py)


@dataclass(frozen=True)
class FilterEnv:
    """What the steps consult: the extender's settings, its cache, its filter and quota book."""

    settings: FilterSettings
    checks: CheckSettings  # admission's checks, asked again at placement (common/protocol/podchecks.py)
    cache: ClusterCache
    filter: Filter
    quotas: QuotaBook
    emit: Emit
    monotonic: Callable[[], float]
    wall_clock: Callable[[], datetime]
    no_fit: NoFit | None = None
    # Binds one node may have in flight by its own pace (nodepace.py), when the settings fix none.
    pace_limit: Callable[[str], int] | None = None

    def queue_limit(self, node: str) -> int:
        """Binds in flight on `node` from which /filter prefers another fitting node (0: none)."""
        if self.settings.bind_queue is not None:
            return self.settings.bind_queue
        return self.pace_limit(node) if self.pace_limit is not None else 0


@dataclass(frozen=True)
class FilterAnswer:
    outcome: str  # the label of hami_dcu_filter_seconds
    result: JSON  # the ExtenderFilterResult


@dataclass
class FilterRequest:
    env: FilterEnv
    args: FilterArgs
    namespace: str
    name: str
    uid: str
    names: list[str]  # the candidate nodes

    @classmethod
    def of(cls, env: FilterEnv, args: FilterArgs) -> FilterRequest:
        meta = args.pod.get("metadata") or {}
        return cls(env, args, meta.get("namespace") or "default", meta.get("name") or "", meta.get("uid") or "",
                   args.candidate_names())

    @property
    def pod(self) -> JSON:
        return self.args.pod

    @cached_property
    def planned(self) -> PodPlan | RequestError | None:
        """The pod's plan (None: it asks for no DCU), or why its request cannot be honoured.
        Parsed once, when a step first asks."""
        try:
            return plan_pod(self.pod, self.env.settings)
        except RequestError as exc:
            return exc

    @property
    def plan(self) -> PodPlan:
        """For the steps after the request is known valid and asking for a DCU."""
        planned = self.planned
        assert isinstance(planned, PodPlan)
        return planned

    def fail_everywhere(self, outcome: str, reasons: dict[str, str]) -> FilterAnswer:
        return FilterAnswer(outcome, filter_result(self.args, [], unresolvable=reasons))


def left_to_volcano(r: FilterRequest) -> FilterAnswer | None:
    """Volcano mode: Volcano's pods are its own to place."""
    not_ours = volcano_owned(r.pod, r.env.settings.volcano_scheduler)
    if not not_ours:
        return None
    log.warning("filter %s/%s: %s", r.namespace, r.name, not_ours)
    return r.fail_everywhere("volcano", {n: not_ours for n in r.names})


def refused_by_admission(r: FilterRequest) -> FilterAnswer | None:
    """It reached us without the webhook (an opt-out label, a webhook down under
    failurePolicy Ignore, schedulerName set by hand): refused as admission would."""
    refused = refusal_of(r.pod, r.env.checks, Stage.PLACE)
    if refused is None:
        return None
    log.info("filter %s/%s: refused (%s): %s", r.namespace, r.name, refused.check, refused.message)
    r.env.emit(r.pod, "FilteringFailed", f"refused ({refused.check}): {refused.message}", "Warning")
    return r.fail_everywhere("refused", refused_everywhere(r.names, refused).failed_text())


def request_invalid(r: FilterRequest) -> FilterAnswer | None:
    """A DCU request that cannot be honoured fails on every node with the reason."""
    error = r.planned
    if not isinstance(error, RequestError):
        return None
    r.env.emit(r.pod, "FilteringFailed", f"invalid DCU request: {error}", "Warning")
    return r.fail_everywhere("invalid", invalid_request(r.names, error).failed_text())


def asks_no_dcu(r: FilterRequest) -> FilterAnswer | None:
    """Not ours to judge: every candidate passes."""
    if r.planned is not None:
        return None
    return FilterAnswer("passthrough", filter_result(r.args, r.names))


def already_bound(r: FilterRequest) -> FilterAnswer | None:
    """A stale retry for a pod that is bound already (its old pending object): what it holds
    stays counted as it is, and kube-scheduler will see the pod bound."""
    cache = r.env.cache
    # Expired placements first: a bound one past its TTL no longer says the pod is bound.
    cache.placements.expire(r.env.monotonic())
    bound_to = cache.bound_node(r.uid, r.namespace, r.name)
    if bound_to is None:
        return None
    message = f"pod already bound to node {bound_to}"
    log.info("filter %s/%s: %s, nothing to place", r.namespace, r.name, message)
    return FilterAnswer("already-bound", filter_result(r.args, [], {n: message for n in r.names}))


FilterStep = Callable[[FilterRequest], FilterAnswer | None]  # an answer, or None: ask the next step

# The /filter rules, in the order they are asked; the first answer stands, and a pod no rule
# settles is placed (`place`).
STEPS: tuple[FilterStep, ...] = (
    left_to_volcano,
    refused_by_admission,
    request_invalid,
    asks_no_dcu,
    already_bound,
)


def place(r: FilterRequest) -> FilterAnswer:
    """The last step: the best node that fits (and that the namespace quota admits), its
    cards reserved for the pod until its bind."""
    env, plan = r.env, r.plan
    if r.uid:
        env.cache.placements.forget(r.uid)  # an earlier choice for this pod must not count against it
    limits = env.quotas.limits(r.namespace)
    admit = quota_gate(limits, namespace_used(env.cache, r.namespace), env.settings.resources) if limits else None
    busy = env.cache.busy_nodes(env.queue_limit)
    outcome = env.filter.run(plan, r.names, env.wall_clock(), admit, busy)
    if outcome.chosen is None or outcome.fit is None:
        return _no_node_fits(r, outcome)
    if r.uid:
        env.cache.placements.reserve(r.uid, r.namespace, r.name, outcome.chosen, outcome.fit, plan.init_count,
                                     env.monotonic(), plan, created=created_at(r.pod))
    failed = outcome.failed_text()
    cards = ",".join(sorted(outcome.fit.held))
    # Why the pod is not where binpack would have put it: those nodes' binds in flight outrun
    # their pace (or --node-bind-queue).
    queued = (f"; passed over {len(busy)} with a full bind queue" if busy and outcome.chosen not in busy else "")
    log.info("filter %s/%s: node %s cards %s (%d nodes fit, %d do not%s)", r.namespace, r.name, outcome.chosen,
             cards, outcome.fitting, len(failed), queued)
    return FilterAnswer("ok", filter_result(r.args, [outcome.chosen], failed))


def _no_node_fits(r: FilterRequest, outcome: FilterOutcome) -> FilterAnswer:
    summary = summarise(outcome.codes()) or "no candidate nodes"
    example = outcome.example_detail()
    log.info("filter %s/%s: no node fits (%s)%s", r.namespace, r.name, summary, f"; {example}" if example else "")
    # FailedNodes carries reasons kube-scheduler can count; one node's figures go here.
    r.env.emit(r.pod, "FilteringFailed", f"no node fits the DCU request: {summary}"
               + (f"; for example {example}" if example else ""), "Warning")
    if r.env.no_fit is not None:
        r.env.no_fit(r.pod, r.plan)
    return FilterAnswer("unschedulable", filter_result(r.args, [], outcome.failed_text()))


def decide(env: FilterEnv, args: FilterArgs) -> FilterAnswer:
    request = FilterRequest.of(env, args)
    for step in STEPS:
        answer = step(request)
        if answer is not None:
            return answer
    return place(request)
