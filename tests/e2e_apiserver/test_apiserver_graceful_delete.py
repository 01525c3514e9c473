"""Graceful deletion of bound pods, as kube-apiserver does it (found on the real control plane:
a DELETE only marks a bound pod; its kubelet stops it and deletes it with grace 0)."""

import pytest

from hami_dcu.cli.localcluster.apiserver import LocalApiServer
from hami_dcu.common.io.kube import Kube


@pytest.fixture
def graceful(tmp_path):
    with LocalApiServer(kubeconfig_path=tmp_path / "kubeconfig", graceful_pod_deletion=True) as server:
        yield Kube.from_kubeconfig(str(server.kubeconfig_path))


def pod(name, node=None, grace=None):
    spec = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": name}, "spec": spec}


def test_a_bound_pod_is_only_marked_until_its_kubelet_deletes_it(graceful):
    created = graceful.create_pod("default", pod("bound", node="n1"))
    marked = graceful.delete_pod("default", "bound")
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    assert graceful.get_pod("default", "bound")["metadata"]["deletionTimestamp"]
    again = graceful.delete_pod("default", "bound")  # a second DELETE changes nothing
    assert again["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]
    graceful.request("DELETE", "/api/v1/namespaces/default/pods/bound",
                     body={"gracePeriodSeconds": 0, "preconditions": {"uid": created["metadata"]["uid"]}})
    assert [p["metadata"]["name"] for p in graceful.list_pods("default").items] == []


@pytest.mark.parametrize("manifest", [pod("unbound"), pod("no-grace", node="n1", grace=0)], ids=["unbound", "grace0"])
def test_unbound_or_zero_grace_pods_go_at_once(graceful, manifest):
    graceful.create_pod("default", manifest)
    graceful.delete_pod("default", manifest["metadata"]["name"])
    assert graceful.list_pods("default").items == []


def test_without_the_option_every_delete_is_immediate(kube):
    kube.create_pod("default", pod("bound", node="n1"))
    kube.delete_pod("default", "bound")
    assert kube.list_pods("default").items == []
