"""Verbs of the local API server that the kube layer tests do not already cover."""

import json
import threading

import pytest
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from hami_dcu.cli.localcluster.apiserver import AdmissionDenied
from hami_dcu.common.io.kube import KubeError, NotFoundError


def pod(name, node=None, labels=None):
    spec = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def test_pod_defaults_and_generate_name(kube):
    created = kube.create_pod("default", {"metadata": {"generateName": "job-"}, "spec": {"containers": []}})
    assert created["metadata"]["name"].startswith("job-")
    assert created["spec"]["schedulerName"] == "default-scheduler"
    assert created["status"]["phase"] == "Pending"
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]


def test_create_in_missing_namespace_is_404(kube):
    with pytest.raises(NotFoundError):
        kube.create_pod("nowhere", pod("p"))


def test_strategic_merge_by_model_client(core, kube):
    """The generated client sends dict bodies as strategic merge patches."""
    kube.create_pod("default", pod("p"))
    core.patch_namespaced_pod("p", "default", {"metadata": {"annotations": {"a": "1", "b": "2"}}})
    core.patch_namespaced_pod("p", "default", {"metadata": {"annotations": {"a": None}}})
    annotations = kube.get_pod("default", "p")["metadata"]["annotations"]
    assert annotations == {"b": "2"}


def test_strategic_merge_merges_containers_by_name(kube):
    kube.create_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}})
    kube.request("PATCH", "/api/v1/namespaces/default/pods/p", body={"spec": {"containers": [
        {"name": "b", "image": "z"}]}}, content_type="application/strategic-merge-patch+json")
    images = [c["image"] for c in kube.get_pod("default", "p")["spec"]["containers"]]
    assert images == ["x", "z"]


def test_json_patch_and_failed_test_op(kube, node):
    kube.request("PATCH", f"/api/v1/nodes/{node}", content_type="application/json-patch+json",
                 body=[{"op": "add", "path": "/metadata/annotations", "value": {"hami.io/x": "1"}}])
    assert kube.get_node(node)["metadata"]["annotations"] == {"hami.io/x": "1"}
    with pytest.raises(KubeError) as info:
        kube.request("PATCH", f"/api/v1/nodes/{node}", content_type="application/json-patch+json",
                     body=[{"op": "test", "path": "/metadata/resourceVersion", "value": "0"}])
    assert info.value.status == 422


def test_status_subresource_changes_only_status(kube, node):
    kube.patch_node_status(node, {"capacity": {"hygon.com/dcunum": "8"}})
    kube.request("PATCH", f"/api/v1/nodes/{node}/status", body={"metadata": {"labels": {"x": "y"}}},
                 content_type="application/merge-patch+json")
    stored = kube.get_node(node)
    assert stored["status"]["capacity"] == {"hygon.com/dcunum": "8"}
    assert "x" not in (stored["metadata"].get("labels") or {})


def test_unknown_field_selector_is_400(kube):
    with pytest.raises(KubeError) as info:
        kube.list_pods(field_selector="spec.bogus=1")
    assert info.value.status == 400 and "not a known field selector" in info.value.message


def test_label_selector_existence_and_inequality(kube):
    kube.create_pod("default", pod("a", labels={"tier": "gpu"}))
    kube.create_pod("default", pod("b", labels={"tier": "cpu"}))
    kube.create_pod("default", pod("c"))
    names = lambda sel: sorted(p["metadata"]["name"] for p in kube.list_pods(label_selector=sel).items)  # noqa: E731
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c"]
    assert names("tier!=cpu") == ["a", "c"]


def test_binding_validation(kube, node):
    kube.create_pod("default", pod("p"))
    with pytest.raises(KubeError) as info:
        kube.request("POST", "/api/v1/namespaces/default/pods/p/binding",
                     body={"metadata": {"name": "other"}, "target": {"name": node}})
    assert info.value.status == 400
    with pytest.raises(KubeError) as info:
        kube.create_binding("default", "p", node, uid="not-the-uid")
    assert info.value.status == 409
    assert "nodeName" not in kube.get_pod("default", "p")["spec"]


