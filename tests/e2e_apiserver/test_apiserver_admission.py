"""The admission hook point for pod CREATE."""

import json

import pytest
from kubernetes.client.exceptions import ApiException

from hami_dcu.e2e.apiserver import AdmissionDenied


def pod(name, labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def test_hook_sees_the_defaulted_pod_and_namespace_and_its_result_is_stored(api_server, core):
    calls = []

    async def admit(resource, namespace, obj, namespace_obj):
        calls.append((resource, namespace, obj["spec"]["schedulerName"], namespace_obj["metadata"]["labels"]))
        obj["spec"]["schedulerName"] = "hami-scheduler"
        obj["metadata"].setdefault("annotations", {})["hami.io/mutated"] = "yes"
        del obj["status"]  # defaulting runs again after admission
        return obj

    api_server.admission = admit
    core.create_namespace({"metadata": {"name": "gpu", "labels": {"hami.io/webhook": "enabled"}}})
    created = core.create_namespaced_pod("gpu", pod("p"))
    assert created.spec.scheduler_name == "hami-scheduler"
    assert created.metadata.annotations == {"hami.io/mutated": "yes"}
    assert created.status.phase == "Pending"
    assert calls == [("pods", "gpu", "default-scheduler",
                      {"hami.io/webhook": "enabled", "kubernetes.io/metadata.name": "gpu"})]
    assert api_server.store.get("pods", "gpu", "p")["spec"]["schedulerName"] == "hami-scheduler"
    core.create_node({"metadata": {"name": "n1"}})  # only pods are admitted
    assert len(calls) == 1


def test_denial_carries_code_and_message_and_stores_nothing(api_server, core):
    async def deny(resource, namespace, obj, namespace_obj):
        raise AdmissionDenied('admission webhook "vdcu.hami.io" denied the request: too many cards', code=403)

    api_server.admission = deny
    rv = api_server.store.resource_version
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod("default", pod("p"))
    assert info.value.status == 403
    body = json.loads(info.value.body)
    assert body["reason"] == "Forbidden"
    assert body["message"] == 'admission webhook "vdcu.hami.io" denied the request: too many cards'
    assert api_server.store.list("pods")[0] == [] and api_server.store.resource_version == rv


def test_a_failing_hook_is_500(api_server, core):
    async def broken(resource, namespace, obj, namespace_obj):
        raise RuntimeError("boom")

    api_server.admission = broken
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod("default", pod("p"))
    assert info.value.status == 500 and "boom" in json.loads(info.value.body)["message"]
    api_server.admission = None
    assert core.create_namespaced_pod("default", pod("p")).metadata.name == "p"
