"""Malformed /filter and /bind bodies: each answered 200 with a reason in `Error` (or a
per-node reason), never a 500 and never "internal error"; nothing is assumed or written,
and the server keeps answering well-formed requests."""

import json

import pytest
from scheduler_helpers import bind_args, create_nodes, dcu_pod, filter_args, until

from hami_dcu.common.protocol import keys

DCU = keys.DCU_NAMING  # the naming set these tests speak


def filter_body(**pod_overrides) -> bytes:
    pod = dcu_pod("p", uid="u-p")
    pod.update(pod_overrides)
    return json.dumps(filter_args(pod, ["n1"])).encode()


def container_body(**fields) -> bytes:
    pod = dcu_pod("p", uid="u-p")
    pod["spec"]["containers"][0].update(fields)
    return json.dumps(filter_args(pod, ["n1"])).encode()


def nested(depth: int) -> bytes:
    return filter_body().replace(b'"spec": {', b'"spec": {"x": ' + b"[" * depth + b"]" * depth + b", ", 1)


FILTER_ATTACKS = {
    "nested-1000": (nested(1000), "nested deeper than"),
    "nested-100000": (b"[" * 100_000 + b"]" * 100_000, "nested deeper than"),
    "nan-constant": (filter_body().replace(b'"2000"', b"NaN"), "not JSON"),
    "metadata-string": (filter_body(metadata="x"), "metadata must be an object"),
    "uid-object": (filter_body(metadata={"name": "p", "uid": {"a": 1}}), "metadata.uid must be a string"),
    "policy-annotation-int": (filter_body(metadata={"name": "p", "uid": "u-p",
                                                    "annotations": {keys.NODE_SCHEDULER_POLICY: 5}}),
                              f"metadata.annotations.{keys.NODE_SCHEDULER_POLICY} must be a string"),
    "spec-list": (filter_body(spec=[]), "spec must be an object"),
    "containers-string": (filter_body(spec={"containers": "abc"}), "spec.containers must be a list"),
    "container-int": (filter_body(spec={"containers": [3]}), "spec.containers[0] must be an object"),
    "limits-list": (container_body(resources={"limits": ["x"]}), "spec.containers[0].resources.limits must be"),
    "node-item-metadata-string": (json.dumps({"Pod": dcu_pod("p"), "Nodes": {"items": [{"metadata": "x"}]}}).encode(),
                                  "ExtenderArgs.Nodes.items[0].metadata: Not a JSON object."),
    "node-item-int": (json.dumps({"Pod": dcu_pod("p"), "Nodes": {"items": [5]}}).encode(),
                      "ExtenderArgs.Nodes.items[0]: Not a JSON object."),
}


@pytest.mark.parametrize("attack", FILTER_ATTACKS)
async def test_malformed_filter_gets_a_reason_and_changes_nothing(kube, service, client, attack):
    create_nodes(kube, ["n1"])
    await until(lambda: service.cache.node("n1") is not None)
    body, reason = FILTER_ATTACKS[attack]
    response = await client.post("/filter", data=body)
    assert response.status == 200
    answer = await response.json()
    assert reason in answer["Error"], answer
    assert "internal error" not in answer["Error"]
    assert not answer["NodeNames"] and service.cache.placements.all() == []
    good = await (await client.post("/filter", data=filter_body())).json()
    assert good["Error"] == "" and good["NodeNames"] == ["n1"]


async def test_out_of_range_quantity_fails_every_node_with_the_reason(kube, service, client):
    create_nodes(kube, ["n1"])
    await until(lambda: service.cache.node("n1") is not None)
    body = container_body(resources={"limits": {DCU.resources.count: "1" * 5000}})
    answer = await (await client.post("/filter", data=body)).json()
    assert answer["NodeNames"] == [] and "out of range" in answer["FailedAndUnresolvableNodes"]["n1"]
    assert len(answer["FailedAndUnresolvableNodes"]["n1"]) < 300
    assert service.cache.placements.all() == []


BIND_ATTACKS = {
    "nested-1000": (b"[" * 1000 + b"]" * 1000, "nested deeper than"),
    "pod-name-path": ({"PodName": "../../nodes/n1", "PodNamespace": "default", "Node": "n1"},
                      "ExtenderBindingArgs.PodName"),
    "pod-name-surrogate": ({"PodName": "p\ud800", "PodNamespace": "default", "Node": "n1"},
                           "ExtenderBindingArgs.PodName"),
    "namespace-upper": ({"PodName": "p", "PodNamespace": "Default", "Node": "n1"}, "ExtenderBindingArgs.PodNamespace"),
    "namespace-int": ({"PodName": "p", "PodNamespace": 5, "Node": "n1"}, "ExtenderBindingArgs.PodNamespace"),
    "node-too-long": ({"PodName": "p", "PodNamespace": "default", "Node": "n" * 254}, "ExtenderBindingArgs.Node"),
    "uid-object": ({"PodName": "p", "PodNamespace": "default", "Node": "n1", "PodUID": {}},
                   "ExtenderBindingArgs.PodUID"),
}


@pytest.mark.parametrize("attack", BIND_ATTACKS)
async def test_malformed_bind_gets_a_reason_and_changes_nothing(kube, service, client, attack):
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("p"))
    await until(lambda: service.cache.node("n1") is not None)
    body, reason = BIND_ATTACKS[attack]
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await client.post("/bind", data=raw)
    assert response.status == 200
    answer = await response.json()
    assert reason in answer["Error"] and "internal error" not in answer["Error"]
    stored = kube.get_pod("default", "p")
    assert not stored["spec"].get("nodeName") and keys.POD_NODE not in stored["metadata"].get("annotations", {})
    assert (await (await client.post("/bind", json=bind_args(pod, "n1"))).json()) == {"Error": ""}
