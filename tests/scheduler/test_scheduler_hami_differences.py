"""HAMi v2.10 decisions where both systems read the same annotations (issue 24), each test
named after the HAMi behaviour it holds us to."""

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.counting import StartOrder, Usage
from hami_dcu.common.protocol.requests import DcuRequest
from hami_dcu.scheduler import policy
from hami_dcu.scheduler.fit import CardSpec, PodFit, PodMiss, Selection, fit_pod
from hami_dcu.scheduler.reasons import Code

DCU = keys.DCU_NAMING  # the naming set these tests speak

SHARE = DcuRequest(count=1, memory_mib=2000, cores=10)


def card(index: int, numa: int = 0, model: str = "DCU-K100_AI") -> CardSpec:
    return CardSpec(id=f"DCU-S{index}", index=index, model=model, slots=4, memory=65520, cores=100, numa=numa)


def place(cards, used, request, card_policy, selection: Selection | None = None):
    return fit_pod(cards, used, [request], ["main"], StartOrder(), selection or Selection(keys.DCU_NAMING), card_policy)


def uuids(result) -> list[str]:
    assert isinstance(result, PodFit), result
    return [d.uuid for d in result.devices[0]]


# --- a chain of filter words only orders as spread -------------------------------------------

@pytest.mark.parametrize("value", ["mutex,topology-aware", "topology-aware,mutex", "mutex,mutex"])
def test_hami_chain_of_only_filter_words_falls_back_to_spreads_order(value):
    cards = [card(0), card(1), card(2)]
    # card 2, the highest index, holds a share: spread tries the least used card first.
    used = [Usage(), Usage(), Usage(1, 8000, 20)]
    chain = policy.parse_card_policy(value)
    assert chain is not None
    spread = policy.parse_card_policy("spread")
    assert spread is not None
    if chain.mutex:
        assert uuids(place(cards, used, SHARE, chain)) == ["DCU-S1"]
    # The order itself is spread's, whatever the filter words then skip.
    states = [policy.CardState(policy.card_score(u.slots, 4, u.memory, 65520, u.cores, 100), u.slots, c.numa,
                               c.index) for c, u in zip(cards, used, strict=True)]
    assert policy.card_order(states, chain) == policy.card_order(states, spread)


def test_hami_chain_of_only_filter_words_with_spread_data_does_not_order_by_index_alone():
    cards = [card(0), card(1)]
    used = [Usage(), Usage(2, 30000, 50)]  # card 1 is busy: index order would try it first
    chain = policy.parse_card_policy("topology-aware,topology-aware")
    assert chain is not None and chain.chained and not chain.mutex
    assert uuids(place(cards, used, SHARE, chain)) == ["DCU-S0"]


# --- nvidia.com/numa-bind: NUMA first in the card order -------------------------------------

@pytest.mark.parametrize("value", ["true", "1", "T", "TRUE", "True"])
def test_hami_reads_numa_bind_on_every_pod_and_puts_numa_first(value):
    cards = [card(0, numa=1), card(1, numa=0)]
    used = [Usage(), Usage(1, 8000, 20)]  # spread alone: the idle card 0 (score first)
    default = policy.CardPolicy(("spread",))
    _, plain = policy.pod_policies({}, "binpack", default)
    assert uuids(place(cards, used, SHARE, plain)) == ["DCU-S0"]
    _, bound = policy.pod_policies({keys.NUMA_BIND: value}, "binpack", default)
    assert bound.numa_first
    # NUMA first: NUMA asc sorts card 1 (NUMA 0) first, and fit walks from the end: card 0
    # (NUMA 1) is still tried first; on equal NUMA nodes score decides. Make NUMA decide:
    cards = [card(0, numa=0), card(1, numa=1)]
    used = [Usage(), Usage(1, 8000, 20)]
    assert uuids(place(cards, used, SHARE, plain)) == ["DCU-S0"]
    assert uuids(place(cards, used, SHARE, bound)) == ["DCU-S1"]


@pytest.mark.parametrize("value", ["false", "0", "yes", "", "on"])
def test_hami_ignores_a_numa_bind_that_is_not_a_true_boolean(value):
    _, card_policy = policy.pod_policies({keys.NUMA_BIND: value}, "binpack", policy.CardPolicy(("spread",)))
    assert not card_policy.numa_first


