"""The namespace DCU quota in DRA mode, pure (webhook/draquota.py): claims counted back into MiB
and % of a card, as the quota is written (issue 21, item 6)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from hami_dcu.common.protocol.dra.translate import device_request
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.common.protocol.quota import Amount, Limit, QuotaLimits
from hami_dcu.common.protocol.requests import DcuRequest
from hami_dcu.webhook.draquota import (
    CardSize,
    ClaimAmount,
    claim_amount,
    claim_shape_problem,
    published_cards,
    refusal,
    spec_amount,
)

DEFAULT_RESOURCES = DCU_NAMING.resources

JSON = dict[str, Any]
MIB = 1024 * 1024


def device(name: str, units: int, memory_mib: int) -> JSON:
    return {"name": name, "capacity": {"cores": {"value": str(units)}, "memory": {"value": f"{memory_mib}Mi"},
                                       "slices": {"value": "4"}}}


def slice_(node: str, *devices: JSON, driver: str = "dra.hygon.com") -> JSON:
    return {"spec": {"driver": driver, "nodeName": node, "pool": {"name": node}, "devices": list(devices)}}


# K100_AI (120 CUs, 65520 MiB) on node a; a Z100 (60 CUs, 32752 MiB) beside it on node b.
CARDS = published_cards([slice_("a", device("k0", 120, 65520), device("k1", 120, 65520)),
                         slice_("b", device("z0", 60, 32752)),
                         slice_("a", device("other", 8, 1), driver="gpu.example.com")])
K100_ONLY = published_cards([slice_("a", device("k0", 120, 65520))])


def exactly(count: int = 1, cores: str | None = None, memory: str | None = None, **extra: Any) -> JSON:
    one: JSON = {"deviceClassName": "dra.hygon.com", "allocationMode": "ExactCount", "count": count, **extra}
    asked = {k: v for k, v in (("cores", cores), ("memory", memory)) if v is not None}
    if asked:
        one["capacity"] = {"requests": asked}
    return one


def spec(*requests: JSON) -> JSON:
    return {"devices": {"requests": [{"name": f"r{i}", **r} for i, r in enumerate(requests)]}}


def allocated(*results: JSON, requests: JSON | None = None) -> JSON:
    return {"metadata": {"name": "c", "uid": "u"}, "spec": requests or spec({"exactly": exactly()}),
            "status": {"allocation": {"devices": {"results": list(results)}}}}


def result(pool: str, dev: str, cores: str | None = None, memory: str | None = None, **extra: Any) -> JSON:
    consumed = {k: v for k, v in (("cores", cores), ("memory", memory)) if v is not None}
    return {"driver": "dra.hygon.com", "pool": pool, "device": dev, "request": "r0",
            **({"consumedCapacity": consumed} if consumed else {}), **extra}


LIMITS = QuotaLimits(memory=Limit(20000, "team-dcu"), cores=Limit(100, "team-dcu"))


def test_the_published_cards_are_read_per_pool_and_device_of_our_driver_only():
    assert CARDS.by_device == {("a", "k0"): CardSize(120, 65520), ("a", "k1"): CardSize(120, 65520),
                               ("b", "z0"): CardSize(60, 32752)}
    assert CARDS.units == (60, 120) and CARDS.most_per_pool == 2


def test_an_allocated_share_counts_what_it_consumed_on_its_card():
    claim = allocated(result("a", "k0", cores="30", memory=str(8192 * MIB)))
    assert claim_amount(claim, CARDS) == ClaimAmount(8192, Fraction(25))
    on_z100 = allocated(result("b", "z0", cores="20", memory="2000Mi"))
    assert claim_amount(on_z100, CARDS) == ClaimAmount(2000, Fraction(100, 3))  # 20 of 60 CUs, exactly


def test_a_whole_card_allocated_without_consumed_capacity_counts_the_card():
    assert claim_amount(allocated(result("a", "k1")), CARDS) == ClaimAmount(65520, Fraction(100))


def test_admin_access_and_other_drivers_hold_nothing():
    claim = allocated(result("a", "k0", adminAccess=True),
                      {**result("a", "other", cores="8"), "driver": "gpu.example.com"})
    assert claim_amount(claim, CARDS) == ClaimAmount()
    assert spec_amount(spec({"exactly": exactly(adminAccess=True)}), CARDS) == ClaimAmount()
    assert spec_amount(spec({"exactly": {**exactly(), "deviceClassName": "gpu.example.com"}}), CARDS) == ClaimAmount()


def test_an_unallocated_share_counts_the_most_it_can_take():
    # 30 CUs fit both sizes: 50 % of a Z100 is the most; its memory is what it names.
    assert spec_amount(spec({"exactly": exactly(cores="30", memory="4Gi")}), CARDS) == ClaimAmount(4096, Fraction(50))
    # 90 CUs fit only the K100_AI.
    assert spec_amount(spec({"exactly": exactly(cores="90")}), CARDS) == ClaimAmount(65520, Fraction(75))
    # No capacity: whole cards, the largest card's memory each.
    assert spec_amount(spec({"exactly": exactly(count=2)}), CARDS) == ClaimAmount(2 * 65520, Fraction(200))


def test_the_webhooks_own_pinned_requests_count_the_percentage_asked():
    share = DcuRequest(count=1, memory_mib=2000, cores=25)
    request = device_request(share, CARDS.units)  # firstAvailable: 15 of 60 CUs, or 30 of 120
    assert "firstAvailable" in request
    assert spec_amount({"devices": {"requests": [request]}}, CARDS) == ClaimAmount(2000, Fraction(25))
    third = device_request(DcuRequest(count=1, memory_mib=1000, cores=33), CARDS.units)
    # 20 of 60 CUs is 33.3 %, 40 of 120 the same: three such shares fit a 100 % quota.
    amount = spec_amount({"devices": {"requests": [third]}}, CARDS)
    assert amount.cores == Fraction(100, 3) and 3 * amount.cores <= 100


def test_first_available_counts_its_largest_alternative_and_all_the_most_devices_of_a_node():
    alternatives = {"firstAvailable": [{"name": "small", **exactly(cores="6", memory="1Gi")},
                                       {"name": "big", **exactly(count=2)}]}
    assert spec_amount(spec(alternatives), CARDS) == ClaimAmount(2 * 65520, Fraction(200))
    every = spec({"exactly": {**exactly(), "allocationMode": "All"}})
    assert spec_amount(every, CARDS) == ClaimAmount(2 * 65520, Fraction(200))


def test_without_published_cards_a_request_counts_whole_cards_and_the_memory_it_names():
    empty = published_cards([])
    assert spec_amount(spec({"exactly": exactly(cores="30", memory="1Gi")}), empty) == ClaimAmount(1024, Fraction(100))


def test_memory_rounds_up_to_whole_mib():
    assert spec_amount(spec({"exactly": exactly(cores="1", memory=str(MIB + 1))}), K100_ONLY).memory == 2


def test_a_claim_over_the_quota_is_refused_naming_the_quota_the_used_and_the_asked():
    held = [allocated(result("a", "k0", cores="60", memory="8000Mi"))]  # 50 %, 8000 MiB
    asked = [spec({"exactly": exactly(cores="72", memory="1000Mi")})]  # 60 % of a K100_AI
    problem = refusal("ResourceClaim", asked, held, LIMITS, Amount(), K100_ONLY, DEFAULT_RESOURCES)
    assert problem is not None
    assert "ResourceQuota team-dcu limits.hygon.com/dcucores: quota 100, used 50, requested 60" in problem
    fits = [spec({"exactly": exactly(cores="60", memory="1000Mi")})]
    assert refusal("ResourceClaim", fits, held, LIMITS, Amount(), K100_ONLY, DEFAULT_RESOURCES) is None


def test_pods_still_holding_device_plugin_allocations_count_too():
    asked = [spec({"exactly": exactly(cores="12", memory="1000Mi")})]
    problem = refusal("pod", asked, [], LIMITS, Amount(19500, 10), K100_ONLY, DEFAULT_RESOURCES)
    assert problem is not None and "limits.hygon.com/dcumem: quota 20000, used 19500, requested 1000" in problem


def test_a_fraction_of_a_percent_is_shown_rounded_up():
    held = [allocated(result("b", "z0", cores="20")) for _ in range(3)]  # 3 x 33.3 %
    problem = refusal("pod", [spec({"exactly": exactly(cores="1")})], held,
                      QuotaLimits(cores=Limit(100, "q")), Amount(), CARDS, DEFAULT_RESOURCES)
    assert problem is not None and "used 100, requested 1.67" in problem  # 1 of 60 CUs


def test_a_template_is_checked_alone_against_the_limits():
    big = [spec({"exactly": exactly(count=2)})]
    problem = refusal("ResourceClaimTemplate", big, None, LIMITS, Amount(99999, 99), K100_ONLY, DEFAULT_RESOURCES)
    assert problem is not None and "used 0" in problem and "no claim made from it" in problem
    small = [spec({"exactly": exactly(cores="12", memory="1000Mi")})]
    assert refusal("ResourceClaimTemplate", small, None, LIMITS, Amount(99999, 99), K100_ONLY,
                   DEFAULT_RESOURCES) is None


def test_a_limit_of_zero_blocks_every_claim():
    problem = refusal("ResourceClaim", [spec({"exactly": exactly(cores="1", memory="1Mi")})], [],
                      QuotaLimits(cores=Limit(0, "none")), Amount(), K100_ONLY, DEFAULT_RESOURCES)
    assert problem is not None and "a limit of 0" in problem


@pytest.mark.parametrize("bad, words", [
    ([], "spec is not an object"),
    ({"devices": []}, "spec.devices is not an object"),
    ({"devices": {"requests": {}}}, "requests is not a list"),
    ({"devices": {"requests": ["x"]}}, "not an object"),
    ({"devices": {"requests": [{"exactly": exactly(cores="lots")}]}}, "not a quantity"),
    ({"devices": {"requests": [{"exactly": {**exactly(), "capacity": []}}]}}, "capacity.requests"),
])
def test_a_malformed_claim_spec_is_named(bad, words):
    problem = claim_shape_problem(bad)
    assert problem is not None and words in problem
