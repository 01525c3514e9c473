"""Issue 21, items 2 and 3, on a real control plane (upstream kube-apiserver with the chart's
ValidatingAdmissionPolicies and RBAC, real ServiceAccount tokens, the chart installed with
`helm install` as a user installs it):

* beside HAMi: HAMi's scheduler, played with its own ServiceAccount and HAMi's rights, places
  its own pods and locks its own nodes, and a node shared with DCUs when the chart names it;
  it still cannot touch a DCU pod's allocation;
* each hami-dcu identity changes only what it must: the extender a node's lock, a device plugin
  its own keys on its own node and pods, the certificate jobs their two Secrets and the
  webhook's caBundle, kube-scheduler its own Lease.

Every attack is sent as a dry run (`dryRun=All`): admission runs in full and nothing changes,
so the same requests against the chart before this change show what they could do.

    pytest e2e/test_realcluster_identities.py
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.realcluster.cluster import RELEASE, SYSTEM_NAMESPACE, RealCluster, unavailable
from e2e.scenarios import phase, wait_until
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.io.kube import Kube, KubeError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import encode_reported

DCU = keys.DCU_NAMING  # the naming set these tests speak

JSON = dict[str, Any]
NODES = ("node0", "node1")
GPU_NODE = "gpu0"  # a node HAMi alone serves: registered here by hand, no kubelet, no DCUs
HAMI_SCHEDULER = "hami-scheduler"  # HAMi's chart names its scheduler's ServiceAccount so
_REASON = unavailable()
pytestmark = pytest.mark.realcluster

EXTENDER_SA, PLUGIN_SA, KUBE_SCHEDULER_SA = f"{RELEASE}-scheduler", f"{RELEASE}-device-plugin", \
    f"{RELEASE}-kube-scheduler"
RENEWAL_SA, CERTS_HOOK_SA = f"{RELEASE}-certs-renewal", f"{RELEASE}-certs"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
# The rights HAMi's Helm chart gives its scheduler: what it can do
# beside hami-dcu is what RBAC lets it do minus what our policies refuse.
HAMI_SCHEDULER_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[RealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    values = {"admissionPolicy": {"nodeLockWriters": {"serviceAccounts": [f"{SYSTEM_NAMESPACE}/{HAMI_SCHEDULER}"]}}}
    with RealCluster({n: default_cards(n, 2) for n in NODES}, values=values) as running:
        _install_hami_scheduler_identity(running)
        running.kube.request("POST", "/api/v1/nodes", body={"metadata": {"name": GPU_NODE, "labels": {
            "kubernetes.io/hostname": GPU_NODE}}})
        yield running


def _install_hami_scheduler_identity(cluster: RealCluster) -> None:
    kube, rbac = cluster.kube, "/apis/rbac.authorization.k8s.io/v1"
    kube.request("POST", f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts",
                 body={"metadata": {"name": HAMI_SCHEDULER}})
    kube.request("POST", f"{rbac}/clusterroles", body={"metadata": {"name": HAMI_SCHEDULER},
                                                        "rules": HAMI_SCHEDULER_RULES})
    kube.request("POST", f"{rbac}/clusterrolebindings", body={
        "metadata": {"name": HAMI_SCHEDULER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": HAMI_SCHEDULER},
        "subjects": [{"kind": "ServiceAccount", "name": HAMI_SCHEDULER, "namespace": SYSTEM_NAMESPACE}]})


def _refused(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(KubeError) as info:
        call(*args, **kwargs)
    assert info.value.status == 403, info.value
    return info.value.message


def _dry_patch(client: Kube, path: str, patch: JSON, content_type: str = MERGE) -> JSON:
    return client.request("PATCH", path + "?dryRun=All", body=patch, content_type=content_type)


def _new_image(pod: JSON) -> JSON:
    """A strategic merge patch swapping the first container's image (merged by name, so it
    passes the API server's validation and reaches admission)."""
    return {"spec": {"containers": [{"name": pod["spec"]["containers"][0]["name"], "image": "attacker/shell"}]}}


def _node_path(node: str) -> str:
    return f"/api/v1/nodes/{node}"


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def _plain(name: str, scheduler: str | None = None, node: str | None = None) -> JSON:
    pod = pod_manifest(name, [Ctr("main")])
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    if node:
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def _lock_value(namespace: str, pod: str) -> str:
    return f"{dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M:%SZ},{namespace},{pod}"


