"""/filter judges nodes by card states (verdicts.py): held to fit.py, node by node.

On random nodes (cards of several models, capacities and health, random holdings) and random
pods (counts, memory, whole cards, cores, init containers, type selection, policies), the
filter must reject exactly the nodes fit.py rejects, with fit.py's reason, and choose the
node the node policy picks among the nodes fit.py accepts, placed as fit.py places it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import (
    ContainerDevice,
    NodeDevice,
    encode_node_devices,
    encode_pod_devices,
    encode_reported,
)
from hami_dcu.common.protocol.counting import StartOrder
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.common.protocol.requests import DcuRequest
from hami_dcu.scheduler import policy as policies
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.filtering import Filter, FilterSettings, PodPlan, best_name
from hami_dcu.scheduler.fit import PodFit, PodMiss, Selection
from hami_dcu.scheduler.reasons import Code

DCU = keys.DCU_NAMING  # the naming set these tests speak

NOW = datetime.now(UTC)
MODELS = ("DCU-K100_AI", "DCU-Z100")

card_strategy = st.fixed_dictionaries({
    "model": st.sampled_from(MODELS),
    "slots": st.integers(0, 4),
    "memory": st.sampled_from([0, 16000, 65520]),
    "cores": st.sampled_from([100, 100, 50]),
    "health": st.booleans() | st.just(True),
    "numa": st.integers(0, 1),
    # shares held on the card: (memory, cores) each
    "shares": st.lists(st.tuples(st.sampled_from([0, 1000, 8000, 16000, 65520]), st.sampled_from([0, 10, 50, 100])),
                       max_size=4),
})
node_strategy = st.lists(card_strategy, min_size=1, max_size=5)
STALE = datetime.fromtimestamp(NOW.timestamp() - 600, UTC)  # a plugin that stopped reporting
request_strategy = st.builds(
    DcuRequest,
    count=st.integers(1, 3),
    memory_mib=st.sampled_from([0, 1000, 8000, 16000, 60000]),
    cores=st.sampled_from([0, 10, 50, 100]),
)
pod_strategy = st.fixed_dictionaries({
    "init": st.lists(st.none() | request_strategy, max_size=2),
    "app": st.lists(st.none() | request_strategy, min_size=1, max_size=3),
    "use_type": st.sampled_from(["", "K100", "Z100"]),
    "nouse_type": st.sampled_from(["", "Z100"]),
    "card_policy": st.sampled_from(["spread", "binpack", "mutex", "numa", "binpack,numa", "spread,mutex"]),
    "node_policy": st.sampled_from(["binpack", "spread"]),
})


def build_cache(nodes: list[list[dict]], stale: frozenset[int] = frozenset()) -> ClusterCache:
    cache = ClusterCache(naming=DCU_NAMING)
    for n, cards in enumerate(nodes):
        name = f"n{n}"
        devices = [NodeDevice(id=f"DCU-{name}-{i}", count=c["slots"], devmem=c["memory"], devcore=c["cores"],
                              type=c["model"], numa=c["numa"], health=c["health"], index=i)
                   for i, c in enumerate(cards)]
        reported = STALE if n in stale else NOW
        cache.apply_node({"metadata": {"name": name, "resourceVersion": "1", "annotations": {
            DCU.node_register: encode_node_devices(devices), DCU.node_handshake: encode_reported(reported)}}}, NOW)
        for i, c in enumerate(cards):
            for s, (memory, cores) in enumerate(c["shares"]):
                allocated = encode_pod_devices([[ContainerDevice(f"DCU-{name}-{i}", "DCU", memory, cores)]])
                cache.apply_pod({"metadata": {"name": f"{name}-{i}-{s}", "namespace": "d", "uid": f"{name}-{i}-{s}",
                                              "resourceVersion": "2",
                                              "annotations": {DCU.pod_devices_allocated: allocated}},
                                 "spec": {"nodeName": name}, "status": {"phase": "Running"}})
    return cache


def plan_of(pod: dict) -> PodPlan | None:
    requests = (*pod["init"], *pod["app"])
    if not any(requests):
        return None
    annotations = {DCU.use_type: pod["use_type"], DCU.nouse_type: pod["nouse_type"]}
    card_policy = policies.parse_card_policy(pod["card_policy"])
    assert card_policy is not None
    return PodPlan(requests=requests, names=tuple(f"c{i}" for i in range(len(requests))),
                   order=StartOrder(len(pod["init"])), selection=Selection.from_annotations(annotations, DCU),
                   node_policy=pod["node_policy"], card_policy=card_policy)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(node_strategy, min_size=1, max_size=6), st.lists(pod_strategy, min_size=1, max_size=6),
       st.frozensets(st.integers(0, 5), max_size=2))
def test_the_filter_rejects_and_chooses_as_fit_does(nodes, pods, stale):
    cache = build_cache(nodes, stale)
    filter_ = Filter(cache, FilterSettings(naming=DCU))
    for p, pod in enumerate(pods + pods):  # shapes seen again after the cache changed: kept sets follow it
        plan = plan_of(pod)
        if plan is None:
            continue
        names = [*sorted(cache.node_names()), "unknown"]
        if p % 2:  # kube-scheduler's own filters left out a node: not every node is a candidate
            names = names[1:]
        expected = {name: plan.fit(cache.node(name).cards, cache.node(name).used) for name in names[:-1]}
        outcome = filter_.run(plan, names, NOW)
        assert outcome.failed["unknown"].code == Code.NODE_UNKNOWN
        assert set(outcome.failed) | {outcome.chosen} <= set(names) | {None}
        for name, result in expected.items():
            if int(name[1:]) in stale:
                assert outcome.failed[name].code == Code.NODE_HANDSHAKE_STALE
            elif isinstance(result, PodMiss):
                assert name in outcome.failed, (name, result)
                assert outcome.failed[name].code == result.code
                assert outcome.failed[name].message == result.summary
                assert outcome.explain is not None
                detail = outcome.failed[name].detail or outcome.explain(name, outcome.failed[name])
                assert detail == result.message
            else:
                assert name not in outcome.failed, (name, outcome.failed.get(name))
        fitting = [(name, cache.node(name).score()) for name, r in expected.items()
                   if isinstance(r, PodFit) and int(name[1:]) not in stale]
        assert outcome.chosen == policies.pick_node(fitting, plan.node_policy)
        if outcome.chosen is not None:
            assert outcome.fit == expected[outcome.chosen]
            # what /filter does next: the choice counts on its node until bound
            cache.placements.reserve(f"a{p}", "d", f"a{p}", outcome.chosen, outcome.fit, plan.init_count, 0.0, plan)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.sampled_from([0.0, 1.5, 2.5, 10.0])), min_size=1,
                max_size=8, unique_by=lambda item: item[0]),
       st.sampled_from(["binpack", "spread", "anything else"]))
def test_best_name_picks_as_pick_node(scored, node_policy):
    assert best_name({name for name, _ in scored}, dict(scored), node_policy) == policies.pick_node(scored, node_policy)


def test_a_shape_first_seen_and_new_card_states_are_judged():
    """A verdict table made before a card state existed judges it when the state appears."""
    cache = build_cache([[{"model": MODELS[0], "slots": 4, "memory": 65520, "cores": 100, "health": True, "numa": 0,
                           "shares": []}]])
    filter_ = Filter(cache, FilterSettings(naming=DCU))
    plan = plan_of({"init": [], "app": [DcuRequest(1, 60000, 10)], "use_type": "", "nouse_type": "",
                    "card_policy": "spread", "node_policy": "binpack"})
    assert plan is not None
    assert filter_.run(plan, ["n0"], NOW).chosen == "n0"
    # the node fills up: a card state no verdict has seen yet
    cache.apply_pod({"metadata": {"name": "p", "namespace": "d", "uid": "p", "resourceVersion": "3", "annotations": {
        DCU.pod_devices_allocated: encode_pod_devices([[ContainerDevice("DCU-n0-0", "DCU", 10000, 10)]])}},
        "spec": {"nodeName": "n0"}, "status": {"phase": "Running"}})
    outcome = filter_.run(plan, ["n0"], NOW)
    assert outcome.chosen is None
    assert outcome.failed["n0"].code == Code.CARD_INSUFFICIENT_MEMORY
    assert "55520 MiB free < 60000 MiB requested" in outcome.example_detail()


def test_a_node_turns_stale_as_time_passes_and_fresh_with_its_next_report():
    cards = [{"model": MODELS[0], "slots": 4, "memory": 65520, "cores": 100, "health": True, "numa": 0, "shares": []}]
    cache = build_cache([cards, cards])
    filter_ = Filter(cache, FilterSettings(naming=DCU))
    plan = plan_of({"init": [], "app": [DcuRequest(1, 1000, 10)], "use_type": "", "nouse_type": "",
                    "card_policy": "spread", "node_policy": "binpack"})
    assert plan is not None
    assert filter_.run(plan, ["n0", "n1"], NOW).failed == {}
    later = datetime.fromtimestamp(NOW.timestamp() + 120, UTC)
    outcome = filter_.run(plan, ["n0", "n1"], later)
    assert {name: r.code for name, r in outcome.failed.items()} == {"n0": Code.NODE_HANDSHAKE_STALE,
                                                                      "n1": Code.NODE_HANDSHAKE_STALE}
    node = {"metadata": {"name": "n1", "resourceVersion": "5", "annotations": {
        DCU.node_register: cache.node("n1").register_value, DCU.node_handshake: encode_reported(later)}}}
    cache.apply_node(node, later)
    outcome = filter_.run(plan, ["n0", "n1"], later)
    assert outcome.chosen == "n1" and list(outcome.failed) == ["n0"]


def test_a_routine_report_moves_the_deadline_without_a_change_logged():
    cards = [{"model": MODELS[0], "slots": 4, "memory": 65520, "cores": 100, "health": True, "numa": 0, "shares": []}]
    cache = build_cache([cards])
    filter_ = Filter(cache, FilterSettings(naming=DCU))
    plan = plan_of({"init": [], "app": [DcuRequest(1, 1000, 10)], "use_type": "", "nouse_type": "",
                    "card_policy": "spread", "node_policy": "binpack"})
    assert plan is not None

    def at(seconds: float) -> datetime:
        return datetime.fromtimestamp(NOW.timestamp() + seconds, UTC)

    assert filter_.run(plan, ["n0"], NOW).chosen == "n0"
    logged = cache.changes.end
    cache.apply_node({"metadata": {"name": "n0", "resourceVersion": "5", "annotations": {
        DCU.node_register: cache.node("n0").register_value, DCU.node_handshake: encode_reported(at(50))}}}, at(50))
    assert cache.changes.end == logged  # nothing /filter must look at now
    assert filter_.run(plan, ["n0"], at(100)).chosen == "n0"  # past the first deadline, within the second
    assert filter_.run(plan, ["n0"], at(200)).failed["n0"].code == Code.NODE_HANDSHAKE_STALE
