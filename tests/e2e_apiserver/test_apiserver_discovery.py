"""kubectl against the local API server: discovery (aggregated and legacy) and server-side
Tables, the two things `kubectl get` and `kubectl describe` need before anything else."""

import json
import os
import subprocess

import pytest

from e2e.tools import helm_and_kubectl
from hami_dcu.cli.localcluster.apiserver.discovery import api_resource_list, wants_aggregated
from hami_dcu.cli.localcluster.apiserver.resources import CLUSTER_SCOPED, KINDS
from hami_dcu.cli.localcluster.apiserver.tables import human_duration, table, wants_table

KUBECTL_ACCEPT_DISCOVERY = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
                            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
                            "application/json")
KUBECTL_ACCEPT_TABLE = ("application/json;as=Table;v=v1;g=meta.k8s.io,"
                        "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")


@pytest.fixture
def kubectl(api_server):
    tools = helm_and_kubectl()
    if tools is None:
        pytest.skip("kubectl not available")
    env = {**os.environ, "KUBECONFIG": str(api_server.kubeconfig_path)}

    def run(*args: str) -> str:
        done = subprocess.run([str(tools[1]), *args], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    return run


def test_every_stored_resource_is_discoverable_in_both_forms(kube):
    aggregated_core = kube.api_client.call_api(
        "/api", "GET", header_params={"Accept": KUBECTL_ACCEPT_DISCOVERY}, _preload_content=False,
        auth_settings=["BearerToken"], _return_http_data_only=True)
    core = json.loads(aggregated_core.data)
    assert core["kind"] == "APIGroupDiscoveryList"
    listed = {r["resource"]: r["scope"] for r in core["items"][0]["versions"][0]["resources"]}
    groups = kube.request("GET", "/apis")  # plain JSON: the legacy APIGroupList
    assert groups["kind"] == "APIGroupList"
    for group in groups["groups"]:
        for r in kube.request("GET", f"/apis/{group['preferredVersion']['groupVersion']}")["resources"]:
            listed[r["name"]] = "Cluster" if not r["namespaced"] else "Namespaced"
    for resource in KINDS:
        assert listed[resource] == ("Cluster" if resource in CLUSTER_SCOPED else "Namespaced")
    assert kube.request("GET", "/api")["versions"] == ["v1"]
    assert {"pods/binding", "pods/status"} <= {r["name"] for r in api_resource_list("v1")["resources"]}


def test_accept_headers_pick_the_form():
    assert wants_aggregated(KUBECTL_ACCEPT_DISCOVERY) and not wants_aggregated("application/json")
    assert wants_table(KUBECTL_ACCEPT_TABLE) and not wants_table("application/json")


def test_pod_table_reads_like_kubectl():
    pods = [
        {"metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
         "spec": {"nodeName": "n1", "containers": [{"name": "x"}, {"name": "y"}]},
         "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
        {"metadata": {"name": "b", "creationTimestamp": "2026-01-01T00:00:00Z", "deletionTimestamp": "x"},
         "spec": {"containers": [{"name": "x"}]}, "status": {"phase": "Running"}},
    ]
    from datetime import UTC, datetime

    result = table("pods", pods, "7", now=datetime(2026, 1, 1, 0, 3, 5, tzinfo=UTC))
    assert [c["name"] for c in result["columnDefinitions"] if c["priority"] == 0] == [
        "Name", "Ready", "Status", "Restarts", "Age"]
    assert result["rows"][0]["cells"][:7] == ["a", "2/2", "Running", "0", "3m5s", "<none>", "n1"]
    assert result["rows"][1]["cells"][:3] == ["b", "0/1", "Terminating"]
    assert result["rows"][0]["object"]["metadata"]["name"] == "a"


def test_human_durations_match_apimachinery():
    assert [human_duration(s) for s in (5, 119, 125, 600, 7200, 30000, 100000, 900000, 80000000)] == [
        "5s", "119s", "2m5s", "10m", "120m", "8h", "27h", "10d", "2y195d"]


def test_kubectl_gets_and_describes_pods_nodes_and_events(kube, kubectl):
    kube.create_node({"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}],
                                                             "nodeInfo": {"kubeletVersion": "v1.33.0"}}})
    pod = kube.create_pod("default", {"metadata": {"name": "p1"},
                                      "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}})
    # describe finds a pod's events by its uid too
    kube.create_event({"kind": "Pod", **pod}, "FilteringFailed", "no node fits", "Warning", component="hami-scheduler")
    pods = kubectl("get", "pods", "-o", "wide").splitlines()
    assert pods[0].split()[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert pods[1].split()[0] == "p1" and "n1" in pods[1].split()
    assert kubectl("get", "nodes").splitlines()[1].split()[:2] == ["n1", "Ready"]
    events = kubectl("get", "events")
    assert "FilteringFailed" in events and "pod/p1" in events and "no node fits" in events
    described = kubectl("describe", "pod", "p1")
    assert "Node:" in described and "n1" in described and "no node fits" in described
    assert "Name:" in kubectl("describe", "node", "n1")
    assert json.loads(kubectl("get", "pod", "p1", "-o", "json"))["metadata"]["name"] == "p1"
    assert "pods" in kubectl("api-resources").split()
