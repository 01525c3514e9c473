"""Fit tables: every reason code with its numbers, selection, multi-card, init containers."""

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.counting import StartOrder, Usage
from hami_dcu.common.protocol.requests import DcuRequest
from hami_dcu.scheduler.fit import CardSpec, PodFit, PodMiss, Selection, fit_pod
from hami_dcu.scheduler.policy import parse_card_policy
from hami_dcu.scheduler.reasons import Code

DCU = keys.DCU_NAMING  # the naming set these tests speak


def card(i: int, model: str = "DCU-K100_AI", health: bool = True, slots: int = 4, memory: int = 65520) -> CardSpec:
    return CardSpec(id=f"DCU-S{i}", index=i, model=model, slots=slots, memory=memory, cores=100, health=health)


def fit(cards, used, requests, init_count=0, annotations=None, policy="spread"):
    names = [f"c{i}" for i in range(len(requests))]
    return fit_pod(cards, used, requests, names, StartOrder(init_count),
                   Selection.from_annotations(annotations or {}, keys.DCU_NAMING), parse_card_policy(policy))


def miss(result) -> PodMiss:
    assert isinstance(result, PodMiss), result
    return result


SHARE = DcuRequest(count=1, memory_mib=2000, cores=60)


@pytest.mark.parametrize(
    ("spec", "used", "request_", "annotations", "code", "numbers"),
    [
        (card(1, health=False), Usage(), SHARE, {}, Code.CARD_UNHEALTHY, "unhealthy"),
        (card(1), Usage(), SHARE, {DCU.use_type: "Z100"}, Code.CARD_TYPE_MISMATCH, "DCU-K100_AI"),
        (card(1), Usage(), SHARE, {DCU.nouse_type: "k100"}, Code.CARD_TYPE_MISMATCH, "excluded"),
        (card(1), Usage(), SHARE, {keys.USE_DCU_UUID: "DCU-S9"}, Code.CARD_UUID_MISMATCH, "not listed"),
        (card(1), Usage(), SHARE, {keys.NOUSE_DCU_UUID: "DCU-S1"}, Code.CARD_UUID_MISMATCH, "excluded"),
        (card(1), Usage(4, 100, 40), SHARE, {}, Code.CARD_SLOTS_EXHAUSTED, "4/4 slots used"),
        (card(1, memory=3024), Usage(1, 2000, 0), SHARE, {}, Code.CARD_INSUFFICIENT_MEMORY,
         "1024 MiB free < 2000 MiB requested"),
        (card(1), Usage(1, 100, 60), SHARE, {}, Code.CARD_INSUFFICIENT_CORES,
         "40 percent of cores free < 60 requested"),
        (card(1), Usage(1, 100, 0), DcuRequest(1, 100, 100), {}, Code.CARD_EXCLUSIVE_CONFLICT, "1 share(s) in use"),
        (card(1), Usage(1, 100, 100), DcuRequest(1, 100, 0), {}, Code.CARD_COMPUTE_EXHAUSTED,
         "all 100 percent of cores taken"),
        (card(1), Usage(1, 1, 0), DcuRequest(1), {}, Code.CARD_INSUFFICIENT_MEMORY, "65519 MiB free < 65520"),
    ],
)
def test_every_card_reason_carries_its_numbers(spec, used, request_, annotations, code, numbers):
    result = miss(fit([spec], [used], [request_], annotations=annotations))
    assert result.code == code
    assert [r.code for r in result.rejections] == [code]
    assert numbers in result.message
    assert f"card {spec.id}: " in result.message


def test_use_and_nouse_type_both_apply():
    cards = [card(1, model="DCU-K100_AI"), card(2, model="DCU-K100")]
    result = fit(cards, [Usage(), Usage()], [SHARE], annotations={
        DCU.use_type: "K100", DCU.nouse_type: "_AI"})
    assert isinstance(result, PodFit)
    assert result.devices[0][0].uuid == "DCU-S2"


def test_empty_selection_values_are_no_constraint():
    result = fit([card(1)], [Usage()], [SHARE], annotations={keys.USE_DCU_UUID: "", DCU.use_type: ""})
    assert isinstance(result, PodFit)


def test_too_few_cards_is_a_node_reason():
    result = miss(fit([card(1)], [Usage()], [DcuRequest(count=2)]))
    assert result.code == Code.NODE_TOO_FEW_CARDS
    assert "node has 1 card" in result.message


