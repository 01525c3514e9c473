"""Scoring and ordering policies (pure), HAMi's for DCUs.

Card score (utilisation of one card):
    score = 10 * (w_slot * used_slots / slots + w_core * used_cores / cores + w_mem * used_memory / memory)
and 0 when any of the three capacities is 0 (HAMi's rule). The weights default to 1,1,1
(`hami.io/device-scoring-weights` changes them per pod, weights.py). HAMi also adds the
incoming request to each term, but compares the request type "DCU" with the card model
"DCU-K100_AI", which never match, so its score is plain current utilisation; we keep that
observable behaviour (README, Where we differ).

Card order. HAMi sorts the node's cards ascending (`DeviceUsageList.Less` in
pkg/scheduler/policy/gpu_policy.go) and its DCU Fit walks the sorted list from the END, so the
card that sorts last is tried first. We build the same ascending order and reverse it, so the
same pod lands on the same card as under HAMi, and a multi-card container lists its cards in
the order HAMi would. The keys, per policy value:
    binpack            score asc,       NUMA asc  -> the fullest card first
    spread (default)   score desc,      NUMA asc  -> the least used card first
    mutex              used slots desc, NUMA asc  -> idle cards first
    topology-aware     as spread (it has no meaning for DCU cards)
    `nvidia.com/numa-bind: true` on the pod (HAMi's NumaBind, read for every vendor), with
        one word: binpack sorts NUMA desc then score asc (the lowest NUMA node is tried
        first, its fullest card first); spread and topology-aware NUMA asc then score desc
        (the highest NUMA node first, its least used card first); mutex ignores it.
    a chain ("binpack,numa") or "numa" alone (`lessByChain`): one key per word, in the order
        written (binpack score asc, spread score desc, numa NUMA asc; mutex and
        topology-aware add no key; a chain with no key word, "mutex,topology-aware", orders
        as spread), NumaBind's NUMA asc before them all, then index asc.
A single word has no index key: HAMi's sort.Sort (an insertion sort, so stable, up to 12
cards) leaves equal cards where they were. Each app container sorts the list the previous
one left (fit.py keeps it); the first one, and every init container, starts from
registration order, which the plugin writes in index order. So among equal cards the
highest NUMA node is tried first, then the highest index, until earlier containers of the
pod reorder them. Past 12 cards Go's sort is not stable; ours stays stable there (README,
Where we differ).

Node score: the same formula, unweighted, over the sums of all the node's cards, computed
before the pod is placed. binpack (default) picks the highest score among fitting nodes,
spread the lowest; ties go to the node name ascending.

Per-pod overrides: `hami.io/node-scheduler-policy` (one word) and
`hami.io/gpu-scheduler-policy` (a word or a comma chain), parsed in common/protocol/preferences.py.
A value with any word HAMi does not know (or a blank one) is ignored as a whole and the
configured default stands; the webhook warns about it at admission (webhook/advice.py), so
the fallback is never silent. HAMi v2.10 compares the raw value instead: a single unknown
word (or " binpack", "Binpack", "") sorts as spread whatever the default, and a chain keeps
the words it knows ("binpack,foo" is binpack) (README, Where we differ).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.preferences import (
    BINPACK,
    MUTEX,
    NODE_WORDS,
    NUMA,
    numa_bind,
    parse_node_policy,
)

# Re-exported: the scheduler names the card-policy vocabulary through this module.
from hami_dcu.common.protocol.preferences import DEFAULT_WEIGHTS as DEFAULT_WEIGHTS
from hami_dcu.common.protocol.preferences import SPREAD as SPREAD
from hami_dcu.common.protocol.preferences import CardPolicy as CardPolicy
from hami_dcu.common.protocol.preferences import Weights as Weights
from hami_dcu.common.protocol.preferences import parse_card_policy as parse_card_policy

POLICIES = NODE_WORDS  # node policies
DEFAULT_NODE_POLICY = BINPACK
DEFAULT_CARD_POLICY = SPREAD
WEIGHT = 10.0


def pod_policies(annotations: Mapping[str, str], node_default: str,
                 card_default: CardPolicy) -> tuple[str, CardPolicy]:
    card_policy = parse_card_policy(annotations.get(keys.DEVICE_SCHEDULER_POLICY)) or card_default
    if numa_bind(annotations.get(keys.NUMA_BIND)) != card_policy.numa_first:
        card_policy = CardPolicy(card_policy.words, numa_first=not card_policy.numa_first)
    return parse_node_policy(annotations.get(keys.NODE_SCHEDULER_POLICY)) or node_default, card_policy


def card_score(used_slots: int, slots: int, used_memory: int, memory: int, used_cores: int, cores: int,
               weights: Weights = DEFAULT_WEIGHTS) -> float:
    """HAMi's device score: a card that registers no slots, memory or cores scores 0."""
    if not slots or not memory or not cores:
        return 0.0
    return WEIGHT * (weights.slot * used_slots / slots + weights.core * used_cores / cores
                     + weights.memory * used_memory / memory)


