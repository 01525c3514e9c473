"""/filter and /bind over HTTP against the local API server: the happy path and every
failure path (the lock is released every time)."""

from scheduler_helpers import bind_args, create_nodes, dcu_pod, filter_args, lock_of, until

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import decode_lock, decode_pod_devices

DCU = keys.DCU_NAMING  # the naming set these tests speak


async def created(kube, pod):
    return kube.create_pod("default", pod)


async def test_filter_then_bind_writes_allocation_atomically_in_two_calls(kube, service, client):
    create_nodes(kube, ["n1", "n2"])
    pod = await created(kube, dcu_pod("p"))
    await until(lambda: service.cache.node("n2") is not None and service.cache.node("n2").present)
    answer = await (await client.post("/filter", json=filter_args(pod, ["n1", "n2"]))).json()
    assert answer["Error"] == ""
    assert answer["NodeNames"] == ["n1"]  # binpack tie -> name order
    assert answer["FailedNodes"] == {}
    reply = await (await client.post("/bind", json=bind_args(pod, "n1"))).json()
    assert reply == {"Error": ""}
    stored = kube.get_pod("default", "p")
    annotations = stored["metadata"]["annotations"]
    assert stored["spec"]["nodeName"] == "n1"
    assert annotations[keys.POD_BIND_PHASE] == keys.BIND_PHASE_ALLOCATING
    assert annotations[keys.POD_NODE] == "n1"
    assert annotations[DCU.pod_devices_to_allocate] == annotations[DCU.pod_devices_allocated]
    devices = decode_pod_devices(annotations[DCU.pod_devices_allocated])
    assert [(d.uuid, d.usedmem, d.usedcores) for d in devices[0]] == [("DCU-n1-S1", 2000, 60)]  # HAMi's order
    lock = decode_lock(lock_of(kube, "n1"))
    assert (lock.namespace, lock.name) == ("default", "p")
    # lock patch + Binding: two API round trips
    samples = {s.name: s.value for m in service.metrics.registry.collect() for s in m.samples}
    assert samples["hami_dcu_scheduler_bind_api_calls_sum"] == 2


