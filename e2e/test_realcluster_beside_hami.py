"""Both charts in one cluster (issue 33): HAMi v2.10's own chart for its GPUs and hami-dcu's for
the DCUs (`scheduler.name=hami-dcu-scheduler`, README, Installing beside HAMi), in either
install order, on the upstream control plane. A fake GPU node carries what HAMi's NVIDIA device
plugin would report (no kubelet runs its pods: HAMi places and binds them, nothing more).

* GPU pods go to HAMi's scheduler, DCU pods to ours; each webhook leaves the other's pods alone;
* each set of admission policies lets the other's identity write what it needs on its own pods
  and nodes, and nothing of ours: HAMi's scheduler writes its GPU pod's keys and its GPU node's
  lock, not a DCU pod's allocation nor a DCU node's lock;
* uninstalling the chart installed first leaves the other working.

This is what e2e/test_realcluster_identities.py checks with a stand-in of HAMi's identity, here
with HAMi itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.realcluster import hami
from e2e.realcluster.cluster import BESIDE_HAMI_SCHEDULER, RELEASE, SYSTEM_NAMESPACE, RealCluster, unavailable
from e2e.scenarios import allocation, wait_running, wait_until
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.io.kube import KubeError
from hami_dcu.common.protocol import keys

_REASON = unavailable() or hami.why_unavailable()
pytestmark = [pytest.mark.realcluster, pytest.mark.peer]  # a peer of the background build (.ci/run)
GPU_NODE = "gpu0"


@pytest.fixture(scope="module", params=["hami-first", "ours-first"])
def both(request: pytest.FixtureRequest) -> Iterator[RealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    with RealCluster({"node0": default_cards("node0", 2)}, beside_hami=request.param) as cluster:
        hami.fake_gpu_node(cluster.kube, GPU_NODE)
        yield cluster


def clear(cluster: RealCluster) -> None:
    """The previous test's pods gone: those on the fake GPU node at once (no kubelet there
    confirms a graceful deletion), then the rest as the suite clears them."""
    for pod in cluster.kube.list_pods(namespace=cluster.namespace).items:
        if pod["spec"].get("nodeName") == GPU_NODE:
            cluster.kube.request("DELETE", f"/api/v1/namespaces/{cluster.namespace}/pods/{pod['metadata']['name']}",
                                 query={"gracePeriodSeconds": "0"})
    cluster.clear_pods()


def gpu_pod_bound(cluster: RealCluster, name: str) -> dict:
    cluster.kube.create_pod(cluster.namespace, hami.gpu_pod(name))

    def bound() -> dict | None:
        pod = cluster.kube.get_pod(cluster.namespace, name)
        return pod if pod["spec"].get("nodeName") else None

    # HAMi's scheduler reads node registrations on its own 15 s cycle: the first may wait for it.
    pod = wait_until(f"GPU pod {name} bound by HAMi", bound, timeout=120, interval=0.5)
    assert pod["spec"]["schedulerName"] == hami.SCHEDULER_NAME
    assert pod["spec"]["nodeName"] == GPU_NODE
    annotations = pod["metadata"].get("annotations") or {}
    assert annotations.get(hami.GPU_ALLOCATED, "").startswith(f"GPU-{GPU_NODE}-"), annotations
    assert not any(k.startswith("hami.io/dcu-") for k in annotations), "our keys on a GPU pod"
    return pod


def dcu_pod_served(cluster: RealCluster, name: str) -> dict:
    created = cluster.kube.create_pod(cluster.namespace, pod_manifest(name, [Ctr("main", 1, 2000, 10)]))
    assert created["spec"]["schedulerName"] == BESIDE_HAMI_SCHEDULER, "our webhook did not route the DCU pod"
    pod = wait_running(cluster, name, timeout=120)
    assert pod["spec"]["nodeName"] == "node0"
    assert (pod["metadata"].get("annotations") or {}).get(keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert allocation(pod)[0][0].usedmem == 2000
    assert hami.GPU_ALLOCATED not in (pod["metadata"].get("annotations") or {})
    return pod


def refused(call: object) -> str:
    try:
        call()  # type: ignore[operator]
    except KubeError as exc:
        assert exc.status in (403, 422), exc
        return str(exc)
    raise AssertionError("the write was admitted")


def test_each_scheduler_takes_its_own_pods_and_each_policy_guards_its_own(both: RealCluster) -> None:
    clear(both)
    gpu = gpu_pod_bound(both, "gpu-a")
    dcu = dcu_pod_served(both, "dcu-a")
    hamis = both.kube_as(f"{hami.RELEASE}-scheduler", hami.NAMESPACE)
    # HAMi's identity on its own pod and node: admitted.
    hamis.patch_pod_metadata(both.namespace, gpu["metadata"]["name"], annotations={keys.POD_BIND_PHASE: "success"})
    hamis.patch_node_metadata(GPU_NODE, annotations={keys.NODE_LOCK: None})
    # On ours: refused.
    message = refused(lambda: hamis.patch_pod_metadata(
        both.namespace, dcu["metadata"]["name"],
        annotations={keys.DCU_NAMING.pod_devices_allocated: "DCU-NODE0S0,DCU-K100_AI,65520,100:;"}))
    assert "written only by hami-dcu" in message, message
    refused(lambda: hamis.patch_node_metadata("node0", annotations={keys.NODE_LOCK: "2026-01-01T00:00:00Z,x,y"}))


def test_uninstalling_the_first_leaves_the_other_working(both: RealCluster) -> None:
    clear(both)
    if both.beside_hami == "hami-first":
        both.helm_run("uninstall", hami.RELEASE, "--namespace", hami.NAMESPACE, "--wait")
        dcu_pod_served(both, "dcu-after")
    else:
        both.helm_run("uninstall", RELEASE, "--namespace", SYSTEM_NAMESPACE, "--wait")
        gpu_pod_bound(both, "gpu-after")
