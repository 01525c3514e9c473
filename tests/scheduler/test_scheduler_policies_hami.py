"""HAMi v2.10's per-pod scheduler features: scoring weights, the mutex policy (idle cards
only), and our NUMA-aware multi-card choice under the numa policy."""

import re

import pytest
from scheduler_helpers import dcu_pod

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.counting import StartOrder, Usage
from hami_dcu.common.protocol.preferences import Weights, WeightsError, parse_weights
from hami_dcu.common.protocol.requests import DcuRequest, RequestError
from hami_dcu.scheduler.filtering import FilterSettings, plan_pod
from hami_dcu.scheduler.fit import CardSpec, PodFit, PodMiss, Selection, fit_pod
from hami_dcu.scheduler.policy import CardPolicy, parse_card_policy
from hami_dcu.scheduler.reasons import Code

SHARE = DcuRequest(count=1, memory_mib=2000, cores=10)


def card(index: int, numa: int = 0) -> CardSpec:
    return CardSpec(id=f"DCU-S{index}", index=index, model="DCU-K100_AI", slots=4, memory=65520, cores=100, numa=numa)


DEFAULT = Weights()


def place(cards, used, request, value="spread", weights=DEFAULT):
    card_policy = parse_card_policy(value)
    assert card_policy is not None
    return fit_pod(cards, used, [request], ["main"], StartOrder(), Selection(keys.DCU_NAMING), card_policy, weights)


def uuids(result) -> list[str]:
    assert isinstance(result, PodFit), result
    return [d.uuid for d in result.devices[0]]


# --- hami.io/device-scoring-weights ---------------------------------------------------------

@pytest.mark.parametrize(("value", "weights"), [
    ("slot=1,core=1,memory=3", Weights(1, 1, 3)),
    (" memory = 2 , slot=0, core=0 ", Weights(0, 0, 2)),
])
def test_weights_parse(value, weights):
    assert parse_weights(value) == weights


@pytest.mark.parametrize(("value", "fragment"), [
    ("slot=1,core=1", "memory missing"),
    ("slot=1,core=1,memory=1,gpu=2", "'gpu=2' is not one of"),
    ("slot=1,slot=2,core=1,memory=1", "slot is given twice"),
    ("slot=-1,core=1,memory=1", "slot=-1 is not a whole number"),
    ("slot=1.5,core=1,memory=1", "slot=1.5 is not a whole number"),
    ("slot=0,core=0,memory=0", "at least one must be above 0"),
    ("", "'' is not one of"),
])
def test_invalid_weights_say_what_is_wrong(value, fragment):
    with pytest.raises(WeightsError, match=re.escape(fragment)):
        parse_weights(value)


def test_weights_change_which_card_is_least_used():
    cards = [card(0), card(1)]
    # card 0: half its slots, little memory; card 1: one slot, much memory.
    used = [Usage(2, 1000, 10), Usage(1, 30000, 10)]
    assert uuids(place(cards, used, SHARE)) == ["DCU-S0"]
    assert uuids(place(cards, used, SHARE, weights=Weights(slot=1, core=0, memory=0))) == ["DCU-S1"]


def test_an_invalid_weights_annotation_makes_the_pod_unschedulable_with_the_reason():
    pod = dcu_pod("p", annotations={keys.DEVICE_SCORING_WEIGHTS: "slot=1,core=1"})
    with pytest.raises(RequestError, match=re.escape("hami.io/device-scoring-weights: memory missing")):
        plan_pod(pod, FilterSettings(naming=keys.DCU_NAMING))
    plan = plan_pod(dcu_pod("q", annotations={keys.DEVICE_SCORING_WEIGHTS: "slot=0,core=2,memory=1"}),
                    FilterSettings(naming=keys.DCU_NAMING))
    assert plan is not None and plan.weights == Weights(0, 2, 1)


# --- mutex ----------------------------------------------------------------------------------

def test_mutex_takes_only_idle_cards():
    cards = [card(0), card(1), card(2)]
    used = [Usage(), Usage(1, 2000, 10), Usage()]
    assert uuids(place(cards, used, SHARE, "mutex")) == ["DCU-S2"]
    assert uuids(place(cards, used, DcuRequest(count=2), "mutex")) == ["DCU-S2", "DCU-S0"]
    # binpack alone would share the busy card; chained with mutex it may not.
    assert uuids(place(cards, used, SHARE, "binpack")) == ["DCU-S1"]
    assert uuids(place(cards, used, SHARE, "binpack,mutex")) == ["DCU-S2"]


def test_mutex_with_no_idle_card_says_why():
    result = place([card(0), card(1)], [Usage(1, 2000, 10), Usage(3, 6000, 30)], SHARE, "mutex")
    assert isinstance(result, PodMiss)
    assert result.code == Code.CARD_BUSY_MUTEX
    assert "card DCU-S1: mutex policy: 3 share(s) in use" in result.message


# --- numa: one NUMA node per multi-card container -----------------------------------------

NUMA_CARDS = [card(0, numa=0), card(1, numa=0), card(2, numa=1), card(3, numa=1)]


def test_numa_policy_keeps_a_multi_card_container_on_one_numa_node():
    used = [Usage(), Usage(), Usage(), Usage(4, 4000, 40)]  # card 3 (NUMA 1) has no slot left
    two = DcuRequest(count=2)
    # Without numa, spread takes the two least used cards whatever their NUMA node.
    assert uuids(place(NUMA_CARDS, used, two, "spread")) == ["DCU-S2", "DCU-S1"]
    # With numa, NUMA 1 cannot hold both: NUMA 0 does.
    assert uuids(place(NUMA_CARDS, used, two, "spread,numa")) == ["DCU-S1", "DCU-S0"]
    assert uuids(place(NUMA_CARDS, used, two, "numa")) == ["DCU-S1", "DCU-S0"]


def test_numa_policy_prefers_the_numa_node_the_order_reaches_first():
    assert uuids(place(NUMA_CARDS, [Usage()] * 4, DcuRequest(count=2), "numa")) == ["DCU-S3", "DCU-S2"]
    # binpack first: the busy card 0 leads, so its NUMA node 0 is tried first.
    used = [Usage(1, 2000, 10), Usage(), Usage(), Usage()]
    assert uuids(place(NUMA_CARDS, used, DcuRequest(count=2, memory_mib=1000, cores=10), "binpack,numa")) == [
        "DCU-S0", "DCU-S1"]


def test_numa_policy_fails_with_the_reason_when_no_numa_node_can_hold_the_request():
    used = [Usage(4, 4000, 40), Usage(), Usage(), Usage(4, 4000, 40)]
    result = place(NUMA_CARDS, used, DcuRequest(count=2), "spread,numa")
    assert isinstance(result, PodMiss)
    assert result.code == Code.NODE_NUMA_INSUFFICIENT
    assert "on one NUMA node (numa policy)" in result.message
    assert "NUMA node 0: 1 of 2 cards fit" in result.message and "NUMA node 1: 1 of 2 cards fit" in result.message
    # The same cards across NUMA nodes would have fitted without the policy.
    assert uuids(place(NUMA_CARDS, used, DcuRequest(count=2), "spread")) == ["DCU-S2", "DCU-S1"]


def test_a_single_card_request_is_not_grouped():
    used = [Usage(), Usage(), Usage(), Usage(4, 4000, 40)]
    assert uuids(place(NUMA_CARDS, used, SHARE, "numa")) == ["DCU-S2"]


def test_the_policy_object_reports_its_filters():
    assert CardPolicy(("binpack", "mutex")).mutex and not CardPolicy(("binpack",)).numa
