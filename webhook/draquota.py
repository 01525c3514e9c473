"""The namespace DCU quota in DRA mode (pure, no I/O): what a namespace's ResourceClaims of our
driver hold, what a new claim (or a rewritten pod's claims) asks, in the quota's own units.

The quota is written as in device-plugin mode (common/protocol/quota.py): `limits.<memory resource>` in
MiB and `limits.<cores resource>` in percent of one card. Claims speak capacity: memory in
bytes and cores in compute units of whichever card they land on. So:

* memory: bytes rounded up to whole MiB (the vdev file's unit);
* cores: compute units / the card's compute units x 100, exactly (a fraction of a percent is
  kept, so three 33 % shares of a 60-unit card, 20 units each, fit a 100 % quota as they do
  in device-plugin mode);
* a claim the scheduler has allocated counts what it consumed, on the card it got (a device
  allocated without consumed capacity is the whole card); one not yet allocated counts the
  most its request can take: per device the capacity it asks, the card's all where it asks
  none (the DeviceClass's request policies default to the whole card), on the smallest card
  it can land on (selectors this webhook writes pin one card size; any other selector may
  land anywhere); `All` counts the most devices one node publishes; a `firstAvailable`
  request its largest alternative (as kube-apiserver's own quota counts devices);
* adminAccess requests and results hold nothing (the DRA driver gives no vDCU for them);
* only requests of our DeviceClass, and results of our driver, count.

Every claim exists from its creation to its deletion, so all of a namespace's claims count,
whether or not a pod uses them yet, exactly as Kubernetes' own quota counts them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.dra.quantity import QuantityError, to_int
from hami_dcu.common.protocol.dra.translate import pinned_units
from hami_dcu.common.protocol.errors import WebhookError
from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.quota import Amount, QuotaLimits, exceeded

JSON = dict[str, Any]
WHOLE = Fraction(100)
MAX_DEVICES = 32  # the API's cap on one claim's allocation results


class ClaimShapeError(WebhookError, ValueError):
    """A claim (or template) whose fields are not what the API accepts; the message says which."""


@dataclass(frozen=True, slots=True, order=True)
class CardSize:
    units: int  # compute units
    memory_mib: int


@dataclass(frozen=True)
class PublishedCards:
    """The cards our driver publishes in ResourceSlices."""

    by_device: dict[tuple[str, str], CardSize] = field(default_factory=dict)  # (pool, device) -> size
    most_per_pool: int = 0

    @property
    def sizes(self) -> tuple[CardSize, ...]:
        return tuple(sorted(set(self.by_device.values())))

    @property
    def units(self) -> tuple[int, ...]:
        return tuple(sorted({size.units for size in self.by_device.values()}))


@dataclass(frozen=True, slots=True)
class ClaimAmount:
    memory: int = 0  # MiB
    cores: Fraction = Fraction(0)  # percent of one card

    def __add__(self, other: ClaimAmount) -> ClaimAmount:
        return ClaimAmount(self.memory + other.memory, self.cores + other.cores)


def published_cards(slices: Iterable[JSON]) -> PublishedCards:
    """Our driver's devices in `slices` with their sizes; a device whose capacities cannot be
    read is left out (it cannot be allocated a share either)."""
    by_device: dict[tuple[str, str], CardSize] = {}
    per_pool: dict[str, int] = {}
    for published in slices:
        spec = _dict(published.get("spec"))
        if spec.get("driver") != names.DRIVER:
            continue
        pool = str(_dict(spec.get("pool")).get("name") or spec.get("nodeName") or "")
        for device in _list(spec.get("devices")):
            capacity = _dict(_dict(device).get("capacity"))
            try:
                units = to_int(_dict(capacity.get(names.CAP_CORES)).get("value"), names.CAP_CORES)
                memory_value = _dict(capacity.get(names.CAP_MEMORY)).get("value")
                memory = 0 if memory_value is None else _mib(memory_value)
            except QuantityError:
                continue
            if units > 0:
                by_device[(pool, str(_dict(device).get("name")))] = CardSize(units, memory)
                per_pool[pool] = per_pool.get(pool, 0) + 1
    return PublishedCards(by_device, max(per_pool.values(), default=0))


def merged_cards(parts: Iterable[PublishedCards]) -> PublishedCards:
    """The cards of several slices' `published_cards`, one `PublishedCards` per slice, as
    `published_cards` of all those slices at once would count them (a pool may span slices)."""
    by_device: dict[tuple[str, str], CardSize] = {}
    per_pool: dict[str, int] = {}
    for part in parts:
        for key, size in part.by_device.items():
            by_device[key] = size
            per_pool[key[0]] = per_pool.get(key[0], 0) + 1
    return PublishedCards(by_device, max(per_pool.values(), default=0))


def claim_shape_problem(claim_spec: object) -> str | None:
    """What in a claim spec (`ResourceClaim.spec`, `ResourceClaimTemplate.spec.spec`) is not of
    the API's shape, as far as the quota reads it; None when it reads."""
    if claim_spec is None:
        return None
    if not isinstance(claim_spec, dict):
        return "spec is not an object"
    devices = claim_spec.get("devices")
    if devices is None:
        return None
    if not isinstance(devices, dict):
        return "spec.devices is not an object"
    requests = devices.get("requests")
    if requests is not None and not isinstance(requests, list):
        return "spec.devices.requests is not a list"
    for request in requests or []:
        if not isinstance(request, dict):
            return "spec.devices.requests has an entry that is not an object"
        alternatives = request.get("firstAvailable")
        if alternatives is not None and not isinstance(alternatives, list):
            return "firstAvailable is not a list"
        for one in [request.get("exactly"), *(alternatives or [])]:
            if one is None:
                continue
            if not isinstance(one, dict):
                return "a device request is not an object"
            try:
                _asked_capacity(one)
            except (QuantityError, ClaimShapeError) as exc:
                return str(exc)
    return None


