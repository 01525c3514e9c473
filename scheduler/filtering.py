"""The decision behind `POST /filter` (pure over the cache; the HTTP layer is in app.py).

For each candidate node: is it usable (known, registered, plugin alive, not degraded), and
does the pod fit its cards (fit.py)? Among fitting nodes the node policy picks exactly one.
A node's fit result is memoised per (node generation, pod shape): it is only recomputed
when something on that node changed, which keeps a 5,000-node filter cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hami_dcu.common import keys
from hami_dcu.common.keys import ResourceNames
from hami_dcu.common.preferences import WeightsError, parse_weights
from hami_dcu.common.requests import DcuRequest, RequestError, parse_pod_requests, pod_containers
from hami_dcu.scheduler import policy as policies
from hami_dcu.scheduler.cache import ClusterCache, NodeEntry
from hami_dcu.scheduler.fit import CardSpec, PodFit, PodMiss, Selection, fit_pod
from hami_dcu.scheduler.handshake import HANDSHAKE_TTL, handshake_problem
from hami_dcu.scheduler.reasons import Code, NodeRejection
from hami_dcu.scheduler.usage import Usage

JSON = dict[str, Any]
_MEMO_SHAPES_PER_NODE = 8


@dataclass(frozen=True)
class FilterSettings:
    node_policy: str = policies.DEFAULT_NODE_POLICY
    card_policy: str = policies.DEFAULT_CARD_POLICY
    resources: ResourceNames = field(default_factory=lambda: keys.DEFAULT_RESOURCES)  # the naming set's
    handshake_ttl_seconds: float = HANDSHAKE_TTL.total_seconds()


@dataclass(frozen=True)
class PodPlan:
    """Everything about the pod that fit needs, parsed once per request."""

    requests: tuple[DcuRequest | None, ...]
    names: tuple[str, ...]
    init_count: int
    selection: Selection
    node_policy: str
    card_policy: policies.CardPolicy
    weights: policies.Weights = policies.DEFAULT_WEIGHTS

    @property
    def shape(self) -> tuple[object, ...]:
        # Two pods with the same shape fit the same way on the same node state.
        return (self.requests, self.init_count, self.selection, self.card_policy, self.weights)

    def fit(self, cards: Sequence[CardSpec], used: Sequence[Usage]) -> PodFit | PodMiss:
        """The pod on `cards` whose current holdings are `used` (filter and bind's re-fit)."""
        return fit_pod(cards, used, self.requests, self.names, self.init_count, self.selection, self.card_policy,
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
    card_default = policies.parse_card_policy(settings.card_policy) or policies.CardPolicy((policies.SPREAD,))
    node_policy, card_policy = policies.pod_policies(annotations, settings.node_policy, card_default)
    return PodPlan(
        requests=requests,
        names=tuple(c.get("name") or f"#{i}" for i, c in enumerate(pod_containers(pod))),
        init_count=len((pod.get("spec") or {}).get("initContainers") or []),
        selection=Selection.from_annotations(annotations),
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

    def failed_text(self) -> dict[str, str]:
        return {node: r.message for node, r in self.failed.items()}

    def example_detail(self) -> str:
        """One failing node's own figures ("node3: container main needs ..., card X: 1024 MiB free
        < 2000 MiB requested"), the first by name, so the text is stable between attempts."""
        for node in sorted(self.failed):
            if self.failed[node].detail:
                return f"{node}: {self.failed[node].detail}"
        return ""

    def codes(self) -> list[Code]:
        return [r.code for r in self.failed.values()]


class Filter:
    def __init__(self, cache: ClusterCache, settings: FilterSettings) -> None:
        self.cache = cache
        self.settings = settings
        self._ttl = timedelta(seconds=settings.handshake_ttl_seconds)
        # node -> (generation, {shape id: result}); shapes get small int ids so a memo
        # lookup hashes an int, not the nested request tuple.
        self._memo: dict[str, tuple[int, dict[int, PodFit | NodeRejection]]] = {}
        self._shape_ids: dict[tuple[object, ...], int] = {}

    def _shape_id(self, plan: PodPlan) -> int:
        shape = plan.shape
        found = self._shape_ids.get(shape)
        if found is None:
            if len(self._shape_ids) > 10_000:  # unbounded pod shapes: start over
                self._shape_ids.clear()
                self._memo.clear()
            found = self._shape_ids[shape] = len(self._shape_ids)
        return found

    def run(self, plan: PodPlan, node_names: Iterable[str], now: datetime,
            admit: Callable[[PodFit], NodeRejection | None] | None = None) -> FilterOutcome:
        """`admit`: a last check of each node's placement (the namespace quota)."""
        outcome = FilterOutcome()
        scored: list[tuple[str, float]] = []
        fits: dict[str, PodFit] = {}
        shape = self._shape_id(plan)
        now_ts = now.timestamp()
        nodes, memo = self.cache.nodes, self._memo
        for name in node_names:
            entry = nodes.get(name)
            # The hot path: a usable node whose fit for this pod shape is memoised.
            if (entry is not None and entry.present and not entry.register_error and not entry.degraded
                    and entry.handshake_fresh_until >= now_ts):
                cached = memo.get(name)
                result = cached[1].get(shape) if cached is not None and cached[0] == entry.generation else None
                if result is None:
                    result = self._fit_and_remember(entry, plan, shape)
            else:
                result = self.usable(entry, now) or self._fit_and_remember(entry, plan, shape)  # type: ignore[arg-type]
            if isinstance(result, NodeRejection):
                outcome.failed[name] = result
                continue
            refused = admit(result) if admit is not None else None
            if refused is not None:
                outcome.failed[name] = refused
                continue
            fits[name] = result
            scored.append((name, entry.score()))  # type: ignore[union-attr]
        outcome.fitting = len(scored)
        outcome.chosen = policies.pick_node(scored, plan.node_policy)
        if outcome.chosen is not None:
            outcome.fit = fits[outcome.chosen]
        return outcome

    def fit_node(self, name: str, plan: PodPlan, now: datetime) -> PodFit | NodeRejection:
        """One node, as `run` judges it."""
        entry = self.cache.nodes.get(name)
        problem = self.usable(entry, now)
        if problem is not None:
            return problem
        assert entry is not None
        return self._fit_and_remember(entry, plan, self._shape_id(plan))

    def _fit_and_remember(self, entry: NodeEntry, plan: PodPlan, shape: int) -> PodFit | NodeRejection:
        cached = self._memo.get(entry.name)
        if cached is None or cached[0] != entry.generation:
            cached = (entry.generation, {})
            self._memo[entry.name] = cached
        result = cached[1].get(shape)
        if result is None:
            result = self._fit(entry, plan)
            if len(cached[1]) >= _MEMO_SHAPES_PER_NODE:
                cached[1].pop(next(iter(cached[1])))
            cached[1][shape] = result
        return result

    def usable(self, entry: NodeEntry | None, now: datetime) -> NodeRejection | None:
        if entry is None or not entry.present:
            return NodeRejection(Code.NODE_UNKNOWN, "node not in the scheduler cache (not seen by its watch)")
        if entry.register_error:
            return NodeRejection(Code.NODE_UNREGISTERED, entry.register_error)
        problem = handshake_problem(entry.handshake, now, self._ttl, entry.dcu_allocatable)
        if problem:
            return NodeRejection(Code.NODE_HANDSHAKE_STALE, problem)
        if entry.degraded:
            more = f" (+{len(entry.degraded) - 1} more)" if len(entry.degraded) > 1 else ""
            return NodeRejection(Code.NODE_DEGRADED, f"degraded: {entry.degraded[0]}{more}")
        return None

    @staticmethod
    def _fit(entry: NodeEntry, plan: PodPlan) -> PodFit | NodeRejection:
        result = plan.fit(entry.cards, entry.used)
        if isinstance(result, PodMiss):
            return NodeRejection(result.code, result.summary, result.message)
        return result


def invalid_request(node_names: Iterable[str], error: RequestError) -> FilterOutcome:
    """A pod whose DCU request cannot be honoured fails on every node with the same reason."""
    rejection = NodeRejection(Code.POD_REQUEST_INVALID, str(error))
    return FilterOutcome(failed={name: rejection for name in node_names})
