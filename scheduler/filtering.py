"""The decision behind `POST /filter` (pure over the cache; the HTTP layer is in app.py).

For each candidate node: is it usable (known, registered, plugin alive, not degraded), and
does the pod fit its cards (fit.py)? Among fitting nodes the node policy picks exactly one.

A node is judged by its card states (cardstates.py, verdicts.py): each distinct card state
is checked once per pod shape, so judging a node costs a set lookup, for a shape seen before
or not. The verdicts are kept as sets of node names per recent pod shape, updated only
where nodes change (nodeview.py), so a filter over 5,000 nodes is a few set operations over
the candidates plus a look at each node that does not fit: about what decoding the
request costs. Only the chosen node is placed card by card (fit.py), which also checks the
verdict. Pods whose fit does not follow from card states are fitted exactly per node,
memoised per (node generation, pod shape).
"""

from __future__ import annotations

import itertools
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import compress
from typing import Any

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.counting import StartOrder, Usage, start_order
from hami_dcu.common.protocol.keys import Naming, ResourceNames
from hami_dcu.common.protocol.podchecks import Refusal
from hami_dcu.common.protocol.preferences import SelectionError, WeightsError, parse_weights
from hami_dcu.common.protocol.requests import DcuRequest, RequestError, parse_pod_requests, pod_containers
from hami_dcu.scheduler import policy as policies
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cacherecords import NodeView
from hami_dcu.scheduler.fit import CardSpec, PodFit, PodMiss, Selection, fit_pod
from hami_dcu.scheduler.handshake import HANDSHAKE_TTL, handshake_problem
from hami_dcu.scheduler.nodeview import ShapeNodes, Usability
from hami_dcu.scheduler.reasons import Code, NodeRejection
from hami_dcu.scheduler.verdicts import ShapeVerdicts, judgeable, shape_verdicts

log = logging.getLogger(__name__)
JSON = dict[str, Any]
_SHAPES_KEPT = 512  # pod shapes whose card-state verdicts are kept
_EXACT_SHAPES_PER_NODE = 32  # exact fits kept per node and generation
# Pod shapes whose fitting nodes are kept as sets (a set of 5,000 names is ~200 KB).
_NODE_SETS_KEPT = 32


# Measured with bench/scale.py --contend at 1,000 kwok nodes (docs/performance.md, No collapse
# when the machine is slower): a fixed limit of 8 with the pace (bindpace.py) left no bind
# failing with or without a CPU hog, but spread a 40-share Job that fits 2 nodes over 5
# (e2e/test_realcluster_scale.py): kube-scheduler places pods faster than one node's Allocates
# end, so any fixed limit breaks binpack's promise where the node would have served them in
# time. None (the default): each node's limit follows its own pace (nodepace.py).
BIND_QUEUE: int | None = None


@dataclass(frozen=True)
class FilterSettings:
    node_policy: str = policies.DEFAULT_NODE_POLICY
    card_policy: str = policies.DEFAULT_CARD_POLICY
    # The set this extender speaks (cli --naming). Required and keyword-only: a default would let
    # a forgotten argument speak the dcu set.
    naming: Naming = field(kw_only=True)
    handshake_ttl_seconds: float = HANDSHAKE_TTL.total_seconds()
    # Volcano mode: pods with this schedulerName are Volcano's to place (scheduler/volcano.py).
    volcano_scheduler: str = ""
    # Binds in flight on one node (placed, not bound yet) from which /filter prefers another
    # fitting node (0: never; None: as many as the node's own pace serves, nodepace.py). HAMi's
    # node lock admits one pod per node between its bind and its Allocate, so the k-th bind
    # queued on a node waits k Allocates: binpack would queue a burst's whole node there, and
    # on a slow machine the last binds outwait --lock-wait.
    bind_queue: int | None = BIND_QUEUE

    @property
    def resources(self) -> ResourceNames:
        return self.naming.resources