async def test_pod_without_dcu_passes_all_nodes_unchanged(kube, service, client):
    create_nodes(kube, ["n1"])
    pod = {"metadata": {"name": "plain", "namespace": "default", "uid": "u1"},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    answer = await (await client.post("/filter", json={"pod": pod, "nodenames": ["n1", "ghost"]})).json()
    assert answer["NodeNames"] == ["n1", "ghost"]
    assert service.cache.placements.all() == []


async def test_failed_nodes_carry_readable_reasons(kube, service, client):
    create_nodes(kube, ["small"], memory=1024)
    create_nodes(kube, ["big"])
    pod = await created(kube, dcu_pod("p", annotations={DCU.use_type: "Z100"}))
    await until(lambda: service.cache.node("big") is not None and service.cache.node("small") is not None)
    answer = await (await client.post("/filter", json=filter_args(pod, ["small", "big", "ghost"]))).json()
    assert answer["NodeNames"] == []
    failed = answer["FailedNodes"]
    # The same failure reads the same on every node, so kube-scheduler counts nodes per reason
    # instead of listing one message per node; no "%" (kube-scheduler printf-formats reasons).
    assert failed["big"] == failed["small"] == "card type mismatch: container main needs 1 card x (2000 MiB, " \
        "60 percent of cores)"
    assert "not in the scheduler cache" in failed["ghost"]
    assert not any("%" in reason for reason in failed.values())
    pod2 = await created(kube, dcu_pod("q"))
    answer = await (await client.post("/filter", json=filter_args(pod2, ["small"]))).json()
    assert answer["FailedNodes"]["small"].startswith("insufficient card memory: container main needs")

    def messages():
        events = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
        return [e["message"] for e in events if e["reason"] == "FilteringFailed"]

    await until(lambda: len(messages()) == 2)
    joined = " | ".join(messages())
    assert "2 nodes: card type mismatch; 1 node: node not in scheduler cache" in joined
    # One node's own figures ride along in our event, where the card detail helps.
    assert "for example big: container main needs" in joined
    assert "model DCU-K100_AI not in hygon.com/use-dcutype=Z100" in joined
    assert "1 node: insufficient card memory; for example small:" in joined
    assert "card DCU-small-S0: 1024 MiB free < 2000 MiB requested" in joined


async def test_filter_with_full_node_objects_returns_nodes(kube, service, client):
    create_nodes(kube, ["n1"])
    pod = await created(kube, dcu_pod("p"))
    await until(lambda: service.cache.node("n1") is not None)
    body = {"Pod": pod, "Nodes": {"metadata": {}, "items": [kube.get_node("n1")]}, "NodeNames": None}
    answer = await (await client.post("/filter", json=body)).json()
    assert answer["NodeNames"] is None
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["n1"]


async def test_bad_bodies_get_an_error_and_change_nothing(kube, service, client):
    for body in (b"not json", b"[]", b'{"Pod": 3}'):
        answer = await (await client.post("/filter", data=body)).json()
        assert answer["Error"]
    answer = await (await client.post("/bind", data=b'{"PodName": ""}')).json()
    assert "PodName" in answer["Error"]
    assert service.cache.placements.all() == []
    assert (await client.get("/healthz")).status == 200


async def test_bind_without_filter_fits_at_bind_time(kube, service, client):
    create_nodes(kube, ["n1"])
    pod = await created(kube, dcu_pod("p"))
    await until(lambda: service.cache.node("n1") is not None)
    reply = await (await client.post("/bind", json=bind_args(pod, "n1"))).json()
    assert reply == {"Error": ""}
    assert kube.get_pod("default", "p")["metadata"]["annotations"][DCU.pod_devices_allocated].startswith("DCU-n1")


async def test_bind_of_missing_pod_fails_and_leaves_no_lock(kube, service, client):
    create_nodes(kube, ["n1"])
    pod = await created(kube, dcu_pod("p"))
    await until(lambda: service.cache.node("n1") is not None)
    await client.post("/filter", json=filter_args(pod, ["n1"]))
    kube.delete_pod("default", "p")
    await until(lambda: service.cache.placements.all() == [])  # the delete drops the assumption
    reply = await (await client.post("/bind", json=bind_args(pod, "n1"))).json()
    assert "not found" in reply["Error"]
    assert lock_of(kube, "n1") is None


async def test_binding_rejected_releases_lock_and_forgets_assumption(kube, service, client):
    create_nodes(kube, ["n1", "n2"])
    pod = await created(kube, dcu_pod("p"))
    await until(lambda: service.cache.node("n2") is not None)
    await client.post("/filter", json=filter_args(pod, ["n1"]))
    # someone else bound it meanwhile: the Binding gets 409 "already assigned"
    kube.create_binding("default", "p", "n2")
    reply = await (await client.post("/bind", json=bind_args(pod, "n1"))).json()
    assert "already bound to node n2" in reply["Error"]  # the pod's own word, not the assumption's
    assert lock_of(kube, "n1") is None
    assert service.cache.placements.find(pod["metadata"]["uid"], "default", "p") is None


async def test_bind_fails_after_bounded_wait_on_a_held_lock_and_keeps_the_holders_lock(kube, service, client):
    create_nodes(kube, ["n1"])
    holder = await created(kube, dcu_pod("holder"))
    pod = await created(kube, dcu_pod("p", memory=1000, cores=10))
    await until(lambda: service.cache.node("n1") is not None)
    assert (await (await client.post("/bind", json=bind_args(holder, "n1"))).json()) == {"Error": ""}
    await client.post("/filter", json=filter_args(pod, ["n1"]))
    reply = await (await client.post("/bind", json=bind_args(pod, "n1"))).json()
    assert "locked by default/holder" in reply["Error"]
    assert decode_lock(lock_of(kube, "n1")).name == "holder"
    assert kube.get_pod("default", "p")["spec"].get("nodeName") in (None, "")


async def test_waiting_bind_succeeds_when_holder_releases(kube, service, client):
    create_nodes(kube, ["n1"])
    holder = await created(kube, dcu_pod("holder"))
    pod = await created(kube, dcu_pod("p", memory=1000, cores=10))
    await until(lambda: service.cache.node("n1") is not None)
    assert (await (await client.post("/bind", json=bind_args(holder, "n1"))).json()) == {"Error": ""}
    import asyncio

    waiting = asyncio.ensure_future(client.post("/bind", json=bind_args(pod, "n1")))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    # the device plugin finishes Allocate and releases the lock
    kube.patch_node_metadata("n1", annotations={keys.NODE_LOCK: None})
    reply = await (await waiting).json()
    assert reply == {"Error": ""}
    assert decode_lock(lock_of(kube, "n1")).name == "p"


async def test_deleting_the_lock_holder_releases_its_lock(kube, service, client):
    create_nodes(kube, ["n1"])
    holder = await created(kube, dcu_pod("holder"))
    await until(lambda: service.cache.node("n1") is not None)
    assert (await (await client.post("/bind", json=bind_args(holder, "n1"))).json()) == {"Error": ""}
    assert lock_of(kube, "n1") is not None
    kube.delete_pod("default", "holder")
    await until(lambda: lock_of(kube, "n1") is None)


async def test_api_errors_on_binding_release_the_lock(kube, service, client, api_server):
    create_nodes(kube, ["n1"])
    pod = await created(kube, dcu_pod("p"))
    await until(lambda: service.cache.node("n1") is not None)
    await client.post("/filter", json=filter_args(pod, ["n1"]))
    api_server.faults.configure(error_rate=1.0, match=lambda method, path: path.endswith("/binding"))
    reply = await (await client.post("/bind", json=bind_args(pod, "n1"))).json()
    api_server.faults.clear()
    assert reply["Error"]
    assert lock_of(kube, "n1") is None
    assert kube.get_pod("default", "p")["spec"].get("nodeName") in (None, "")


async def test_lock_patch_failure_answers_error_and_leaves_nothing(kube, service, client, api_server):
    create_nodes(kube, ["n1"])
    pod = await created(kube, dcu_pod("p"))
    await until(lambda: service.cache.node("n1") is not None)
    await client.post("/filter", json=filter_args(pod, ["n1"]))
    api_server.faults.configure(error_rate=1.0, match=lambda method, path: method == "PATCH")
    reply = await (await client.post("/bind", json=bind_args(pod, "n1"))).json()
    api_server.faults.clear()
    assert "cannot lock node n1" in reply["Error"]
    assert lock_of(kube, "n1") is None
    assert service.cache.placements.all() == []


async def test_stale_handshake_makes_node_unusable(kube, service, client):
    from datetime import UTC, datetime, timedelta

    from scheduler_helpers import node_object

    kube.create_node(node_object("old", handshake=datetime.now(UTC) - timedelta(seconds=120)))
    pod = await created(kube, dcu_pod("p"))
    await until(lambda: service.cache.node("old") is not None)
    answer = await (await client.post("/filter", json=filter_args(pod, ["old"]))).json()
    assert "last reported 12" in answer["FailedNodes"]["old"]


async def test_allocation_has_one_entry_per_container_init_first(kube, service, client):
    create_nodes(kube, ["n1"])
    limits = {DCU.resources.count: "1", DCU.resources.memory: "1000",
              DCU.resources.cores: "30"}
    pod = {"metadata": {"name": "multi", "namespace": "default"},
           "spec": {"schedulerName": keys.DEFAULT_SCHEDULER_NAME,
                    "initContainers": [{"name": "setup", "image": "x"}],
                    "containers": [{"name": "a", "image": "x", "resources": {"limits": limits}},
                                   {"name": "sidecar", "image": "x"},
                                   {"name": "b", "image": "x", "resources": {"limits": limits}}]}}
    pod = await created(kube, pod)
    await until(lambda: service.cache.node("n1") is not None)
    answer = await (await client.post("/filter", json=filter_args(pod, ["n1"]))).json()
    assert answer["NodeNames"] == ["n1"]
    assert (await (await client.post("/bind", json=bind_args(pod, "n1"))).json()) == {"Error": ""}
    value = kube.get_pod("default", "multi")["metadata"]["annotations"][DCU.pod_devices_to_allocate]
    entries = decode_pod_devices(value)
    assert [len(e) for e in entries] == [0, 1, 0, 1]
    # spread: the two app containers land on the two cards
    assert {entries[1][0].uuid, entries[3][0].uuid} == {"DCU-n1-S0", "DCU-n1-S1"}
    assert value.startswith(";") and value.count(";") == 4


async def test_a_lock_written_on_the_version_the_watch_showed_needs_no_echo_from_the_watch(kube, service, client):
    """The lock write was a compare-and-swap on the node's version the cache holds: nothing
    happened to the node in between, so the node object the write returns is the cache's next
    state. The Binding goes out at once, however late the watch brings the lock back."""
    create_nodes(kube, ["n1"])
    pod = await created(kube, dcu_pod("p"))
    await until(lambda: service.cache.node("n1") is not None and service.cache.node("n1").present)
    apply = service.informer._apply

    def slow_node_watch(resource, event):  # the watch never brings a locked n1 back
        annotations = ((event.get("object") or {}).get("metadata") or {}).get("annotations") or {}
        if resource == "nodes" and keys.NODE_LOCK in annotations:
            return None
        return apply(resource, event)

    service.informer._apply = slow_node_watch
    await client.post("/filter", json=filter_args(pod, ["n1"]))
    reply = await (await client.post("/bind", json=bind_args(pod, "n1"))).json()
    assert reply == {"Error": ""}
    assert kube.get_pod("default", "p")["spec"]["nodeName"] == "n1"
    samples = {s.name: s.value for m in service.metrics.registry.collect() for s in m.samples}
    assert samples["hami_dcu_scheduler_bind_api_calls_sum"] == 2  # lock + Binding: no list of the node's pods
    assert samples["hami_dcu_scheduler_bind_seconds_sum"] < service.settings.bind.settle_wait
