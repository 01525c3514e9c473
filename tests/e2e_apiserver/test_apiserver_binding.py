"""The pods/binding subresource, through the real client: the Binding's annotations land on the pod with
spec.nodeName, and the answer is a Status (docs/architecture.md, Wire formats)."""

import json

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException


def binding(name, node, annotations=None, uid=None, kind="Node"):
    return k8s.V1Binding(metadata=k8s.V1ObjectMeta(name=name, annotations=annotations, uid=uid),
                         target=k8s.V1ObjectReference(kind=kind, name=node))


@pytest.fixture
def pending(core):
    return core.create_namespaced_pod("default", {"metadata": {"name": "p", "annotations": {
        "hami.io/bind-phase": "allocating", "keep": "1"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}})


def test_bind_answers_201_status_and_updates_the_pod_once(core, pending, api_server):
    rv_before = int(api_server.store.resource_version)
    response = core.create_namespaced_pod_binding(
        "p", "default", binding("p", "n1", {"hami.io/bind-phase": "success", "hami.io/vdcu-devices-allocated": "x"},
                                uid=pending.metadata.uid), _preload_content=False)
    assert response.status == 201
    assert json.loads(response.data) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                         "code": 201}
    assert int(api_server.store.resource_version) == rv_before + 1  # one atomic update
    pod = core.read_namespaced_pod("p", "default")
    assert pod.spec.node_name == "n1"
    assert pod.metadata.annotations == {"hami.io/bind-phase": "success", "keep": "1",
                                        "hami.io/vdcu-devices-allocated": "x"}
    assert [(c.type, c.status) for c in pod.status.conditions] == [("PodScheduled", "True")]


def test_second_binding_is_409_already_assigned(core, pending):
    core.create_namespaced_pod_binding("p", "default", binding("p", "n1"), _preload_content=False)
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_binding("p", "default", binding("p", "n2"), _preload_content=False)
    assert info.value.status == 409
    assert json.loads(info.value.body)["message"] == 'pod p is already assigned to node "n1"'
    assert core.read_namespaced_pod("p", "default").spec.node_name == "n1"


def test_the_generated_client_raises_after_a_successful_bind(core, pending):
    """The upstream quirk (kubernetes-client/python#547) the server must reproduce: a Status
    body cannot be read as a V1Binding, yet the bind happened."""
    with pytest.raises(ValueError):
        core.create_namespaced_pod_binding("p", "default", binding("p", "n1"))
    assert core.read_namespaced_pod("p", "default").spec.node_name == "n1"


@pytest.mark.parametrize(("body", "code"), [
    (binding("other", "n1"), 400),  # name in URL does not match
    ({"metadata": {"name": "p"}, "target": {"kind": "Node"}}, 400),  # target.name missing
    (binding("p", "n1", kind="Pod"), 400),  # target kind
    (binding("p", "n1", uid="not-the-uid"), 409),  # uid precondition
])
def test_rejected_bindings_change_nothing(core, pending, body, code):
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    assert info.value.status == code
    pod = core.read_namespaced_pod("p", "default")
    assert pod.spec.node_name is None and pod.metadata.resource_version == pending.metadata.resource_version


def test_binding_a_missing_pod_is_404(core):
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_binding("ghost", "default", binding("ghost", "n1"), _preload_content=False)
    assert info.value.status == 404
