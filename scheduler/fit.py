"""Exact per-card fit of one pod on one node (pure), as HAMi's scheduler fits DCUs.

For each container that asks for DCUs, the node's cards are tried in policy order and a
card is taken when every check passes (in this order, each failure a reason code):

1. healthy;                                        CardUnhealthy
2. model matches `hygon.com/use-dcutype` (substring, case-insensitive) and matches none of
   `hygon.com/nouse-dcutype`; both apply;          CardTypeMismatch
3. id is listed in `hygon.com/use-gpuuuid` (if given) and not in `nouse-gpuuuid`;
                                                   CardUuidMismatch
4. a free slot (slots come from the card's Count); CardSlotsExhausted
   with the mutex policy, no share in use at all;  CardBusyMutex
5. memory: the request, or the whole card when dcumem is absent;
                                                   CardInsufficientMemory
6. cores (percent);                                CardInsufficientCores
7. a 100 % request needs an idle card;             CardExclusiveConflict
8. a 0 % request cannot go on a card whose compute is all taken;
                                                   CardComputeExhausted

With `numa` in the card policy a multi-card container gets all its cards from one NUMA
node, or the node fails with NodeNumaInsufficient (HAMi only sorts by NUMA node for DCUs).

What we fix relative to HAMi: empty selection values mean "no constraint" (but a
`use-<set>type` of only empty entries, ",,", matches no card, as in HAMi), use and nouse
both apply, a multi-card container gets distinct cards, init containers are fitted each
against the node as it is (they run one at a time, before the app containers) and app
containers cumulatively, and every rejected card is reported with its numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, PodDevices
from hami_dcu.common.protocol.counting import StartOrder, Usage, collapse
from hami_dcu.common.protocol.keys import Naming
from hami_dcu.common.protocol.preferences import names_no_type, selection_entries
from hami_dcu.common.protocol.requests import DcuRequest
from hami_dcu.common.protocol.untrusted import shown
from hami_dcu.scheduler import policy as policies
from hami_dcu.scheduler.reasons import SUMMARY_PHRASE, CardRejection, Code, primary_code


@dataclass(frozen=True, slots=True)
class CardSpec:
    """A card as the node registers it (capacity; never changes with usage)."""

    id: str
    index: int
    model: str
    slots: int
    memory: int  # MiB
    cores: int  # percent, 100 for a whole card
    health: bool = True
    numa: int = 0


@dataclass(frozen=True, slots=True)
class Selection:
    """The pod's card selection annotations, parsed once per pod, in the naming set the
    extender speaks (which also names the request type a placement writes)."""

    naming: Naming
    use_types: tuple[str, ...] = ()  # upper-cased substrings
    nouse_types: tuple[str, ...] = ()
    use_ids: frozenset[str] = frozenset()
    nouse_ids: frozenset[str] = frozenset()
    # `use-<set>type` written with only empty entries (",,"): HAMi matches no card with it.
    use_types_empty: bool = False

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str], naming: Naming) -> Selection:
        """Raises SelectionError for a list longer than common/protocol/preferences.py bounds: each
        entry is matched against every card weighed, so it is refused before any is."""
        def entries(key: str) -> tuple[str, ...]:
            return selection_entries(key, annotations.get(key))

        use_types, nouse_types = entries(naming.use_type), entries(naming.nouse_type)
        use_ids, nouse_ids = entries(keys.USE_DCU_UUID), entries(keys.NOUSE_DCU_UUID)
        return cls(
            naming=naming,
            use_types_empty=names_no_type(annotations.get(naming.use_type)),
            use_types=tuple(t.upper() for t in use_types),
            nouse_types=tuple(t.upper() for t in nouse_types),
            use_ids=frozenset(use_ids),
            nouse_ids=frozenset(nouse_ids),
        )

    def type_problem(self, model: str) -> str | None:
        if not self.use_types and not self.nouse_types and not self.use_types_empty:
            return None  # most pods name no type: checked for every card state a new shape meets
        if self.use_types_empty:
            return f"{self.naming.use_type} names no card type (only empty entries): no card matches, as in HAMi"
        upper = model.upper()
        if self.use_types and not any(t in upper for t in self.use_types):
            # The types are the pod author's words: escaped and cut before they reach a reason.
            return f"model {model} not in {self.naming.use_type}={shown(','.join(self.use_types))}"
        for t in self.nouse_types:
            if t in upper:
                return f"model {model} excluded by {self.naming.nouse_type}={shown(t)}"
        return None

    def id_problem(self, card_id: str) -> str | None:
        if self.use_ids and card_id not in self.use_ids:
            return f"not listed in {keys.USE_DCU_UUID}"
        if card_id in self.nouse_ids:
            return f"excluded by {keys.NOUSE_DCU_UUID}"
        return None


@dataclass(frozen=True, slots=True)
class PodFit:
    devices: PodDevices  # codec order, one entry per container
    held: dict[str, Usage]  # what the pod will hold per card id


@dataclass(frozen=True, slots=True)
class PodMiss:
    container: str
    code: Code
    message: str  # the node's own figures: which card failed and why
    rejections: tuple[CardRejection, ...] = ()
    request: str = ""  # what the container asked for, e.g. "1 card x (2000 MiB, 10 percent of cores)"

    @property
    def summary(self) -> str:
        """The same text for every node that fails this way, so kube-scheduler can count nodes
        per reason ("0/5000 nodes are available: 5000 insufficient card memory: ...") instead of
        listing 5,000 distinct messages in one event."""
        return f"{SUMMARY_PHRASE[self.code]}: container {self.container} needs {self.request}"


# Reasons never contain "%": kube-scheduler passes the extender's reasons through a printf
# when it records FailedScheduling, so "10% cores" was shown as "10%!c(MISSING)ores".
def describe(request: DcuRequest) -> str:
    memory = "all memory" if request.whole_memory else f"{request.memory_mib} MiB"
    plural = "s" if request.count != 1 else ""
    return f"{request.count} card{plural} x ({memory}, {request.cores} percent of cores)"


def fit_pod(
    cards: Sequence[CardSpec],
    used: Sequence[Usage],
    requests: Sequence[DcuRequest | None],
    container_names: Sequence[str],
    order: StartOrder,
    selection: Selection,
    card_policy: policies.CardPolicy,
    weights: policies.Weights = policies.DEFAULT_WEIGHTS,
) -> PodFit | PodMiss:
    """Place every container of the pod on `cards` whose current holdings are `used`
    (counted as common.protocol.counting counts: sidecars run beside what starts after them)."""
    # what is on the cards plus the sidecars placed so far, then plus the app containers
    running = [[u.slots, u.memory, u.cores] for u in used]
    # HAMi's card list for the app containers: each sorts it in place, and equal cards keep
    # the places the previous container's sort gave them (policy.card_order). HAMi fits every
    # init container on a fresh copy of the node, its cards in registration order.
    app_list = list(range(len(cards)))
    devices: PodDevices = []
    for position, request in enumerate(requests):
        if request is None:
            devices.append([])
            continue
        ordinary_init = order.ordinary_init(position)
        usage = [list(row) for row in running] if ordinary_init else running  # an init container's share ends
        listed = list(range(len(cards))) if position < order.init_count else app_list
        placed = fit_container(cards, usage, request, container_names[position], selection, card_policy, weights,
                               listed)
        if isinstance(placed, PodMiss):
            return placed
        devices.append(placed)
    return PodFit(devices=devices, held=collapse(devices, order))


def fit_container(
    cards: Sequence[CardSpec],
    usage: list[list[int]],
    request: DcuRequest,
    name: str,
    selection: Selection,
    card_policy: policies.CardPolicy,
    weights: policies.Weights = policies.DEFAULT_WEIGHTS,
    listed: list[int] | None = None,
) -> list[ContainerDevice] | PodMiss:
    """Choose `request.count` distinct cards; `usage` ([slots, memory, cores] per card) is
    updated in place with what was taken, `listed` (HAMi's card list, policy.card_order)
    sorted in place."""
    if request.count > len(cards):
        plural = "s" if len(cards) != 1 else ""
        return PodMiss(name, Code.NODE_TOO_FEW_CARDS,
                       f"container {name} needs {describe(request)}: node has {len(cards)} card{plural}",
                       request=describe(request))
    # Scored once per container, before it takes anything, as HAMi does: the cards one
    # container takes do not reorder the rest of its walk.
    states = [
        policies.CardState(policies.card_score(u[0], c.slots, u[1], c.memory, u[2], c.cores, weights), u[0], c.numa,
                           c.index)
        for c, u in zip(cards, usage, strict=True)
    ]
    order = policies.card_order(states, card_policy, listed)
    if card_policy.numa and request.count > 1:
        return _fit_on_one_numa_node(cards, usage, request, name, selection, card_policy, order)
    chosen, rejections = _take(cards, usage, request, selection, card_policy, order)
    if len(chosen) == request.count:
        return chosen
    code = primary_code(rejections) or Code.NODE_TOO_FEW_CARDS
    found = f"{len(chosen)} of {len(cards)} cards fit"
    details = "; ".join(r.text() for r in rejections)
    return PodMiss(name, code, f"container {name} needs {describe(request)}, {found}: {details}", tuple(rejections),
                   describe(request))


def _take(
    cards: Sequence[CardSpec],
    usage: list[list[int]],
    request: DcuRequest,
    selection: Selection,
    card_policy: policies.CardPolicy,
    positions: Sequence[int],
) -> tuple[list[ContainerDevice], list[CardRejection]]:
    """Walk `positions` taking cards until the request is met. On a shortfall what was
    taken is given back to `usage` (a partial placement must never look like a holding)
    and the cards that did fit are still returned, for the reason."""
    chosen: list[tuple[int, ContainerDevice]] = []
    rejections: list[CardRejection] = []
    for i in positions:
        card, row = cards[i], usage[i]
        memory = request.memory_mib or card.memory
        rejection = check_card(card, row, request, memory, selection, card_policy.mutex)
        if rejection is not None:
            rejections.append(rejection)
            continue
        row[0] += 1
        row[1] += memory
        row[2] += request.cores
        chosen.append((i, ContainerDevice(uuid=card.id, type=selection.naming.device_type, usedmem=memory,
                                          usedcores=request.cores)))
        if len(chosen) == request.count:
            break
    if len(chosen) < request.count:
        for i, device in chosen:
            usage[i][0] -= 1
            usage[i][1] -= device.usedmem
            usage[i][2] -= device.usedcores
    return [device for _, device in chosen], rejections


def _fit_on_one_numa_node(
    cards: Sequence[CardSpec],
    usage: list[list[int]],
    request: DcuRequest,
    name: str,
    selection: Selection,
    card_policy: policies.CardPolicy,
    order: Sequence[int],
) -> list[ContainerDevice] | PodMiss:
    """With `numa` in the policy a multi-card container gets all its cards from one NUMA
    node: the nodes are tried in the order their first card comes in `order` (so the
    policy's preference holds), each walked in that order."""
    groups: dict[int, list[int]] = {}
    for i in order:
        groups.setdefault(cards[i].numa, []).append(i)
    found: list[str] = []
    rejections: list[CardRejection] = []
    for numa, positions in groups.items():
        chosen, rejected = _take(cards, usage, request, selection, card_policy, positions)
        if len(chosen) == request.count:
            return chosen
        found.append(f"NUMA node {numa}: {len(chosen)} of {len(positions)} cards fit")
        rejections.extend(rejected)
    details = "; ".join([*found, *(r.text() for r in rejections)])
    return PodMiss(name, Code.NODE_NUMA_INSUFFICIENT,
                   f"container {name} needs {describe(request)} on one NUMA node (numa policy): {details}",
                   tuple(rejections), describe(request))


def check_card(
    card: CardSpec, row: list[int], request: DcuRequest, memory: int, selection: Selection, mutex: bool = False
) -> CardRejection | None:
    """The first check `card` fails for `request`, None when it can take it. `mutex`: only
    an idle card may be taken (the mutex policy)."""
    used_slots, used_memory, used_cores = row
    if not card.health:
        return CardRejection(card.id, Code.CARD_UNHEALTHY, "reported unhealthy by the device plugin")
    problem = selection.type_problem(card.model)
    if problem:
        return CardRejection(card.id, Code.CARD_TYPE_MISMATCH, problem)
    problem = selection.id_problem(card.id)
    if problem:
        return CardRejection(card.id, Code.CARD_UUID_MISMATCH, problem)
    if used_slots >= card.slots:
        return CardRejection(card.id, Code.CARD_SLOTS_EXHAUSTED, f"{used_slots}/{card.slots} slots used")
    if mutex and used_slots > 0:
        return CardRejection(card.id, Code.CARD_BUSY_MUTEX, f"mutex policy: {used_slots} share(s) in use")
    free_memory = card.memory - used_memory
    if card.memory <= 0:
        # A "whole card" of 0 MiB would fit; the plugin never registers such a card.
        return CardRejection(card.id, Code.CARD_INSUFFICIENT_MEMORY, "the card registers no memory")
    if free_memory < memory:
        return CardRejection(card.id, Code.CARD_INSUFFICIENT_MEMORY,
                             f"{free_memory} MiB free < {memory} MiB requested")
    free_cores = card.cores - used_cores
    if free_cores < request.cores:
        return CardRejection(card.id, Code.CARD_INSUFFICIENT_CORES,
                             f"{free_cores} percent of cores free < {request.cores} requested")
    if request.cores >= 100 and card.cores == 100 and used_slots > 0:
        return CardRejection(card.id, Code.CARD_EXCLUSIVE_CONFLICT,
                             f"all cores need an idle card, {used_slots} share(s) in use")
    if request.cores == 0 and card.cores and used_cores >= card.cores:
        return CardRejection(card.id, Code.CARD_COMPUTE_EXHAUSTED,
                             f"all {card.cores} percent of cores taken, a zero-cores request would get none")
    return None
