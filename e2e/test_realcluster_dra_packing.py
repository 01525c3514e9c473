"""DRA mode packs on the real control plane: a burst of HAMi-style share pods (a Job, its pods
created by the real Job controller, rewritten into claims by our webhook and routed to
hami-scheduler) lands on the fewest nodes that fit it. kube-scheduler allocates the claims and
binds; our extender's /prioritize ranks the nodes that fit, fullest first.

    pytest e2e/test_realcluster_dra_packing.py

Before it, the same burst as plain claim pods through the cluster's default kube-scheduler
(no extender) shows what it does without packing; its spread is printed, not asserted.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.realcluster.cluster import unavailable
from e2e.realcluster.dra_cluster import DraRealCluster
from e2e.scenarios import wait_until
from hami_dcu.cli.localcluster.pods import Ctr, MockCard, pod_manifest
from hami_dcu.common.protocol.dra import names

JSON = dict[str, Any]
NODES = [f"node{i}" for i in range(4)]
SLOTS = 4  # vDCU slots per card (the chart's devicePlugin.slotsPerCard): pods per node here
PODS = 8
_REASON = unavailable()
pytestmark = pytest.mark.realcluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[DraRealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    cards = {node: [MockCard(serial=f"PACK{i}", pci_bus_id="0000:3D:00.0")] for i, node in enumerate(NODES)}
    with DraRealCluster(cards) as real:
        yield real


def placements(cluster: DraRealCluster, selector: str) -> dict[str, str]:
    pods = cluster.kube.list_pods(namespace=cluster.namespace, label_selector=selector).items
    return {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in pods}


def all_bound(cluster: DraRealCluster, selector: str, count: int) -> dict[str, str] | None:
    placed = placements(cluster, selector)
    return placed if len(placed) == count and all(placed.values()) else None


def plain_claim_burst(cluster: DraRealCluster, count: int) -> dict[str, str]:
    """`count` pods, each with a claim of the same share, left to the cluster's own kube-scheduler."""
    templates = f"{names.RESOURCE_API}/namespaces/{cluster.namespace}/resourceclaimtemplates"
    request = {"name": "dcu", "exactly": {"deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount",
                                          "count": 1, "capacity": {"requests": {"cores": "12", "memory": "2000Mi"}}}}
    cluster.kube.request("POST", templates, body={"metadata": {"name": "plain-share"},
                                                  "spec": {"spec": {"devices": {"requests": [request]}}}})
    for i in range(count):
        cluster.kube.create_pod(cluster.namespace, {
            "metadata": {"name": f"plain-{i}", "labels": {"burst": "plain"}},
            "spec": {"schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 0,
                     "resourceClaims": [{"name": "dcu", "resourceClaimTemplateName": "plain-share"}],
                     "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                                     "resources": {"claims": [{"name": "dcu"}]}}]}})
    placed = wait_until("the plain claim pods bound", lambda: all_bound(cluster, "burst=plain", count), timeout=180,
                        interval=0.2)
    for name in placed:
        cluster.kube.delete_pod(cluster.namespace, name)
    claims = f"{names.RESOURCE_API}/namespaces/{cluster.namespace}/resourceclaims"
    wait_until("the plain pods and their claims gone", lambda: not placements(cluster, "burst=plain")
               and not cluster.kube.request("GET", claims).get("items"), timeout=120, interval=0.5)
    return placed


def test_a_burst_of_shares_lands_on_the_fewest_nodes_that_fit(cluster: DraRealCluster) -> None:
    # What the cluster's own kube-scheduler does with the same burst (no extender): printed, not
    # asserted (its spreading is its own business); then gone, so the Job finds every slot free.
    plain = plain_claim_burst(cluster, PODS)
    print(f"\n{PODS} shares through default-scheduler (no extender) on {len(set(plain.values()))} nodes: "
          f"{dict(sorted(Counter(plain.values()).items()))}")

    template = pod_manifest("x", [Ctr("c", 1, 2000, 10)])  # 1 card, 2000 MiB, 10 % of cores: one slot each
    template["spec"]["restartPolicy"] = "Never"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pack"},
           "spec": {"parallelism": PODS, "completions": PODS, "backoffLimit": 0,
                    "template": {"metadata": {"labels": {"burst": "pack"}}, "spec": template["spec"]}}}
    started = time.monotonic()
    cluster.kube.request("POST", f"/apis/batch/v1/namespaces/{cluster.namespace}/jobs", body=job)
    try:
        placed = wait_until(f"all {PODS} pods of the Job bound", lambda: all_bound(cluster, "burst=pack", PODS),
                            timeout=180, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.diagnose()}") from None
    elapsed = time.monotonic() - started
    pods = cluster.kube.list_pods(namespace=cluster.namespace, label_selector="burst=pack").items
    assert all(p["spec"].get("schedulerName") == "hami-scheduler" and p["spec"].get("resourceClaims") for p in pods)
    per_node = Counter(placed.values())
    fewest = math.ceil(PODS / SLOTS)
    print(f"the same burst as a Job of HAMi-style pods through hami-scheduler: bound in {elapsed:.1f} s on "
          f"{len(per_node)} nodes (fewest that fit: {fewest}): {dict(sorted(per_node.items()))}")
    assert len(per_node) == fewest, per_node
    assert set(per_node.values()) == {SLOTS}
