"""Pods that reached the extender without the webhook (issue 21): an opt-out label, a webhook
down under failurePolicy Ignore, schedulerName set by hand. /filter and /bind apply admission's
checks again and refuse with admission's words; no card is handed out, nothing is locked."""

from __future__ import annotations

import pytest
from scheduler_helpers import bind_args, create_nodes, dcu_pod, filter_args, lock_of, until

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.podchecks import CheckSettings, Stage, refusal_of

DCU = keys.DCU_NAMING  # the naming set these tests speak


def with_label(pod: dict) -> dict:
    pod["metadata"]["labels"] = {keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}
    return pod


def multi_card_share() -> dict:
    return with_label(dcu_pod("twocards", memory=1000, cores=10, count=2, uid="u-two"))


def privileged_pod() -> dict:
    pod = with_label(dcu_pod("priv", uid="u-priv"))
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return pod


def init_share() -> dict:
    pod = with_label(dcu_pod("init", uid="u-init"))
    pod["spec"]["initContainers"] = [{"name": "setup", "resources": {"limits": {
        DCU.resources.count: "1", DCU.resources.memory: "500"}}}]
    return pod


def failed_events(kube) -> list[str]:
    events = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    return [e["message"] for e in events if e["reason"] == "FilteringFailed"]


@pytest.mark.parametrize("build", [multi_card_share, privileged_pod, init_share])
async def test_filter_refuses_on_every_node_with_the_webhooks_words(kube, service, client, build):
    create_nodes(kube, ["n1", "n2"])
    pod = kube.create_pod("default", build())
    await until(lambda: all(service.cache.node(n) is not None for n in ("n1", "n2")))
    expected = refusal_of(pod, CheckSettings(DCU.resources), Stage.PLACE)
    assert expected is not None
    answer = await (await client.post("/filter", json=filter_args(pod, ["n1", "n2"]))).json()
    assert answer["NodeNames"] == [] and answer["Error"] == ""
    assert answer["FailedAndUnresolvableNodes"] == {"n1": expected.message, "n2": expected.message}
    assert service.cache.placements.all() == []
    await until(lambda: any(expected.message in m for m in failed_events(kube)))


async def test_bind_without_a_filter_refuses_too_and_takes_no_lock(kube, service, client):
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", multi_card_share())
    await until(lambda: service.cache.node("n1") is not None)
    reply = await (await client.post("/bind", json=bind_args(pod, "n1"))).json()
    assert "multi-card-sharing" in reply["Error"] and "one shared vDCU" in reply["Error"]
    stored = kube.get_pod("default", "twocards")
    assert not stored["spec"].get("nodeName")
    assert DCU.pod_devices_to_allocate not in (stored["metadata"].get("annotations") or {})
    assert not lock_of(kube, "n1")


async def test_a_native_sidecar_share_is_placed_beside_the_app_container(kube, service, client):
    create_nodes(kube, ["n1"])
    pod = dcu_pod("side", memory=2000, cores=30, uid="u-side")
    pod["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {
        DCU.resources.count: "1", DCU.resources.memory: "500", DCU.resources.cores: "10"}}}]
    pod = kube.create_pod("default", pod)
    await until(lambda: service.cache.node("n1") is not None)
    answer = await (await client.post("/filter", json=filter_args(pod, ["n1"]))).json()
    assert answer["NodeNames"] == ["n1"], answer
    assert await (await client.post("/bind", json=bind_args(pod, "n1"))).json() == {"Error": ""}


async def test_a_forged_type_annotation_reaches_reasons_and_events_escaped(kube, service, client):
    # use-dcutype is the pod author's text; kube-scheduler logs FailedNodes and the event is
    # what `kubectl describe` prints: a newline or a terminal escape must not get through.
    create_nodes(kube, ["n1"])
    forged = "Z100\nI0101 00:00:00 scheduler: pod kube-system/x bound\x1b]0;owned\x07"
    pod = kube.create_pod("default", dcu_pod("typed", uid="u-typed", annotations={DCU.use_type: forged}))
    await until(lambda: service.cache.node("n1") is not None)
    answer = await (await client.post("/filter", json=filter_args(pod, ["n1"]))).json()
    reason = answer["FailedNodes"]["n1"]
    assert "type mismatch" in reason and "\n" not in reason and "\x1b" not in reason
    await until(lambda: any("Z100" in m for m in failed_events(kube)))
    message = next(m for m in failed_events(kube) if "Z100" in m)
    assert "Z100\\nI0101" in message  # the node's own figures name the value, escaped
    assert "\n" not in message and "\x1b" not in message and "\x07" not in message


async def test_forged_scoring_weights_reach_the_event_escaped(kube, service, client):
    create_nodes(kube, ["n1"])
    weights = "slot=1\n\x1b[31mI0101 forged,core=1,memory=1"
    pod = kube.create_pod("default", dcu_pod("weighted", uid="u-w",
                                             annotations={keys.DEVICE_SCORING_WEIGHTS: weights}))
    await until(lambda: service.cache.node("n1") is not None)
    answer = await (await client.post("/filter", json=filter_args(pod, ["n1"]))).json()
    reason = answer["FailedAndUnresolvableNodes"]["n1"]
    assert "\\n\\x1b[31m" in reason and "\n" not in reason and "\x1b" not in reason
    await until(lambda: any(keys.DEVICE_SCORING_WEIGHTS in m for m in failed_events(kube)))
    assert all("\x1b" not in m and "\n" not in m for m in failed_events(kube))