@dataclass(frozen=True)
class PodPlan:
    """Everything about the pod that fit needs, parsed once per request."""

    requests: tuple[DcuRequest | None, ...]
    names: tuple[str, ...]
    order: StartOrder
    selection: Selection
    node_policy: str
    card_policy: policies.CardPolicy
    weights: policies.Weights = policies.DEFAULT_WEIGHTS

    @property
    def init_count(self) -> int:
        return self.order.init_count

    @property
    def sidecars(self) -> frozenset[int]:
        return self.order.sidecars

    @property
    def shape(self) -> tuple[object, ...]:
        # Two pods with the same shape fit the same way on the same node state.
        return (self.requests, self.order, self.selection, self.card_policy, self.weights)

    def fit(self, cards: Sequence[CardSpec], used: Sequence[Usage]) -> PodFit | PodMiss:
        """The pod on `cards` whose current holdings are `used` (filter and bind's re-fit)."""
        return fit_pod(cards, used, self.requests, self.names, self.order, self.selection, self.card_policy,
                       self.weights)


def plan_pod(pod: JSON, settings: FilterSettings) -> PodPlan | None:
    """None when the pod asks for no DCU. Raises RequestError for a malformed request or
    scoring weights HAMi refuses (the pod is unschedulable, as in HAMi, with the reason)."""
    requests = tuple(parse_pod_requests(pod, settings.resources))
    if not any(requests):
        return None
    meta = pod.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    weights = policies.DEFAULT_WEIGHTS
    written = annotations.get(keys.DEVICE_SCORING_WEIGHTS)
    if written is not None:
        try:
            weights = parse_weights(written)
        except WeightsError as exc:
            raise RequestError(f"annotation {keys.DEVICE_SCORING_WEIGHTS}: {exc}") from exc
    try:
        selection = Selection.from_annotations(annotations, settings.naming)
    except SelectionError as exc:  # fails closed: the pod fits no node, the annotation named
        raise RequestError(str(exc)) from exc
    card_default = policies.parse_card_policy(settings.card_policy) or policies.CardPolicy((policies.SPREAD,))
    node_policy, card_policy = policies.pod_policies(annotations, settings.node_policy, card_default)
    return PodPlan(
        requests=requests,
        names=tuple(c.get("name") or f"#{i}" for i, c in enumerate(pod_containers(pod))),
        order=start_order(pod),
        selection=selection,
        node_policy=node_policy,
        card_policy=card_policy,
        weights=weights,
    )


@dataclass
class FilterOutcome:
    chosen: str | None = None
    fit: PodFit | None = None
    failed: dict[str, NodeRejection] = field(default_factory=dict)
    fitting: int = 0
    # A failing node's own figures, worked out only when asked (rejections judged from card
    # states carry the text all such nodes share, not each node's numbers).
    explain: Callable[[str, NodeRejection], str] | None = None

    def failed_text(self) -> dict[str, str]:
        return {node: r.message for node, r in self.failed.items()}

    def example_detail(self) -> str:
        """One failing node's own figures ("node3: container main needs ..., card X: 1024 MiB free
        < 2000 MiB requested"), the first by name, so the text is stable between attempts."""
        for node in sorted(self.failed):
            rejection = self.failed[node]
            detail = rejection.detail or (self.explain(node, rejection) if self.explain is not None else "")
            if detail:
                return f"{node}: {detail}"
        return ""

    def codes(self) -> list[Code]:
        return [r.code for r in self.failed.values()]


