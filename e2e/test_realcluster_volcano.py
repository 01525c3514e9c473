"""The Volcano scenarios (e2e/volcano_scenarios.py) on the real control plane: the chart in
Volcano mode (`naming: hcu`, `volcano.enabled`, a 5 s register interval), Volcano played by
the stand-in under its own ServiceAccount, the real admission chain (CEL policy and webhook)
judging its writes, the kubelet stand-in admitting what it binds (issue 24).

    pytest e2e/test_realcluster_volcano.py
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.realcluster.cluster import RELEASE, SYSTEM_NAMESPACE, RealCluster, unavailable
from e2e.scenarios import wait_until
from e2e.volcano_scenarios import VOLCANO_SCENARIOS, VolcanoScenario
from hami_dcu.cli.localcluster.pods import default_cards
from hami_dcu.common import keys
from hami_dcu.common.kube import Kube, KubeError

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
