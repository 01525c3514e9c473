"""DRA mode on kind: the chart reinstalled with `mode: dra` on the kind suite's cluster.

The real kubelet registers our driver through its plugin manager, kube-scheduler allocates the
claims against the driver's ResourceSlices (consumable capacity), the kubelet calls
NodePrepareResources before the sandbox, and containerd injects the CDI devices and mounts into
the container, which sees its vDCU. Runs after e2e/test_kind.py (same session cluster).

    pytest -m kind e2e/test_kind_dra.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from e2e.kindcluster import CARDS_PER_NODE, WORKERS, KindBackend, usage_of
from e2e.scenarios import phase, wait_until
from hami_dcu.cli.localcluster.pods import POD_IMAGE
from hami_dcu.common.io.kube import KubeError, NotFoundError
from hami_dcu.common.protocol.dra import names

pytestmark = pytest.mark.kind
JSON = dict[str, Any]


@pytest.fixture
def dra(kind: KindBackend) -> KindBackend:
    kind.ensure_mode("dra")
    kind.clean_claims()
    return kind


def _claims(b: KindBackend) -> str:
    return f"{names.RESOURCE_API}/namespaces/{b.namespace}/resourceclaims"


def share(b: KindBackend, name: str, cores: str, memory: str) -> None:
    exactly = {"deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1,
               "capacity": {"requests": {"cores": cores, "memory": memory}}}
    b.kube.request("POST", _claims(b), body={"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                             "metadata": {"name": name},
                                             "spec": {"devices": {"requests": [{"name": "dcu", "exactly": exactly}]}}})
    b.kube.create_pod(b.namespace, {
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 1, "resourceClaims": [{"name": "dcu", "resourceClaimName": name}],
                 "containers": [{"name": "main", "image": POD_IMAGE, "imagePullPolicy": "IfNotPresent",
                                 "command": ["sleep", "infinity"], "resources": {"claims": [{"name": "dcu"}]}}]}})


def running(b: KindBackend, name: str, timeout: float = 120) -> JSON:
    def check() -> JSON | None:
        pod = b.kube.get_pod(b.namespace, name)
        return pod if (pod.get("status") or {}).get("phase") == "Running" else None

    return wait_until(f"pod {name} Running", check, timeout=timeout, interval=0.5)


def mask(conf: dict[str, list[str]]) -> int:
    low, high = (int(v, 16) for v in conf["cu_mask"])
    return low | high << 64


def test_the_real_kubelet_registers_the_driver_and_its_slices_are_published(dra: KindBackend) -> None:
    for node in WORKERS:
        published = wait_until(f"{node}'s ResourceSlice", lambda n=node: dra.resource_slice(n), timeout=120,
                               interval=1)
        devices = published["spec"]["devices"]
        assert len(devices) == CARDS_PER_NODE and all(d["allowMultipleAllocations"] for d in devices)
        registry = dra.node_exec(node, "ls", "/var/lib/kubelet/plugins_registry")
        assert "dra.hygon.com" in registry, registry
        # One mode per node: no device plugin serves it. (The real kubelet keeps a departed
        # plugin's resource, at 0, after the device-plugin mode's uninstall.)
        assert int((dra.kube.get_node(node)["status"].get("allocatable") or {}).get("hygon.com/dcunum", "0")) == 0


def test_a_share_is_prepared_and_the_container_sees_its_vdcu(dra: KindBackend) -> None:
    share(dra, "share-a", cores="30", memory="8Gi")
    pod = running(dra, "share-a")
    conf = dra.vdev_conf_inside("share-a")
    print("vdev0.conf inside share-a (DRA):\n" + dra.pod_exec("share-a", "cat", "/etc/vdev/docker/vdev0.conf"))
    assert conf["cu_count"] == ["30"] and conf["mem"] == ["8192 MiB"]
    assert bin(mask(conf)).count("1") == 30
    devices = dra.pod_exec("share-a", "ls", "/dev", "/dev/dri")
    assert "kfd" in devices and "mkfd" in devices and "renderD" in devices, devices
    node = pod["spec"]["nodeName"]
    uid = dra.kube.request("GET", f"{_claims(dra)}/share-a")["metadata"]["uid"]
    assert any(uid in spec for spec in dra.cdi_specs(node)), "no CDI spec for the claim on its node"


def test_two_shares_on_one_card_have_disjoint_masks(dra: KindBackend) -> None:
    # 70 % each: no card holds both, unless... they must go to distinct cards or share without overlap.
    share(dra, "left", cores="60", memory="4Gi")
    share(dra, "right", cores="40", memory="4Gi")
    left, right = running(dra, "left"), running(dra, "right")
    a, b = dra.vdev_conf_inside("left"), dra.vdev_conf_inside("right")
    if left["spec"]["nodeName"] == right["spec"]["nodeName"] and a["PciBusId"] == b["PciBusId"]:
        assert mask(a) & mask(b) == 0, "two shares of one card overlap"
    assert bin(mask(a)).count("1") == 60 and bin(mask(b)).count("1") == 40


def test_deleting_the_pod_unprepares_and_frees_the_share(dra: KindBackend) -> None:
    share(dra, "gone", cores="30", memory="2Gi")
    pod = running(dra, "gone")
    node = pod["spec"]["nodeName"]
    uid = dra.kube.request("GET", f"{_claims(dra)}/gone")["metadata"]["uid"]
    dra.kube.delete_pod(dra.namespace, "gone")
    wait_until("the pod gone", lambda: phase(dra.kube, dra.namespace, "gone") == "Gone", timeout=60)
    wait_until("its CDI spec and vDCU removed",
               lambda: not any(uid in s for s in dra.cdi_specs(node))
               and not any(uid in d for d in dra.vdev_files(node)), timeout=60, interval=1)
    wait_until("the claim deallocated",
               lambda: not (dra.kube.request("GET", f"{_claims(dra)}/gone").get("status") or {}).get("allocation"),
               timeout=60, interval=1)


def test_a_hami_style_pod_is_rewritten_into_a_claim_and_runs(dra: KindBackend) -> None:
    dra.kube.create_pod(dra.namespace, {"metadata": {"name": "hami-style"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": POD_IMAGE, "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "infinity"],
                        "resources": {"limits": {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000",
                                                 "hygon.com/dcucores": "25"}}}]}})
    running(dra, "hami-style")
    conf = dra.vdev_conf_inside("hami-style")
    assert conf["mem"] == ["2000 MiB"] and conf["cu_count"] == ["30"]  # 25 % of 120 CUs


def test_usage_metrics_name_the_pod_of_a_claim_and_change_between_scrapes(dra: KindBackend) -> None:
    """The driver finds a container's share by the CDI id the real kubelet reports for it in the
    pod resources API: the pod's namespace, name and container label its vDCU's usage."""
    share(dra, "usage-dra", cores="30", memory="2Gi")
    node = running(dra, "usage-dra")["spec"]["nodeName"]
    labels = {"dcu_pod_namespace": dra.namespace, "dcu_pod_name": "usage-dra", "container": "main", "node": node,
              "vdcu_computer_unit": "30", "vdcu_memory_cap": str(2 * 1024**3)}
    first = wait_until("the claim's vDCU in the usage metrics", lambda: usage_of(dra.node_metrics(node), labels),
                       timeout=60, interval=1)
    time.sleep(2)  # the mock SMI's numbers step every second
    second = usage_of(dra.node_metrics(node), labels)
    print(f"usage of {dra.namespace}/usage-dra on {node}: {first} then {second}")
    assert second and second["vdcu_utilizationrate"] != first["vdcu_utilizationrate"]
    assert second["vdcu_usedmemory_bytes"] != first["vdcu_usedmemory_bytes"]


QUOTAS_OF = "/api/v1/namespaces/{}/resourcequotas"
LEDGER = "/api/v1/namespaces/kube-system/configmaps/hami-dcu-dra-driver-quota"
CARD_MIB = 65520  # the kind workers' mock K100_AI


def test_a_whole_card_pod_runs_as_written_beside_a_rewritten_share_and_the_quota_counts_both(
        dra: KindBackend) -> None:
    """Issue 36, item 3, on the real kubelet: kind runs Kubernetes 1.37, so the chart's
    DeviceClass names hygon.com/dcunum as its extendedResourceName and a pod asking one whole
    card by the count alone is stored as written; kube-scheduler makes and allocates its claim,
    the kubelet prepares it through our driver and containerd injects the card. A share is
    rewritten into a claim as before. The namespace quota (limits.hygon.com/dcumem) counts both:
    the driver's ledger holds both claims and a second whole card is refused at admission."""
    kube = dra.kube
    device_class = kube.request("GET", f"{names.RESOURCE_API}/deviceclasses/{names.DEVICE_CLASS}")
    assert device_class["spec"].get("extendedResourceName") == "hygon.com/dcunum"
    quotas = QUOTAS_OF.format(dra.namespace)
    quota_mib = CARD_MIB + 8000 + 1000
    try:
        kube.request("DELETE", f"{quotas}/dcu-quota")
    except NotFoundError:
        pass
    kube.request("POST", quotas, body={"metadata": {"name": "dcu-quota"},
                                       "spec": {"hard": {"limits.hygon.com/dcumem": str(quota_mib)}}})
    try:
        # The extender's watch delivers the quota to the webhook: a dry run of two cards tells when.
        def quota_seen() -> bool:
            try:
                kube.request("POST", f"/api/v1/namespaces/{dra.namespace}/pods", query={"dryRun": "All"},
                             body=_pod("probe", {"hygon.com/dcunum": "2"}))
            except KubeError as exc:
                return "exceeds the DCU quota" in str(exc)
            return False

        wait_until("the webhook sees the quota", quota_seen, timeout=60, interval=0.5)

        written = {"hygon.com/dcunum": "1"}
        kube.create_pod(dra.namespace, _pod("whole", written))
        stored = kube.get_pod(dra.namespace, "whole")
        spec = stored["spec"]
        shown = {"schedulerName": spec["schedulerName"], "resourceClaims": spec.get("resourceClaims"),
                 "containers": [{"name": c["name"], "resources": c["resources"]} for c in spec["containers"]]}
        print("whole-card pod as stored:", json.dumps(shown))
        assert stored["spec"]["containers"][0]["resources"] == {"limits": written, "requests": written}
        assert "resourceClaims" not in stored["spec"]
        assert stored["spec"]["schedulerName"] == "hami-scheduler"

        pod = running(dra, "whole")
        extended = pod["status"]["extendedResourceClaimStatus"]
        print("whole-card pod status.extendedResourceClaimStatus:", json.dumps(extended))
        claim = kube.request("GET", f"{_claims(dra)}/{extended['resourceClaimName']}")
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert result["driver"] == names.DRIVER and int(result["consumedCapacity"]["cores"]) == 120
        # containerd injected the card: the device nodes, no vDCU (a whole card needs none).
        devices = dra.pod_exec("whole", "ls", "/dev", "/dev/dri")
        assert "kfd" in devices and "renderD" in devices, devices

        kube.create_pod(dra.namespace, _pod("share", {"hygon.com/dcunum": "1", "hygon.com/dcumem": "8000",
                                                      "hygon.com/dcucores": "25"}))
        assert kube.get_pod(dra.namespace, "share")["spec"]["resourceClaims"]
        running(dra, "share")
        conf = dra.vdev_conf_inside("share")
        assert conf["mem"] == ["8000 MiB"] and conf["cu_count"] == ["30"]

        ledger = json.loads(kube.request("GET", LEDGER)["data"][dra.namespace])
        held = {entry["claim"]: (entry["memoryMiB"], entry["cores"]) for entry in ledger.values()}
        print(f"quota limits.hygon.com/dcumem {quota_mib}; the DRA drivers' ledger of {dra.namespace}: {held}")
        share_claim = next(name for name in held if name.startswith("share-"))
        assert held == {claim["metadata"]["name"]: (CARD_MIB, "100"), share_claim: (8000, "25")}
        with pytest.raises(KubeError) as refused:
            kube.create_pod(dra.namespace, _pod("whole-2", written))
        print("a second whole card:", str(refused.value)[:300])
        assert "exceeds the DCU quota" in str(refused.value)

        status = [sys.executable, "-m", "hami_dcu.cli.main", "status", "--kubeconfig", str(dra.kubeconfig),
                  "-n", dra.namespace]
        table = subprocess.run(status, capture_output=True, text=True, timeout=60, check=True).stdout
        print(f"\nhami-dcu status -n {dra.namespace}\n{table}")
        assert f"{dra.namespace}/{claim['metadata']['name']} (whole card)" in table
        assert f"{dra.namespace}/{share_claim} (8000 MiB, 30 CU = 25%)" in table
    finally:
        kube.request("DELETE", f"{quotas}/dcu-quota")


def _pod(name: str, limits: dict[str, str]) -> JSON:
    return {"metadata": {"name": name}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": POD_IMAGE, "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "infinity"], "resources": {"limits": limits}}]}}