class Filter:
    def __init__(self, cache: ClusterCache, settings: FilterSettings) -> None:
        self.cache = cache
        self.settings = settings
        self._ttl = timedelta(seconds=settings.handshake_ttl_seconds)
        # Card-state verdicts per pod shape (None: a shape fitted exactly), least recently used first.
        self._verdicts: OrderedDict[tuple[object, ...], ShapeVerdicts | None] = OrderedDict()
        # Exact fits, for shapes verdicts cannot judge and for bind: node -> (generation,
        # {shape id: result}); shapes get small int ids so a lookup hashes an int.
        self._memo: dict[str, tuple[int, dict[int, PodFit | NodeRejection]]] = {}
        self._shape_ids: dict[tuple[object, ...], int] = {}
        # Node sets kept current between requests (nodeview.py): usability and scores for
        # all pods, the fitting nodes per recent pod shape.
        self._usability = Usability(cache)
        self._shape_nodes: OrderedDict[tuple[object, ...], ShapeNodes] = OrderedDict()
        # the last request's candidates: (names NUL-joined, as a set, usability.known_version,
        # names every node)
        self._last_candidates: tuple[str, set[str], int, bool] | None = None

    def _shape_id(self, plan: PodPlan) -> int:
        shape = plan.shape
        found = self._shape_ids.get(shape)
        if found is None:
            if len(self._shape_ids) > 10_000:  # unbounded pod shapes: start over
                self._shape_ids.clear()
                self._memo.clear()
            found = self._shape_ids[shape] = len(self._shape_ids)
        return found

    def _verdicts_for(self, plan: PodPlan) -> ShapeVerdicts | None:
        shape = plan.shape
        if shape in self._verdicts:
            self._verdicts.move_to_end(shape)
            verdicts = self._verdicts[shape]
        else:
            by_states = judgeable(plan.requests, plan.init_count, plan.selection, plan.card_policy, plan.sidecars)
            verdicts = (shape_verdicts(plan.requests, plan.names, plan.selection, plan.card_policy)
                        if by_states else None)
            self._verdicts[shape] = verdicts
            if len(self._verdicts) > _SHAPES_KEPT:
                self._verdicts.popitem(last=False)
        if verdicts is not None:
            verdicts.sync(self.cache.card_states)
        return verdicts

    def _shape_nodes_for(self, plan: PodPlan, verdicts: ShapeVerdicts) -> ShapeNodes:
        shape = plan.shape
        found = self._shape_nodes.get(shape)
        if found is None or found.verdicts is not verdicts:
            found = self._shape_nodes[shape] = ShapeNodes(self.cache, verdicts, self._usability)
            if len(self._shape_nodes) > _NODE_SETS_KEPT:
                self._shape_nodes.popitem(last=False)
        else:
            self._shape_nodes.move_to_end(shape)
        found.sync()
        return found

    def run(self, plan: PodPlan, node_names: Sequence[str], now: datetime,
            admit: Callable[[PodFit], NodeRejection | None] | None = None,
            busy: Set[str] = frozenset()) -> FilterOutcome:
        """`admit`: a last check of the chosen node's placement (the namespace quota).
        `busy`: nodes with `bind_queue` binds in flight; the policy's pick among the others,
        and one of them only when every fitting node is busy (a bind that waits is better
        than none)."""
        verdicts = self._verdicts_for(plan)
        outcome = FilterOutcome(explain=lambda node, rejection: self._explain(node, rejection, plan, now, verdicts))
        self._usability.sync(now.timestamp())
        spread = plan.node_policy == policies.SPREAD
        if verdicts is None:
            fitting, exact = self._judge_exactly(outcome, plan, node_names, now)
            self._choose(outcome, plan, lambda excluded: _best_of(fitting - excluded, self._usability.scores,
                                                                 plan.node_policy), exact, admit, busy)
            return outcome
        shape_nodes = self._shape_nodes_for(plan, verdicts)
        allowed = self._judge_by_sets(outcome, shape_nodes, node_names, now)
        self._choose(outcome, plan, lambda excluded: self._usability.best(
            spread, shape_nodes.fits, lambda name: allowed(name) and name not in excluded), {}, admit, busy)
        return outcome

    def _candidates(self, node_names: Sequence[str]) -> tuple[set[str], bool]:
        """The request's node names as a set, and whether they name every node in the cache.
        kube-scheduler sends the same list again and again (every node its own filters
        pass): an equal list reuses what the last one found. Lists are compared as one
        NUL-joined string (a C copy and a memcmp, far cheaper than hashing 5,000 names into a
        set); names containing NUL, which no node has, are never compared that way."""
        version = self._usability.known_version
        joined = "\0".join(node_names)
        comparable = joined.count("\0") == max(len(node_names) - 1, 0)
        last = self._last_candidates
        if comparable and last is not None and last[2] == version and last[0] == joined:
            return last[1], last[3]
        candidates = set(node_names)
        covers = candidates.issuperset(self._usability.scores)
        self._last_candidates = (joined, candidates, version, covers) if comparable else None
        return candidates, covers

    def _judge_by_sets(self, outcome: FilterOutcome, shape_nodes: ShapeNodes, node_names: Sequence[str],
                       now: datetime) -> Callable[[str], bool]:
        """A reason in `outcome.failed` for every candidate that does not take the pod, by set
        operations on what is kept between requests (nodeview.py): the nodes that do fit are
        not looked at one by one. Returns which fitting nodes this request may choose."""
        usability = self._usability
        candidates, covers = self._candidates(node_names)
        fits, blocked, stale = shape_nodes.fits, usability.blocked, usability.stale
        excluded = blocked | stale if blocked or stale else blocked
        if covers:
            # Every node is a candidate: the failing ones are those kept as failing.
            failing: Iterable[str] = itertools.chain(
                shape_nodes.failing, stale.difference(shape_nodes.failing),
                candidates.difference(usability.scores) if len(candidates) > len(usability.scores) else ())
            outcome.fitting = len(fits) - len(stale.intersection(fits))
        else:
            fitting = (fits - excluded if excluded else fits) & candidates
            failing = candidates - fitting
            outcome.fitting = len(fitting)
        failed, node = outcome.failed, self.cache.node
        extra: set[str] = set()  # usable after all: a node whose plugin reported just in time
        for name in failing:
            entry = node(name)
            if entry is None or name in excluded:
                problem = self.usable(entry, now)
                if problem is not None:
                    failed[name] = problem
                    continue
            rejection = shape_nodes.reason(name)
            if rejection is None:
                extra.add(name)
            else:
                failed[name] = rejection
        if extra:
            shape_nodes.fits.update(extra)  # they do fit: kept so, for this request's choice too
            shape_nodes.failing.difference_update(extra)
            outcome.fitting += len(extra)
        if covers:
            return lambda name: name not in excluded or name in extra
        return lambda name: name in candidates and (name not in excluded or name in extra)

    def _judge_exactly(self, outcome: FilterOutcome, plan: PodPlan, node_names: Iterable[str], now: datetime
                       ) -> tuple[set[str], dict[str, PodFit]]:
        """Pods whose fit does not follow from card states: fit.py on every candidate."""
        fitting: set[str] = set()
        exact: dict[str, PodFit] = {}
        shape = self._shape_id(plan)
        for name in node_names:
            entry = self.cache.node(name)
            problem = self.usable(entry, now)
            if problem is not None:
                outcome.failed[name] = problem
                continue
            assert entry is not None
            result = self._fit_and_remember(entry, plan, shape)
            if isinstance(result, NodeRejection):
                outcome.failed[name] = result
            else:
                fitting.add(entry.name)
                exact[entry.name] = result
        outcome.fitting = len(fitting)
        return fitting, exact

    def _choose(self, outcome: FilterOutcome, plan: PodPlan, best: Callable[[set[str]], str | None],
                exact: dict[str, PodFit], admit: Callable[[PodFit], NodeRejection | None] | None,
                busy: Set[str] = frozenset()) -> None:
        """The node policy's pick (`best`, among the fitting nodes not in the set it is
        given), placed exactly (fit.py) and admitted; the next best when either refuses.
        Busy nodes are passed over while any other fits, never reported as failing."""
        excluded: set[str] = set()
        if busy:
            passed_over = set(busy)
            if best(passed_over) is not None:
                self._choose(outcome, plan, lambda more: best(more | passed_over), exact, admit)
                if outcome.chosen is not None:
                    return
                # Every other fitting node refused the pod: the busy ones are still candidates.
                excluded = {name for name in outcome.failed if name not in passed_over}
        while (name := best(excluded)) is not None:
            result = exact.get(name) or self._fit_known(name, plan)
            if isinstance(result, NodeRejection):
                # Card-state verdicts let through a node fit.py refuses: fit.py is the rule.
                log.warning("filter: node %s passed the card-state check but fit refuses it: %s", name,
                            result.detail)
                outcome.failed[name] = result
            else:
                refused = admit(result) if admit is not None else None
                if refused is None:
                    outcome.chosen, outcome.fit = name, result
                    return
                outcome.failed[name] = refused
                if _same_amounts_everywhere(plan):
                    # The quota counts amounts, and this pod holds the same on any node: every
                    # other fitting node is refused alike.
                    excluded.add(name)
                    while (other := best(excluded)) is not None:
                        outcome.failed[other] = refused
                        excluded.add(other)
                    outcome.fitting = 0
                    return
            excluded.add(name)
            outcome.fitting -= 1

    def _explain(self, name: str, rejection: NodeRejection, plan: PodPlan, now: datetime,
                 verdicts: ShapeVerdicts | None) -> str:
        """The node's own figures behind a card-state rejection, from an exact fit."""
        if verdicts is None or not verdicts.made(rejection):
            return ""
        entry = self.cache.node(name)
        if entry is None or self.usable(entry, now) is not None:
            return ""
        result = self._fit(entry, plan)
        return result.detail if isinstance(result, NodeRejection) else ""

    def fit_node(self, name: str, plan: PodPlan, now: datetime) -> PodFit | NodeRejection:
        """One node, placed exactly."""
        entry = self.cache.node(name)
        problem = self.usable(entry, now)
        if problem is not None:
            return problem
        assert entry is not None
        return self._fit_and_remember(entry, plan, self._shape_id(plan))

    def _fit_and_remember(self, entry: NodeView, plan: PodPlan, shape: int) -> PodFit | NodeRejection:
        cached = self._memo.get(entry.name)
        if cached is None or cached[0] != entry.generation:
            cached = (entry.generation, {})
            self._memo[entry.name] = cached
        result = cached[1].get(shape)
        if result is None:
            result = self._fit(entry, plan)
            if len(cached[1]) >= _EXACT_SHAPES_PER_NODE:
                cached[1].pop(next(iter(cached[1])))
            cached[1][shape] = result
        return result

    def _fit_known(self, name: str, plan: PodPlan) -> PodFit | NodeRejection:
        """A node the node sets hold (so the cache holds it), placed exactly."""
        entry = self.cache.node(name)
        assert entry is not None
        return self._fit(entry, plan)

    def usable(self, entry: NodeView | None, now: datetime) -> NodeRejection | None:
        if entry is None or not entry.present:
            return NodeRejection(Code.NODE_UNKNOWN, "node not in the scheduler cache (not seen by its watch)")
        if entry.register_error:
            return NodeRejection(Code.NODE_UNREGISTERED, entry.register_error)
        problem = handshake_problem(entry.handshake, now, self._ttl, entry.dcu_allocatable,
                                    key=self.settings.naming.node_handshake)
        if problem:
            return NodeRejection(Code.NODE_HANDSHAKE_STALE, problem)
        if entry.degraded:
            more = f" (+{len(entry.degraded) - 1} more)" if len(entry.degraded) > 1 else ""
            return NodeRejection(Code.NODE_DEGRADED, f"degraded: {entry.degraded[0]}{more}")
        return None

    @staticmethod
    def _fit(entry: NodeView, plan: PodPlan) -> PodFit | NodeRejection:
        result = plan.fit(entry.cards, entry.used)
        if isinstance(result, PodMiss):
            return NodeRejection(result.code, result.summary, result.message)
        return result