def spec_amount(claim_spec: object, cards: PublishedCards) -> ClaimAmount:
    """The most a claim of this spec can hold once allocated (see the module's rules)."""
    total = ClaimAmount()
    for request in _list(_dict(_dict(claim_spec).get("devices")).get("requests")):
        request = _dict(request)
        alternatives = [_dict(a) for a in _list(request.get("firstAvailable"))]
        if request.get("exactly") is not None:
            alternatives = [_dict(request.get("exactly"))]
        amounts = [_request_amount(one, cards) for one in alternatives]
        total = total + ClaimAmount(max((a.memory for a in amounts), default=0),
                                    max((a.cores for a in amounts), default=Fraction(0)))
    return total


def claim_amount(claim: JSON, cards: PublishedCards) -> ClaimAmount:
    """What an existing claim holds: its allocation when it has one, else its spec's most."""
    allocation = _dict(_dict(claim.get("status")).get("allocation"))
    if not allocation:
        return spec_amount(claim.get("spec"), cards)
    total = ClaimAmount()
    for result in _list(_dict(allocation.get("devices")).get("results")):
        result = _dict(result)
        if result.get("driver") != names.DRIVER or result.get("adminAccess"):
            continue
        size = cards.by_device.get((str(result.get("pool")), str(result.get("device"))))
        total = total + _allocated(_dict(result.get("consumedCapacity")), size, cards)
    return total


def namespace_claims(claims: Iterable[JSON], cards: PublishedCards, skip: str | None = None) -> ClaimAmount:
    """What the claims hold together (`skip`: a uid not to count, the claim under review)."""
    total = ClaimAmount()
    for claim in claims:
        if skip is not None and _dict(claim.get("metadata")).get("uid") == skip:
            continue
        if claim_shape_problem(claim.get("spec")) is None:
            total = total + claim_amount(claim, cards)
    return total


def asked_amount(asked_specs: Iterable[object], cards: PublishedCards) -> ClaimAmount:
    """The most the claims of `asked_specs` can hold together."""
    return sum((spec_amount(spec, cards) for spec in asked_specs), start=ClaimAmount())


