"""The preempt verb: kube-scheduler's victims are kept only where removing them frees a card
for the preemptor (it sees slots, never card memory or cores); where they do not, the fewest
further lower-priority holders are added, or the node is dropped."""

from datetime import UTC, datetime

from scheduler_helpers import dcu_pod, dcu_settings, node_object, until

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.extender import NodeVictims, PreemptionArgs, parse_preemption_args
from hami_dcu.scheduler.filtering import FilterSettings, plan_pod
from hami_dcu.scheduler.preemption import choose_victims
from hami_dcu.scheduler.service import SchedulerService

DCU = keys.DCU_NAMING  # the naming set these tests speak

NOW = datetime.now(UTC)
# One card, four slots, all taken: A holds 60 percent of its cores, B, C and D 10 each.
SHARES = {"A": 60, "B": 10, "C": 10, "D": 10}


def holder(uid: str, cores: int, priority: int = 0, node: str = "n1") -> dict:
    return {"metadata": {"uid": uid, "name": uid.lower(), "namespace": "default", "resourceVersion": "5",
                         "annotations": {DCU.pod_devices_allocated: f"DCU-{node}-S0,DCU,1000,{cores}:;"}},
            "spec": {"nodeName": node, "priority": priority, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


def full_card() -> ClusterCache:
    cache = ClusterCache(naming=DCU_NAMING)
    cache.apply_node(node_object("n1", count=1), NOW)
    for uid, cores in SHARES.items():
        cache.apply_pod(holder(uid, cores))
    return cache


def plan(cores: int, count: int = 1, memory: int = 1000):
    found = plan_pod(dcu_pod("urgent", memory=memory, cores=cores, count=count), FilterSettings(naming=DCU))
    assert found is not None
    return found


def test_victims_that_free_enough_are_kept_as_proposed():
    entry = full_card().node("n1")
    assert choose_victims(plan(10), entry, ["D"]) == ["D"]


def test_victims_that_free_too_little_get_the_fewest_further_pods():
    entry = full_card().node("n1")
    # D frees 10 percent; 50 are needed. Of B, C, A (in that order of eviction), only A is needed.
    assert choose_victims(plan(50), entry, ["D"]) is None
    assert choose_victims(plan(50), entry, ["D"], ["B", "C", "A"]) == ["D", "A"]


def test_a_node_where_no_eviction_helps_is_dropped():
    entry = full_card().node("n1")
    assert choose_victims(plan(10, memory=70000), entry, ["D"], ["A", "B", "C"]) is None


def test_the_preempt_reply_speaks_uids_whatever_the_mode():
    meta = parse_preemption_args({"Pod": dcu_pod("p"), "NodeNameToMetaVictims": {
        "n1": {"Pods": [{"UID": "D"}], "NumPDBViolations": 1}}})
    assert meta.nodes == {"n1": NodeVictims(["D"], 1)}
    whole = parse_preemption_args({"pod": dcu_pod("p"), "NodeNameToVictims": {
        "n1": {"Pods": [{"metadata": {"uid": "D"}}], "NumPDBViolations": 0}}, "NodeNameToMetaVictims": None})
    assert whole.nodes == {"n1": NodeVictims(["D"], 0)}


async def test_the_verb_keeps_only_nodes_where_a_card_is_freed():
    service = SchedulerService(None, dcu_settings())
    cache = service.cache
    cache.apply_node(node_object("n1", count=1), NOW)
    cache.apply_node(node_object("n2", count=1), NOW)
    for uid, cores in SHARES.items():
        cache.apply_pod(holder(uid, cores))
    cache.apply_pod(holder("E", 100, node="n2"))
    urgent = dcu_pod("urgent", memory=1000, cores=50)
    urgent["spec"]["priority"] = 1000
    reply = await service.preempt_pod(PreemptionArgs(urgent, {"n1": NodeVictims(["D"]), "n2": NodeVictims(["E"])}))
    # n1: evicting D frees 10 percent, and this scheduler cannot ask the API for more: dropped.
    assert reply == {"NodeNameToMetaVictims": {"n2": {"Pods": [{"UID": "E"}], "NumPDBViolations": 0}}}
    plain = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}}
    passthrough = await service.preempt_pod(PreemptionArgs(plain, {"n1": NodeVictims(["D"])}))
    assert passthrough == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "D"}], "NumPDBViolations": 0}}}


async def test_lower_priority_holders_are_asked_of_the_api(kube, service, client):
    kube.create_node(node_object("n1", count=1))
    uids = {}
    for name, cores, priority in (("a", 60, 10), ("b", 10, 0), ("c", 10, 2000), ("d", 10, 0)):
        pod = holder(name.upper(), cores, priority)
        del pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
        uids[name] = kube.create_pod("default", pod)["metadata"]["uid"]
    await until(lambda: len(service.cache.node("n1").holdings if service.cache.node("n1") is not None else {}) == 4)
    urgent = dcu_pod("urgent", memory=1000, cores=50)
    urgent["spec"]["priority"] = 1000
    body = {"Pod": urgent, "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": uids["d"]}], "NumPDBViolations": 0}}}
    reply = await (await client.post("/preempt", json=body)).json()
    # c outranks the preemptor and is never taken; of the others a (60 percent) is what frees the card.
    assert reply == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": uids["d"]}, {"UID": uids["a"]}],
                                                      "NumPDBViolations": 0}}}
    bad = await (await client.post("/preempt", json={"Pod": urgent, "NodeNameToMetaVictims": {"n1": 3}})).json()
    assert bad == {"NodeNameToMetaVictims": {}}
