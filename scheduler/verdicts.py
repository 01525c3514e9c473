"""Does a node take a pod? Judged from the node's card states (cardstates.py), pure.

For most pods the answer does not need a placement, only a count. Per DCU container, fit.py
walks the node's cards in policy order and takes each card `check_card` passes until it
has `count` of them; a card is checked at most once per container, and a container's
checks see only the node's holdings (an init container runs before the app containers and
is fitted against the node as it is; so is a pod's only app container). So when a pod has
at most one DCU app container, does not pick cards by id, and does not need several cards
on one NUMA node, a container fits exactly when at least `count` of the node's cards pass
`check_card`, and when it does not, fit.py reports the most common reason among the cards
that failed (`primary_code`): both follow from the node's card states alone, whatever the
policy order. A pod fits when all its DCU containers do; the first that does not (in
container order) is the reason, as in fit.py.

`ShapeVerdicts` judges each card state once per pod shape, so a node costs a set lookup
per card, for shapes seen before or not. Other pods (several DCU app containers, cards
chosen by id, numa with several cards) are fitted exactly, per node (`judgeable`). The
placement itself (which cards) is always fit.py's, on the chosen node only.
tests/scheduler/test_scheduler_verdicts.py holds this module to fit.py on random nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hami_dcu.common.protocol.requests import DcuRequest
from hami_dcu.scheduler import policy as policies
from hami_dcu.scheduler.cardstates import CardStateTable
from hami_dcu.scheduler.fit import PodMiss, Selection, check_card, describe
from hami_dcu.scheduler.reasons import CardRejection, Code, NodeRejection, primary_code

_FAILURES_KEPT = 50_000  # remembered rejections per shape (distinct failing nodes' card states)


@dataclass(frozen=True, slots=True)
class Need:
    """One DCU container of the pod."""

    container: str
    request: DcuRequest


def judgeable(requests: Sequence[DcuRequest | None], init_count: int, selection: Selection,
              card_policy: policies.CardPolicy, sidecars: frozenset[int] = frozenset()) -> bool:
    """True when the pod's fit on a node follows from the node's card states (module doc)."""
    if selection.use_ids or selection.nouse_ids:
        return False
    if sum(1 for request in requests[init_count:] if request is not None) > 1:
        return False
    if any(requests[position] is not None for position in sidecars):
        return False  # a sidecar's share stays beside the others: fit.py places them together
    return not (card_policy.numa and any(r is not None and r.count > 1 for r in requests))


class ShapeVerdicts:
    """The verdicts for one pod shape. `sync` before judging nodes whose card states may be
    new; `rejection(states)` is None when a node with those card states takes the pod."""

    def __init__(self, needs: Sequence[Need], selection: Selection, mutex: bool) -> None:
        self.needs = tuple(needs)
        self.selection = selection
        self.mutex = mutex
        # per need: card states that pass, and the rejection of those that do not
        self.passing: list[set[int]] = [set() for _ in self.needs]
        self.rejected: list[dict[int, CardRejection]] = [{} for _ in self.needs]
        # The common pod: one container, one card. A node takes it when any card passes.
        self.one_card: set[int] | None = (
            self.passing[0] if len(self.needs) == 1 and self.needs[0].request.count == 1 else None)
        self._judged = 0  # every live state with a smaller id is judged
        self._failures: dict[tuple[int, ...], NodeRejection] = {}
        self._made: set[NodeRejection] = set()  # every rejection judged here (a few per shape)

    def made(self, rejection: NodeRejection) -> bool:
        """True for a rejection judged from card states (it carries no node's own figures)."""
        return rejection in self._made

    def sync(self, table: CardStateTable) -> None:
        if len(self.passing[0]) + len(self.rejected[0]) > 2 * len(table.live) + 4096:
            self._prune(table)
        born = table.born_since(self._judged)
        self._judged = table.next_id
        selection, mutex = self.selection, self.mutex
        for need, passing, rejected in zip(self.needs, self.passing, self.rejected, strict=True):
            # A shape seen for the first time judges every live state here (hundreds): the
            # loop is kept to the check itself.
            request, memory = need.request, need.request.memory_mib
            for state, (card, row) in born:
                rejection = check_card(card, row, request, memory or card.memory, selection, mutex)
                if rejection is None:
                    passing.add(state)
                else:
                    rejected[state] = rejection

    def _prune(self, table: CardStateTable) -> None:
        """Forget the states no card is in any more (their ids never come back)."""
        live = table.live
        for passing in self.passing:
            passing.intersection_update(live)
        for k, rejected in enumerate(self.rejected):
            self.rejected[k] = {state: r for state, r in rejected.items() if state in live}

    def rejection(self, states: tuple[int, ...]) -> NodeRejection | None:
        one_card = self.one_card
        if one_card is not None and not one_card.isdisjoint(states):
            return None
        found = self._failures.get(states)
        if found is not None:
            return found
        for need, passing, rejected in zip(self.needs, self.passing, self.rejected, strict=True):
            request = need.request
            if request.count > len(states):
                code = Code.NODE_TOO_FEW_CARDS
            else:
                if sum(1 for state in states if state in passing) >= request.count:
                    continue
                code = primary_code(rejected[state] for state in states if state not in passing) \
                    or Code.NODE_TOO_FEW_CARDS
            # The text every node failing this way shares (fit.py's PodMiss.summary); the
            # node's own figures come from an exact fit when someone asks (FilterOutcome).
            miss = PodMiss(need.container, code, "", request=describe(request))
            rejection = NodeRejection(code, miss.summary)
            self._made.add(rejection)
            if len(self._failures) >= _FAILURES_KEPT:
                self._failures.clear()
            self._failures[states] = rejection
            return rejection
        return None


def shape_verdicts(requests: Sequence[DcuRequest | None], names: Sequence[str], selection: Selection,
                   card_policy: policies.CardPolicy) -> ShapeVerdicts:
    needs = [Need(names[i], request) for i, request in enumerate(requests) if request is not None]
    return ShapeVerdicts(needs, selection, card_policy.mutex)