def test_multi_card_container_gets_distinct_cards_and_partial_is_reported():
    cards = [card(1), card(2), card(3)]
    ok = fit(cards, [Usage()] * 3, [DcuRequest(count=3, memory_mib=1000, cores=10)])
    assert isinstance(ok, PodFit)
    assert sorted(d.uuid for d in ok.devices[0]) == ["DCU-S1", "DCU-S2", "DCU-S3"]
    bad = miss(fit(cards, [Usage(), Usage(4, 0, 0), Usage()], [DcuRequest(count=3, memory_mib=1000, cores=10)]))
    assert "2 of 3 cards fit" in bad.message
    assert bad.code == Code.CARD_SLOTS_EXHAUSTED


def test_whole_card_request_takes_all_memory_and_cores():
    result = fit([card(1)], [Usage()], [DcuRequest(count=1)])
    assert isinstance(result, PodFit)
    device = result.devices[0][0]
    assert (device.usedmem, device.usedcores) == (65520, 100)
    assert result.held["DCU-S1"] == Usage(1, 65520, 100)


def test_second_identical_pod_is_rejected_for_cores_like_the_reference_example():
    first = fit([card(1)], [Usage()], [SHARE])
    assert isinstance(first, PodFit)
    second = miss(fit([card(1)], [first.held["DCU-S1"]], [SHARE]))
    assert second.code == Code.CARD_INSUFFICIENT_CORES


def test_dcu_none_dcu_containers_keep_positions_and_accumulate():
    result = fit([card(1)], [Usage()], [DcuRequest(1, 1000, 30), None, DcuRequest(1, 1000, 30)])
    assert isinstance(result, PodFit)
    assert [len(e) for e in result.devices] == [1, 0, 1]
    assert result.held["DCU-S1"] == Usage(2, 2000, 60)


def test_app_containers_are_cumulative():
    # two 60% containers cannot share one card; with two cards they spread
    one = miss(fit([card(1)], [Usage()], [SHARE, SHARE]))
    assert one.container == "c1" and one.code == Code.CARD_INSUFFICIENT_CORES
    two = fit([card(1), card(2)], [Usage(), Usage()], [SHARE, SHARE])
    assert isinstance(two, PodFit)
    assert {two.devices[0][0].uuid, two.devices[1][0].uuid} == {"DCU-S1", "DCU-S2"}


def test_init_containers_fit_by_peak_not_sum():
    # init 80% then app 80%: they never run together, so one card is enough
    result = fit([card(1)], [Usage()], [DcuRequest(1, 1000, 80), DcuRequest(1, 3000, 80)], init_count=1)
    assert isinstance(result, PodFit)
    assert result.held["DCU-S1"] == Usage(1, 3000, 80)


def test_init_container_too_big_fails_on_its_own():
    result = miss(fit([card(1)], [Usage(1, 0, 50)], [DcuRequest(1, 1000, 80), DcuRequest(1, 1000, 10)],
                      init_count=1))
    assert result.container == "c0"


def test_spread_takes_least_used_card_binpack_the_fullest():
    cards = [card(1), card(2), card(3)]
    used = [Usage(1, 8000, 20), Usage(), Usage(2, 16000, 40)]
    spread = fit(cards, used, [SHARE], policy="spread")
    binpack = fit(cards, used, [SHARE], policy="binpack")
    assert isinstance(spread, PodFit) and isinstance(binpack, PodFit)
    assert spread.devices[0][0].uuid == "DCU-S2"
    assert binpack.devices[0][0].uuid == "DCU-S3"


def test_ties_go_to_the_last_registered_card_or_in_a_chain_the_highest_index_as_in_hami():
    """HAMi v2.10's single-word Less has no index key and its stable sort keeps registration
    order, so the last card registered is tried first; lessByChain ends on the index (both
    answered by HAMi's own fitInDevices)."""
    cards = [card(2), card(0), card(1)]
    for value, expected in (("spread", "DCU-S1"), ("binpack", "DCU-S1"), ("spread,numa", "DCU-S2"), ("numa", "DCU-S2")):
        result = fit(cards, [Usage()] * 3, [SHARE], policy=value)
        assert isinstance(result, PodFit)
        assert result.devices[0][0].uuid == expected, value