def _plugin(cluster: RealCluster, node: str) -> Kube:
    pods = cluster.kube.list_pods(namespace=SYSTEM_NAMESPACE,
                                  label_selector="app.kubernetes.io/component=device-plugin").items
    (pod,) = [p for p in pods if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")]
    return cluster.kube_as(PLUGIN_SA, pod=pod)


def _running_on(cluster: RealCluster, name: str, node: str) -> JSON:
    wait_until(f"{name} running", lambda: phase(cluster.kube, cluster.namespace, name) == "Running", timeout=60)
    pod = cluster.kube.get_pod(cluster.namespace, name)
    assert pod["spec"]["nodeName"] == node
    return pod


# --- item 2: beside HAMi -------------------------------------------------------------------


def test_hamis_scheduler_places_its_own_pods_and_locks_its_own_and_mixed_nodes(cluster: RealCluster) -> None:
    """Before: HAMi's bind-phase/vgpu-node patch on its own pod and its node lock were refused
    on every pod and node (the chart guarded HAMi's keys everywhere): HAMi could schedule nothing."""
    hami = cluster.kube_as(HAMI_SCHEDULER)
    ns = cluster.namespace
    cluster.kube.create_pod(ns, _plain("hami-gpu-pod", scheduler="hami-scheduler-of-hami"))
    now = str(int(dt.datetime.now(dt.UTC).timestamp()))
    # HAMi's /bind: the node lock, the pod's bind keys, then a Binding without annotations.
    for node in (GPU_NODE, "node0"):  # a node without DCUs; a node shared with DCUs (listed)
        hami.patch_node_metadata(node, annotations={keys.NODE_LOCK: _lock_value(ns, "hami-gpu-pod")})
        assert cluster.kube.get_node(node)["metadata"]["annotations"][keys.NODE_LOCK].endswith("hami-gpu-pod")
        hami.patch_node_metadata(node, annotations={keys.NODE_LOCK: None})  # HAMi's release
    hami.patch_pod_metadata(ns, "hami-gpu-pod", annotations={
        keys.POD_NODE: GPU_NODE, keys.POD_TIME: now, keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
        keys.POD_BIND_TIME: now})
    hami.request("POST", _pod_path(ns, "hami-gpu-pod") + "/binding", body={
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "hami-gpu-pod"},
        "target": {"kind": "Node", "name": GPU_NODE}})
    bound = cluster.kube.get_pod(ns, "hami-gpu-pod")
    assert bound["spec"]["nodeName"] == GPU_NODE
    assert bound["metadata"]["annotations"][keys.POD_BIND_PHASE] == keys.BIND_PHASE_ALLOCATING
    # HAMi's device plugin marks it done (played by the same identity: the keys are HAMi's here).
    hami.patch_pod_metadata(ns, "hami-gpu-pod", annotations={keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})


def test_hamis_scheduler_cannot_touch_a_dcu_pods_allocation(cluster: RealCluster) -> None:
    ns = cluster.namespace
    hami = cluster.kube_as(HAMI_SCHEDULER)
    cluster.kube.create_pod(ns, pod_manifest("dcu-share", [Ctr("main", 1, 1000, 10)]))
    node = wait_until("dcu-share bound", lambda: cluster.kube.get_pod(ns, "dcu-share")["spec"].get("nodeName"),
                      timeout=60)
    pod = _running_on(cluster, "dcu-share", node)
    recorded = pod["metadata"]["annotations"]
    for change in ({keys.POD_BIND_PHASE: keys.BIND_PHASE_FAILED}, {keys.POD_NODE: GPU_NODE},
                   {keys.POD_BIND_TIME: None}, {DCU.pod_devices_allocated: None}):
        message = _refused(hami.patch_pod_metadata, ns, "dcu-share", annotations=change)
        assert f"annotations {next(iter(change))} are written only by hami-dcu" in message
        assert f"system:serviceaccount:{SYSTEM_NAMESPACE}:{HAMI_SCHEDULER} may not" in message
    # Nor on a DCU pod not yet scheduled (it names a DCU resource; nothing carries our keys yet).
    pending = pod_manifest("dcu-pending", [Ctr("main", 1)])
    pending["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "nowhere"}
    cluster.kube.create_pod(ns, pending)
    _refused(hami.patch_pod_metadata, ns, "dcu-pending", annotations={keys.POD_BIND_PHASE: "allocating"})
    after = cluster.kube.get_pod(ns, "dcu-share")["metadata"]["annotations"]
    assert {k: after.get(k) for k in recorded if k.startswith("hami.io/")} == \
        {k: v for k, v in recorded.items() if k.startswith("hami.io/")}


def test_a_mixed_nodes_lock_stays_hami_dcus_for_identities_not_named(cluster: RealCluster) -> None:
    """The lock of a DCU node: the extender, the node's plugin and the listed identities only."""
    lock = {keys.NODE_LOCK: _lock_value(cluster.namespace, "x")}
    cluster.kube.request("POST", f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts",
                         body={"metadata": {"name": "hami-device-plugin"}})
    unlisted = cluster.kube_as("hami-device-plugin")
    cluster.kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body={
        "metadata": {"name": "hami-device-plugin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": HAMI_SCHEDULER},
        "subjects": [{"kind": "ServiceAccount", "name": "hami-device-plugin", "namespace": SYSTEM_NAMESPACE}]})
    message = wait_until("the RBAC binding in effect", lambda: _denial(unlisted, "node0", lock), timeout=30)
    assert f"annotations {keys.NODE_LOCK} are written only by hami-dcu" in message
    _dry_patch(unlisted, _node_path(GPU_NODE), {"metadata": {"annotations": lock}})  # its own node: fine
    _dry_patch(cluster.kube_as(EXTENDER_SA), _node_path("node0"), {"metadata": {"annotations": lock}})


