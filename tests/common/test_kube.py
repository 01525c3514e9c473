"""The Kubernetes access layer against the local API server, through the real client."""

import os
import socket

import pytest

from hami_dcu.common.io.kube import (
    ConflictError,
    GoneError,
    Kube,
    KubeConfigError,
    NotFoundError,
    UnreachableError,
    load_api_client,
)
from hami_dcu.common.protocol import keys


def pod_body(name: str, node: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": {"app": "demo"}}, "spec": spec}


def test_missing_kubeconfig_is_a_clear_error(tmp_path):
    with pytest.raises(KubeConfigError, match="does not exist"):
        load_api_client(str(tmp_path / "nope"))


def test_no_config_at_all_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config either
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match="in-cluster"):
        load_api_client(None)


def test_unreachable_api_server(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    kube = Kube.from_kubeconfig(str(config), timeout=2)
    with pytest.raises(UnreachableError, match="unreachable"):
        kube.get_node("n1")


def test_typed_errors(kube, node):
    with pytest.raises(NotFoundError):
        kube.get_node("missing")
    kube.create_pod("default", pod_body("p"))
    with pytest.raises(ConflictError):
        kube.create_pod("default", pod_body("p"))
    rv = kube.get_node(node)["metadata"]["resourceVersion"]
    kube.patch_node_metadata(node, annotations={"a": "1"})
    with pytest.raises(ConflictError):
        kube.patch_node_metadata(node, annotations={"a": "2"}, resource_version=rv)
    assert kube.get_node(node)["metadata"]["annotations"]["a"] == "1"


def test_metadata_patch_sets_and_deletes(kube, node):
    kube.patch_node_metadata(node, annotations={"x": "1", "y": "2"}, labels={"dcu": "on"})
    kube.patch_node_metadata(node, annotations={"x": None})
    meta = kube.get_node(node)["metadata"]
    assert meta["annotations"].get("x") is None and meta["annotations"]["y"] == "2"
    assert meta["labels"]["dcu"] == "on"


def test_binding_merges_annotations_and_second_bind_conflicts(kube, node):
    created = kube.create_pod("default", pod_body("p"))
    kube.create_binding(
        "default", "p", node, uid=created["metadata"]["uid"], annotations={keys.POD_BIND_PHASE: "allocating"}
    )
    pod = kube.get_pod("default", "p")
    assert pod["spec"]["nodeName"] == node
    assert pod["metadata"]["annotations"][keys.POD_BIND_PHASE] == "allocating"
    with pytest.raises(ConflictError, match="already assigned"):
        kube.create_binding("default", "p", node)


def test_list_with_selectors_returns_plain_dicts(kube, node):
    kube.create_pod("default", pod_body("on-node", node=node))
    kube.create_pod("default", pod_body("elsewhere"))
    listed = kube.list_pods(field_selector=f"spec.nodeName={node}")
    assert [p["metadata"]["name"] for p in listed.items] == ["on-node"]
    assert isinstance(listed.items[0], dict) and listed.resource_version
    assert len(kube.list_pods(namespace="default", label_selector="app=demo").items) == 2


def test_watch_yields_events_in_order(kube, node):
    start = kube.list_pods().resource_version
    kube.create_pod("default", pod_body("w"))
    kube.patch_pod_metadata("default", "w", annotations={"k": "v"})
    kube.delete_pod("default", "w")
    events = []
    for event in kube.watch_pods(start, timeout_seconds=1):
        events.append((event["type"], event["object"]["metadata"]["name"]))
        if len(events) == 3:
            break
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_watch_from_compacted_version_is_gone(kube, api_server):
    api_server.compact()
    with pytest.raises(GoneError):
        list(kube.watch_pods("1", timeout_seconds=1))


def test_events_are_posted(kube, node):
    pod = kube.create_pod("default", pod_body("e"))
    kube.create_event(pod, "FilteringFailed", "3 nodes: insufficient card memory", "Warning")
    events = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    assert any(e["reason"] == "FilteringFailed" and e["involvedObject"]["name"] == "e" for e in events)


def test_kubeconfig_from_environment(api_server, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(api_server.kubeconfig_path))
    kube = Kube(load_api_client(None))
    assert kube.list_nodes().resource_version
    assert os.environ["KUBECONFIG"]


def test_a_paged_list_is_one_snapshot_and_trims_items(kube):
    """limit/continue: every page shows the first page's snapshot (objects created meanwhile
    are not in it, as with kube-apiserver), `keep` trims each item, an unknown token is 410."""
    for i in range(5):
        kube.create_pod("default", pod_body(f"p{i}"))
    first = kube.list_page("/api/v1/namespaces/default/pods", 2, keep=lambda pod: {"name": pod["metadata"]["name"]})
    assert first.items == [{"name": "p0"}, {"name": "p1"}] and first.continue_token
    kube.create_pod("default", pod_body("late"))
    names, token, versions = [], first.continue_token, {first.resource_version}
    while token:
        page = kube.list_page("/api/v1/namespaces/default/pods", 2, token)
        names += [p["metadata"]["name"] for p in page.items]
        versions.add(page.resource_version)
        token = page.continue_token
    assert names == ["p2", "p3", "p4"]
    assert len(versions) == 1
    with pytest.raises(GoneError):
        kube.list_page("/api/v1/namespaces/default/pods", 2, "page-unknown")
    assert len(kube.list_page("/api/v1/namespaces/default/pods", 100).items) == 6
