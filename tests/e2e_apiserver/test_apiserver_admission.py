"""The admission hook point for pod CREATE."""

import json

import pytest
from kubernetes.client.exceptions import ApiException

from hami_dcu.cli.localcluster.apiserver import AdmissionDenied
from hami_dcu.common.io.kube import Kube, KubeError


def pod(name, labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def test_hook_sees_the_defaulted_pod_and_namespace_and_its_result_is_stored(api_server, core):
    calls = []

    async def admit(attributes):
        obj = attributes.object
        calls.append((attributes.resource, attributes.namespace, obj["spec"]["schedulerName"],
                      attributes.namespace_object["metadata"]["labels"]))
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
    async def deny(attributes):
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
    async def broken(attributes):
        raise RuntimeError("boom")

    api_server.admission = broken
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod("default", pod("p"))
    assert info.value.status == 500 and "boom" in json.loads(info.value.body)["message"]
    api_server.admission = None
    assert core.create_namespaced_pod("default", pod("p")).metadata.name == "p"


def test_updates_patches_and_bindings_are_admitted_with_the_old_object_and_the_caller(api_server, kube):
    """As kube-apiserver: every pod write goes through admission, not only CREATE (issue 21), so
    the fast tests see what a webhook registered for UPDATE and pods/binding would see."""
    seen = []

    async def admit(attributes):
        old = attributes.old_object
        seen.append((attributes.operation, attributes.subresource, attributes.kind, attributes.user["username"],
                     (old or {}).get("metadata", {}).get("labels"), attributes.object["metadata"].get("labels")))
        if (attributes.object["metadata"].get("annotations") or {}).get("forbidden"):
            raise AdmissionDenied("no forbidden annotation", code=403)
        return attributes.object

    kube.create_pod("default", pod("p", labels={"v": "1"}))
    api_server.admission = admit
    tenant = Kube.from_kubeconfig(str(api_server.credentials("alice", {"x": ["y"]})))
    tenant.patch_pod_metadata("default", "p", labels={"v": "2"})
    assert seen[-1] == ("UPDATE", "", "Pod", "alice", {"v": "1"}, {"v": "2"})
    current = kube.get_pod("default", "p")
    current["metadata"]["labels"]["v"] = "3"
    kube.request("PUT", "/api/v1/namespaces/default/pods/p", body=current)
    assert seen[-1] == ("UPDATE", "", "Pod", "local-cluster", {"v": "2"}, {"v": "3"})
    with pytest.raises(KubeError) as info:
        tenant.patch_pod_metadata("default", "p", annotations={"forbidden": "1"})
    assert info.value.status == 403 and "no forbidden annotation" in info.value.message
    assert "forbidden" not in (kube.get_pod("default", "p")["metadata"].get("annotations") or {})
    with pytest.raises(KubeError):
        tenant.create_binding("default", "p", "n1", None, {"forbidden": "1"})
    assert seen[-1][:4] == ("CREATE", "binding", "Binding", "alice")
    assert not kube.get_pod("default", "p")["spec"].get("nodeName")
    tenant.create_binding("default", "p", "n1", None, {"fine": "1"})
    assert kube.get_pod("default", "p")["spec"]["nodeName"] == "n1"


def test_an_update_racing_another_write_is_admitted_again_on_the_newer_pod(api_server, kube):
    kube.create_pod("default", pod("p"))
    olds = []

    async def admit(attributes):
        olds.append(attributes.old_object["metadata"]["resourceVersion"])
        if len(olds) == 1:  # another client writes while this update is being admitted
            api_server.store.patch("pods", "default", "p", {"metadata": {"labels": {"other": "1"}}})
        return attributes.object

    api_server.admission = admit
    updated = kube.patch_pod_metadata("default", "p", labels={"mine": "1"})
    assert updated["metadata"]["labels"] == {"other": "1", "mine": "1"}  # neither write lost
    assert len(olds) == 2 and olds[0] != olds[1]
