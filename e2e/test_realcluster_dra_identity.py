"""Issue 35, finding 4, on a real control plane: the DRA driver's identity reaches its own node
only. The chart installed in DRA mode (`mode: dra`), its driver running on node0 with the
projected token the kubelet stand-in binds to the driver's pod (the API server names node0 in
its userInfo.extra), node1 registered by hand (no kubelet) with a slice of our driver and one of
another driver, as a second DCU node and a GPU node would have.

Before: a token bound to node0's driver pod created slices for node1 and for `gpu.nvidia.com`,
deleted `gpu.nvidia.com`'s slice on node1, and listed every claim of the cluster; a token of the
same account bound to no pod could too. Now the policy `<release>-dra-driver-scope` keeps its
slice writes to `node0-dra.hygon.com` of driver `dra.hygon.com` on node0 and refuses an unbound
token, and RBAC lets it read a claim by name only; the driver still publishes, replaces and
recreates its slice and prepares claims.

    pytest -m realcluster e2e/test_realcluster_dra_identity.py
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.realcluster.cluster import RELEASE, SYSTEM_NAMESPACE, unavailable
from e2e.realcluster.dra_cluster import DraRealCluster
from e2e.scenarios import wait_until
from hami_dcu.cli.localcluster.pods import MockCard
from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError
from hami_dcu.common.protocol.dra import names

JSON = dict[str, Any]
NODE, OTHER_NODE = "node0", "node1"
GPU_DRIVER = "gpu.nvidia.com"
CARD = MockCard(serial="DRA0", pci_bus_id="0000:3D:00.0")
DRIVER_SA = f"{RELEASE}-dra-driver"
SLICES = f"{names.RESOURCE_API}/resourceslices"
DRY_RUN = "?dryRun=All"
_REASON = unavailable()
pytestmark = pytest.mark.realcluster


def slice_body(name: str, driver: str, node: str, pool: str | None = None) -> JSON:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node, "devices": [],
                     "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1}}}


# Slices other components own: node1's DCU slice (its own driver's, were it running) and a GPU
# driver's slices on node1 and on node0.
VICTIMS = {f"{OTHER_NODE}-{names.DRIVER}": slice_body(f"{OTHER_NODE}-{names.DRIVER}", names.DRIVER, OTHER_NODE),
           f"{OTHER_NODE}-{GPU_DRIVER}": slice_body(f"{OTHER_NODE}-{GPU_DRIVER}", GPU_DRIVER, OTHER_NODE),
           f"{NODE}-{GPU_DRIVER}": slice_body(f"{NODE}-{GPU_DRIVER}", GPU_DRIVER, NODE)}


@pytest.fixture(scope="module")
def cluster() -> Iterator[DraRealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    with DraRealCluster({NODE: [CARD]}) as real:
        real.kube.request("POST", "/api/v1/nodes", body={"metadata": {"name": OTHER_NODE, "labels": {
            "kubernetes.io/hostname": OTHER_NODE}}})
        for body in VICTIMS.values():
            real.kube.request("POST", SLICES, body=body)
        yield real


def driver_pod(cluster: DraRealCluster, node: str = NODE) -> JSON:
    pods = cluster.kube.list_pods(namespace=SYSTEM_NAMESPACE,
                                  label_selector="app.kubernetes.io/component=dra-driver").items
    (pod,) = [p for p in pods if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")]
    return pod


def bound_driver(cluster: DraRealCluster) -> Kube:
    """The token the kubelet gives node0's driver: its ServiceAccount's, bound to its pod."""
    return cluster.kube_as(DRIVER_SA, pod=driver_pod(cluster))


def refused(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(KubeError) as info:
        call(*args, **kwargs)
    assert info.value.status == 403, info.value
    return info.value.message


def own_slice(cluster: DraRealCluster) -> JSON:
    published = cluster.resource_slice(NODE)
    assert published is not None
    return published


def test_a_bound_driver_token_writes_no_other_nodes_or_drivers_slice(cluster: DraRealCluster) -> None:
    driver = bound_driver(cluster)
    own = names.slice_name(NODE)
    # Created under its own slice's name, each field of it wrong in turn: admission answers
    # before the store finds the name taken (a 409 would mean the policy let it through).
    for body in (slice_body(own, names.DRIVER, OTHER_NODE),  # another node
                 slice_body(own, GPU_DRIVER, NODE),  # another driver
                 slice_body(own, names.DRIVER, NODE, pool=OTHER_NODE)):  # another node's pool
        message = refused(driver.request, "POST", SLICES + DRY_RUN, body=body)
        assert f"the hami-dcu DRA driver of node {NODE} may write only its own ResourceSlice {own}" in message
    # The attack as found: new slices for another node, of our driver and of another; another
    # driver's on its own node.
    for body in (slice_body("evil-dcu", names.DRIVER, OTHER_NODE), slice_body("evil-gpu", GPU_DRIVER, OTHER_NODE),
                 slice_body("evil-gpu-here", GPU_DRIVER, NODE)):
        refused(driver.request, "POST", SLICES, body=body)
        with pytest.raises(NotFoundError):
            cluster.kube.request("GET", f"{SLICES}/{body['metadata']['name']}")
    # Replacing or deleting slices it does not own: another node's of our driver, another driver's
    # on another node and on its own node.
    for name in VICTIMS:
        stored = cluster.kube.request("GET", f"{SLICES}/{name}")
        emptied = {**stored, "spec": {**stored["spec"], "pool": {**stored["spec"]["pool"], "generation": 2}}}
        message = refused(driver.request, "PUT", f"{SLICES}/{name}", body=emptied)
        assert "only its own ResourceSlice" in message
        message = refused(driver.request, "DELETE", f"{SLICES}/{name}")
        assert f"may delete only its own ResourceSlice {own}, not {name}" in message
        assert cluster.kube.request("GET", f"{SLICES}/{name}")["metadata"]["uid"] == stored["metadata"]["uid"]


def test_an_unbound_driver_token_writes_no_slice(cluster: DraRealCluster) -> None:
    unbound = cluster.kube_as(DRIVER_SA)
    own = own_slice(cluster)
    for call in (lambda: unbound.request("POST", SLICES + DRY_RUN, body=slice_body("evil-dcu", names.DRIVER, NODE)),
                 lambda: unbound.request("PUT", f"{SLICES}/{own['metadata']['name']}{DRY_RUN}", body=own),
                 lambda: unbound.request("DELETE", f"{SLICES}/{own['metadata']['name']}{DRY_RUN}"),
                 lambda: unbound.request("DELETE", f"{SLICES}/{OTHER_NODE}-{GPU_DRIVER}")):
        message = refused(call)
        assert f"system:serviceaccount:{SYSTEM_NAMESPACE}:{DRIVER_SA} is the hami-dcu DRA driver, but its token " \
               "names no node" in message
    assert cluster.kube.request("GET", f"{SLICES}/{OTHER_NODE}-{GPU_DRIVER}")


def test_the_driver_reads_claims_by_name_only(cluster: DraRealCluster) -> None:
    """Before: list and watch of every claim of the cluster."""
    driver = bound_driver(cluster)
    claims = f"{names.RESOURCE_API}/namespaces/{cluster.namespace}/resourceclaims"
    cluster.kube.request("POST", claims, body={
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "someone-elses"},
        "spec": {"devices": {"requests": [{"name": "dcu", "exactly": {
            "deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1}}]}}})
    try:
        for path in (f"{names.RESOURCE_API}/resourceclaims", claims, f"{claims}?watch=true&timeoutSeconds=1"):
            refused(driver.request, "GET", path)
        # Issue 36, item 2 grants patch on resourceclaims/status (its status.devices entries): the
        # allocation and reservations stay kube-scheduler's (no resourceclaims/binding).
        with pytest.raises(KubeError) as binding:
            driver.request("PATCH", f"{claims}/someone-elses/status", body={"status": {"reservedFor": [
                {"resource": "pods", "name": "x", "uid": "00000000-0000-4000-8000-000000000001"}]}},
                content_type="application/merge-patch+json")
        assert 'resource="resourceclaims/binding"' in str(binding.value), binding.value
        assert driver.request("GET", f"{claims}/someone-elses")["metadata"]["name"] == "someone-elses"
    finally:
        cluster.kube.request("DELETE", f"{claims}/someone-elses")


def test_the_driver_still_writes_its_own_slice_and_prepares_claims(cluster: DraRealCluster) -> None:
    """Its own slice: replaced and deleted by its bound token (dry run), recreated and rewritten by
    the running driver after an admin removed or changed it, and a claim prepared for a pod."""
    driver, own = bound_driver(cluster), own_slice(cluster)
    path = f"{SLICES}/{own['metadata']['name']}"
    driver.request("PUT", path + DRY_RUN, body=own)
    driver.request("DELETE", path + DRY_RUN)
    # The running driver re-creates its slice (CREATE) ...
    cluster.kube.request("DELETE", path)
    back = wait_until("the driver's slice re-created",
                      lambda: (cluster.resource_slice(NODE) or {}).get("spec", {}).get("devices"), timeout=60)
    assert [d["name"] for d in back] == [names.device_name(CARD.pci_bus_id)]
    # ... and replaces one that no longer says what its cards are (UPDATE).
    stale = own_slice(cluster)
    stale["spec"]["devices"] = []
    cluster.kube.request("PUT", path, body=stale)
    wait_until("the driver's slice rewritten",
               lambda: (cluster.resource_slice(NODE) or {}).get("spec", {}).get("devices"), timeout=60)
    # A claim is read and prepared: the pod runs.
    claims = f"{names.RESOURCE_API}/namespaces/{cluster.namespace}/resourceclaims"
    cluster.kube.request("POST", claims, body={
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "share"},
        "spec": {"devices": {"requests": [{"name": "dcu", "exactly": {
            "deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1,
            "capacity": {"requests": {"cores": "30", "memory": "8Gi"}}}}]}}})
    cluster.kube.create_pod(cluster.namespace, {"metadata": {"name": "share"}, "spec": {
        "terminationGracePeriodSeconds": 0, "resourceClaims": [{"name": "dcu", "resourceClaimName": "share"}],
        "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "dcu"}]}}]}})

    def running() -> bool:
        return (cluster.kube.get_pod(cluster.namespace, "share").get("status") or {}).get("phase") == "Running"

    try:
        wait_until("the claim's pod Running", running, timeout=90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nkubelet DRA errors: {cluster.kubelets[NODE].prepare_errors}\n"
                             f"{cluster.diagnose()}") from None


def test_the_driver_changes_no_allocation_reservation_or_other_drivers_entry_of_a_claim(
        cluster: DraRealCluster) -> None:
    """Security round 5. On Kubernetes 1.34 and 1.35 RBAC alone authorizes claim status writes
    (no DRAResourceClaimGranularStatusAuthorization): `patch` on resourceclaims/status let the
    driver's token deallocate any claim of any namespace, reserve it for a pod, or write another
    driver's status.devices entries. Played here by granting the driver's account what 1.37
    checks besides (resourceclaims/binding, resourceclaims/driver of any driver on any node).
    Before: each attack answered 200 (dry run). Now the policy `<release>-dra-driver-claims`
    refuses them and lets the driver write its own driver's entries."""
    claims = f"{names.RESOURCE_API}/namespaces/{cluster.namespace}/resourceclaims"
    role = "round5-rbac-alone"
    cluster.kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", body={
        "metadata": {"name": role}, "rules": [{"apiGroups": ["resource.k8s.io"], "verbs": ["*"],
                                               "resources": ["resourceclaims/binding", "resourceclaims/driver"]}]})
    cluster.kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body={
        "metadata": {"name": role}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": DRIVER_SA, "namespace": SYSTEM_NAMESPACE}]})
    device = {"driver": names.DRIVER, "pool": OTHER_NODE, "device": "dev1"}
    gpu = {"driver": GPU_DRIVER, "pool": OTHER_NODE, "device": "gpu0"}
    cluster.kube.request("POST", claims, body={
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "victim"},
        "spec": {"devices": {"requests": [
            {"name": "dcu", "exactly": {"deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount",
                                        "count": 1}},
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "ExactCount",
                                        "count": 1}}]}}})
    merge = "application/merge-patch+json"
    try:
        cluster.kube.request("PATCH", f"{claims}/victim/status", content_type=merge, body={"status": {"allocation": {
            "devices": {"results": [{"request": "dcu", **device}, {"request": "gpu", **gpu}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [OTHER_NODE]}]}]}}}})
        driver = bound_driver(cluster)
        status = f"{claims}/victim/status{DRY_RUN}"
        # Its own driver's entry, on a claim of another node: what the grant lets through (once live).
        def own_entry() -> JSON | None:
            try:
                return driver.request("PATCH", status, content_type=merge, body={"status": {"devices": [device]}})
            except KubeError as exc:
                if exc.status != 403 or "dra-driver-claims" in exc.message:
                    raise
                return None  # RBAC: the grant not live yet

        wait_until("the grant live", own_entry, timeout=30)
        for attack in ({"status": {"allocation": None}},  # deallocate someone's claim
                       {"status": {"reservedFor": [{"resource": "pods", "name": "thief",
                                                    "uid": "00000000-0000-4000-8000-000000000002"}]}},
                       {"status": {"devices": [gpu]}},  # another driver's entry
                       {"status": {"devices": [device, gpu]}}):
            message = refused(driver.request, "PATCH", status, content_type=merge, body=attack)
            assert f"the hami-dcu DRA driver may change in ResourceClaim {cluster.namespace}/victim only the " \
                   f"status.devices entries of driver {names.DRIVER}" in message, message
        stored = cluster.kube.request("GET", f"{claims}/victim")
        assert stored["status"]["allocation"]["devices"]["results"][0]["device"] == "dev1"
        assert not stored["status"].get("reservedFor") and not stored["status"].get("devices")
    finally:
        cluster.kube.request("DELETE", f"{claims}/victim")
        cluster.kube.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}")
        cluster.kube.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")
