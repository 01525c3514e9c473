"""fieldSelector and labelSelector on lists, through the real client."""

import pytest
from kubernetes.client.exceptions import ApiException

from hami_dcu.cli.localcluster.apiserver.selectors import SelectorError, field_selector, label_selector


def pod(name, node=None, labels=None, scheduler=None):
    spec = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


@pytest.fixture
def pods(core):
    core.create_namespaced_pod("default", pod("on-n1", node="n1", labels={"tier": "gpu"}))
    core.create_namespaced_pod("default", pod("on-n2", node="n2", labels={"tier": "cpu"}))
    core.create_namespaced_pod("default", pod("pending", scheduler="hami-scheduler"))
    core.patch_namespaced_pod_status("on-n2", "default", {"status": {"phase": "Succeeded"}})


def names(result):
    return sorted(p.metadata.name for p in result.items)


def test_field_selectors_on_pods(core, pods):
    everywhere = core.list_pod_for_all_namespaces
    assert names(everywhere(field_selector="spec.nodeName=n1")) == ["on-n1"]
    assert names(everywhere(field_selector="spec.nodeName==n2")) == ["on-n2"]
    assert names(everywhere(field_selector="spec.nodeName=")) == ["pending"]  # unscheduled
    assert names(everywhere(field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")) == [
        "on-n1"]
    assert names(everywhere(field_selector="spec.schedulerName=hami-scheduler")) == ["pending"]
    assert names(core.list_namespaced_pod("default", field_selector="metadata.name=on-n2")) == ["on-n2"]
    assert names(everywhere(field_selector="metadata.namespace=kube-system")) == []


def test_unknown_field_is_400(core, pods):
    with pytest.raises(ApiException) as info:
        core.list_pod_for_all_namespaces(field_selector="spec.bogus=1")
    assert info.value.status == 400 and "not a known field selector" in info.value.body


def test_node_field_and_label_selectors(core):
    core.create_node({"metadata": {"name": "a", "labels": {"dcu": "on"}}})
    core.create_node({"metadata": {"name": "b"}, "spec": {"unschedulable": True}})
    assert [n.metadata.name for n in core.list_node(field_selector="metadata.name=b").items] == ["b"]
    assert [n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=false").items] == ["a"]
    assert [n.metadata.name for n in core.list_node(label_selector="dcu=on").items] == ["a"]
    with pytest.raises(ApiException) as info:
        core.list_node(field_selector="spec.nodeName=x")  # a pod field, not a node one
    assert info.value.status == 400


def test_label_selectors(core, pods):
    assert names(core.list_namespaced_pod("default", label_selector="tier=gpu")) == ["on-n1"]
    assert names(core.list_namespaced_pod("default", label_selector="tier==cpu")) == ["on-n2"]
    assert names(core.list_namespaced_pod("default", label_selector="tier!=cpu")) == ["on-n1", "pending"]
    assert names(core.list_namespaced_pod("default", label_selector="tier")) == ["on-n1", "on-n2"]
    assert names(core.list_namespaced_pod("default", label_selector="!tier")) == ["pending"]
    assert names(core.list_namespaced_pod("default", label_selector="tier in (gpu, tpu),tier")) == ["on-n1"]
    assert names(core.list_namespaced_pod("default", label_selector="tier notin (gpu)")) == ["on-n2", "pending"]
    both = core.list_namespaced_pod("default", label_selector="tier", field_selector="spec.nodeName=n2")
    assert names(both) == ["on-n2"]


def test_selector_units():
    assert field_selector("", "pods") is None and label_selector(None) is None
    match = field_selector("spec.hostNetwork=false", "pods")
    assert match({"spec": {}}) and not match({"spec": {"hostNetwork": True}})
    with pytest.raises(SelectorError):
        field_selector("spec.nodeName", "pods")  # no operator
    with pytest.raises(SelectorError):
        label_selector("a in b")
