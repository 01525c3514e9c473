"""Upstream Volcano's preemptable and reclaimable verbs, card-aware (scheduler/volcanoevict.py,
volcanoverbs.py, volcanoapp.py): the fewest evictees of one card whose going lets the evictor
fit that card, lowest priority first; REJECT with none when nothing frees a card; ABSTAIN where
cards need no say. An evictor pipelined on a node its evictions did not free a card of is
refused (Volcano then undoes them). Bad input abstains with a 200, never a 5xx."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from scheduler_helpers import dcu_pod, node_object

from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.filtering import Filter, FilterSettings
from hami_dcu.scheduler.service import SchedulerService, ServiceSettings
from hami_dcu.scheduler.volcanoapp import build_volcano_app
from hami_dcu.scheduler.volcanoevict import Purpose
from hami_dcu.scheduler.volcanoverbs import VolcanoRefused, VolcanoVerbs
from hami_dcu.scheduler.volcanowire import (
    ABSTAIN,
    PENDING,
    PERMIT,
    PIPELINED,
    REJECT,
    RELEASING,
    RUNNING,
    EvictArgs,
    Task,
    parse_evict,
)

DCU = DCU_NAMING
VOLCANO = "volcano"
NOW = datetime.now(UTC)
SETTINGS = FilterSettings(naming=DCU, volcano_scheduler=VOLCANO)
JSON = dict[str, Any]


def held(name: str, card: int, memory: int, priority: int = 10, cores: int = 10, started: int = 1) -> JSON:
    """A running share of card `card` of node n1, as Volcano placed it."""
    pod = dcu_pod(name, memory=memory, cores=cores, uid=name, scheduler=VOLCANO,
                  annotations={DCU.pod_devices_allocated: f"DCU-n1-S{card},DCU,{memory},{cores}:;"})
    pod["metadata"]["resourceVersion"] = "5"
    pod["spec"].update({"nodeName": "n1", "priority": priority})
    pod["status"] = {"phase": "Running", "startTime": f"2026-11-27T10:00:0{started}Z"}
    return pod


def task(pod: JSON, status: int = RUNNING) -> Task:
    meta = pod["metadata"]
    return Task(meta["uid"], meta["namespace"], meta["name"], pod["spec"].get("nodeName", ""), status, pod,
                pod["spec"].get("priority", 1))


def evictor(memory: int, priority: int = 100, cores: int = 10) -> Task:
    pod = dcu_pod("urgent", memory=memory, cores=cores, uid="urgent", scheduler=VOLCANO)
    pod["spec"]["priority"] = priority
    return task(pod, PENDING)


def verbs_with(pods: list[JSON]) -> VolcanoVerbs:
    cache = ClusterCache(naming=DCU)
    cache.apply_node(node_object("n1", count=2), NOW)
    for pod in pods:
        cache.apply_pod(pod)
    return VolcanoVerbs(cache, Filter(cache, SETTINGS), SETTINGS, lambda: 100.0, lambda: NOW)


def ask(verbs: VolcanoVerbs, purpose: Purpose, who: Task, pods: list[JSON]) -> tuple[int, list[str]]:
    evictees = [task(p) for p in pods]
    answer = verbs.evictable(purpose, EvictArgs(who, evictees, [{} for _ in evictees]))
    return answer.status, sorted(answer.victims)


# Card 0: low a (30,000 MiB) and high x (30,000); card 1: low b1 (20,000) and b2 (20,000).
# 5,520 MiB free on card 0, 25,520 on card 1; the evictor asks 40,000.
def shares() -> list[JSON]:
    return [held("a", 0, 30000, priority=5), held("x", 0, 30000, priority=1000),
            held("b1", 1, 20000, started=2), held("b2", 1, 20000, started=3)]


def test_preemptable_answers_the_fewest_lower_priority_shares_of_one_card():
    pods = shares()
    verbs = verbs_with(pods)
    # a is the lowest priority, but card 0 keeps x (higher priority than the evictor): a
    # frees nothing the evictor fits. b2 alone (started last) frees card 1: 45,520 MiB.
    assert ask(verbs, Purpose.PREEMPT, evictor(40000), pods) == (PERMIT, ["b2"])


def test_reclaimable_may_take_any_priority_and_takes_the_fewest():
    pods = shares()
    verbs = verbs_with(pods)
    # Reclaim is between queues: x may go too. Card 0 needs a and x (2), card 1 needs one.
    assert ask(verbs, Purpose.RECLAIM, evictor(40000, priority=1), pods) == (PERMIT, ["b2"])
    # 60,000 MiB: card 1 cannot free it with 2 shares gone (65,520 - 0 ... both gone: 65,520 free,
    # so both), card 0 needs both too: equal counts, the lower priorities win (card 1).
    assert ask(verbs, Purpose.RECLAIM, evictor(60000, priority=1), pods) == (PERMIT, ["b1", "b2"])


def test_nothing_frees_a_card_rejects_with_no_victims():
    pods = shares()
    verbs = verbs_with(pods)
    assert ask(verbs, Purpose.PREEMPT, evictor(70000), pods) == (REJECT, [])  # more than a card
    # Cores: the evictor asks 100 percent; only lower-priority pods may go, x stays on card 0,
    # b1 and b2 may go from card 1: that card is then whole.
    assert ask(verbs, Purpose.PREEMPT, evictor(1000, cores=100), pods) == (PERMIT, ["b1", "b2"])
    # Of equal priority: not eligible for preemption.
    assert ask(verbs, Purpose.PREEMPT, evictor(40000, priority=10), pods) == (REJECT, [])


def test_abstains_where_cards_need_no_say():
    pods = shares()
    verbs = verbs_with(pods)
    assert ask(verbs, Purpose.PREEMPT, evictor(20000), pods) == (ABSTAIN, [])  # card 1 takes it as it is
    plain = dcu_pod("plain", memory=None, cores=None, uid="plain", scheduler=VOLCANO)
    plain["spec"]["containers"][0]["resources"] = {}
    assert ask(verbs, Purpose.PREEMPT, task(plain, PENDING), pods) == (ABSTAIN, [])
    assert ask(verbs, Purpose.PREEMPT, evictor(40000), []) == (ABSTAIN, [])


def test_a_slot_is_a_card_resource_too():
    # Card 1 full by slots (4 small shares), card 0 by memory: the evictor needs a slot.
    pods = [held(f"s{i}", 1, 1000, started=i + 1) for i in range(4)] + [held("big", 0, 65000, priority=50)]
    verbs = verbs_with(pods)
    assert ask(verbs, Purpose.PREEMPT, evictor(2000), pods) == (PERMIT, ["s3"])  # lowest priority, latest started


def test_evictions_of_the_session_count_as_gone_and_a_pipeline_is_checked():
    pods = shares()
    verbs = verbs_with(pods)
    urgent = evictor(40000)
    # Volcano evicts b2 (deallocateFunc, Releasing): the next answer counts it gone.
    verbs.deallocate(task(pods[3], RELEASING))
    assert ask(verbs, Purpose.PREEMPT, urgent, pods[:3]) == (ABSTAIN, [])
    pipelined = Task(urgent.uid, urgent.namespace, urgent.name, "n1", PIPELINED, urgent.pod, urgent.priority)
    assert verbs.allocate(pipelined) is None  # fits card 1 once b2 is gone: allowed, nothing written
    # Undone (allocateFunc with it Running again): the pipeline would free nothing now.
    verbs.allocate(task(pods[3], RUNNING))
    with pytest.raises(VolcanoRefused, match="no card there takes it"):
        verbs.allocate(pipelined)
    # Committed at the session's close: gone until the cache no longer has it.
    verbs.deallocate(task(pods[3], RELEASING))
    verbs.session_close()
    assert verbs.going("n1") == ["b2"]
    verbs.cache.delete_pod(pods[3])
    assert verbs.going("n1") == []


def test_an_evictor_that_cannot_be_placed_rejects():
    pods = shares()
    verbs = verbs_with(pods)
    other = dcu_pod("other", memory=1000, uid="other", scheduler="default-scheduler")
    assert ask(verbs, Purpose.PREEMPT, task(other, PENDING), pods) == (REJECT, [])


# --- the wire ------------------------------------------------------------------------------


@pytest.fixture
async def client(kube, aiohttp_client) -> AsyncIterator[Any]:
    from hami_dcu.common.io.kube import AsyncKube

    akube = AsyncKube(kube)
    service = SchedulerService(akube, ServiceSettings(filter=SETTINGS))
    kube.create_node(node_object("n1", count=2))
    pods = [kube.create_pod("default", p) for p in shares()]
    service.start()
    assert await service.wait_synced(10)
    for _ in range(200):
        entry = service.cache.node("n1")
        if entry is not None and len(entry.holdings) == len(pods):
            break
        import asyncio

        await asyncio.sleep(0.01)
    yield await aiohttp_client(build_volcano_app(service)), pods
    await service.stop()
    akube.close()
    kube.api_client.rest_client.pool_manager.clear()


def wire_task(pod: JSON, status: int) -> JSON:
    meta = pod["metadata"]
    return {"UID": meta["uid"], "Job": "default/j", "Name": meta["name"], "Namespace": meta["namespace"],
            "NodeName": pod["spec"].get("nodeName", ""), "Status": status, "Priority": pod["spec"].get("priority", 1),
            "Resreq": {"MilliCPU": 0, "ScalarResources": {DCU.resources.memory: 1}}, "Preemptable": True, "Pod": pod}


@pytest.mark.parametrize("verb", ["preemptable", "reclaimable"])
async def test_the_victims_go_back_as_they_were_sent(client, verb):
    http, pods = client
    urgent = dcu_pod("urgent", memory=40000, cores=10, uid="urgent", scheduler=VOLCANO)
    urgent["spec"]["priority"] = 100
    evictees = [wire_task(p, RUNNING) for p in pods]
    response = await http.post(f"/volcano/{verb}", json={"evictor": wire_task(urgent, PENDING), "evictees": evictees})
    assert response.status == 200
    answer = await response.json()
    assert answer["status"] == PERMIT
    assert answer["victims"] == [e for e in evictees if e["Name"] == "b2"]  # whole, Resreq and all


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b"{}", b'{"evictor": 3}', b'{"evictor": {"Name": "x"}}',
    b'{"evictor": {"UID": "u", "Name": "x", "Namespace": "d", "Pod": {}}, "evictees": {"a": 1}}',
    b'{"evictor": {"UID": "u", "Name": "x", "Namespace": "d", "Pod": {}}, "evictees": [{"UID": 3}]}',
    b'{"evictor": {"UID": "u", "Name": "x", "Namespace": "d", "Pod": {}, "Priority": "high"}}',
])
@pytest.mark.parametrize("verb", ["preemptable", "reclaimable"])
async def test_bad_input_abstains_never_a_5xx(client, verb, body):
    http, _ = client
    response = await http.post(f"/volcano/{verb}", data=body, headers={"Content-Type": "application/json"})
    assert response.status == 200
    assert await response.json() == {"status": ABSTAIN, "victims": []}


def test_evictees_are_read_as_go_reads_them():
    pod = dcu_pod("p", uid="p", scheduler=VOLCANO)
    sent = {"UID": "p", "name": "p", "NAMESPACE": "default", "Pod": pod}
    args = parse_evict({"Evictor": {"UID": "e", "Name": "e", "Namespace": "default", "Pod": pod},
                        "EVICTEES": [sent]})
    assert [t.uid for t in args.evictees] == ["p"] and args.sent == [sent]
    assert args.evictees[0].priority == 1  # no Priority and no spec.priority: Volcano's default


def test_two_evictors_pipelined_in_one_session_are_never_promised_one_card():
    pods = shares()
    verbs = verbs_with(pods)
    first, second = evictor(40000), evictor(40000)
    second = Task("urgent-2", second.namespace, "urgent-2", "", PENDING, second.pod, second.priority)
    assert ask(verbs, Purpose.PREEMPT, first, pods) == (PERMIT, ["b2"])
    verbs.deallocate(task(pods[3], RELEASING))  # Volcano evicts b2
    verbs.allocate(Task(first.uid, first.namespace, first.name, "n1", PIPELINED, first.pod, first.priority))
    # Card 1 (45,520 MiB free once b2 goes) is the first's now: with b1 gone too it has 25,520
    # beside the first's 40,000, and card 0 keeps x: nothing frees a card for the second.
    assert ask(verbs, Purpose.PREEMPT, second, pods[:3]) == (REJECT, [])
    with pytest.raises(VolcanoRefused, match="no card there takes it"):
        verbs.allocate(Task(second.uid, second.namespace, second.name, "n1", PIPELINED, second.pod, second.priority))
    # The first's pipeline undone (deallocateFunc, Pending): its card is free for the second.
    verbs.deallocate(Task(first.uid, first.namespace, first.name, "n1", PENDING, first.pod, first.priority))
    assert ask(verbs, Purpose.PREEMPT, second, pods[:3]) == (ABSTAIN, [])
