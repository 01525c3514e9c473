"""Issue 11's attacks, replayed on a real control plane (upstream kube-apiserver with the chart's
ValidatingAdmissionPolicies, real ServiceAccount tokens bound to pods, the chart's own pods run by
kubelet stand-ins), each now failing to do harm.

    pytest e2e/test_realcluster_trust.py

A tenant is a ServiceAccount of the test namespace with a Role to create, read, change and
delete pods there (what `edit` gives). Skips with a one-line reason where the real cluster
cannot run (see test_realcluster.py).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.realcluster.cluster import IMAGE_REPOSITORY, IMAGE_TAG, RELEASE, SYSTEM_NAMESPACE, RealCluster, unavailable
from e2e.scenarios import phase, wait_until
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.io.kube import Kube, KubeError
from hami_dcu.common.protocol import keys, writers
from hami_dcu.common.protocol.codec import encode_reported
from hami_dcu.common.protocol.podchecks import CheckSettings, Stage, refusal_of
from hami_dcu.common.protocol.writers import BINDING, NODE, POD, Caller, Identities

DCU = keys.DCU_NAMING  # the naming set these tests speak

JSON = dict[str, Any]
NODES = ("node0", "node1")
_REASON = unavailable()
pytestmark = pytest.mark.realcluster

EXTENDER_SA, PLUGIN_SA, KUBE_SCHEDULER_SA = f"{RELEASE}-scheduler", f"{RELEASE}-device-plugin", \
    f"{RELEASE}-kube-scheduler"
EXTENDER_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{EXTENDER_SA}"
PLUGIN_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{PLUGIN_SA}"
IDENTITIES = Identities(frozenset({EXTENDER_USER}), frozenset({PLUGIN_USER}))
TENANT = "tenant"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    with RealCluster({n: default_cards(n, 2) for n in NODES}) as running:
        _make_tenant(running)
        yield running


def _make_tenant(cluster: RealCluster) -> None:
    ns = cluster.namespace
    cluster.kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", body={"metadata": {"name": TENANT}})
    rules = [{"apiGroups": [""], "resources": ["pods"],
              "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"]}]
    cluster.kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
                         body={"metadata": {"name": TENANT}, "rules": rules})
    cluster.kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", body={
        "metadata": {"name": TENANT}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                  "name": TENANT},
        "subjects": [{"kind": "ServiceAccount", "name": TENANT, "namespace": ns}]})


def _tenant(cluster: RealCluster) -> Kube:
    return cluster.kube_as(TENANT, cluster.namespace)


def _plugin_pod(cluster: RealCluster, node: str) -> JSON:
    pods = cluster.kube.list_pods(namespace=SYSTEM_NAMESPACE,
                                  label_selector="app.kubernetes.io/component=device-plugin").items
    (pod,) = [p for p in pods if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")]
    return pod


def _plugin(cluster: RealCluster, node: str) -> Kube:
    """The device plugin's identity as its pod on `node` holds it: a token bound to that pod."""
    return cluster.kube_as(PLUGIN_SA, pod=_plugin_pod(cluster, node))