def _denial(client: Kube, node: str, annotations: JSON) -> str | None:
    try:
        _dry_patch(client, _node_path(node), {"metadata": {"annotations": annotations}})
    except KubeError as exc:
        return exc.message if "written only by hami-dcu" in exc.message else None
    raise AssertionError(f"{node}: the lock was admitted")


def test_kube_scheduler_leads_on_its_release_lease_not_hamis(cluster: RealCluster) -> None:
    """Before: the Lease was named after the scheduler name, hami-scheduler, which is HAMi's."""
    lease = wait_until("the release's Lease held", lambda: _lease(cluster, f"{RELEASE}-kube-scheduler"), timeout=60)
    assert lease["spec"]["holderIdentity"].startswith(f"{RELEASE}-scheduler-")
    assert _lease(cluster, "hami-scheduler") is None


def _lease(cluster: RealCluster, name: str) -> JSON | None:
    try:
        return cluster.kube.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NAMESPACE}/leases/{name}")
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise


# --- item 3: each identity, only what it must -----------------------------------------------


def test_the_extender_changes_only_the_lock_of_a_node(cluster: RealCluster) -> None:
    """Before: the extender's ServiceAccount could taint, cordon and relabel any node."""
    extender = cluster.kube_as(EXTENDER_SA)
    for patch in ({"spec": {"unschedulable": True}},
                  {"spec": {"taints": [{"key": "evil", "effect": "NoSchedule"}]}},
                  {"metadata": {"labels": {"dcu": "off"}}},
                  {"metadata": {"annotations": {DCU.node_register: "forged", "team": "x"}}},
                  {"metadata": {"annotations": {keys.NODE_LOCK: _lock_value("ns", "p"), "team": "x"}}}):
        for node in ("node0", GPU_NODE):
            message = _refused(_dry_patch, extender, _node_path(node), patch)
            assert "may change on nodes only the annotation hami.io/mutex.lock" in message or \
                "are written only by hami-dcu" in message, message
    _dry_patch(extender, _node_path("node0"), {"metadata": {"annotations": {keys.NODE_LOCK: _lock_value("a", "b")}}})
    # It still binds pods: the shared scenarios and every DCU pod here prove that.


