"""Issue 35, finding 6: a pods/status write carries metadata too, and the API server keeps it.

A status PATCH persisted annotations and labels: the bundled kube-scheduler's account (which
may write pods/status, as every kube-scheduler may) rewrote a running pod's allocation to a
whole card. Where the ValidatingAdmissionPolicies run (Kubernetes 1.30+, the chart's default)
they cover every pod subresource; where they do not (`admissionPolicy.enabled: false` here, as
below 1.30) the chart now sends pods/status UPDATEs that touch hami-dcu's keys to the webhook,
which judges them as any pod write. The kubelet stand-ins' own status writes go on passing: the
shared scenarios below run under that webhook.

    pytest -m realcluster e2e/test_realcluster_status_writes.py
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.realcluster.cluster import RELEASE, SYSTEM_NAMESPACE, RealCluster, unavailable
from e2e.scenarios import SCENARIOS, Scenario, phase, wait_until
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.io.kube import MERGE_PATCH, Kube, KubeError
from hami_dcu.common.protocol import keys, writers

JSON = dict[str, Any]
DCU = keys.DCU_NAMING
NODES = ("node0", "node1")
KUBE_SCHEDULER_SA = f"{RELEASE}-kube-scheduler"
_REASON = unavailable()
pytestmark = pytest.mark.realcluster
_WEBHOOK_CONFIG = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{RELEASE}-webhook"
_POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"


@pytest.fixture(scope="module", params=[False, True], ids=["policies-off", "policies-on"])
def cluster(request: pytest.FixtureRequest) -> Iterator[RealCluster]:
    """policies-off: the fallback webhook holds the rule (as below 1.30); policies-on: the
    chart's ValidatingAdmissionPolicies do (1.30+)."""
    if _REASON:
        pytest.skip(_REASON)
    values = {"admissionPolicy": {"enabled": request.param}}
    with RealCluster({n: default_cards(n, 2) for n in NODES}, values=values) as running:
        yield running


def _policies_on(cluster: RealCluster) -> bool:
    return bool(cluster.extra_values["admissionPolicy"]["enabled"])


def _patch_status(kube: Kube, cluster: RealCluster, name: str, body: JSON) -> JSON:
    return kube.request("PATCH", f"/api/v1/namespaces/{cluster.namespace}/pods/{name}/status", body=body,
                        content_type=MERGE_PATCH)


def _refused(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(KubeError) as info:
        call(*args, **kwargs)
    assert info.value.status == 403, info.value
    return info.value.message


# The kubelet stand-ins' status writes of DCU pods (Pending -> Running, container states) pass
# the webhook: the shared scenarios that exercise them run here as everywhere, first, on fresh
# cards (shared_pod_gets_its_vdev expects the first compute units of an unused card).
_KUBELET_SCENARIOS = ("shared_pod_gets_its_vdev", "whole_card_pod", "delete_frees_share_and_vdev",
                      "a_native_sidecar_keeps_its_card")


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.name in _KUBELET_SCENARIOS], ids=lambda s: s.name)
def test_the_kubelets_status_writes_still_pass(cluster: RealCluster, scenario: Scenario) -> None:
    cluster.clear_pods()
    scenario.run(cluster)


def test_the_rule_is_registered_for_status_writes(cluster: RealCluster) -> None:
    hooks = {h["name"]: h for h in cluster.kube.request("GET", _WEBHOOK_CONFIG)["webhooks"]}
    policies = {p["metadata"]["name"] for p in cluster.kube.request("GET", _POLICIES)["items"]}
    if _policies_on(cluster):
        assert "status.writers.dcu.hami.io" not in hooks and f"{RELEASE}-allocation-writers" in policies
    else:
        assert hooks["status.writers.dcu.hami.io"]["rules"][0]["resources"] == ["pods/status"]
        assert f"{RELEASE}-allocation-writers" not in policies


def test_a_status_patch_cannot_rewrite_a_running_pods_allocation(cluster: RealCluster) -> None:
    """kube-scheduler's own account (pods/status: update, patch) and a cluster admin PATCH the
    status of a running share with a whole card in `dcu-devices-allocated`: refused, the
    scheduler's record stands. A status PATCH of a condition alone still passes."""
    cluster.clear_pods()
    cluster.kube.create_pod(cluster.namespace, pod_manifest("shared", [Ctr("main", 1, 1000, 10)]))
    wait_until("the shared pod running", lambda: phase(cluster.kube, cluster.namespace, "shared") == "Running",
               timeout=60)
    recorded = cluster.kube.get_pod(cluster.namespace, "shared")["metadata"]["annotations"]
    card = recorded[DCU.pod_devices_allocated].split(",")[0]
    kube_scheduler = cluster.kube_as(KUBE_SCHEDULER_SA, SYSTEM_NAMESPACE)
    whole = {DCU.pod_devices_allocated: f"{card},DCU,65520,100:;"}
    for who in (kube_scheduler, cluster.kube):
        message = _refused(_patch_status, who, cluster, "shared", {"metadata": {"annotations": whole}})
        assert f"annotations {DCU.pod_devices_allocated} are written only by hami-dcu" in message
        where = f"{RELEASE}-allocation-writers" if _policies_on(cluster) else "status.writers.dcu.hami.io"
        assert where in message
    message = _refused(_patch_status, kube_scheduler, cluster, "shared",
                       {"metadata": {"annotations": {keys.POD_BIND_PHASE: None}}})
    assert keys.POD_BIND_PHASE in message
    # Status itself, or metadata that is not ours, through the same subresource: fine.
    condition = {"type": "hami.io/probe", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    _patch_status(kube_scheduler, cluster, "shared",
                  {"metadata": {"annotations": {"team": "a"}}, "status": {"conditions": [condition]}})
    pod = cluster.kube.get_pod(cluster.namespace, "shared")
    after = pod["metadata"]["annotations"]
    assert {k: after.get(k) for k in writers.POD_KEYS} == {k: recorded.get(k) for k in writers.POD_KEYS}
    assert after["team"] == "a"  # the API server keeps a status write's metadata: the finding's premise
    assert pod["status"]["phase"] == "Running"


def test_a_status_patch_cannot_forge_a_holding_on_a_plain_pod(cluster: RealCluster) -> None:
    """No DCU asked: a status PATCH adding an allocation (a card's worth of another node's
    cards charged to nobody's request) is refused too."""
    cluster.clear_pods()
    plain = pod_manifest("plain", [Ctr("main")])
    plain["spec"]["schedulerName"] = "nobody"  # never placed: it only has to exist
    cluster.kube.create_pod(cluster.namespace, plain)
    kube_scheduler = cluster.kube_as(KUBE_SCHEDULER_SA, SYSTEM_NAMESPACE)
    forged = {DCU.pod_devices_allocated: f"DCU-{cluster.cards['node1'][0].serial},DCU,65520,100:;",
              keys.POD_NODE: "node1"}
    message = _refused(_patch_status, kube_scheduler, cluster, "plain", {"metadata": {"annotations": forged}})
    assert "are written only by hami-dcu" in message
    annotations = cluster.kube.get_pod(cluster.namespace, "plain")["metadata"].get("annotations") or {}
    assert DCU.pod_devices_allocated not in annotations
