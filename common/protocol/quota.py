"""Namespace quotas on DCU totals, as HAMi (since v2.10) reads them (pure).

A ResourceQuota caps a namespace's DCU use with `spec.hard` keys `limits.<memory resource>`
(MiB) and `limits.<cores resource>` (percent of one card), e.g. `limits.hygon.com/dcumem`.
Kubernetes' own quota admission has no evaluator for these keys, so it neither counts nor
enforces them: we do, at admission (webhook) and again at filter time (extender), where
the exact cards are known.

* What a pod holds: per card its memory and cores, summed over its cards (a whole card
  holds the card's memory; init containers count by their peak, usage.py).
* What a pod asks for at admission: max(sum over app containers of cards x per-card
  request, the largest init container's), HAMi's rule. A whole-card request's memory is
  unknown before the card is chosen and counts 0 there; the filter then checks the card's
  real memory. Volcano's pods meet no filter: in Volcano mode a whole card counts the largest
  card a node registers (`whole_card_mib`), and an admitted pod counts from its admission
  (scheduler/quotas.py).
* Several quotas in one namespace: each must hold (the tightest decides).
* An explicit limit of 0 blocks every DCU pod of the namespace (HAMi #2313).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from hami_dcu.common.protocol import objects
from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.kubequantity import parse_quantity
from hami_dcu.common.protocol.objects import JSON
from hami_dcu.common.protocol.requests import DcuRequest

_QUANTITY_MAX_CHARS = 64


def quota_key(resource: str) -> str:
    return f"limits.{resource}"


@dataclass(frozen=True, slots=True)
class Limit:
    value: int
    quota: str  # the ResourceQuota that sets it (the tightest one)


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    memory: Limit | None = None  # MiB
    cores: Limit | None = None  # percent of one card

    def __bool__(self) -> bool:
        return self.memory is not None or self.cores is not None


@dataclass(frozen=True, slots=True)
class Amount:
    memory: int = 0
    cores: int = 0

    def __add__(self, other: Amount) -> Amount:
        return Amount(self.memory + other.memory, self.cores + other.cores)


@dataclass(frozen=True)
class Reservations:
    """Volcano mode's admission quota, where no /filter follows admission: a pod counts from
    its admission (scheduler/quotas.py keeps the count). `whole_card()`: what a whole card's
    memory counts, the largest card a node registers (None: no node has registered a card
    yet); `reserve(namespace, reservation id, amount)`: what an admitted pod asks, counted
    until the watch shows the pod stored, or a deadline passes."""

    whole_card: Callable[[], int | None]
    reserve: Callable[[str, str, Amount], None]


def limits_from(quotas: Iterable[JSON], names: ResourceNames) -> QuotaLimits:
    """The tightest DCU limits among a namespace's ResourceQuota objects. A value that is
    not a quantity is skipped (the API server validates quantities, so only a hand-made
    object can carry one)."""
    memory: Limit | None = None
    cores: Limit | None = None
    for quota in quotas:
        name = str(objects.name(quota) or "")
        hard = (quota.get("spec") or {}).get("hard") or {}
        found = _amount(hard.get(quota_key(names.memory)))
        if found is not None and (memory is None or found < memory.value):
            memory = Limit(found, name)
        found = _amount(hard.get(quota_key(names.cores)))
        if found is not None and (cores is None or found < cores.value):
            cores = Limit(found, name)
    return QuotaLimits(memory, cores)


def _amount(raw: object) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, str | int) or len(str(raw)) > _QUANTITY_MAX_CHARS:
        return None
    try:
        value = parse_quantity(raw)
    except (ValueError, ArithmeticError):
        return None
    if not value.is_finite():
        return None
    return max(int(value), 0)  # a fraction of a MiB or percent allows no more than its floor


def requested(requests: Sequence[DcuRequest | None], init_count: int,
              sidecars: frozenset[int] = frozenset(), whole_card_mib: int = 0) -> Amount:
    """What a pod asks for at admission (HAMi's rule, whole-card memory counted as
    `whole_card_mib`, 0 unless Volcano mode says otherwise; native sidecars in `sidecars` add to
    what runs after them, as Kubernetes counts them)."""
    running = Amount()  # the sidecars so far, then the app containers too
    init_peak = Amount()
    for position, request in enumerate(requests):
        if request is None:
            continue
        memory = whole_card_mib if request.whole_memory else request.memory_mib
        each = Amount(request.count * memory, request.count * request.cores)
        if position < init_count and position not in sidecars:
            beside = running + each
            init_peak = Amount(max(init_peak.memory, beside.memory), max(init_peak.cores, beside.cores))
        else:
            running = running + each
    return Amount(max(running.memory, init_peak.memory), max(running.cores, init_peak.cores))


class Amounts(Protocol):
    """What `exceeded` reads: `Amount`, or DRA mode's amounts whose cores are a fraction of a
    percent (compute units of a card, webhook/draquota.py)."""

    @property
    def memory(self) -> int: ...

    @property
    def cores(self) -> int | Fraction: ...


def exceeded(limits: QuotaLimits, used: Amounts, asked: Amounts, names: ResourceNames) -> str | None:
    """Why `asked` on top of `used` breaks `limits`, None when it fits."""
    for resource, limit, in_use, wanted in ((names.memory, limits.memory, used.memory, asked.memory),
                                            (names.cores, limits.cores, used.cores, asked.cores)):
        if limit is None:
            continue
        if limit.value == 0 or in_use + wanted > limit.value:
            blocked = " (a limit of 0 blocks every DCU pod)" if limit.value == 0 else ""
            return (f"exceeds ResourceQuota {limit.quota} {quota_key(resource)}: quota {limit.value}, "
                    f"used {figure(in_use)}, requested {figure(wanted)}{blocked}")
    return None


def figure(value: int | Fraction) -> str:
    """A whole number as is; a fraction (DRA mode's cores) to two decimals, never shown below
    what it is, so `used + requested` as shown is never under the limit it broke."""
    whole = int(value)
    if whole == value:
        return str(whole)
    return f"{math.ceil(Fraction(value) * 100) / 100:.2f}".rstrip("0").rstrip(".")
