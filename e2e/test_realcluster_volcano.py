"""The Volcano scenarios (e2e/volcano_scenarios.py) on the real control plane: the chart in
Volcano mode (`naming: hcu`, `volcano.enabled`, a 5 s register interval), Volcano played by
the stand-in under its own ServiceAccount, the real admission chain (CEL policy and webhook)
judging its writes, the kubelet stand-in admitting what it binds (issue 24).

    pytest e2e/test_realcluster_volcano.py
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from e2e.realcluster.cluster import RELEASE, SYSTEM_NAMESPACE, RealCluster, unavailable
from e2e.scenarios import wait_until
from e2e.volcano_scenarios import (
    SERVED,
    VOLCANO_SCENARIOS,
    VOLCANO_SCHEDULER,
    VolcanoScenario,
    outcome,
    place_together,
    shared,
    volcano,
)
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError
from hami_dcu.common.protocol import keys

_REASON = unavailable()
pytestmark = pytest.mark.realcluster
VALUES = {"naming": "hcu", "volcano": {"enabled": True}}
JSON = dict[str, Any]
SHARES = keys.HCU_NAMING.resources


@pytest.fixture(scope="module")
def volcano_cluster() -> Iterator[RealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    with RealCluster({"node0": default_cards("node0", 2)}, values=VALUES) as cluster:
        yield cluster



@pytest.mark.parametrize("scenario", VOLCANO_SCENARIOS, ids=lambda s: s.name)
def test_volcano_scenario_on_a_real_control_plane(volcano_cluster: RealCluster, scenario: VolcanoScenario) -> None:
    volcano_cluster.clear_pods()
    try:
        scenario.run(volcano_cluster)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{volcano_cluster.diagnose()}") from None


# --- issue 35, finding 7: a plugin's node status writes ---------------------------------------


def _plugin(cluster: RealCluster, node: str) -> Kube:
    """The token the kubelet gives the node's device plugin: bound to its pod."""
    pods = cluster.kube.list_pods(namespace=SYSTEM_NAMESPACE,
                                  label_selector="app.kubernetes.io/component=device-plugin").items
    (pod,) = [p for p in pods if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")]
    return cluster.kube_as(f"{RELEASE}-device-plugin", pod=pod)


def _status_patch(client: Kube, node: str, status: JSON, strategic: bool = False) -> JSON:
    content_type = "application/strategic-merge-patch+json" if strategic else "application/merge-patch+json"
    return client.request("PATCH", f"/api/v1/nodes/{node}/status?dryRun=All", body={"status": status},
                          content_type=content_type)


def test_a_plugin_changes_only_hcumem_and_hcucores_in_its_nodes_status(volcano_cluster: RealCluster) -> None:
    """Before: in Volcano mode the node0 plugin's nodes/status patch could set any status field:
    cpu capacity, allocatable pods, the addresses, the Ready condition (the policy compared the
    spec, labels and annotations only). Each patch is a dry run: admission runs in full."""
    plugin, node = _plugin(volcano_cluster, "node0"), "node0"
    status = volcano_cluster.kube.get_node(node)["status"]
    assert status["capacity"][SHARES.memory] and status["allocatable"][SHARES.cores]  # what the plugin writes
    # Its shares: allowed, in capacity and allocatable.
    written = _status_patch(plugin, node, {"capacity": {SHARES.memory: "1", SHARES.cores: "100"},
                                           "allocatable": {SHARES.memory: "1", SHARES.cores: "100"}})
    assert written["status"]["allocatable"][SHARES.memory] == "1"
    for change, strategic in (
        ({"capacity": {"cpu": "1000"}}, False),
        ({"allocatable": {"pods": "1000"}}, False),
        ({"allocatable": {SHARES.memory: "1", "memory": "1Ti"}}, False),  # a share and another resource
        ({"allocatable": {SHARES.count: "64"}}, False),  # the count resource is the kubelet's
        ({"allocatable": {"cpu": None}}, False),  # removing another resource
        ({"addresses": [{"type": "InternalIP", "address": "203.0.113.7"}]}, False),
        ({"conditions": [{"type": "Ready", "status": "False", "reason": "Hijacked"}]}, True),
        ({"nodeInfo": {"kubeletVersion": "v0.0.1"}}, False),
    ):
        with pytest.raises(KubeError) as info:
            _status_patch(plugin, node, change, strategic)
        assert info.value.status == 403, (change, info.value)
        assert "there only the capacity and allocatable of hygon.com/hcucores and hygon.com/hcumem" in \
            info.value.message
    after = volcano_cluster.kube.get_node(node)["status"]
    assert after["capacity"]["cpu"] == status["capacity"]["cpu"]
    assert next(c for c in after["conditions"] if c["type"] == "Ready")["status"] == "True"
    # The running plugin's own write still passes: its shares, changed by an admin, are written
    # back by the plugin that restarts (it advertises at start).
    shrunk = {SHARES.memory: "1"}
    volcano_cluster.kube.patch_node_status(node, {"capacity": shrunk, "allocatable": shrunk})
    volcano_cluster.restart_device_plugin(node)
    wait_until("the restarted plugin's shares in node status", lambda: volcano_cluster.kube.get_node(node)["status"][
        "allocatable"][SHARES.memory] == status["allocatable"][SHARES.memory], timeout=60)


# --- issue 35, finding 2: the namespace DCU quota of Volcano's pods ---------------------------

QUOTA = "team-dcu"


def _over_quota(refusal: str | None) -> bool:
    """The webhook's quota refusal (its words name the quota when the API server is the caller)."""
    return refusal is not None and "exceeds" in refusal and "quota" in refusal.lower()


def _quota_seen(cluster: RealCluster, probe: JSON) -> str:
    """The extender's watch has delivered the quota to the webhook: a dry run past it is refused."""
    try:
        cluster.kube.request("POST", f"/api/v1/namespaces/{cluster.namespace}/pods", body=probe,
                             query={"dryRun": "All"})
    except KubeError as exc:
        return str(exc) if _over_quota(str(exc)) else ""
    return ""


def _create(cluster: RealCluster, name: str, ctr: Ctr) -> str | None:
    """None when admitted, else the API server's refusal."""
    manifest = pod_manifest(name, [ctr])
    manifest["spec"]["schedulerName"] = VOLCANO_SCHEDULER
    try:
        cluster.kube.create_pod(cluster.namespace, manifest)
    except KubeError as exc:
        return str(exc)
    return None


def test_the_namespace_quota_holds_for_volcano_pods(volcano_cluster: RealCluster) -> None:
    """Before: with limits.hygon.com/hcumem 4000, three Volcano pods of 4,000 MiB and a whole
    card were all admitted and placed (77,520 MiB held): Volcano's pods meet no /filter and a
    whole card counted 0 at admission. Now the first is admitted and the rest refused, placed
    or not; created in parallel, at most one of eight is admitted."""
    cluster = volcano_cluster
    cluster.clear_pods()
    quotas = f"/api/v1/namespaces/{cluster.namespace}/resourcequotas"
    cluster.kube.request("POST", quotas, body={"metadata": {"name": QUOTA},
                                               "spec": {"hard": {f"limits.{SHARES.memory}": "4000"}}})
    share, whole = shared(4000, 10), Ctr("main", 1, names=SHARES)
    try:
        probe = pod_manifest("probe", [shared(5000, 10)])
        probe["spec"]["schedulerName"] = VOLCANO_SCHEDULER
        wait_until("the webhook sees the quota", lambda: _quota_seen(cluster, probe), timeout=60)
        # The reported sequence, one pod after another.
        refusals = {name: _create(cluster, name, ctr)
                    for name, ctr in (("a", share), ("b", share), ("c", share), ("w", whole))}
        assert refusals["a"] is None, refusals["a"]
        assert all(_over_quota(refusals[name]) for name in ("b", "c", "w")), refusals
        # Placed by Volcano, the admitted pod holds its 4,000 MiB and still counts once.
        standin, node = volcano(cluster), sorted(cluster.cards)[0]
        place_together(cluster, standin, [cluster.kube.get_pod(cluster.namespace, "a")], node)
        assert outcome(cluster, "a") == SERVED
        assert _over_quota(_create(cluster, "b", share))
        cluster.clear_pods()
        # Created at once, before the watch shows any: the reservations of the ones admitted.
        for round_ in range(3):
            names = [f"burst{round_}-{i}" for i in range(8)]
            with ThreadPoolExecutor(max_workers=8) as pool:
                results = list(pool.map(lambda n: _create(cluster, n, share), names))
            admitted = [n for n, refusal in zip(names, results, strict=True) if refusal is None]
            assert len(admitted) <= 1, f"round {round_}: {admitted} admitted against a 4,000 MiB quota"
            cluster.clear_pods()
    finally:
        try:
            cluster.kube.request("DELETE", f"{quotas}/{QUOTA}")
        except NotFoundError:
            pass
        cluster.clear_pods()
