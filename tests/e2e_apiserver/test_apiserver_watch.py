"""Watch: resourceVersion semantics, ordering, 410, filtered watches, timeouts, bookmarks."""

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from hami_dcu.cli.localcluster.apiserver import LocalApiServer


def pod(name, labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def collect(func, *args, count, timeout=2, **kwargs):
    """(type, name) of the first `count` events, stopping early instead of waiting out the timeout."""
    watcher = k8s_watch.Watch()
    seen = []
    for event in watcher.stream(func, *args, timeout_seconds=timeout, **kwargs):
        seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
        if len(seen) == count:
            watcher.stop()
    return seen


def test_events_after_a_resource_version_in_order(core):
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("a"))
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
    core.delete_namespaced_pod("a", "default")
    watcher = k8s_watch.Watch()
    events = []
    for event in watcher.stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=2):
        events.append(event)
        if len(events) == 3:
            watcher.stop()
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[1]["object"].metadata.labels == {"x": "1"}
    assert all(e["raw_object"]["kind"] == "Pod" and e["raw_object"]["apiVersion"] == "v1" for e in events)
    versions = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(rv)
    assert watcher.resource_version == str(versions[-1])


def test_watch_without_resource_version_starts_with_synthetic_added(core):
    core.create_node({"metadata": {"name": "n1"}})
    core.create_node({"metadata": {"name": "n2"}})
    assert sorted(collect(core.list_node, count=2)) == [("ADDED", "n1"), ("ADDED", "n2")]
    assert sorted(collect(core.list_node, count=2, resource_version="0")) == [("ADDED", "n1"), ("ADDED", "n2")]


def test_live_events_reach_a_waiting_watch(core):
    rv = core.list_node().metadata.resource_version
    seen = []
    thread = threading.Thread(target=lambda: seen.extend(collect(core.list_node, count=2, timeout=5,
                                                                 resource_version=rv)))
    thread.start()
    time.sleep(0.2)
    core.create_node({"metadata": {"name": "late"}})
    core.delete_node("late")
    thread.join(10)
    assert seen == [("ADDED", "late"), ("DELETED", "late")]


def test_too_old_resource_version_is_410(tmp_path, make_client):
    with LocalApiServer(kubeconfig_path=tmp_path / "small", history=3) as server, make_client(server) as small:
        core = k8s.CoreV1Api(small)
        rv = core.list_node().metadata.resource_version
        for i in range(5):
            core.create_node({"metadata": {"name": f"n{i}"}})
        with pytest.raises(ApiException) as info:
            list(k8s_watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=1))
        assert info.value.status == 410
        # A recent rv is still inside the history window.
        recent = str(int(server.store.resource_version) - 2)
        assert collect(core.list_node, count=2, resource_version=recent) == [("ADDED", "n3"), ("ADDED", "n4")]


def test_too_old_is_an_in_stream_error_event(api_server, core):
    rv = api_server.store.resource_version
    core.create_node({"metadata": {"name": "n1"}})
    api_server.compact()
    with urllib.request.urlopen(f"{api_server.url}/api/v1/nodes?watch=1&resourceVersion={rv}", timeout=5) as resp:
        assert resp.status == 200
        event = json.loads(resp.readline())
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"


def test_filtered_watch_reports_leaving_and_entering_the_selector(core):
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("a", {"team": "x"}))
    core.create_namespaced_pod("default", pod("b"))
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"team": "y"}}})  # leaves
    core.patch_namespaced_pod("b", "default", {"metadata": {"labels": {"team": "x"}}})  # enters
    core.patch_namespaced_pod("b", "default", {"metadata": {"annotations": {"n": "1"}}})  # stays
    core.delete_namespaced_pod("b", "default")
    core.delete_namespaced_pod("a", "default")  # already out: not reported
    seen = collect(core.list_namespaced_pod, "default", count=5, timeout=1, resource_version=rv,
                   label_selector="team=x")
    assert seen == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "b")]


def test_field_selector_watch_on_phase(core):
    core.create_namespaced_pod("default", pod("job"))
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    core.patch_namespaced_pod_status("job", "default", {"status": {"phase": "Succeeded"}})
    seen = collect(core.list_pod_for_all_namespaces, count=1, resource_version=rv,
                   field_selector="status.phase!=Succeeded,status.phase!=Failed")
    assert seen == [("DELETED", "job")]


def test_namespaced_watch_ignores_other_namespaces_and_kinds(core):
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("kube-system", pod("other"))
    core.create_node({"metadata": {"name": "n1"}})
    core.create_namespaced_pod("default", pod("mine"))
    assert collect(core.list_namespaced_pod, "default", count=1, resource_version=rv) == [("ADDED", "mine")]


def test_timeout_seconds_ends_the_stream(core):
    rv = core.list_node().metadata.resource_version
    started = time.monotonic()
    assert list(k8s_watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=1)) == []
    assert 0.9 <= time.monotonic() - started < 3


def test_bookmarks_when_enabled(api_server, core):
    api_server.bookmark_interval = 0.1
    rv = core.list_node().metadata.resource_version
    core.create_namespaced_pod("default", pod("unrelated"))  # moves the global rv
    watcher = k8s_watch.Watch()
    for event in watcher.stream(core.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=2):
        assert event["type"] == "BOOKMARK"
        assert event["object"]["kind"] == "Node"
        assert event["object"]["metadata"]["resourceVersion"] == api_server.store.resource_version
        watcher.stop()


def test_bad_watch_parameters_are_400(api_server):
    for query in ("resourceVersion=abc", "timeoutSeconds=x", "fieldSelector=spec.bogus%3D1"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{api_server.url}/api/v1/pods?watch=true&{query}", timeout=5)
        assert info.value.code == 400


def test_stop_closes_open_watches(tmp_path):
    server = LocalApiServer(kubeconfig_path=tmp_path / "kc").start()
    response = urllib.request.urlopen(f"{server.url}/api/v1/pods?watch=true&resourceVersion=1", timeout=10)
    started = time.monotonic()
    server.stop()
    assert response.read() == b""  # ends cleanly, long before the 1800 s default
    assert time.monotonic() - started < 5