def test_a_device_plugin_changes_only_its_keys_on_its_node_and_pods(cluster: RealCluster) -> None:
    """Before: a plugin could rewrite any field of any pod on its node (the image of a pod whose
    token is another identity's) and set node-restriction.kubernetes.io/ labels on its node."""
    ns = cluster.namespace
    plugin = _plugin(cluster, "node0")
    cluster.kube.create_pod(ns, _plain("neighbour", node="node0"))
    neighbour = _running_on(cluster, "neighbour", "node0")
    path = _pod_path(ns, "neighbour")
    for patch, content_type in ((_new_image(neighbour), STRATEGIC), ({"metadata": {"labels": {"app": "x"}}}, MERGE),
                                ({"metadata": {"annotations": {"team": "x"}}}, MERGE),
                                ({"spec": {"activeDeadlineSeconds": 1}}, MERGE)):
        message = _refused(_dry_patch, plugin, path, patch, content_type)
        assert "the hami-dcu device plugin of node node0 may change on its pods only the annotations" in message
    _dry_patch(plugin, path, {"metadata": {"annotations": {keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS}}})
    # The system pods on its node (the scheduler's carries kube-scheduler's token) alike.
    system = cluster.kube.list_pods(namespace=SYSTEM_NAMESPACE, field_selector="spec.nodeName=node0").items
    assert system
    for pod in system:
        _refused(_dry_patch, plugin, _pod_path(SYSTEM_NAMESPACE, pod["metadata"]["name"]), _new_image(pod), STRATEGIC)
    node = _node_path("node0")
    for patch in ({"metadata": {"labels": {"node-restriction.kubernetes.io/dcu-trusted": "true"}}},
                  {"metadata": {"labels": {"dcu": "off"}}}, {"spec": {"unschedulable": True}},
                  {"metadata": {"annotations": {"team": "x"}}}):
        message = _refused(_dry_patch, plugin, node, patch)
        assert "may change on its node only the annotations" in message
    handshake = encode_reported(dt.datetime.now(dt.UTC))
    _dry_patch(plugin, node, {"metadata": {"annotations": {DCU.node_handshake: handshake}}})


def test_the_renewal_job_creates_no_secret(cluster: RealCluster) -> None:
    """Before: the renewal CronJob's ServiceAccount could create any Secret in kube-system, a
    bootstrap token included (a way to join a node of one's own)."""
    renewal = cluster.kube_as(RENEWAL_SA)
    bootstrap = {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
                 "metadata": {"name": "bootstrap-token-abcdef"},
                 "stringData": {"token-id": "abcdef", "token-secret": "0123456789abcdef",
                                "usage-bootstrap-authentication": "true",
                                "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}}
    path = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/secrets"
    _refused(renewal.request, "POST", path + "?dryRun=All", body=bootstrap)
    # Its own two Secrets it still renews.
    serving = cluster.kube.request("GET", f"{path}/{RELEASE}-webhook-tls")
    renewal.request("PUT", f"{path}/{RELEASE}-webhook-tls?dryRun=All", body=serving)


def test_the_certs_hook_identity_creates_only_its_two_secrets(cluster: RealCluster) -> None:
    """The install/upgrade hook must create the Secrets (RBAC cannot narrow create by name); the
    policy does. Its ServiceAccount is deleted once the hooks succeed: recreated here with the
    hook's Role, as the next `helm upgrade` does."""
    chart_role = {"metadata": {"name": CERTS_HOOK_SA}, "rules": [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]}
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{SYSTEM_NAMESPACE}"
    cluster.kube.request("POST", f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts",
                         body={"metadata": {"name": CERTS_HOOK_SA}})
    cluster.kube.request("POST", f"{rbac}/roles", body=chart_role)
    cluster.kube.request("POST", f"{rbac}/rolebindings", body={
        "metadata": {"name": CERTS_HOOK_SA},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CERTS_HOOK_SA},
        "subjects": [{"kind": "ServiceAccount", "name": CERTS_HOOK_SA, "namespace": SYSTEM_NAMESPACE}]})
    hook = cluster.kube_as(CERTS_HOOK_SA)
    path = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/secrets?dryRun=All"

    def secret(name: str) -> JSON:
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"k": "v"}}

    message = wait_until("the hook's Role in effect", lambda: _create_refusal(hook, path, secret(
        "bootstrap-token-abcdef")), timeout=30)
    assert f"the hami-dcu certs job writes only the Secrets {SYSTEM_NAMESPACE}/{RELEASE}-webhook-tls" in message
    with pytest.raises(KubeError) as exists:  # its own name passes admission; the Secret exists
        hook.request("POST", path, body=secret(f"{RELEASE}-webhook-ca"))
    assert exists.value.status == 409


def _create_refusal(client: Kube, path: str, body: JSON) -> str | None:
    try:
        client.request("POST", path, body=body)
    except KubeError as exc:
        return exc.message if exc.status == 403 and "certs job" in exc.message else None
    raise AssertionError("the bootstrap token Secret was admitted")


