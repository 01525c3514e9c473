"""hami-dcu as upstream Volcano's extender (issue 34): the verbs of Volcano's extender plugin
under /volcano/, in the wire format Volcano v1.15.1 really sends (recorded by
e2e/test_realcluster_volcano_peer.py), over the same cache and fit as /filter.

A session: predicates see what earlier allocates of the session reserved; allocate writes
the allocation on the pod (no node lock); deallocate undoes exactly that; a session close
forgets nothing Volcano binds. Bad input: a 200 with the verb's error field, never a 5xx."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from scheduler_helpers import create_nodes, dcu_pod, lock_of, until

from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import decode_pod_devices
from hami_dcu.scheduler.filtering import FilterSettings
from hami_dcu.scheduler.service import SchedulerService, ServiceSettings
from hami_dcu.scheduler.volcanoapp import build_volcano_app
from hami_dcu.scheduler.volcanoverbs import VolcanoRefused, volcano_entries
from hami_dcu.scheduler.volcanowire import ALLOCATED, PENDING, PIPELINED, RUNNING

DCU = keys.DCU_NAMING
VOLCANO = "volcano"
JSON = dict[str, Any]


@pytest.fixture
async def world(kube, aiohttp_client) -> AsyncIterator[tuple[SchedulerService, Any]]:
    akube = AsyncKube(kube)
    service = SchedulerService(akube, ServiceSettings(filter=FilterSettings(naming=DCU, volcano_scheduler=VOLCANO)))
    service.start()
    assert await service.wait_synced(10)
    yield service, await aiohttp_client(build_volcano_app(service))
    await service.stop()
    akube.close()
    kube.api_client.rest_client.pool_manager.clear()


def share(kube, name: str, memory: int = 30000, cores: int = 50, count: int = 1) -> JSON:
    return kube.create_pod("default", dcu_pod(name, memory=memory, cores=cores, count=count, scheduler=VOLCANO))


def task(pod: JSON, node: str = "", status: int = ALLOCATED) -> JSON:
    """A TaskInfo as Volcano sends it (Go field names), the pod inside."""
    meta = pod["metadata"]
    return {"UID": meta.get("uid", ""), "Job": "default/gang", "Name": meta["name"], "Namespace": meta["namespace"],
            "NodeName": node, "Status": status, "Resreq": {"MilliCPU": 0}, "Pod": pod}


def node_info(name: str) -> JSON:
    return {"Name": name, "Node": {"metadata": {"name": name}}, "Tasks": {}}


async def post(client, verb: str, body: object) -> JSON:
    response = await client.post(f"/volcano/{verb}", json=body)
    assert response.status == 200, await response.text()
    return await response.json()


async def predicate(client, pod: JSON, node: str) -> JSON:
    return await post(client, "predicate", {"task": task(pod, status=PENDING), "node": node_info(node)})


async def allocate(client, pod: JSON, node: str, status: int = ALLOCATED) -> JSON:
    return await post(client, "allocateFunc", {"task": task(pod, node, status)})


async def deallocate(client, pod: JSON, node: str) -> JSON:
    return await post(client, "deallocateFunc", {"task": task(pod, node, PENDING)})


def allocation(kube, name: str) -> dict[str, str]:
    annotations = kube.get_pod("default", name)["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k in keys.SCHEDULER_OWNED_POD_ANNOTATIONS}


def cards_of(kube, name: str) -> list[str]:
    value = allocation(kube, name)[DCU.pod_devices_allocated]
    return [d.uuid for entry in decode_pod_devices(value) for d in entry]


async def test_a_gang_fills_a_node_in_one_session_and_later_predicates_see_it(kube, world):
    service, client = world
    create_nodes(kube, ["n1"])
    await until(lambda: service.cache.node("n1") is not None)
    await post(client, "onSessionOpen", {"Jobs": {}, "Nodes": {}, "Queues": {}})
    # 2 cards of 65520 MiB: two shares of 30000 MiB and 50 percent each per card.
    gang = [share(kube, f"g-{i}") for i in range(4)]
    for pod in gang:
        assert await predicate(client, pod, "n1") == {"status": "", "code": 0}
        assert await allocate(client, pod, "n1") == {"errorMessage": ""}
    extra = share(kube, "extra")
    refused = await predicate(client, extra, "n1")
    assert refused["code"] == 2 and "does not fit node n1" in refused["status"], refused
    # Written as the device plugin's lockless path serves a Volcano pod, with no node lock.
    for pod in gang:
        written = allocation(kube, pod["metadata"]["name"])
        assert written[DCU.pod_devices_to_allocate] == written[DCU.pod_devices_allocated]
        assert written[keys.POD_NODE] == "n1" and written[keys.POD_BIND_PHASE] == keys.BIND_PHASE_ALLOCATING
    assert lock_of(kube, "n1") is None
    per_card: dict[str, int] = {}
    for pod in gang:
        for card in cards_of(kube, pod["metadata"]["name"]):
            per_card[card] = per_card.get(card, 0) + 1
    assert sorted(per_card.values()) == [2, 2], per_card
    # Deallocate of one member frees its share for the next predicate.
    assert await deallocate(client, gang[3], "n1") == {"errorMessage": ""}
    assert allocation(kube, "g-3") == {}
    assert await predicate(client, extra, "n1") == {"status": "", "code": 0}


async def test_a_gang_rolled_back_leaves_no_annotation_and_no_slot(kube, world):
    service, client = world
    create_nodes(kube, ["n1"])
    await until(lambda: service.cache.node("n1") is not None)
    gang = [share(kube, f"r-{i}", memory=40000) for i in range(3)]  # one per card: the third cannot fit
    for pod in gang[:2]:
        assert await allocate(client, pod, "n1") == {"errorMessage": ""}
    third = await allocate(client, gang[2], "n1")
    assert "does not fit node n1" in third["errorMessage"]
    # Volcano rolls the refused one back (a deallocate of what we never wrote) and discards the rest.
    for pod in reversed(gang):
        assert await deallocate(client, pod, "n1") == {"errorMessage": ""}
    await post(client, "onSessionClose", {})
    assert [allocation(kube, p["metadata"]["name"]) for p in gang] == [{}, {}, {}]
    assert service.cache.placements.all() == []
    assert lock_of(kube, "n1") is None


async def test_a_session_close_keeps_what_volcano_binds(kube, world):
    service, client = world
    create_nodes(kube, ["n1"])
    await until(lambda: service.cache.node("n1") is not None)
    pod = share(kube, "kept")
    assert await allocate(client, pod, "n1") == {"errorMessage": ""}
    await post(client, "onSessionClose", {})
    # Committed: a later deallocate (an eviction of the running pod) removes nothing.
    assert await deallocate(client, pod, "n1") == {"errorMessage": ""}
    assert allocation(kube, "kept")[keys.POD_NODE] == "n1"
    assert [a.name for a in service.cache.placements.all()] == ["kept"]


async def test_deallocate_leaves_a_bound_pod_alone(kube, world):
    service, client = world
    create_nodes(kube, ["n1"])
    await until(lambda: service.cache.node("n1") is not None)
    pod = share(kube, "b")
    assert await allocate(client, pod, "n1") == {"errorMessage": ""}
    kube.create_binding("default", "b", "n1")
    assert await deallocate(client, pod, "n1") == {"errorMessage": ""}
    assert allocation(kube, "b")[keys.POD_NODE] == "n1"


async def test_pipelined_and_running_tasks_write_nothing(kube, world):
    service, client = world
    create_nodes(kube, ["n1"])
    await until(lambda: service.cache.node("n1") is not None)
    pod = share(kube, "p")
    for status in (PIPELINED, RUNNING):
        assert await allocate(client, pod, "n1", status) == {"errorMessage": ""}
    assert allocation(kube, "p") == {}
    assert service.cache.placements.all() == []


async def test_a_pod_without_dcu_passes_and_writes_nothing(kube, world):
    _, client = world
    plain = kube.create_pod("default", {"metadata": {"name": "plain", "namespace": "default"},
                                        "spec": {"schedulerName": VOLCANO, "containers": [{"name": "c"}]}})
    assert await predicate(client, plain, "nowhere") == {"status": "", "code": 0}
    assert await allocate(client, plain, "nowhere") == {"errorMessage": ""}
    assert allocation(kube, "plain") == {}


async def test_refusals_say_why(kube, world):
    service, client = world
    create_nodes(kube, ["n1"])
    await until(lambda: service.cache.node("n1") is not None)
    other = kube.create_pod("default", dcu_pod("other", scheduler="default-scheduler"))
    answer = await predicate(client, other, "n1")
    assert answer["code"] == 3 and "schedulerName 'default-scheduler'" in answer["status"]
    unknown = await predicate(client, share(kube, "u"), "n9")
    assert unknown["code"] == 2 and "n9" in unknown["status"]
    nowhere = await post(client, "allocateFunc", {"task": task(share(kube, "x"), "")})
    assert "names no node" in nowhere["errorMessage"]


@pytest.mark.parametrize("verb", ["predicate", "prioritize", "allocateFunc", "deallocateFunc", "preemptable",
                                  "reclaimable"])
@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"task": 3}', b'{"task": {"Name": "x"}}',
                                  b'{"task": {"UID": "u", "Name": "x", "Namespace": "d", "Pod": []}}'])
async def test_bad_input_gets_a_clear_error_never_a_5xx(world, verb, body):
    _, client = world
    response = await client.post(f"/volcano/{verb}", data=body, headers={"Content-Type": "application/json"})
    assert response.status == 200
    answer = await response.json()
    error = answer.get("status") if verb == "predicate" else answer.get("errorMessage")
    if verb == "predicate":
        assert answer["code"] == 1 and error
    elif verb in ("preemptable", "reclaimable"):
        assert answer == {"status": 0, "victims": []}  # abstain
    else:
        assert error


async def test_prioritize_scores_every_node_and_sessions_answer_empty(kube, world):
    _, client = world
    pod = share(kube, "s")
    answer = await post(client, "prioritize", {"task": task(pod, status=PENDING),
                                               "nodes": [node_info("a"), node_info("b")]})
    assert answer == {"nodeScore": {"a": 0.0, "b": 0.0}, "errorMessage": ""}
    assert await post(client, "onSessionOpen", {"Jobs": {"x": {"Name": "x"}}, "NodeList": None}) == {}
    response = await client.post("/volcano/onSessionClose", data=b"garbage")
    assert response.status == 200 and await response.json() == {}


def test_entries_follow_the_plugins_layout_for_volcano_pods():
    names = DCU.resources
    pod = {"spec": {"containers": [
        {"name": "side"},
        {"name": "main", "resources": {"limits": {names.count: "1", names.memory: "1000"}}}]}}
    from hami_dcu.common.protocol.codec import ContainerDevice

    held = [ContainerDevice("C0", "DCU", 1000, 10)]
    assert volcano_entries(pod, [[], held], names) == [held]
    init = {"spec": {"initContainers": [{"name": "i"}], "containers": pod["spec"]["containers"]}}
    with pytest.raises(VolcanoRefused, match="init container i"):
        volcano_entries(init, [held, [], held], names)
    cores_only = {"spec": {"containers": [{"name": "c", "resources": {"limits": {names.cores: "10"}}}]}}
    with pytest.raises(VolcanoRefused, match="without"):
        volcano_entries(cores_only, [held], names)


def test_the_listener_needs_volcanos_scheduler_name():
    from hami_dcu.cli.main import build_parser
    from hami_dcu.scheduler import command

    parser, _ = build_parser()
    with pytest.raises(ValueError, match="--volcano-bind needs --volcano-scheduler-name"):
        command._check_listeners(parser.parse_args(["scheduler", "--volcano-bind", "0.0.0.0:8446"]), None)
    command._check_listeners(parser.parse_args(["scheduler", "--volcano-bind", "0.0.0.0:8446",
                                                "--volcano-scheduler-name", VOLCANO]), None)