def test_numa_bind_goes_before_the_keys_of_a_chain_and_reverses_binpack_alone():
    """HAMi v2.10 gpu_policy.go: lessByChain puts NumaBind's NUMA (asc) before the chain's
    keys; Less with binpack alone sorts NUMA desc, so the lowest NUMA node is tried first."""
    cards = [card(0, numa=0), card(1, numa=1), card(2, numa=0)]
    used = [Usage(1, 8000, 20), Usage(), Usage()]

    def bound(value: str) -> policy.CardPolicy:
        _, card_policy = policy.pod_policies({keys.DEVICE_SCHEDULER_POLICY: value, keys.NUMA_BIND: "true"},
                                             "binpack", policy.CardPolicy(("spread",)))
        return card_policy

    # binpack alone takes busy card 0, with NumaBind too: NUMA node 0 first, its fullest card.
    assert uuids(place(cards, used, SHARE, policy.CardPolicy(("binpack",)))) == ["DCU-S0"]
    assert uuids(place(cards, used, SHARE, bound("binpack"))) == ["DCU-S0"]
    # In a chain NUMA asc comes first: NUMA node 1 (card 1) goes first.
    assert uuids(place(cards, used, SHARE, bound("binpack,numa"))) == ["DCU-S1"]
    assert uuids(place(cards, used, SHARE, bound("binpack,spread"))) == ["DCU-S1"]


# --- the card score is the card's current use, never the incoming request ------------------

@pytest.mark.parametrize("model", ["DCU", "DCU-K100_AI"])
def test_the_card_score_ignores_the_incoming_request_whatever_the_cards_type(model):
    """HAMi v2.10 pkg/scheduler/policy/gpu_policy.go ComputeScore adds the container's request
    to a card's use only when the card's registered type equals the request's type, "DCU":
    for two cards registered as "DCU" (A: 1 slot, idle; B: 8 slots, one 8000 MiB / 20 % share)
    a spread pod asking for the same share scores A 13.22 and B 8.94 and goes to B; registered
    as "DCU-K100_AI", as every Hygon plugin writes a model, A 0 and B 4.47: A (both answered
    by HAMi's own fitInDevices). We score current use whatever the type: A."""
    cards = [CardSpec(id="A", index=0, model=model, slots=1, memory=65520, cores=100),
             CardSpec(id="B", index=1, model=model, slots=8, memory=65520, cores=100)]
    used = [Usage(), Usage(1, 8000, 20)]
    request = DcuRequest(count=1, memory_mib=8000, cores=20)
    assert uuids(place(cards, used, request, policy.CardPolicy(("spread",)))) == ["A"]


# --- a policy value with a word HAMi does not know (README, Where we differ) ----------------

@pytest.mark.parametrize(("card", "node", "ours", "hami"), [
    ("binpack,fastest", "fastest", ("mutex", "spread"), ("binpack", "binpack")),
    ("Binpack", "Spread", ("mutex", "spread"), ("spread", "binpack")),
    (" binpack", " spread", ("binpack", "spread"), ("spread", "binpack")),
    ("", "", ("mutex", "spread"), ("spread", "binpack")),
])
def test_an_unknown_policy_word_leaves_the_configured_default_where_hami_reads_the_raw_value(card, node, ours, hami):
    """HAMi v2.10 compares the raw annotation (util.GetGPUSchedulerPolicyByPod,
    resolveNodeSchedulerPolicy), whatever the configured defaults: gpu_policy.go Less sorts
    any single value but exactly binpack, mutex or numa as spread and lessByChain keeps a
    chain's known words (both confirmed on HAMi's own fitInDevices with default binpack);
    node_policy.go Less takes anything but exactly "spread" as binpack. We trim words and
    ignore a value with an unknown word as a whole, so the configured default (here mutex
    for cards, spread for nodes) stands, and the webhook warns."""
    node_policy, card_policy = policy.pod_policies(
        {keys.DEVICE_SCHEDULER_POLICY: card, keys.NODE_SCHEDULER_POLICY: node}, "spread", policy.CardPolicy(("mutex",)))
    assert (card_policy.words, node_policy) == ((ours[0],), ours[1])
    assert ours != hami


# --- use-<set>type with only empty entries matches no card ----------------------------------

@pytest.mark.parametrize("value", [",,", ",", " , "])
def test_hami_use_type_with_only_empty_entries_matches_no_card(value):
    selection = Selection.from_annotations({DCU.use_type: value}, keys.DCU_NAMING)
    result = place([card(0), card(1)], [Usage(), Usage()], SHARE, policy.CardPolicy(("spread",)), selection)
    assert isinstance(result, PodMiss)
    assert result.code == Code.CARD_TYPE_MISMATCH
    assert "names no card type" in result.message


def test_an_empty_use_type_is_still_no_constraint():
    for annotations in ({DCU.use_type: ""}, {DCU.nouse_type: ",,"}, {}):
        selection = Selection.from_annotations(annotations, keys.DCU_NAMING)
        result = place([card(0)], [Usage()], SHARE, policy.CardPolicy(("spread",)), selection)
        assert uuids(result) == ["DCU-S0"], annotations
