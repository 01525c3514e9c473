"""HAMi's exact card order (scheduler/policy.py): HAMi sorts ascending and tries the
card that sorts last first, so among equal cards it takes the highest NUMA node, then the
highest index, and a multi-card container lists its cards in that walk order."""

from datetime import UTC, datetime

import pytest
from scheduler_helpers import dcu_pod

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import NodeDevice, encode_node_devices, encode_pod_devices, encode_reported
from hami_dcu.common.protocol.counting import StartOrder, Usage
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.common.protocol.requests import DcuRequest
from hami_dcu.scheduler import policy
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.filtering import Filter, FilterSettings, plan_pod
from hami_dcu.scheduler.fit import CardSpec, PodFit, Selection, fit_pod

DCU = keys.DCU_NAMING  # the naming set these tests speak

NOW = datetime.now(UTC)
SHARE = DcuRequest(count=1, memory_mib=2000, cores=60)


def card(index: int, numa: int = 0) -> CardSpec:
    return CardSpec(id=f"DCU-S{index}", index=index, model="DCU-K100_AI", slots=4, memory=65520, cores=100, numa=numa)


def chosen(cards: list[CardSpec], used: list[Usage], request: DcuRequest, value: str) -> list[str]:
    card_policy = policy.parse_card_policy(value)
    assert card_policy is not None
    result = fit_pod(cards, used, [request], ["main"], StartOrder(), Selection(keys.DCU_NAMING), card_policy)
    assert isinstance(result, PodFit), result
    return [device.uuid for device in result.devices[0]]


def test_reference_worked_example_lands_on_the_second_card_with_the_same_annotation():
    """HAMi's worked example: two idle K100_AI cards S1 (index 0) and S2 (index 1); the 2000 MiB /
    60 % pod gets S2."""
    register = encode_node_devices([
        NodeDevice(id="DCU-S1", count=4, devmem=65520, devcore=100, type="DCU-K100_AI", index=0),
        NodeDevice(id="DCU-S2", count=4, devmem=65520, devcore=100, type="DCU-K100_AI", index=1),
    ])
    assert register == ("DCU-S1,4,65520,100,DCU-K100_AI,0,true,0,hami:"
                        "DCU-S2,4,65520,100,DCU-K100_AI,0,true,1,hami:")
    cache = ClusterCache(naming=DCU_NAMING)
    cache.apply_node({"metadata": {"name": "n1", "resourceVersion": "1", "annotations": {
        DCU.node_register: register, DCU.node_handshake: encode_reported(NOW)}}}, NOW)
    flt = Filter(cache, FilterSettings(naming=DCU))
    plan = plan_pod(dcu_pod("p", memory=2000, cores=60), flt.settings)
    assert plan is not None
    outcome = flt.run(plan, ["n1"], NOW)
    assert outcome.chosen == "n1" and outcome.fit is not None
    assert encode_pod_devices(outcome.fit.devices) == "DCU-S2,DCU,2000,60:;"


@pytest.mark.parametrize("value", ["spread", "binpack", "mutex", "topology-aware"])
def test_among_equal_cards_the_highest_numa_node_then_the_highest_index_goes_first(value):
    cards = [card(0, numa=1), card(1, numa=0), card(2, numa=1), card(3, numa=0)]
    assert chosen(cards, [Usage()] * 4, SHARE, value) == ["DCU-S2"]


def test_a_multi_card_container_lists_its_cards_in_hamis_walk_order():
    cards = [card(0), card(1), card(2)]
    assert chosen(cards, [Usage()] * 3, DcuRequest(count=3), "spread") == ["DCU-S2", "DCU-S1", "DCU-S0"]
    result = fit_pod(cards, [Usage()] * 3, [DcuRequest(count=2)], ["main"], StartOrder(), Selection(keys.DCU_NAMING),
                     policy.CardPolicy(("spread",)))
    assert isinstance(result, PodFit)
    assert encode_pod_devices(result.devices) == "DCU-S2,DCU,65520,100:DCU-S1,DCU,65520,100:;"


def test_score_decides_before_numa_for_binpack_and_spread():
    # card 0 on NUMA 1 is idle, card 1 on NUMA 0 holds a share: score is the first key.
    cards = [card(0, numa=1), card(1, numa=0)]
    used = [Usage(), Usage(1, 8000, 20)]
    assert chosen(cards, used, SHARE, "spread") == ["DCU-S0"]
    assert chosen(cards, used, SHARE, "binpack") == ["DCU-S1"]


def test_a_chain_applies_its_keys_in_the_order_written_then_the_index():
    cards = [card(0, numa=0), card(1, numa=1), card(2, numa=0)]
    used = [Usage(1, 8000, 20), Usage(), Usage()]
    # binpack first: the busy card 0 wins although its NUMA node is lower.
    assert chosen(cards, used, SHARE, "binpack,numa") == ["DCU-S0"]
    # numa first: NUMA 1 (card 1) before anything on NUMA 0.
    assert chosen(cards, used, SHARE, "numa,binpack") == ["DCU-S1"]
    # spread then numa: the idle cards 1 and 2 tie on score, NUMA 1 sorts last.
    assert chosen(cards, used, SHARE, "spread,numa") == ["DCU-S1"]
    # "numa" alone is a chain of one key: usage plays no part, the last of NUMA 1 goes first.
    assert chosen(cards, [Usage(), Usage(3, 8000, 20), Usage()], SHARE, "numa") == ["DCU-S1"]


def test_a_chain_without_numa_breaks_ties_by_index_alone():
    # Outside a chain NUMA is the tie-break; inside one only the words written count.
    cards = [card(0, numa=0), card(1, numa=0), card(2, numa=5), card(3, numa=0)]
    assert chosen(cards, [Usage()] * 4, SHARE, "spread") == ["DCU-S2"]
    assert chosen(cards, [Usage()] * 4, SHARE, "spread,mutex") == ["DCU-S3"]


def test_mutex_orders_by_slots_in_use_idle_cards_first():
    states = [policy.CardState(score=s, used_slots=u, numa=0, index=i)
              for i, (s, u) in enumerate([(1.0, 3), (9.0, 1), (2.0, 0)])]
    assert policy.card_order(states, policy.CardPolicy(("mutex",))) == [2, 1, 0]


@pytest.mark.parametrize(("slots", "memory", "cores"), [(0, 65520, 100), (4, 0, 100), (4, 65520, 0)])
def test_a_card_with_a_zero_capacity_scores_zero(slots, memory, cores):
    assert policy.card_score(2, slots, 1000, memory, 50, cores) == 0.0


def test_card_score_is_hamis_formula():
    assert policy.card_score(1, 4, 16384, 65536, 50, 100) == pytest.approx(10 * (1 / 4 + 50 / 100 + 16384 / 65536))