def refusal(what: str, asked_specs: Iterable[object], claims: Iterable[JSON] | None, limits: QuotaLimits,
            pods: Amount, cards: PublishedCards, resources: ResourceNames,
            in_flight: ClaimAmount = ClaimAmount()) -> str | None:
    """Why the claims of `asked_specs` (the admitted object's: a rewritten pod's, a new claim's)
    break the namespace DCU quota on top of its `claims`, the claims admitted but not stored yet
    (`in_flight`) and what its `pods` hold (device-plugin allocations still running); None when
    they fit. `claims` None: a ResourceClaimTemplate, which holds nothing itself, so its one
    claim must only fit the limits at all."""
    asked = asked_amount(asked_specs, cards)
    if claims is None:
        problem = exceeded(limits, ClaimAmount(), asked, resources)
        return None if problem is None else (f"DRA mode: one claim of this {what} {problem}: no claim made from it "
                                             "can be admitted")
    used = ClaimAmount(pods.memory, Fraction(pods.cores)) + namespace_claims(claims, cards) + in_flight
    problem = exceeded(limits, used, asked, resources)
    return None if problem is None else (f"DRA mode: {what} {problem} (ResourceClaims of {names.DEVICE_CLASS}, "
                                         "counted in MiB and % of their card)")


# --- reading one device request ------------------------------------------------------------------


def _request_amount(request: JSON, cards: PublishedCards) -> ClaimAmount:
    if request.get("deviceClassName") != names.DEVICE_CLASS or request.get("adminAccess"):
        return ClaimAmount()
    count = _device_count(request, cards)
    cores_units, memory_mib = _asked_capacity(request)
    candidates = _candidate_sizes(request, cards, cores_units, memory_mib)
    if not candidates:
        # No card of that size published yet: a whole card's cores, and the memory it names.
        return ClaimAmount(count * (memory_mib or 0), count * WHOLE)
    cores = max(_percent(cores_units, s.units) for s in candidates)
    memory = memory_mib if memory_mib is not None else max(s.memory_mib for s in candidates)
    return ClaimAmount(count * memory, count * cores)


def _device_count(request: JSON, cards: PublishedCards) -> int:
    """How many devices `request` takes, at most MAX_DEVICES; a count not a positive int counts as 1."""
    if request.get("allocationMode") == "All":
        count = max(cards.most_per_pool, 1)
    else:
        count = request.get("count", 1)
        count = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1
    return min(count, MAX_DEVICES)


def _candidate_sizes(request: JSON, cards: PublishedCards, cores_units: int | None,
                     memory_mib: int | None) -> list[CardSize]:
    """The published card sizes `request` could be allocated on, those its capacity fits first."""
    pinned = pinned_units(request.get("selectors"))
    sizes = [s for s in cards.sizes if pinned is None or s.units == pinned]
    fitting = [s for s in sizes if (cores_units or 0) <= s.units and (memory_mib or 0) <= s.memory_mib]
    return fitting or sizes  # none fits: it waits unallocated, counted as on any card


def _asked_capacity(request: JSON) -> tuple[int | None, int | None]:
    """(compute units, MiB) a device request asks; None where it asks none (the whole card's)."""
    capacity = request.get("capacity")
    if capacity is None:
        return None, None
    if not isinstance(capacity, dict) or not isinstance(capacity.get("requests") or {}, dict):
        raise ClaimShapeError("capacity.requests is not an object")
    asked = capacity.get("requests") or {}
    cores = asked.get(names.CAP_CORES)
    memory = asked.get(names.CAP_MEMORY)
    return (None if cores is None else to_int(cores, f"capacity {names.CAP_CORES}"),
            None if memory is None else _mib(memory))


def _allocated(consumed: JSON, size: CardSize | None, cards: PublishedCards) -> ClaimAmount:
    if size is None:
        # The device is no longer published (its node left): what it consumed, on the smallest card.
        sizes = cards.sizes
        size = sizes[0] if sizes else None
    try:
        units = to_int(consumed[names.CAP_CORES], names.CAP_CORES) if names.CAP_CORES in consumed else None
        memory = _mib(consumed[names.CAP_MEMORY]) if names.CAP_MEMORY in consumed else None
    except QuantityError:
        units = memory = None
    if size is None:
        return ClaimAmount(memory or 0, WHOLE)
    return ClaimAmount(size.memory_mib if memory is None else memory, _percent(units, size.units))


def _percent(units: int | None, card_units: int) -> Fraction:
    if units is None:
        return WHOLE
    return min(Fraction(units * 100, card_units), WHOLE)


def _mib(value: object) -> int:
    return -(-to_int(value, f"capacity {names.CAP_MEMORY}") // names.MEMORY_STEP)


def _dict(value: object) -> JSON:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
