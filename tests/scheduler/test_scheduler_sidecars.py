"""Native sidecars (init containers with `restartPolicy: Always`, issue 12 cause 7) keep running
beside the app containers: what they hold is added to the app containers' share, never
released as a finished init container's is; a regular init container after a sidecar runs
beside it."""

from __future__ import annotations

from hami_dcu.common.protocol.codec import ContainerDevice
from hami_dcu.common.protocol.counting import StartOrder, Usage, collapse
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.common.protocol.quota import Amount, requested
from hami_dcu.common.protocol.requests import DcuRequest, sidecar_positions
from hami_dcu.scheduler.fit import CardSpec, PodFit, PodMiss, Selection, fit_pod
from hami_dcu.scheduler.policy import parse_card_policy
from hami_dcu.scheduler.reasons import Code

WHOLE = DcuRequest(1)  # a whole card: all its memory and cores


def card(i: int) -> CardSpec:
    return CardSpec(id=f"DCU-S{i}", index=i, model="DCU-K100_AI", slots=4, memory=65520, cores=100, health=True)


def fit(cards, requests, init_count, sidecars):
    names = [f"c{i}" for i in range(len(requests))]
    return fit_pod(cards, [Usage() for _ in cards], requests, names, StartOrder(init_count, sidecars),
                   Selection.from_annotations({}, DCU_NAMING), parse_card_policy("spread"))


def dev(card_id: str, memory: int, cores: int) -> list[ContainerDevice]:
    return [ContainerDevice(card_id, "DCU", memory, cores)]


def test_sidecar_positions_are_the_init_containers_that_restart_always():
    pod = {"spec": {"initContainers": [{"name": "setup"}, {"name": "proxy", "restartPolicy": "Always"},
                                       {"name": "late", "restartPolicy": "Never"}],
                    "containers": [{"name": "main", "restartPolicy": "Always"}]}}
    assert sidecar_positions(pod) == frozenset({1})  # codec order: init containers first
    assert sidecar_positions({"spec": {"containers": [{"name": "main"}]}}) == frozenset()


def test_a_sidecar_holding_a_whole_card_keeps_it_from_the_app_container():
    alone = fit([card(1)], [WHOLE, WHOLE], init_count=1, sidecars=frozenset({0}))
    assert isinstance(alone, PodMiss) and alone.container == "c1"
    assert alone.code == Code.CARD_INSUFFICIENT_MEMORY  # the sidecar holds all of it
    two = fit([card(1), card(2)], [WHOLE, WHOLE], init_count=1, sidecars=frozenset({0}))
    assert isinstance(two, PodFit)
    assert two.devices[0][0].uuid != two.devices[1][0].uuid


def test_a_finished_init_container_still_hands_its_card_on():
    result = fit([card(1)], [WHOLE, WHOLE], init_count=1, sidecars=frozenset())
    assert isinstance(result, PodFit)


def test_a_sidecar_share_adds_to_the_app_containers_share():
    held = collapse([dev("DCU-S0", 1000, 20), dev("DCU-S0", 2000, 30)], StartOrder(1, frozenset({0})))
    assert held["DCU-S0"] == Usage(2, 3000, 50)
    # the same pod with an ordinary init container: the larger of the two
    assert collapse([dev("DCU-S0", 1000, 20), dev("DCU-S0", 2000, 30)], StartOrder(1))["DCU-S0"] == Usage(1, 2000, 30)


def test_an_init_container_after_a_sidecar_runs_beside_it():
    devices = [dev("DCU-S0", 1000, 10), dev("DCU-S0", 3000, 60), dev("DCU-S0", 500, 5)]
    held = collapse(devices, StartOrder(2, frozenset({0})))
    # sidecar + init (4000 MiB, 70 %) outweighs sidecar + app (1500 MiB, 15 %)
    assert held["DCU-S0"] == Usage(2, 4000, 70)
    # and the fit sees it: a card with 40 % of cores free cannot take the init container beside the sidecar
    cards = [card(1)]
    miss = fit_pod(cards, [Usage(1, 0, 60)], [DcuRequest(1, 1000, 10), DcuRequest(1, 1000, 35), DcuRequest(1, 500, 5)],
                   ["proxy", "setup", "main"], StartOrder(2, frozenset({0})),
                   Selection.from_annotations({}, DCU_NAMING), parse_card_policy("spread"))
    assert isinstance(miss, PodMiss) and miss.container == "setup"


def test_quota_counts_a_sidecar_beside_the_app_containers():
    asks = [DcuRequest(1, 1000, 10), DcuRequest(1, 2000, 20)]
    assert requested(asks, 1, frozenset({0})) == Amount(3000, 30)
    assert requested(asks, 1) == Amount(2000, 20)


def test_the_cache_counts_a_running_sidecar_beside_the_app_container_from_the_slim_pod():
    from datetime import UTC, datetime

    from scheduler_helpers import node_object

    from hami_dcu.common.protocol import keys
    from hami_dcu.common.protocol.codec import encode_pod_devices
    from hami_dcu.scheduler.cache import ClusterCache
    from hami_dcu.scheduler.slim import slim_pod

    cache = ClusterCache(naming=DCU_NAMING)
    cache.apply_node(node_object("a", count=1, memory=8000), datetime.now(UTC))
    card_id = cache.node("a").cards[0].id
    pod = {"metadata": {"uid": "u1", "name": "p", "namespace": "default", "resourceVersion": "5",
                        "annotations": {keys.DCU_NAMING.pod_devices_allocated: encode_pod_devices(
                            [dev(card_id, 1000, 20), dev(card_id, 2000, 30)])}},
           "spec": {"nodeName": "a", "initContainers": [{"name": "proxy", "image": "x", "restartPolicy": "Always"}],
                    "containers": [{"name": "main", "image": "x"}]},
           "status": {"phase": "Running"}}
    cache.apply_pod(slim_pod(pod))  # what the informer keeps of it
    assert cache.node("a").used[0] == Usage(2, 3000, 50)