def test_binding_through_generated_client_returns_201_status(core, kube, node):
    kube.create_pod("default", pod("p"))
    body = k8s.V1Binding(metadata=k8s.V1ObjectMeta(name="p", annotations={"k": "v"}),
                         target=k8s.V1ObjectReference(kind="Node", name=node))
    raw = core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    assert raw.status == 201
    assert json.loads(raw.data)["kind"] == "Status"
    stored = kube.get_pod("default", "p")
    assert stored["spec"]["nodeName"] == node and stored["metadata"]["annotations"]["k"] == "v"


def test_filtered_watch_reports_leaving_and_entering(core, kube, node):
    start = kube.list_pods().resource_version
    kube.create_pod("default", pod("p"))
    kube.create_binding("default", "p", node)  # enters spec.nodeName=n1
    kube.delete_pod("default", "p")
    seen = []
    for event in k8s_watch.Watch().stream(core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}",
                                           resource_version=start, timeout_seconds=1):
        seen.append(event["type"])
    assert seen == ["ADDED", "DELETED"]


def test_watch_with_the_generated_client_and_compaction(core, kube, api_server):
    kube.create_pod("default", pod("a"))
    rv = kube.list_pods().resource_version
    kube.create_pod("default", pod("b"))
    names = [e["object"].metadata.name for e in k8s_watch.Watch().stream(
        core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1)]
    assert names == ["b"]
    api_server.compact()
    with pytest.raises(ApiException) as info:
        list(k8s_watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1))
    assert info.value.status == 410


def test_live_watch_receives_later_writes(kube):
    rv = kube.list_pods().resource_version
    got = []

    def consume():
        for event in kube.watch_pods(rv, timeout_seconds=5):
            got.append(event["object"]["metadata"]["name"])
            if len(got) == 2:
                return

    t = threading.Thread(target=consume)
    t.start()
    kube.create_pod("default", pod("x"))
    kube.create_pod("default", pod("y"))
    t.join(10)
    assert got == ["x", "y"]


def test_fault_injection_fails_writes_without_storing(kube, api_server):
    api_server.faults.configure(error_rate=1.0, match=lambda method, path: method == "POST")
    for i in range(3):
        with pytest.raises(KubeError) as info:
            kube.create_pod("default", pod(f"p{i}"))
        assert info.value.status == 500
    assert api_server.faults.injected["500"] == 3
    api_server.faults.clear()
    assert kube.list_pods().items == []
    api_server.faults.configure(conflict_rate=0.5, seed=7)
    outcomes = []
    for i in range(20):
        try:
            kube.create_pod("default", pod(f"q{i}"))
            outcomes.append("ok")
        except KubeError as exc:
            outcomes.append(exc.status)
    assert 0 < outcomes.count(409) < 20
    assert len(kube.list_pods().items) == outcomes.count("ok")


def test_admission_hook_mutates_and_denies(kube, api_server):
    async def admit(attributes):
        obj = attributes.object
        assert attributes.namespace_object["metadata"]["name"] == attributes.namespace
        if obj["metadata"]["name"] == "bad":
            raise AdmissionDenied('admission webhook "x" denied the request: no')
        obj["spec"]["schedulerName"] = "hami-scheduler"
        return obj

    api_server.admission = admit
    assert kube.create_pod("default", pod("good"))["spec"]["schedulerName"] == "hami-scheduler"
    with pytest.raises(KubeError) as info:
        kube.create_pod("default", pod("bad"))
    assert "denied the request: no" in info.value.message
    assert [p["metadata"]["name"] for p in kube.list_pods().items] == ["good"]


def test_store_wait_for(api_server, kube):
    threading.Timer(0.2, lambda: kube.create_pod("default", pod("late"))).start()
    assert api_server.store.wait_for(lambda: len(api_server.store.list("pods")[0]) == 1, timeout=5)
    assert not api_server.store.wait_for(lambda: False, timeout=0.1)