def best_name(names: set[str], scores: Mapping[str, float], node_policy: str) -> str:
    """policy.pick_node over a set of node names, without building (name, score) pairs:
    binpack the highest node score, spread the lowest, ties to the name ascending. In C
    loops (map, compress) over the set, which iterates in the same order both times."""
    score = scores.__getitem__
    target = min(map(score, names)) if node_policy == policies.SPREAD else max(map(score, names))
    return min(compress(names, map(target.__eq__, map(score, names))))


def _best_of(names: set[str], scores: Mapping[str, float], node_policy: str) -> str | None:
    return best_name(names, scores, node_policy) if names else None


def _same_amounts_everywhere(plan: PodPlan) -> bool:
    """One DCU container with a given memory size: it holds the same amounts on any node."""
    asked = [request for request in plan.requests if request is not None]
    return len(asked) == 1 and not asked[0].whole_memory


def invalid_request(node_names: Iterable[str], error: RequestError) -> FilterOutcome:
    """A pod whose DCU request cannot be honoured fails on every node with the same reason."""
    rejection = NodeRejection(Code.POD_REQUEST_INVALID, str(error))
    return FilterOutcome(failed={name: rejection for name in node_names})


def refused_everywhere(node_names: Iterable[str], refusal: Refusal) -> FilterOutcome:
    """A pod admission refuses (common/protocol/podchecks.py) fails on every node with admission's words."""
    rejection = NodeRejection(Code.POD_REFUSED, refusal.message)
    return FilterOutcome(failed={name: rejection for name in node_names})
