"""Node and card policies pinned: binpack versus spread, per-pod overrides, tie-breaks."""

from datetime import UTC, datetime

import pytest
from scheduler_helpers import dcu_pod, node_object

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler import policy
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.filtering import Filter, FilterSettings, plan_pod
from hami_dcu.scheduler.reasons import Code, summarise

DCU = keys.DCU_NAMING  # the naming set these tests speak

NOW = datetime.now(UTC)


def loaded_cache() -> ClusterCache:
    """busy: one card half used; idle: nothing used; tie-a / tie-b: identical and idle."""
    cache = ClusterCache(naming=DCU_NAMING)
    for name in ("busy", "idle"):
        cache.apply_node(node_object(name), NOW)
    cache.apply_pod({
        "metadata": {"uid": "u1", "name": "x", "namespace": "default", "resourceVersion": "3",
                     "annotations": {DCU.pod_devices_allocated: "DCU-busy-S1,DCU,30000,50:;"}},
        "spec": {"nodeName": "busy", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}})
    return cache


def choose(cache: ClusterCache, pod: dict, nodes: list[str], **settings) -> tuple[str | None, str | None]:
    flt = Filter(cache, FilterSettings(naming=DCU, **settings))
    outcome = flt.run(plan_pod(pod, flt.settings), nodes, NOW)
    card = outcome.fit.devices[0][0].uuid if outcome.fit else None
    return outcome.chosen, card


def test_default_is_binpack_nodes_and_spread_cards():
    chosen, card = choose(loaded_cache(), dcu_pod("p"), ["idle", "busy"])
    assert chosen == "busy"
    assert card == "DCU-busy-S0"  # the idle card of the busy node


def test_spread_nodes_and_binpack_cards_by_flags():
    cache = loaded_cache()
    assert choose(cache, dcu_pod("p"), ["idle", "busy"], node_policy="spread")[0] == "idle"
    assert choose(cache, dcu_pod("p", cores=30), ["busy"], card_policy="binpack")[1] == "DCU-busy-S1"


def test_pod_annotations_override_the_flags():
    pod = dcu_pod("p", cores=30, annotations={keys.NODE_SCHEDULER_POLICY: "spread",
                                    keys.DEVICE_SCHEDULER_POLICY: "binpack,numa"})
    assert choose(loaded_cache(), pod, ["idle", "busy"])[0] == "idle"
    assert choose(loaded_cache(), pod, ["busy"])[1] == "DCU-busy-S1"


def test_equal_nodes_break_ties_by_name_under_both_policies():
    cache = ClusterCache(naming=DCU_NAMING)
    for name in ("tie-b", "tie-a"):
        cache.apply_node(node_object(name), NOW)
    for node_policy in policy.POLICIES:
        assert choose(cache, dcu_pod("p"), ["tie-b", "tie-a"], node_policy=node_policy)[0] == "tie-a"


@pytest.mark.parametrize(("value", "words"), [
    (None, None), ("", None), (" ", None),
    ("BinPack", None),  # words are compared exactly: not binpack, the whole value is ignored
    ("binpack,", None), ("binpack,best-fit", None),  # HAMi reads these differently (hami_differences)
    ("binpack", ("binpack",)), (" spread ", ("spread",)), ("mutex,binpack", ("mutex", "binpack")),
    ("binpack , numa", ("binpack", "numa")), ("topology-aware", ("topology-aware",)),
])
def test_card_policy_parsing_takes_known_trimmed_words_only(value, words):
    parsed = policy.parse_card_policy(value)
    assert (parsed.words if parsed else None) == words


@pytest.mark.parametrize(("value", "expected"), [
    (None, None), ("spread", "spread"), (" binpack ", "binpack"), ("Spread", None), ("binpack,spread", None)])
def test_node_policy_parsing_is_one_exact_word(value, expected):
    assert policy.parse_node_policy(value) == expected


def test_an_unknown_policy_annotation_leaves_the_configured_defaults():
    default = policy.CardPolicy(("binpack",))
    annotations = {keys.NODE_SCHEDULER_POLICY: "fastest", keys.DEVICE_SCHEDULER_POLICY: "binpack,fastest"}
    assert policy.pod_policies(annotations, "spread", default) == ("spread", default)


def test_node_score_formula_is_utilisation_over_all_cards():
    cache = loaded_cache()
    # one card of two: slots 1/8, cores 50/200, memory 30000/131040
    expected = 10 * (1 / 8 + 50 / 200 + 30000 / 131040)
    assert cache.node("busy").score() == pytest.approx(expected)
    assert cache.node("idle").score() == 0


def test_memo_is_invalidated_when_the_node_changes():
    cache = loaded_cache()
    flt = Filter(cache, FilterSettings(naming=DCU))
    plan = plan_pod(dcu_pod("p", memory=40000, cores=10), flt.settings)
    first = flt.run(plan, ["busy"], NOW)
    assert first.fit.devices[0][0].uuid == "DCU-busy-S0"
    cache.apply_pod({
        "metadata": {"uid": "u2", "name": "y", "namespace": "default", "resourceVersion": "4",
                     "annotations": {DCU.pod_devices_allocated: "DCU-busy-S0,DCU,30000,10:;"}},
        "spec": {"nodeName": "busy", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}})
    second = flt.run(plan, ["busy"], NOW)
    assert second.chosen is None
    assert second.failed["busy"].code == Code.CARD_INSUFFICIENT_MEMORY


def test_summary_counts_nodes_per_reason_most_common_first():
    codes = [Code.CARD_INSUFFICIENT_MEMORY] * 3 + [Code.CARD_TYPE_MISMATCH] * 2
    assert summarise(codes) == "3 nodes: insufficient card memory; 2 nodes: card type mismatch"
