"""Create, get, list, replace and delete through the real `kubernetes` client."""

import json
import urllib.error
import urllib.request

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException


def pod(name, labels=None, **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "x"}], **spec}}


def raw(server, method, path, body=None, content_type=None):
    """One HTTP request without the generated client: (status, decoded JSON body)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method=method)
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_pod_create_get_list_delete(core):
    created = core.create_namespaced_pod("default", pod("p1"))
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert created.metadata.namespace == "default"
    assert created.spec.scheduler_name == "default-scheduler"
    assert created.status.phase == "Pending"
    got = core.read_namespaced_pod("p1", "default")
    assert got.metadata.resource_version == created.metadata.resource_version
    core.create_namespaced_pod("default", pod("p2"))
    listed = core.list_namespaced_pod("default")
    assert sorted(p.metadata.name for p in listed.items) == ["p1", "p2"]
    assert int(listed.metadata.resource_version) >= int(got.metadata.resource_version)
    deleted = core.delete_namespaced_pod("p1", "default", grace_period_seconds=30)
    assert deleted.metadata.name == "p1"
    assert int(deleted.metadata.resource_version) > int(created.metadata.resource_version)
    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod("p1", "default")
    assert info.value.status == 404
    status = json.loads(info.value.body)
    assert status["kind"] == "Status" and status["reason"] == "NotFound"
    assert status["message"] == 'pods "p1" not found'
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["p2"]


def test_every_write_bumps_one_global_resource_version(core):
    versions = [int(core.create_node({"metadata": {"name": f"n{i}"}}).metadata.resource_version) for i in range(3)]
    versions.append(int(core.create_namespaced_pod("default", pod("p")).metadata.resource_version))
    versions.append(int(core.patch_node("n0", {"metadata": {"labels": {"a": "b"}}}).metadata.resource_version))
    assert versions == sorted(versions) and len(set(versions)) == len(versions)


def test_duplicate_create_is_409_already_exists(core):
    core.create_node({"metadata": {"name": "n1"}})
    with pytest.raises(ApiException) as info:
        core.create_node({"metadata": {"name": "n1"}})
    assert info.value.status == 409
    assert json.loads(info.value.body)["reason"] == "AlreadyExists"
    assert len(core.list_node().items) == 1


def test_generate_name_and_cluster_scoped_nodes(core):
    a = core.create_node({"metadata": {"generateName": "gpu-"}})
    b = core.create_node({"metadata": {"generateName": "gpu-"}})
    assert a.metadata.name.startswith("gpu-") and a.metadata.name != b.metadata.name
    assert a.metadata.namespace is None
    assert core.read_node(a.metadata.name).metadata.uid == a.metadata.uid
    core.delete_node(a.metadata.name)
    assert [n.metadata.name for n in core.list_node().items] == [b.metadata.name]


def test_all_namespaces_list_and_missing_namespace(core):
    core.create_namespace({"metadata": {"name": "team", "labels": {"hami.io/webhook": "on"}}})
    core.create_namespaced_pod("team", pod("a"))
    core.create_namespaced_pod("default", pod("b"))
    everywhere = core.list_pod_for_all_namespaces()
    assert sorted((p.metadata.namespace, p.metadata.name) for p in everywhere.items) == [("default", "b"),
                                                                                         ("team", "a")]
    assert [p.metadata.name for p in core.list_namespaced_pod("team").items] == ["a"]
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod("nowhere", pod("c"))
    assert info.value.status == 404


def test_namespaces_exist_and_carry_their_name_label(core):
    names = {ns.metadata.name: ns.metadata.labels for ns in core.list_namespace().items}
    assert names["default"]["kubernetes.io/metadata.name"] == "default"
    assert names["kube-system"]["kubernetes.io/metadata.name"] == "kube-system"
    created = core.create_namespace({"metadata": {"name": "gpu", "labels": {"team": "ml"}}})
    assert created.metadata.labels == {"team": "ml", "kubernetes.io/metadata.name": "gpu"}
    patched = core.patch_namespace("gpu", {"metadata": {"labels": {"kubernetes.io/metadata.name": None}}})
    assert patched.metadata.labels["kubernetes.io/metadata.name"] == "gpu"  # forced back, as kube does


def test_deleting_a_namespace_deletes_its_objects(core, api_server):
    core.create_namespace({"metadata": {"name": "tmp"}})
    core.create_namespaced_pod("tmp", pod("a"))
    core.create_namespaced_config_map("tmp", {"metadata": {"name": "cm"}})
    core.delete_namespace("tmp")
    assert api_server.store.list("pods", "tmp")[0] == []
    assert api_server.store.list("configmaps", "tmp")[0] == []


def test_replace_with_stale_resource_version_is_409(core):
    core.create_node({"metadata": {"name": "n1"}})
    first = core.read_node("n1")
    first.metadata.labels = {"v": "1"}
    core.replace_node("n1", first)  # current rv: accepted
    first.metadata.labels = {"v": "2"}  # still carries the old rv
    with pytest.raises(ApiException) as info:
        core.replace_node("n1", first)
    assert info.value.status == 409
    body = json.loads(info.value.body)
    assert body["reason"] == "Conflict"
    assert body["message"] == ('Operation cannot be fulfilled on nodes "n1": the object has been modified; '
                               "please apply your changes to the latest version and try again")
    assert core.read_node("n1").metadata.labels == {"v": "1"}


def test_replace_keeps_status_and_status_subresource_keeps_the_rest(core):
    core.create_node({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4"}}})
    current = core.read_node("n1").to_dict()
    body = {"metadata": {"name": "n1", "labels": {"x": "y"}}, "status": {"capacity": {"cpu": "99"}}}
    replaced = core.replace_node("n1", body)
    assert replaced.metadata.labels == {"x": "y"}
    assert replaced.status.capacity == {"cpu": "4"}  # main resource writes ignore status
    status_put = {"metadata": {"name": "n1", "labels": {}}, "status": {"capacity": {"cpu": "8"}}}
    after = core.replace_node_status("n1", status_put)
    assert after.status.capacity == {"cpu": "8"} and after.metadata.labels == {"x": "y"}
    assert after.metadata.uid == current["metadata"]["uid"]
    assert core.patch_node_status("n1", {"status": {"allocatable": {"cpu": "7"}}}).status.allocatable == {"cpu": "7"}


def test_pod_status_patch_like_a_kubelet(core):
    core.create_namespaced_pod("default", pod("p"))
    patched = core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}})
    assert patched.status.phase == "Running"
    ignored = core.patch_namespaced_pod("p", "default", {"status": {"phase": "Failed"}})
    assert ignored.status.phase == "Running"


def test_secrets_and_configmaps(core):
    core.create_namespaced_secret("kube-system", {"metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
                                                  "data": {"tls.crt": "Y3J0", "tls.key": "a2V5"}})
    secret = core.read_namespaced_secret("tls", "kube-system")
    assert secret.data == {"tls.crt": "Y3J0", "tls.key": "a2V5"} and secret.type == "kubernetes.io/tls"
    core.patch_namespaced_secret("tls", "kube-system", {"data": {"ca.crt": "Y2E="}})
    assert set(core.read_namespaced_secret("tls", "kube-system").data) == {"tls.crt", "tls.key", "ca.crt"}
    tls = core.list_namespaced_secret("kube-system", field_selector="type=kubernetes.io/tls")
    assert [s.metadata.name for s in tls.items] == ["tls"]
    core.create_namespaced_config_map("default", {"metadata": {"name": "cfg"}, "data": {"a": "1"}})
    cm = core.read_namespaced_config_map("cfg", "default")
    cm.data = {"a": "2"}
    assert core.replace_namespaced_config_map("cfg", "default", cm).data == {"a": "2"}
    assert [c.metadata.name for c in core.list_namespaced_config_map("default").items] == ["cfg"]
    status = core.delete_namespaced_config_map("cfg", "default")
    assert status.status == "Success"


def test_mutating_webhook_configurations(admreg):
    body = {"metadata": {"name": "hami"}, "webhooks": [{
        "name": "pods.hami.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "clientConfig": {"url": "https://127.0.0.1:1/webhook", "caBundle": "Y2E="},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}]}
    created = admreg.create_mutating_webhook_configuration(body)
    assert created.webhooks[0].name == "pods.hami.io"
    patched = admreg.patch_mutating_webhook_configuration("hami", {"metadata": {"labels": {"a": "b"}}})
    assert patched.metadata.labels == {"a": "b"}
    current = admreg.read_mutating_webhook_configuration("hami")
    current.webhooks[0].client_config.ca_bundle = "bmV3"
    replaced = admreg.replace_mutating_webhook_configuration("hami", current)
    assert replaced.webhooks[0].client_config.ca_bundle == "bmV3"
    assert [c.metadata.name for c in admreg.list_mutating_webhook_configuration().items] == ["hami"]
    admreg.delete_mutating_webhook_configuration("hami")
    assert admreg.list_mutating_webhook_configuration().items == []


def test_events_create_and_list(core):
    event = {"metadata": {"name": "p.1"}, "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p"},
             "reason": "FailedScheduling", "message": "0/1 nodes are available", "type": "Warning",
             "source": {"component": "hami-scheduler"}}
    core.create_namespaced_event("default", event)
    core.create_namespace({"metadata": {"name": "other"}})
    core.create_namespaced_event("other", {**event, "involvedObject": {"kind": "Pod", "name": "q"}})
    assert [e.reason for e in core.list_namespaced_event("default").items] == ["FailedScheduling"]
    assert len(core.list_event_for_all_namespaces().items) == 2
    picked = core.list_event_for_all_namespaces(field_selector="involvedObject.name=q")
    assert [e.metadata.namespace for e in picked.items] == ["other"]


def test_status_bodies_and_unknown_paths(api_server):
    status, body = raw(api_server, "GET", "/api/v1/widgets")
    assert status == 404 and body["kind"] == "Status" and body["reason"] == "NotFound"
    status, body = raw(api_server, "GET", "/api/v1/pods/p")  # a pod needs its namespace
    assert status == 404
    status, body = raw(api_server, "GET", "/apis/admissionregistration.k8s.io/v1/pods")
    assert status == 404
    status, body = raw(api_server, "DELETE", "/api/v1/namespaces/default/pods")
    assert status == 405 and body["reason"] == "MethodNotAllowed"
    status, body = raw(api_server, "POST", "/api/v1/nodes", body=None)
    assert status == 400 and body["reason"] == "BadRequest"


def test_post_without_content_type_is_json(api_server):
    request = urllib.request.Request(api_server.url + "/api/v1/nodes", method="POST",
                                     data=json.dumps({"metadata": {"name": "bare"}}).encode())
    request.remove_header("Content-type")
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 201
    assert api_server.store.get("nodes", "", "bare")["metadata"]["name"] == "bare"


def test_namespace_in_body_must_match_url(core):
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod("default", {**pod("p"), "metadata": {"name": "p", "namespace": "kube-system"}})
    assert info.value.status == 400


def test_delete_precondition_uid(core):
    core.create_namespaced_pod("default", pod("p"))
    with pytest.raises(ApiException) as info:
        core.delete_namespaced_pod("p", "default", body=k8s.V1DeleteOptions(
            preconditions=k8s.V1Preconditions(uid="not-it")))
    assert info.value.status == 409
    assert core.read_namespaced_pod("p", "default").metadata.name == "p"


def test_version_and_health(api_server, client):
    assert k8s.VersionApi(client).get_code().git_version.startswith("v1.")
    with urllib.request.urlopen(api_server.url + "/healthz", timeout=5) as response:
        assert response.read() == b"ok"


def test_resource_quantities_are_stored_canonical_like_kube_apiserver(api_server):
    # kube-apiserver stores "2000" as "2k" and admission webhooks see that form (the real
    # control plane showed it: our webhook denied every shared pod until it read "2k").
    body = pod("q")
    body["spec"]["containers"][0]["resources"] = {
        "limits": {"hygon.com/dcunum": 1, "hygon.com/dcumem": "2000", "hygon.com/dcucores": "15"},
        "requests": {"memory": "3000000", "cpu": "500m"},
    }
    status, created = raw(api_server, "POST", "/api/v1/namespaces/default/pods", body, "application/json")
    assert status == 201
    resources = created["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2k", "hygon.com/dcucores": "15"}
    assert resources["requests"] == {"memory": "3M", "cpu": "500m"}
