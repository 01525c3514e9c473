"""Why a card or a node cannot take a pod: stable reason codes, the numbers, readable text.

Codes are part of our interface (users grep events for them), so
they never change meaning. Every rejection carries the figures that decided it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class Code(StrEnum):
    # card level, in the order fit checks them
    CARD_UNHEALTHY = "CardUnhealthy"
    CARD_TYPE_MISMATCH = "CardTypeMismatch"
    CARD_UUID_MISMATCH = "CardUuidMismatch"
    CARD_SLOTS_EXHAUSTED = "CardSlotsExhausted"
    CARD_BUSY_MUTEX = "CardBusyMutex"  # the mutex policy takes idle cards only
    CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
    CARD_INSUFFICIENT_CORES = "CardInsufficientCores"
    CARD_EXCLUSIVE_CONFLICT = "CardExclusiveConflict"
    CARD_COMPUTE_EXHAUSTED = "CardComputeExhausted"
    # node level
    NODE_TOO_FEW_CARDS = "NodeInsufficientCards"
    NODE_NUMA_INSUFFICIENT = "NodeNumaInsufficient"  # numa policy: no NUMA node holds the whole request
    NODE_UNKNOWN = "NodeUnknown"
    NODE_UNREGISTERED = "NodeUnregistered"
    NODE_HANDSHAKE_STALE = "NodeHandshakeStale"
    NODE_DEGRADED = "NodeDegraded"
    POD_REQUEST_INVALID = "PodRequestInvalid"
    POD_QUOTA_EXCEEDED = "QuotaExceeded"
    # admission's checks (common/protocol/podchecks.py) refuse the pod: it arrived without the webhook
    POD_REFUSED = "PodRefused"


# How a reason reads in a per-pod summary ("3 nodes: insufficient card memory").
SUMMARY_PHRASE: Mapping[Code, str] = {
    Code.CARD_UNHEALTHY: "card unhealthy",
    Code.CARD_TYPE_MISMATCH: "card type mismatch",
    Code.CARD_UUID_MISMATCH: "card uuid not selected",
    Code.CARD_SLOTS_EXHAUSTED: "card slots exhausted",
    Code.CARD_BUSY_MUTEX: "card in use (mutex policy takes idle cards only)",
    Code.CARD_INSUFFICIENT_MEMORY: "insufficient card memory",
    Code.CARD_INSUFFICIENT_CORES: "insufficient card cores",
    Code.CARD_EXCLUSIVE_CONFLICT: "whole-card request on a shared card",
    Code.CARD_COMPUTE_EXHAUSTED: "card compute exhausted",
    Code.NODE_TOO_FEW_CARDS: "too few cards",
    Code.NODE_NUMA_INSUFFICIENT: "no NUMA node can hold all the cards (numa policy)",
    Code.NODE_UNKNOWN: "node not in scheduler cache",
    Code.NODE_UNREGISTERED: "no DCU registered",
    Code.NODE_HANDSHAKE_STALE: "device plugin not reporting",
    Code.NODE_DEGRADED: "node degraded",
    Code.POD_REQUEST_INVALID: "invalid DCU request",
    Code.POD_QUOTA_EXCEEDED: "namespace DCU quota exceeded",
    Code.POD_REFUSED: "refused by admission checks",
}

# When a node's cards fail for different reasons, the node is summarised by the most common
# one; ties go to the reason that got furthest through the checks (the most specific).
_PRECEDENCE = {code: i for i, code in enumerate(Code)}


@dataclass(frozen=True, slots=True)
class CardRejection:
    card: str
    code: Code
    detail: str  # the numbers, e.g. "1024 MiB free < 2000 MiB requested"

    def text(self) -> str:
        return f"card {self.card}: {self.detail}"


@dataclass(frozen=True, slots=True)
class NodeRejection:
    code: Code
    message: str  # what failedNodes says for this node
    detail: str = ""  # this node's own figures (which card, how much was free), for logs and events


def primary_code(rejections: Iterable[CardRejection]) -> Code | None:
    counts = Counter(r.code for r in rejections)
    if not counts:
        return None
    return max(counts, key=lambda code: (counts[code], _PRECEDENCE[code]))


def summarise(codes: Iterable[Code]) -> str:
    """`3 nodes: insufficient card memory; 2 nodes: card type mismatch` (most common first)."""
    counts = Counter(codes)
    parts = sorted(counts.items(), key=lambda item: (-item[1], item[0].value))
    return "; ".join(f"{n} node{'s' if n != 1 else ''}: {SUMMARY_PHRASE[code]}" for code, n in parts)
