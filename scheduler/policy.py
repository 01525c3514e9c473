"""Scoring and ordering policies (pure). Reference: hami-wire-protocol.md §4.6.

Card score (utilisation of one card, 0..30):
    score = 10 * (used_slots / slots + used_cores / cores + used_memory / memory)
with a term dropped when its capacity is 0. HAMi also adds the incoming request to each
term, but compares the request type "DCU" with the card model "DCU-K100_AI", which never
match, so its score is plain current utilisation; we keep that observable behaviour.

Card order (the first card in the order is tried first):
    spread  (default): lowest score first  -> the least used card;
    binpack:           highest score first -> the fullest card that still fits.
    Ties: card index ascending, then card id (deterministic).

Node score: the same formula over the sums of all the node's cards, computed before the
pod is placed. binpack (default) picks the highest score among fitting nodes, spread the
lowest; ties go to the node name ascending.

Per-pod overrides: `hami.io/node-scheduler-policy` and `hami.io/gpu-scheduler-policy`.
HAMi's card policy may be a comma chain (`binpack,numa`); we take its first binpack/spread
token, and fall back to the default for values we do not implement (mutex, topology-aware).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hami_dcu.common import keys

BINPACK = "binpack"
SPREAD = "spread"
POLICIES = (BINPACK, SPREAD)
DEFAULT_NODE_POLICY = BINPACK
DEFAULT_CARD_POLICY = SPREAD


def resolve(value: str | None, default: str) -> str:
    """The policy a pod annotation asks for, else `default`."""
    if value:
        for token in value.split(","):
            token = token.strip().lower()
            if token in POLICIES:
                return token
    return default


def pod_policies(annotations: Mapping[str, str], node_default: str, card_default: str) -> tuple[str, str]:
    return (
        resolve(annotations.get(keys.NODE_SCHEDULER_POLICY), node_default),
        resolve(annotations.get(keys.DEVICE_SCHEDULER_POLICY), card_default),
    )


def utilisation(
    used_slots: int, slots: int, used_memory: int, memory: int, used_cores: int, cores: int
) -> float:
    score = 0.0
    if slots:
        score += used_slots / slots
    if cores:
        score += used_cores / cores
    if memory:
        score += used_memory / memory
    return 10.0 * score


def card_order(scores: Sequence[float], indexes: Sequence[int], ids: Sequence[str], policy: str) -> list[int]:
    """Positions of the cards in the order fit tries them."""
    sign = -1.0 if policy == BINPACK else 1.0
    return sorted(range(len(scores)), key=lambda i: (sign * scores[i], indexes[i], ids[i]))


def pick_node(scored: Sequence[tuple[str, float]], policy: str) -> str | None:
    """The node fit should use among (name, node score) pairs of fitting nodes."""
    if not scored:
        return None
    if policy == SPREAD:
        return min(scored, key=lambda item: (item[1], item[0]))[0]
    return min(scored, key=lambda item: (-item[1], item[0]))[0]
