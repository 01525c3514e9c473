"""Card health where the API server does not keep device taints (issue 36, item 1): the same
two-card node as test_realcluster_dra_health.py, with kube-apiserver v1.37.2 run with
`--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false`, so it drops
`devices[].taints` as an API server before 1.36 does. The driver's first tainted write is a dry
run; seeing the taint dropped, it leaves the unhealthy card out of the slice, as before taints:
the claim on it keeps running, new claims go to the other card, and recovery brings it back.

The kube-schedulers keep their default gates and so list DeviceTaintRules, which the API
server's bootstrap RBAC no longer grants them with the gate off: the harness grants it, or they
would wait for that informer forever.

    pytest e2e/test_realcluster_dra_health_without_taints.py
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from e2e.realcluster.cluster import unavailable
from e2e.realcluster.dra_cluster import DraRealCluster
from e2e.scenarios import phase, wait_until
from e2e.test_realcluster_dra_health import (
    CARD_A,
    CARD_B,
    DEV_A,
    DEV_B,
    NODE,
    allocated_device,
    run_claim,
    set_health,
    wait_running,
)

_REASON = unavailable()
pytestmark = pytest.mark.realcluster
TAINTS_OFF = "--feature-gates=DRADeviceTaints=false,DRADeviceTaintRules=false"


class TaintsOffCluster(DraRealCluster):
    def _helm_install(self) -> None:
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        self.kube.request("POST", f"{rbac}/clusterroles", body={
            "metadata": {"name": "e2e-device-taint-rules-reader"},
            "rules": [{"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"],
                       "verbs": ["get", "list", "watch"]}]})
        self.kube.request("POST", f"{rbac}/clusterrolebindings", body={
            "metadata": {"name": "e2e-device-taint-rules-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "e2e-device-taint-rules-reader"},
            "subjects": [{"kind": "User", "name": "system:kube-scheduler"},
                         {"kind": "Group", "name": "system:serviceaccounts:kube-system"}]})
        super()._helm_install()


@pytest.fixture(scope="module")
def cluster() -> Iterator[DraRealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    with TaintsOffCluster({NODE: [CARD_A, CARD_B]}, apiserver_args=[TAINTS_OFF]) as real:
        yield real


def published_devices(cluster: DraRealCluster) -> list[str]:
    published = cluster.resource_slice(NODE)
    assert published is not None
    return [d["name"] for d in published["spec"]["devices"]]


def test_an_unhealthy_card_is_left_out_where_taints_are_dropped(cluster: DraRealCluster) -> None:
    run_claim(cluster, "on-b", on=CARD_B.pci_bus_id.lower())
    wait_running(cluster, "on-b")
    assert allocated_device(cluster, "on-b") == DEV_B

    set_health(cluster, healthy=False)
    wait_until("card B left out of the ResourceSlice", lambda: published_devices(cluster) == [DEV_A], timeout=30)
    published = cluster.resource_slice(NODE)
    assert published is not None and not any(d.get("taints") for d in published["spec"]["devices"])
    logs = cluster.container_logs("dra-driver")
    assert "the API server drops device taints" in logs, logs[-3000:]

    run_claim(cluster, "new")
    wait_running(cluster, "new")
    assert allocated_device(cluster, "new") == DEV_A
    time.sleep(2)
    assert phase(cluster.kube, cluster.namespace, "on-b") == "Running"

    set_health(cluster, healthy=True)
    wait_until("card B published again", lambda: published_devices(cluster) == [DEV_A, DEV_B], timeout=30)
    run_claim(cluster, "back-on-b", on=CARD_B.pci_bus_id.lower())
    wait_running(cluster, "back-on-b")
    assert allocated_device(cluster, "back-on-b") == DEV_B