def test_the_certs_jobs_change_only_the_webhooks_ca_bundle(cluster: RealCluster) -> None:
    """Its ClusterRole may patch hami-dcu's webhook configuration, which could send every DCU
    pod to a server of one's choosing; the policy leaves it the caBundle only."""
    renewal = cluster.kube_as(RENEWAL_SA)
    path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{RELEASE}-webhook"
    config = cluster.kube.request("GET", path)
    webhooks = config["webhooks"]
    redirected = [{**w, "clientConfig": {"url": "https://attacker.example/webhook",
                                         "caBundle": w["clientConfig"]["caBundle"]}} for w in webhooks]
    opened = [{**w, "failurePolicy": "Ignore"} for w in webhooks]
    for changed in (redirected, opened):
        message = _refused(_dry_patch, renewal, path, {"webhooks": changed})
        assert "changes only the caBundle of the webhook configuration" in message
    rebundled = [{**w, "clientConfig": {**w["clientConfig"], "caBundle": w["clientConfig"]["caBundle"]}}
                 for w in webhooks]
    _dry_patch(renewal, path, {"webhooks": rebundled})


def test_kube_scheduler_may_not_take_another_components_lease(cluster: RealCluster) -> None:
    """Before: its Role let it update every Lease of the release namespace (kube-system): it could
    hold kube-controller-manager's leadership and stop every controller."""
    scheduler = cluster.kube_as(KUBE_SCHEDULER_SA)
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NAMESPACE}/leases"
    try:
        victim = cluster.kube.request("GET", f"{leases}/kube-controller-manager")
    except KubeError:  # this control plane's controller manager runs without leader election
        victim = cluster.kube.request("POST", leases, body={
            "metadata": {"name": "kube-controller-manager"},
            "spec": {"holderIdentity": "controller-manager-0", "leaseDurationSeconds": 15}})
    taken = {**victim, "spec": {**victim["spec"], "holderIdentity": "hami-dcu-kube-scheduler"}}
    _refused(scheduler.request, "PUT", f"{leases}/kube-controller-manager?dryRun=All", body=taken)
    own = cluster.kube.request("GET", f"{leases}/{RELEASE}-kube-scheduler")
    scheduler.request("PUT", f"{leases}/{RELEASE}-kube-scheduler?dryRun=All", body=own)


def _claims(token: str) -> JSON:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_kube_scheduler_runs_on_a_projected_expiring_token(cluster: RealCluster) -> None:
    """Before: a kubernetes.io/service-account-token Secret, valid until deleted, mounted into
    kube-scheduler. Now the pod's own projected token (bound to the pod, expiring); the
    extender's is minted from it, expiring too, and is the one the extender writes with (the
    allocation policy would refuse its Bindings otherwise: every DCU pod here proves it)."""
    legacy = [s["metadata"]["name"] for s in cluster.kube.request(
        "GET", f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/secrets")["items"]
        if s.get("type") == "kubernetes.io/service-account-token"]
    assert legacy == []
    (scheduler,) = cluster.kube.list_pods(namespace=SYSTEM_NAMESPACE,
                                          label_selector="app.kubernetes.io/component=scheduler").items
    assert scheduler["spec"]["serviceAccountName"] == KUBE_SCHEDULER_SA
    volumes = cluster.kubelets[scheduler["spec"]["nodeName"]].running[scheduler["metadata"]["uid"]].root / "volumes"
    own = _claims((volumes / "kube-scheduler-token" / "token").read_text())
    assert own["sub"] == f"system:serviceaccount:{SYSTEM_NAMESPACE}:{KUBE_SCHEDULER_SA}"
    assert own["kubernetes.io"]["pod"]["uid"] == scheduler["metadata"]["uid"]
    assert own["exp"] - own["iat"] == 3600  # not extended to a year (3607 would be)
    minted = _claims((volumes / "extender-token" / "token").read_text())
    assert minted["sub"] == f"system:serviceaccount:{SYSTEM_NAMESPACE}:{EXTENDER_SA}"
    assert minted["exp"] - minted["iat"] == 3600
    assert sorted(p.name for p in (volumes / "extender-token").iterdir()) == ["ca.crt", "namespace", "token"]
    # kube-scheduler may mint the extender's token and no other ServiceAccount's.
    scheduler_client = cluster.kube_as(KUBE_SCHEDULER_SA)
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}}
    for other in (PLUGIN_SA, RENEWAL_SA):
        _refused(scheduler_client.request, "POST",
                 f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts/{other}/token", body=body)