def utilisation(used_slots: int, slots: int, used_memory: int, memory: int, used_cores: int, cores: int) -> float:
    """Node score: utilisation over the node's card sums, a term dropped when its capacity is 0."""
    score = 0.0
    if slots:
        score += used_slots / slots
    if cores:
        score += used_cores / cores
    if memory:
        score += used_memory / memory
    return WEIGHT * score


@dataclass(frozen=True, slots=True)
class CardState:
    """What the card order looks at: the card's score and slots in use, its NUMA node and
    index."""

    score: float
    used_slots: int
    numa: int
    index: int


def _sort_key(card: CardState, policy: CardPolicy) -> tuple[float | int, ...]:
    """HAMi's `DeviceUsageList.Less` as an ascending key. A single word has no index key: equal
    cards keep the order the list had (card_order)."""
    if policy.chained:
        return _chain_key(card, policy)
    word = policy.words[0]
    if word == MUTEX:
        return (-card.used_slots, card.numa)  # HAMi's mutex branch comes before NumaBind's
    if word == BINPACK:
        return (-card.numa, card.score) if policy.numa_first else (card.score, card.numa)
    return (card.numa, -card.score) if policy.numa_first else (-card.score, card.numa)  # spread, topology-aware


def _chain_key(card: CardState, policy: CardPolicy) -> tuple[float | int, ...]:
    """HAMi's `lessByChain`: NumaBind's NUMA first, the key words in the order written, spread
    when no word is a key, then the index."""
    chain: list[float | int] = [card.numa] if policy.numa_first else []
    keyed = False
    for word in policy.words:
        if word == BINPACK:
            chain.append(card.score)
        elif word == SPREAD:
            chain.append(-card.score)
        elif word == NUMA:
            chain.append(card.numa)
        else:
            continue
        keyed = True
    if not keyed:
        chain.append(-card.score)  # only filter words ("mutex,topology-aware"): spread (HAMi)
    chain.append(card.index)
    return tuple(chain)


def card_order(cards: Sequence[CardState], policy: CardPolicy, listed: list[int] | None = None) -> list[int]:
    """Positions of `cards` in the order fit tries them: HAMi's sorted list, walked from the end.

    `listed` is HAMi's list before this sort (positions of `cards`, registration order when
    None); it is sorted in place, as HAMi's `sort.Sort` sorts the node's list, so the next
    container's sort can start from it. The sort is stable: cards equal under the policy's
    keys keep their places in `listed`."""
    if listed is None:
        listed = list(range(len(cards)))
    listed.sort(key=lambda i: _sort_key(cards[i], policy))
    return listed[::-1]


def pick_node(scored: Sequence[tuple[str, float]], policy: str) -> str | None:
    """The node fit should use among (name, node score) pairs of fitting nodes."""
    if not scored:
        return None
    if policy == SPREAD:
        return min(scored, key=lambda item: (item[1], item[0]))[0]
    return min(scored, key=lambda item: (-item[1], item[0]))[0]
