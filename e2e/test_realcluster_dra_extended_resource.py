"""DRA mode with the DeviceClass's extendedResourceName (issue 36, item 3) on a real control
plane: kube-apiserver and kube-scheduler v1.37.2, where DRAExtendedResource is GA, so the
chart's `draDriver.extendedResource: auto` names hygon.com/dcunum on dra.hygon.com and tells the
webhook to leave whole-card pods as written.

A pod asking `hygon.com/dcunum: 1` and nothing else is stored as written (only its scheduler is
routed); kube-scheduler makes the claim `<pod>-extended-resources-*` itself, allocates a whole
card to it and names it in the pod's status.extendedResourceClaimStatus; the kubelet stand-in
prepares it through our driver as a real kubelet does. A share beside it is rewritten into a
claim as before and lands on the other card. The namespace DCU quota counts both: the driver's
ledger holds both claims, and a second whole card past the quota is refused at admission.
With `draDriver.extendedResource: false` (what `auto` renders below 1.37, tests/dra shows) the
class names no resource and the same pod is rewritten into a claim as before.

    pytest -m realcluster e2e/test_realcluster_dra_extended_resource.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.realcluster.cluster import RELEASE, SYSTEM_NAMESPACE, _merge, unavailable
from e2e.realcluster.dra_cluster import DraRealCluster
from e2e.scenarios import wait_until
from e2e.tools import ROOT
from hami_dcu.cli.localcluster.pods import MockCard
from hami_dcu.common.io.kube import KubeError, NotFoundError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.dra import names

JSON = dict[str, Any]
NODE = "node0"
CARDS = [MockCard(serial="ERA0", pci_bus_id="0000:3D:00.0"), MockCard(serial="ERA1", pci_bus_id="0000:9F:00.0")]
CARD_MIB = 65520  # K100_AI
CLAIMS = f"{names.RESOURCE_API}/namespaces/hami-e2e/resourceclaims"
LEDGER = "/api/v1/namespaces/kube-system/configmaps/hami-dcu-dra-driver-quota"
QUOTAS = "/api/v1/namespaces/hami-e2e/resourcequotas"
QUOTA_MIB = CARD_MIB + 8000 + 1000  # one whole card and the 8000 MiB share fit, a second card does not
_REASON = unavailable()
pytestmark = pytest.mark.realcluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[DraRealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    with DraRealCluster({NODE: CARDS}) as real:
        yield real


def container(limits: dict[str, str]) -> JSON:
    return {"name": "main", "image": "busybox", "resources": {"limits": limits}}


def pod(name: str, limits: dict[str, str]) -> JSON:
    return {"metadata": {"name": name}, "spec": {"terminationGracePeriodSeconds": 0, "containers": [container(limits)]}}


def wait_running(cluster: DraRealCluster, name: str) -> JSON:
    def running() -> JSON | None:
        found = cluster.kube.get_pod(cluster.namespace, name)
        return found if (found.get("status") or {}).get("phase") == "Running" else None

    try:
        return wait_until(f"pod {name} Running", running, timeout=90, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nkubelet DRA errors: {cluster.kubelets[NODE].prepare_errors}\n"
                             f"{cluster.diagnose()}") from None


def status_json(cluster: DraRealCluster) -> JSON:
    assert cluster.control_plane is not None
    done = subprocess.run([sys.executable, "-m", "hami_dcu.cli.main", "status", "--kubeconfig",
                           str(cluster.control_plane.admin_kubeconfig), "-n", cluster.namespace, "-o", "json"],
                          capture_output=True, text=True, timeout=60, check=True)
    return dict(json.loads(done.stdout))


def test_a_whole_card_pod_runs_unrewritten_beside_a_rewritten_share_and_the_quota_counts_both(
        cluster: DraRealCluster) -> None:
    kube = cluster.kube
    device_class = kube.request("GET", f"{names.RESOURCE_API}/deviceclasses/{names.DEVICE_CLASS}")
    assert device_class["spec"].get("extendedResourceName") == "hygon.com/dcunum"
    try:
        kube.request("DELETE", f"{QUOTAS}/dcu-quota")
    except NotFoundError:
        pass
    kube.request("POST", QUOTAS, body={"metadata": {"name": "dcu-quota"},
                                       "spec": {"hard": {"limits.hygon.com/dcumem": str(QUOTA_MIB)}}})

    written = {"hygon.com/dcunum": "1"}
    kube.create_pod(cluster.namespace, pod("whole", written))
    stored = kube.get_pod(cluster.namespace, "whole")
    print("whole-card pod as stored:", json.dumps({"schedulerName": stored["spec"]["schedulerName"],
                                                     "resourceClaims": stored["spec"].get("resourceClaims"),
                                                     "resources": stored["spec"]["containers"][0]["resources"]}))
    # As written (the API server copies limits into requests): no claim, no rewrite; only routed.
    assert stored["spec"]["containers"][0]["resources"] == {"limits": written, "requests": written}
    assert "resourceClaims" not in stored["spec"]
    assert stored["spec"]["schedulerName"] == keys.DEFAULT_SCHEDULER_NAME

    running = wait_running(cluster, "whole")
    extended = running["status"]["extendedResourceClaimStatus"]
    claim = kube.request("GET", f"{CLAIMS}/{extended['resourceClaimName']}")
    assert claim["metadata"]["name"].startswith("whole-extended-resources-")
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == names.DEVICE_CLASS and request["exactly"]["count"] == 1
    assert "capacity" not in request["exactly"]  # kube-scheduler asks no capacity: the policies' defaults
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == names.DRIVER
    whole_device = result["device"]
    # The whole card's cores and memory, so no share fits beside it on that card.
    assert int(result["consumedCapacity"]["cores"]) == 120
    assert extended["requestMappings"] == [{"containerName": "main", "resourceName": "hygon.com/dcunum",
                                            "requestName": request["name"]}]
    assert any(claim["metadata"]["uid"] in spec for spec in cluster.cdi_specs(NODE))

    # A share beside it: rewritten into a claim from a template as before, on the other card.
    kube.create_pod(cluster.namespace, pod("share", {"hygon.com/dcunum": "1", "hygon.com/dcumem": "8000",
                                                     "hygon.com/dcucores": "25"}))
    share = kube.get_pod(cluster.namespace, "share")
    assert share["spec"]["resourceClaims"]
    assert "hygon.com/dcunum" not in share["spec"]["containers"][0]["resources"].get("limits", {})
    wait_running(cluster, "share")
    share_claim = next(c for c in kube.request("GET", CLAIMS)["items"]
                       if any(r.get("name") == "share" for r in c["metadata"].get("ownerReferences") or [])
                       and c["metadata"]["name"] != claim["metadata"]["name"])
    [share_result] = share_claim["status"]["allocation"]["devices"]["results"]
    assert share_result["device"] != whole_device

    # The quota counts both: the driver's ledger holds both claims, in the quota's units...
    ledger = json.loads(kube.request("GET", LEDGER)["data"][cluster.namespace])
    held = {entry["claim"]: (entry["memoryMiB"], entry["cores"]) for entry in ledger.values()}
    print("DCU quota ledger of", cluster.namespace, held)
    assert held == {claim["metadata"]["name"]: (CARD_MIB, "100"), share_claim["metadata"]["name"]: (8000, "25")}
    # ... and a second whole card is refused at admission (65520 + 8000 held, 65520 more asked).
    with pytest.raises(KubeError) as refused:
        kube.create_pod(cluster.namespace, pod("whole-2", written))
    assert f"exceeds the DCU quota of namespace {cluster.namespace}" in str(refused.value)

    # `hami-dcu status` shows both, each on its card, with its pod.
    report = status_json(cluster)
    print("hami-dcu status (DRA part):", json.dumps(report.get("dra"))[:2000])
    shares = {s["claim"]: (c["device"], s["pods"], s["whole"]) for c in report["dra"]["cards"] for s in c["shares"]}
    assert shares[claim["metadata"]["name"]] == (whole_device, ["whole"], True)
    assert shares[share_claim["metadata"]["name"]] == (share_result["device"], ["share"], False)
    kube.request("DELETE", f"{QUOTAS}/dcu-quota")


def test_with_the_value_off_as_below_1_37_a_whole_card_pod_is_rewritten_into_a_claim_as_before(
        cluster: DraRealCluster) -> None:
    kube = cluster.kube
    cluster.clear_pods()
    cluster.clear_claims()
    cluster.extra_values = _merge(cluster.extra_values, {"draDriver": {"extendedResource": False}})
    values = cluster.workdir / "values-no-extended-resource.yaml"
    values.write_text(yaml.safe_dump(cluster.values()))
    cluster.helm_run("upgrade", RELEASE, str(ROOT / "chart"), "--namespace", SYSTEM_NAMESPACE, "-f", str(values),
                     "--wait", "--timeout", "5m")
    device_class = kube.request("GET", f"{names.RESOURCE_API}/deviceclasses/{names.DEVICE_CLASS}")
    assert "extendedResourceName" not in device_class["spec"]

    written = {"hygon.com/dcunum": "1"}

    def rewritten() -> JSON | None:
        """The pod as a dry run would store it, once the restarted webhook rewrites it."""
        try:
            dry = kube.request("POST", f"/api/v1/namespaces/{cluster.namespace}/pods", query={"dryRun": "All"},
                               body=pod("probe", written))
        except KubeError:
            return None  # the webhook's endpoint moving to its new pod
        return dry if dry["spec"].get("resourceClaims") else None

    wait_until("the webhook without --dra-extended-resource", rewritten, timeout=120, interval=1)
    kube.create_pod(cluster.namespace, pod("whole-as-before", written))
    stored = kube.get_pod(cluster.namespace, "whole-as-before")
    print("whole-card pod as stored without the extended resource:",
          json.dumps({"resourceClaims": stored["spec"]["resourceClaims"],
                      "resources": stored["spec"]["containers"][0]["resources"]}))
    [entry] = stored["spec"]["resourceClaims"]
    assert entry["resourceClaimTemplateName"].startswith("hami-dcu-")
    assert stored["spec"]["containers"][0]["resources"] == {"claims": [{"name": entry["name"]}]}
    running = wait_running(cluster, "whole-as-before")
    assert not (running.get("status") or {}).get("extendedResourceClaimStatus")
