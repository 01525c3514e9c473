"""What HAMi's decoders and parsers let through, and what the extender makes of it: a zero
card count asks for nothing; signed numbers decode; a negative figure never frees or
fits anything (fail closed)."""

from datetime import UTC, datetime

from scheduler_helpers import dcu_pod, node_object

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import encode_reported
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.filtering import Filter, FilterSettings, plan_pod
from hami_dcu.scheduler.reasons import Code

DCU = keys.DCU_NAMING  # the naming set these tests speak

NOW = datetime.now(UTC)


def running(uid: str, node: str, allocated: str) -> dict:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "default", "resourceVersion": "5",
                         "annotations": {DCU.pod_devices_allocated: allocated}},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}


def test_a_pod_asking_for_zero_cards_is_passed_through():
    assert plan_pod(dcu_pod("p", memory=None, cores=None, count=0), FilterSettings(naming=DCU)) is None


def test_a_negative_share_degrades_the_node_instead_of_freeing_capacity():
    cache = ClusterCache(naming=DCU_NAMING)
    cache.apply_node(node_object("n1"), NOW)
    cache.apply_pod(running("u1", "n1", "DCU-n1-S0,DCU,-60000,-100:;"))
    entry = cache.node("n1")
    assert entry.used[0].memory == 0
    assert entry.degraded == ["pod default/u1: negative share in hami.io/dcu-devices-allocated on card DCU-n1-S0"]
    flt = Filter(cache, FilterSettings(naming=DCU))
    plan = plan_pod(dcu_pod("p"), flt.settings)
    assert plan is not None
    assert flt.run(plan, ["n1"], NOW).failed["n1"].code == Code.NODE_DEGRADED


def test_a_card_registering_a_negative_capacity_never_fits():
    node = node_object("n1")
    node["metadata"]["annotations"][DCU.node_register] = (
        "DCU-A,4,-1,100,DCU-K100_AI,-1,true,0,hami:DCU-B,+4,65520,100,DCU-K100_AI,-1,true,1,hami:")
    node["metadata"]["annotations"][DCU.node_handshake] = encode_reported(NOW)
    cache = ClusterCache(naming=DCU_NAMING)
    cache.apply_node(node, NOW)
    assert [(c.id, c.memory, c.numa) for c in cache.node("n1").cards] == [("DCU-A", 0, -1), ("DCU-B", 65520, -1)]
    flt = Filter(cache, FilterSettings(naming=DCU))
    whole = plan_pod(dcu_pod("p", memory=None, cores=None, count=2), flt.settings)
    assert whole is not None
    assert flt.run(whole, ["n1"], NOW).chosen is None
    one = plan_pod(dcu_pod("q", memory=None, cores=None), flt.settings)
    assert one is not None
    outcome = flt.run(one, ["n1"], NOW)
    assert outcome.fit is not None and outcome.fit.devices[0][0].uuid == "DCU-B"