def _refused(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(KubeError) as info:
        call(*args, **kwargs)
    assert info.value.status == 403, info.value
    return info.value.message


def _card(cluster: RealCluster, node: str) -> str:
    return f"DCU-{cluster.cards[node][0].serial}"


def _forged(cluster: RealCluster, node: str) -> dict[str, str]:
    """A whole card of `node` held: what finding 3's pods carried."""
    return {DCU.pod_devices_allocated: f"{_card(cluster, node)},DCU,65520,100:;", keys.POD_NODE: node}


def _plain(name: str, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
           scheduler: str | None = None) -> JSON:
    pod = pod_manifest(name, [Ctr("main")])
    pod["metadata"]["annotations"] = annotations or {}
    pod["metadata"]["labels"] = labels or {}
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    return pod



# --- finding 3: forged holdings on any pod --------------------------------------------------


def test_a_forged_holding_is_refused_on_any_pod_at_create(cluster: RealCluster) -> None:
    """A pod without DCUs, opted out of the webhook, carrying `-allocated` + `vgpu-node` for a
    whole card: refused for the tenant and for a cluster admin alike; the card stays free."""
    cluster.clear_pods()
    tenant = _tenant(cluster)
    opted_out = _plain("forged", _forged(cluster, "node0"), {keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE})
    message = _refused(tenant.create_pod, cluster.namespace, opted_out)
    assert f"{RELEASE}-allocation-writers" in message
    assert f"annotations {DCU.pod_devices_allocated}, {keys.POD_NODE} are written only by hami-dcu" in message
    assert f"system:serviceaccount:{cluster.namespace}:{TENANT} may not" in message
    _refused(cluster.kube.create_pod, cluster.namespace, opted_out)  # system:masters too
    assert phase(cluster.kube, cluster.namespace, "forged") == "Gone"
    # Every card of node0 is still free: a pod wanting both whole cards runs there.
    whole = pod_manifest("whole", [Ctr("main", 2)])
    whole["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "node0"}
    tenant.create_pod(cluster.namespace, whole)
    wait_until("the two-card pod running on node0",
               lambda: phase(cluster.kube, cluster.namespace, "whole") == "Running", timeout=60)


def test_a_holding_patched_onto_an_existing_pod_is_refused(cluster: RealCluster) -> None:
    cluster.clear_pods()
    tenant = _tenant(cluster)
    tenant.create_pod(cluster.namespace, _plain("victim", scheduler="nobody"))
    message = _refused(tenant.patch_pod_metadata, cluster.namespace, "victim", annotations=_forged(cluster, "node1"))
    assert "are written only by hami-dcu" in message
    tenant.patch_pod_metadata(cluster.namespace, "victim", annotations={"team": "a"})  # other keys: fine
    annotations = cluster.kube.get_pod(cluster.namespace, "victim")["metadata"].get("annotations") or {}
    assert DCU.pod_devices_allocated not in annotations and annotations["team"] == "a"


# --- finding 2: post-bind edits -----------------------------------------------------------


def test_the_owner_cannot_rewrite_the_allocation_after_the_binding(cluster: RealCluster) -> None:
    """Rewritten to a whole card, or to 60000 MiB: refused; the scheduler's record stands."""
    cluster.clear_pods()
    tenant = _tenant(cluster)
    tenant.create_pod(cluster.namespace, pod_manifest("shared", [Ctr("main", 1, 1000, 10)]))
    wait_until("the shared pod running", lambda: phase(cluster.kube, cluster.namespace, "shared") == "Running",
               timeout=60)
    pod = cluster.kube.get_pod(cluster.namespace, "shared")
    node, recorded = pod["spec"]["nodeName"], pod["metadata"]["annotations"]
    card = recorded[DCU.pod_devices_allocated].split(",")[0]
    for rewrite in (f"{card},DCU,65520,100:;", f"{card},DCU,60000,10:;"):
        for key in (DCU.pod_devices_to_allocate, DCU.pod_devices_allocated):
            message = _refused(tenant.patch_pod_metadata, cluster.namespace, "shared", annotations={key: rewrite})
            assert f"annotations {key} are written only by hami-dcu" in message
    _refused(tenant.patch_pod_metadata, cluster.namespace, "shared", annotations={keys.POD_BIND_PHASE: None})
    after = cluster.kube.get_pod(cluster.namespace, "shared")["metadata"]["annotations"]
    assert {k: after.get(k) for k in writers.POD_KEYS} == {k: recorded.get(k) for k in writers.POD_KEYS}
    # The plugin of the pod's own node may record progress; the other node's plugin may not.
    other = next(n for n in NODES if n != node)
    _plugin(cluster, node).patch_pod_metadata(cluster.namespace, "shared",
                                              annotations={keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
    message = _refused(_plugin(cluster, other).patch_pod_metadata, cluster.namespace, "shared",
                       annotations={keys.POD_BIND_PHASE: keys.BIND_PHASE_FAILED})
    assert f"the hami-dcu device plugin of node {other} may write only its own node" in message


def test_a_binding_carries_an_allocation_only_from_the_extender(cluster: RealCluster) -> None:
    """The API server copies a Binding's annotations onto the pod without admitting a pod
    UPDATE: the policy covers the pods/binding subresource itself."""
    cluster.clear_pods()
    for name in ("by-admin", "by-extender"):
        cluster.kube.create_pod(cluster.namespace, _plain(name, scheduler="nobody"))

    def binding(name: str, annotations: dict[str, str]) -> JSON:
        return {"apiVersion": "v1", "kind": "Binding", "target": {"kind": "Node", "name": "node1"},
                "metadata": {"name": name, "annotations": annotations}}

    path = f"/api/v1/namespaces/{cluster.namespace}/pods/%s/binding"
    message = _refused(cluster.kube.request, "POST", path % "by-admin", body=binding("by-admin",
                                                                                      _forged(cluster, "node1")))
    assert "are written only by hami-dcu" in message
    assert cluster.kube.get_pod(cluster.namespace, "by-admin")["spec"].get("nodeName") is None
    extender = cluster.kube_as(EXTENDER_SA)
    extender.request("POST", path % "by-extender", body=binding("by-extender", {keys.POD_BIND_PHASE: "failed"}))
    bound = cluster.kube.get_pod(cluster.namespace, "by-extender")
    assert bound["spec"]["nodeName"] == "node1" and bound["metadata"]["annotations"][keys.POD_BIND_PHASE] == "failed"


def test_a_binding_posted_to_the_namespaces_bindings_carries_no_allocation(cluster: RealCluster) -> None:
    """Security round 5. A Binding can also be posted to /api/v1/namespaces/<ns>/bindings (the
    API's legacy `bindings` resource, not the pods/binding subresource); the API server copies
    its annotations onto the pod just the same. Before: no policy matched that resource, and
    the bundled kube-scheduler's account (system:kube-scheduler may create `bindings`) bound a
    pod carrying a forged whole card. Now the policies match it as a Binding (the extender binds
    through pods/binding only: RBAC gives it no `bindings`)."""
    cluster.clear_pods()
    for name in ("legacy-admin", "legacy-sched", "legacy-plain"):
        cluster.kube.create_pod(cluster.namespace, _plain(name, scheduler="nobody"))

    def binding(name: str, annotations: dict[str, str]) -> JSON:
        return {"apiVersion": "v1", "kind": "Binding", "target": {"kind": "Node", "name": "node1"},
                "metadata": {"name": name, "annotations": annotations}}

    path = f"/api/v1/namespaces/{cluster.namespace}/bindings"
    kube_scheduler = cluster.kube_as(KUBE_SCHEDULER_SA)
    for client, name in ((cluster.kube, "legacy-admin"), (kube_scheduler, "legacy-sched")):
        message = _refused(client.request, "POST", path, body=binding(name, _forged(cluster, "node1")))
        assert "are written only by hami-dcu" in message
        assert cluster.kube.get_pod(cluster.namespace, name)["spec"].get("nodeName") is None
    # A Binding without our keys still binds (kube-scheduler's own, or another scheduler's).
    kube_scheduler.request("POST", path, body=binding("legacy-plain", {}))
    assert cluster.kube.get_pod(cluster.namespace, "legacy-plain")["spec"]["nodeName"] == "node1"


# --- NodeRestriction for device plugins ----------------------------------------------------


def test_a_device_plugin_writes_only_its_own_node(cluster: RealCluster) -> None:
    plugin = _plugin(cluster, "node0")
    handshake = encode_reported(dt.datetime.now(dt.UTC))
    plugin.patch_node_metadata("node0", annotations={DCU.node_handshake: handshake})
    message = _refused(plugin.patch_node_metadata, "node1", annotations={DCU.node_handshake: handshake})
    assert "the hami-dcu device plugin of node node0 may write only its own node" in message
    assert "not node node1" in message
    _refused(plugin.patch_node_metadata, "node1", labels={"dcu": "off"})  # any change, not only our keys
    unbound = cluster.kube_as(PLUGIN_SA)  # the plugin's ServiceAccount, but a token bound to no pod
    assert "its token names no node" in _refused(unbound.patch_node_metadata, "node0",
                                                 annotations={DCU.node_handshake: handshake})
    # Nobody else writes the registration or the lock, the node's own kubelet included.
    kubelet = Kube.from_kubeconfig(str(cluster.control_plane.node_kubeconfig("node0")))
    assert "are written only by hami-dcu" in _refused(kubelet.patch_node_metadata, "node0",
                                                      annotations={keys.NODE_LOCK: "2025-01-01T00:00:00Z"})


# --- finding 6: /filter and /bind reachable by anyone --------------------------------------


def _from_another_pod(cluster: RealCluster, script: str) -> str:
    """Run `script` in a fresh pod network namespace: what any pod of the cluster can reach."""
    assert cluster.network is not None
    netns, _ = cluster.network.add_pod()
    try:
        result = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", script], capture_output=True,
                                text=True, timeout=60)
    finally:
        cluster.network.remove_pod(netns)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_filter_and_bind_are_out_of_reach_of_other_pods(cluster: RealCluster) -> None:
    """An anonymous /bind bound another namespace's pod to a node; 8 anonymous /filter calls
    reserved every card. Now the extender listens on the scheduler pod's loopback only, and
    the webhook's and the metrics' ports serve neither verb."""
    cluster.clear_pods()
    cluster.kube.create_pod(cluster.namespace, pod_manifest("victim", [Ctr("main", 1)]))
    (scheduler,) = cluster.kube.list_pods(namespace=SYSTEM_NAMESPACE,
                                          label_selector="app.kubernetes.io/component=scheduler").items
    ip = scheduler["status"]["podIP"]
    victim = {"metadata": {"name": "victim", "namespace": cluster.namespace, "uid": "forged-uid"},
              "spec": {"containers": [{"name": "c", "resources": {"limits": {DCU.resources.count: "1"}}}]}}
    script = f"""
import json, socket, ssl, urllib.error, urllib.request
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
out = {{}}
try:
    socket.create_connection(({ip!r}, 8443), timeout=3).close(); out["8443"] = "open"
except OSError as exc:
    out["8443"] = type(exc).__name__
for scheme, port in (("https", 9443), ("http", 9395)):
    for verb, body in (("filter", {{"Pod": {victim!r}, "NodeNames": ["node0", "node1"]}}),
                       ("bind", {{"PodName": "victim", "PodNamespace": {cluster.namespace!r}, "PodUID": "x",
                                 "Node": "node0"}})):
        request = urllib.request.Request(f"{{scheme}}://{ip}:{{port}}/{{verb}}", json.dumps(body).encode(),
                                         {{"Content-Type": "application/json"}})
        try:
            out[f"{{port}}/{{verb}}"] = urllib.request.urlopen(request, context=ctx if scheme == "https" else None,
                                                             timeout=5).status
        except urllib.error.HTTPError as exc:
            out[f"{{port}}/{{verb}}"] = exc.code
print(json.dumps(out))
"""
    reached = json.loads(_from_another_pod(cluster, script))
    assert reached == {"8443": "ConnectionRefusedError", "9443/filter": 404, "9443/bind": 404,
                       "9395/filter": 404, "9395/bind": 404}
    victim_now = cluster.kube.get_pod(cluster.namespace, "victim")
    assert victim_now["spec"].get("nodeName") in (None, "node0", "node1")  # scheduled normally, or not yet
    wait_until("the victim scheduled by hami-scheduler itself",
               lambda: phase(cluster.kube, cluster.namespace, "victim") == "Running", timeout=60)
    annotations = cluster.kube.get_pod(cluster.namespace, "victim")["metadata"]["annotations"]
    assert annotations[keys.POD_BIND_PHASE] == keys.BIND_PHASE_SUCCESS


# --- finding 7: identities and keys ---------------------------------------------------------


def _may(cluster: RealCluster, user: str, verb: str, group: str, resource: str, subresource: str = "",
         name: str = "") -> bool:
    review = cluster.kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body={
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{SYSTEM_NAMESPACE}",
                                          "system:authenticated"],
                 "resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                        "namespace": SYSTEM_NAMESPACE, "subresource": subresource, "name": name}}})
    return bool(review["status"].get("allowed"))


def test_the_extender_holds_none_of_kube_schedulers_rights(cluster: RealCluster) -> None:
    """Finding 7: the network-facing extender shared kube-scheduler's ServiceAccount."""
    kube_scheduler = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{KUBE_SCHEDULER_SA}"
    for verb, group, resource, subresource in (("update", "", "pods", "status"), ("delete", "", "pods", ""),
                                               ("create", "coordination.k8s.io", "leases", "")):
        assert _may(cluster, kube_scheduler, verb, group, resource, subresource), (verb, resource, subresource)
        assert not _may(cluster, EXTENDER_USER, verb, group, resource, subresource), (verb, resource, subresource)
    assert _may(cluster, EXTENDER_USER, "create", "", "pods", "binding")
    assert not _may(cluster, EXTENDER_USER, "get", "", "secrets", name=f"{RELEASE}-webhook-ca")


def test_the_ca_key_reaches_no_pod_and_the_serving_key_is_0400(cluster: RealCluster) -> None:
    serving = cluster.kube.request("GET", f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/secrets/{RELEASE}-webhook-tls")
    assert set(serving["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    ca = cluster.kube.request("GET", f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/secrets/{RELEASE}-webhook-ca")
    assert base64.b64decode(ca["data"]["ca.crt"]) == base64.b64decode(serving["data"]["ca.crt"])
    (scheduler,) = cluster.kube.list_pods(namespace=SYSTEM_NAMESPACE,
                                          label_selector="app.kubernetes.io/component=scheduler").items
    kubelet = cluster.kubelets[scheduler["spec"]["nodeName"]]
    tls = kubelet.running[scheduler["metadata"]["uid"]].root / "volumes" / "tls"
    assert sorted(p.name for p in tls.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    key = os.stat(tls / "tls.key")
    assert stat.S_IMODE(key.st_mode) == 0o440 and key.st_uid == 0 and key.st_gid == 65532  # 0400 + fsGroup


# --- the webhook's rule and the API server's policies agree ---------------------------------


def _cases(cluster: RealCluster, bound_pod: JSON) -> list[tuple[str, str, Kube, Caller, str, dict[str, Any]]]:
    """(what, kind, client, caller, target, change): each applied as a dry-run merge patch."""
    admin, tenant = cluster.kube, _tenant(cluster)
    extender = cluster.kube_as(EXTENDER_SA)
    plugin0 = _plugin(cluster, "node0")
    node = bound_pod["spec"]["nodeName"]
    tenant_caller = Caller(f"system:serviceaccount:{cluster.namespace}:{TENANT}")
    admin_caller, extender_caller = Caller("hami-e2e-admin"), Caller(EXTENDER_USER)
    plugin_caller = Caller(PLUGIN_USER, node="node0")
    name = bound_pod["metadata"]["name"]
    cases = []
    for key in sorted(writers.POD_KEYS):
        for who, client, caller in (("tenant", tenant, tenant_caller), ("plugin", plugin0, plugin_caller)):
            cases.append((f"{who} sets {key} on a pod of {node}", POD, client, caller, name, {key: "x"}))
    for key in sorted(writers.NODE_KEYS):
        for who, client, caller in (("admin", admin, admin_caller), ("extender", extender, extender_caller),
                                    ("plugin", plugin0, plugin_caller)):
            for target in NODES:
                cases.append((f"{who} sets {key} on {target}", NODE, client, caller, target, {key: "x"}))
    cases.append(("plugin labels node1", NODE, plugin0, plugin_caller, "node1", {}))
    # Within its node, its own keys only (issue 21).
    cases.append(("plugin labels node0", NODE, plugin0, plugin_caller, "node0", {}))
    cases.append(("extender labels node0", NODE, extender, extender_caller, "node0", {}))
    cases.append(("plugin sets another annotation on node0", NODE, plugin0, plugin_caller, "node0", {"team": "x"}))
    cases.append((f"plugin sets another annotation on a pod of {node}", POD, plugin0, plugin_caller, name,
                  {"team": "x"}))
    return cases


def test_the_webhook_rule_and_the_admission_policies_agree(cluster: RealCluster) -> None:
    """Each case goes through the real API server (dry run: nothing changes) and through
    common/protocol/writers.py, which the webhook runs: the same verdict, and the same words."""
    cluster.clear_pods()
    # A DCU pod: on a pod without DCUs the keys HAMi shares with us are HAMi's to write (issue 21).
    cluster.kube.create_pod(cluster.namespace, pod_manifest("subject", [Ctr("main", 1, 1000, 10)]))
    wait_until("the subject pod bound", lambda: cluster.kube.get_pod(cluster.namespace, "subject")["spec"].get(
        "nodeName"), timeout=60)
    bound = cluster.kube.get_pod(cluster.namespace, "subject")
    disagreements = []
    for what, kind, client, caller, target, change in _cases(cluster, bound):
        if kind == POD:
            old = bound
            path = f"/api/v1/namespaces/{cluster.namespace}/pods/{target}"
            patch: JSON = {"metadata": {"annotations": change}}
        else:
            old = cluster.kube.get_node(target)
            path = f"/api/v1/nodes/{target}"
            patch = {"metadata": {"annotations": change} if change else {"labels": {"probe": "x"}}}
        new = json.loads(json.dumps(old))
        new["metadata"].setdefault("annotations", {}).update(change)
        if not change:
            new["metadata"].setdefault("labels", {})["probe"] = "x"
        # Several rules may refuse; the API server then reports one of the policies' words.
        reasons = [r for r in (writers.allocation_writers(kind, caller, new, old, IDENTITIES),
                               writers.plugin_scope(kind, caller, new, IDENTITIES),
                               writers.plugin_fields(kind, caller, new, old, IDENTITIES),
                               writers.extender_fields(kind, caller, new, old, IDENTITIES)) if r]
        assert (writers.judge(kind, caller, new, old, IDENTITIES) is None) == (not reasons)
        try:
            client.request("PATCH", path + "?dryRun=All", body=patch, content_type="application/merge-patch+json")
            verdict = None
        except KubeError as exc:
            verdict = exc.message if exc.status == 403 else f"HTTP {exc.status}: {exc.message}"
        if (verdict is None) != (not reasons) or (reasons and not any(r in (verdict or "") for r in reasons)):
            disagreements.append(f"{what}: API server {verdict!r}, writers.py {reasons!r}")
    assert not disagreements, "\n".join(disagreements)
    assert BINDING == "binding"  # the Binding's case is test_a_binding_carries_an_allocation_only_from_the_extender


# --- issue 21: admission nobody can skip ------------------------------------------------------

_WEBHOOK_CONFIG = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{RELEASE}-webhook"
_OPTED_OUT = {keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}


def _two_card_share(name: str) -> JSON:
    pod = pod_manifest(name, [Ctr("train", 2, 1000, 10)])
    pod["metadata"]["labels"] = dict(_OPTED_OUT)
    return pod


def _privileged(name: str) -> JSON:
    pod = pod_manifest(name, [Ctr("main", 1, 1000)])
    pod["metadata"]["labels"] = dict(_OPTED_OUT)
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return pod


def _init_share(name: str) -> JSON:
    pod = pod_manifest(name, [Ctr("setup", 1, 500, init=True), Ctr("main", 1)])
    pod["metadata"]["labels"] = dict(_OPTED_OUT)
    return pod


def test_an_opted_out_dcu_pod_meets_the_webhook(cluster: RealCluster) -> None:
    """Issue 21: `hami.io/webhook: ignore` kept a two-card share away from the webhook, which
    was then served as two whole cards without limits. The label now exempts only pods naming
    no DCU resource."""
    cluster.clear_pods()
    tenant = _tenant(cluster)
    message = _refused(tenant.create_pod, cluster.namespace, _two_card_share("twocards"))
    assert "denied the request" in message and "one shared vDCU" in message
    plain = _plain("plain", labels=dict(_OPTED_OUT))
    assert tenant.create_pod(cluster.namespace, plain)["spec"]["schedulerName"] == "default-scheduler"


@pytest.fixture
def webhook_down(cluster: RealCluster) -> Iterator[None]:
    """failurePolicy: Ignore, and the webhook unreachable (a Service port nobody serves)."""
    saved = cluster.kube.request("GET", _WEBHOOK_CONFIG)
    broken = json.loads(json.dumps(saved))
    broken["webhooks"][0]["failurePolicy"] = "Ignore"
    broken["webhooks"][0]["clientConfig"]["service"]["port"] = 1
    cluster.kube.request("PUT", _WEBHOOK_CONFIG, body=broken)
    try:
        yield
    finally:
        current = cluster.kube.request("GET", _WEBHOOK_CONFIG)
        saved["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        cluster.kube.request("PUT", _WEBHOOK_CONFIG, body=saved)


def test_pods_past_a_webhook_that_is_down_get_no_card(cluster: RealCluster, webhook_down: None) -> None:
    """The webhook down under failurePolicy: Ignore, schedulerName set by hand: the real
    kube-scheduler asks our extender, which refuses each pod with the webhook's words."""
    cluster.clear_pods()
    tenant = _tenant(cluster)
    expected = {}
    for name, build in (("twocards", _two_card_share), ("priv", _privileged), ("initshare", _init_share)):
        manifest = build(name)
        manifest["spec"]["schedulerName"] = keys.DEFAULT_SCHEDULER_NAME
        pod = tenant.create_pod(cluster.namespace, manifest)  # admitted: nobody reviewed it
        refusal = refusal_of(pod, CheckSettings(DCU.resources), Stage.PLACE)
        assert refusal is not None
        expected[name] = refusal.message

    def refused_all() -> bool:
        events = cluster.kube.request("GET", f"/api/v1/namespaces/{cluster.namespace}/events")["items"]
        said = {(e["involvedObject"]["name"], e["reason"], e["message"]) for e in events}
        return all(any(n == name and reason == "FilteringFailed" and message in text for n, reason, text in said)
                   for name, message in expected.items())

    wait_until("each pod refused by the extender with the webhook's words", refused_all, timeout=60)
    for name in expected:
        pod = cluster.kube.get_pod(cluster.namespace, name)
        assert not pod["spec"].get("nodeName"), name
        assert DCU.pod_devices_allocated not in (pod["metadata"].get("annotations") or {})


def test_a_native_sidecar_holds_a_share(cluster: RealCluster) -> None:
    """Issue 21 item 8: the webhook refused a share in an init container with restartPolicy:
    Always, which runs beside the app containers and which the extender already counts."""
    cluster.clear_pods()
    pod = pod_manifest("sidecar", [Ctr("proxy", 1, 500, 10, init=True), Ctr("main", 1, 2000, 20)])
    pod["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    created = _tenant(cluster).create_pod(cluster.namespace, pod)
    wait_until("the pod with a sidecar share running",
               lambda: phase(cluster.kube, cluster.namespace, "sidecar") == "Running", timeout=60)
    node = cluster.kube.get_pod(cluster.namespace, "sidecar")["spec"]["nodeName"]
    mine = [d for d in cluster.vdev_files(node) if d.startswith(created["metadata"]["uid"])]
    assert sorted(d.split("_")[1] for d in mine) == ["main", "proxy"]  # one vDCU each


# --- issue 35, finding 1: a zero-count pod stopped every DCU Allocate on its node -------------


def test_a_pending_zero_count_pod_does_not_stop_the_nodes_dcu_pods(cluster: RealCluster) -> None:
    """A tenant pod with `dcunum: 0` (admitted as a no-DCU pod), placed on node0 by the default
    scheduler through a nodeSelector and kept Pending by an init container that keeps failing,
    was a rival of every lock holder there: the kubelet calls no Allocate for a count of 0, so
    it never cleared, and each DCU pod on node0 was refused "cannot tell which pod this Allocate
    is for". Now only a pod asking for more than 0 is a rival: the DCU pod runs beside it."""
    cluster.clear_pods()
    tenant = _tenant(cluster)
    image = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"  # one the kubelet stand-in runs: its init container fails
    zero = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "zero"}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": "node0"},
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 1,
        "initContainers": [{"name": "stuck", "image": image, "command": ["false"],
                            "resources": {"limits": {DCU.resources.count: "0"}}}],
        "containers": [{"name": "main", "image": image, "command": ["sleep", "3600"],
                        "resources": {"limits": {DCU.resources.count: "0"}}}]}}
    created = tenant.create_pod(cluster.namespace, zero)
    assert created["spec"]["schedulerName"] == keys.KUBE_DEFAULT_SCHEDULER  # a no-DCU pod: not routed
    wait_until("the zero-count pod bound to node0 by the default scheduler",
               lambda: cluster.kube.get_pod(cluster.namespace, "zero")["spec"].get("nodeName") == "node0",
               timeout=60)
    dcu = pod_manifest("dcu", [Ctr("main", 1, 1000, 10)])
    dcu["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "node0"}
    uid = tenant.create_pod(cluster.namespace, dcu)["metadata"]["uid"]
    wait_until("the DCU pod on node0 running (or failed)",
               lambda: phase(cluster.kube, cluster.namespace, "dcu") in ("Running", "Failed"), timeout=90)
    pod = cluster.kube.get_pod(cluster.namespace, "dcu")
    assert pod["status"]["phase"] == "Running", pod["status"].get("message")
    assert pod["metadata"]["annotations"][keys.POD_BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert [d for d in cluster.vdev_files("node0") if d.startswith(uid)]  # its vDCU was made
    assert phase(cluster.kube, cluster.namespace, "zero") == "Pending"  # still there all along
    events = cluster.kube.request("GET", f"/api/v1/namespaces/{cluster.namespace}/events")["items"]
    assert not [e for e in events if e["reason"] == "DCUAllocationAmbiguous"]
