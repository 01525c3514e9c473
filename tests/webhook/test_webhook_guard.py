"""The webhook enforces the one-writer rule on whatever it is sent: pod CREATE and UPDATE (any
pod, labelled or not, DCU or not), Bindings and Nodes (issue 11, findings 2 and 3). The local
cluster has no CEL, so this is what its admission runs; the chart's policies say the same."""

import json

import pytest
from prometheus_client import CollectorRegistry

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.writers import NODE_NAME_EXTRA, Identities
from hami_dcu.webhook.decision import Settings
from hami_dcu.webhook.server import WebhookMetrics, answer

DCU = keys.DCU_NAMING  # the naming set these tests speak

SCHEDULER = "system:serviceaccount:kube-system:hami-dcu-scheduler"
PLUGIN = "system:serviceaccount:kube-system:hami-dcu-device-plugin"
SETTINGS = Settings(naming=DCU, identities=Identities(frozenset({SCHEDULER}), frozenset({PLUGIN})))
ALLOCATED = {DCU.pod_devices_allocated: "DCU-A,DCU,65520,100:;", keys.POD_NODE: "node0"}


def plain_pod(node=None, labels=None, **annotations):
    spec = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": "p", "namespace": "team", "labels": labels or {}, "annotations": annotations},
            "spec": spec}


def review(operation, obj, old=None, user="alice", extra=None, kind="Pod", resource="pods", sub=""):
    request = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": kind}, "namespace": "team",
               "name": "p", "operation": operation, "resource": {"group": "", "version": "v1", "resource": resource},
               "subResource": sub, "userInfo": {"username": user, "extra": extra or {}}, "object": obj,
               "oldObject": old}
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    return answer(body.encode(), SETTINGS, WebhookMetrics(CollectorRegistry()))["response"]


def test_forged_holding_on_a_plain_opted_out_pod_is_denied_at_create():
    """Finding 3: no DCU request and `hami.io/webhook: ignore` used to pass untouched."""
    response = review("CREATE", plain_pod(labels={keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}, **ALLOCATED))
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert DCU.pod_devices_allocated in response["status"]["message"] and "alice" in response["status"]["message"]


def test_post_bind_rewrite_by_the_owner_is_denied_at_update():
    """Finding 2: the owner rewrote dcu-devices-to-allocate between the Binding and Allocate."""
    bound = plain_pod("node0", **{DCU.pod_devices_to_allocate: "DCU-A,DCU,1000,10:;"})
    whole_card = plain_pod("node0", **{DCU.pod_devices_to_allocate: "DCU-A,DCU,65520,100:;"})
    response = review("UPDATE", whole_card, old=bound)
    assert response["allowed"] is False and DCU.pod_devices_to_allocate in response["status"]["message"]
    unrelated = review("UPDATE", {**bound, "metadata": {**bound["metadata"], "labels": {"a": "b"}}}, old=bound)
    assert unrelated["allowed"] is True


def test_binding_with_the_allocation_only_from_the_extender():
    binding = {"metadata": {"name": "p", "annotations": ALLOCATED}, "target": {"kind": "Node", "name": "node0"}}
    assert review("CREATE", binding, kind="Binding", sub="binding", user=SCHEDULER)["allowed"] is True
    refused = review("CREATE", binding, kind="Binding", sub="binding", user="system:kube-scheduler")
    assert refused["allowed"] is False



def test_a_binding_posted_to_the_legacy_bindings_resource_is_a_binding():
    """Security round 5: POST /api/v1/namespaces/<ns>/bindings (resource `bindings`, no
    subresource) copies the Binding's annotations onto the pod as pods/binding does. Before, the
    guard took it for no object of ours and let kube-scheduler's account forge a whole card."""
    binding = {"metadata": {"name": "p", "annotations": ALLOCATED}, "target": {"kind": "Node", "name": "node0"}}
    assert review("CREATE", binding, kind="Binding", resource="bindings", user=SCHEDULER)["allowed"] is True
    refused = review("CREATE", binding, kind="Binding", resource="bindings", user="system:kube-scheduler")
    assert refused["allowed"] is False and DCU.pod_devices_allocated in refused["status"]["message"]
    plain = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "node0"}}
    assert review("CREATE", plain, kind="Binding", resource="bindings", user="system:kube-scheduler")["allowed"]

@pytest.mark.parametrize(("node", "allowed"), [("node0", True), ("node1", False)])
def test_device_plugin_writes_only_its_own_node(node, allowed):
    old = {"metadata": {"name": node, "annotations": {}}}
    new = {"metadata": {"name": node, "annotations": {DCU.node_register: "x"}}}
    response = review("UPDATE", new, old=old, user=PLUGIN, extra={NODE_NAME_EXTRA: ["node0"]}, kind="Node",
                      resource="nodes")
    assert response["allowed"] is allowed


def test_dcu_pod_create_is_still_routed():
    pod = plain_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {DCU.resources.count: "1"}}
    response = review("CREATE", pod)
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"


HAMI_SCHEDULER = "system:serviceaccount:kube-system:hami-scheduler"  # HAMi's own, beside us
SHARED = {keys.POD_NODE: "node0", keys.POD_BIND_PHASE: "allocating", keys.POD_TIME: "1", keys.POD_BIND_TIME: "1"}


def dcu(pod, resource=DCU.resources.count):
    pod["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
    return pod


def test_the_keys_hami_shares_with_us_are_guarded_on_dcu_pods_only():
    # HAMi's scheduler places an NVIDIA pod: its keys on that pod are none of our business.
    gpu_old, gpu_new = plain_pod("node0"), plain_pod("node0", **SHARED)
    assert review("UPDATE", gpu_new, old=gpu_old, user=HAMI_SCHEDULER)["allowed"] is True
    binding = {"metadata": {"name": "p", "annotations": SHARED}, "target": {"kind": "Node", "name": "node0"}}
    assert review("CREATE", binding, kind="Binding", sub="binding", user=HAMI_SCHEDULER)["allowed"] is True
    # The same keys on a DCU pod, of either naming set: only hami-dcu's identities.
    for resource in (DCU.resources.count, keys.HCU_NAMING.resources.count):
        refused = review("UPDATE", dcu(plain_pod("node0", **SHARED), resource), old=dcu(plain_pod("node0"), resource),
                         user=HAMI_SCHEDULER)
        assert refused["allowed"] is False and keys.POD_BIND_PHASE in refused["status"]["message"]
    # hami-dcu's extender writes them only through the pod's Binding (its identity's rule: it
    # changes nothing else of a pod), never by updating the pod.
    ours = {"metadata": {"name": "p", "annotations": SHARED}, "target": {"kind": "Node", "name": "node0"}}
    assert review("CREATE", ours, kind="Binding", sub="binding", user=SCHEDULER)["allowed"] is True
    assert review("UPDATE", dcu(plain_pod("node0", **SHARED)), old=dcu(plain_pod("node0")),
                  user=SCHEDULER)["allowed"] is False


def test_a_pod_carrying_a_naming_sets_allocation_key_is_a_dcu_pod():
    # No DCU resource, but an allocation a device plugin would read: set, changed or removed.
    for key in (DCU.pod_devices_to_allocate, keys.HCU_NAMING.pod_devices_allocated):
        forged = plain_pod("node0", **{key: "DCU-A,DCU,65520,100:;"})
        assert review("UPDATE", forged, old=plain_pod("node0"), user=HAMI_SCHEDULER)["allowed"] is False
        assert review("UPDATE", plain_pod("node0"), old=forged)["allowed"] is False
    binding = {"metadata": {"name": "p", "annotations": {keys.HCU_NAMING.pod_devices_to_allocate: "x"}},
               "target": {"kind": "Node", "name": "node0"}}
    assert review("CREATE", binding, kind="Binding", sub="binding", user=HAMI_SCHEDULER)["allowed"] is False


def test_a_device_plugin_stays_on_its_node_even_for_pods_that_are_not_ours():
    response = review("UPDATE", plain_pod("node1", **SHARED), old=plain_pod("node1"), user=PLUGIN,
                      extra={NODE_NAME_EXTRA: ["node0"]})
    assert response["allowed"] is False and "node node0" in response["status"]["message"]


# --- issue 35, finding 6: pods/status writes carry metadata too -------------------------------

KUBE_SCHEDULER = "system:serviceaccount:kube-system:hami-dcu-kube-scheduler"  # the bundled one: pods/status rights
KUBELET = "system:node:node0"


def running(pod, **status):
    return {**pod, "status": {"phase": "Running", **status}}


def test_a_status_write_rewriting_the_allocation_is_refused_whoever_writes_it():
    """The API server persists the annotations a pods/status PATCH carries: kube-scheduler's
    account rewrote a running pod's allocation to a whole card that way. Judged as a pod write."""
    share = {DCU.pod_devices_allocated: "DCU-A,DCU,1000,10:;", keys.POD_NODE: "node0"}
    old = running(dcu(plain_pod("node0", **share)))
    whole = running(dcu(plain_pod("node0", **{**share, DCU.pod_devices_allocated: "DCU-A,DCU,65520,100:;"})))
    for user in (KUBE_SCHEDULER, KUBELET, "kubernetes-admin"):
        response = review("UPDATE", whole, old=old, user=user, sub="status")
        assert response["allowed"] is False and response["status"]["code"] == 403
        assert f"annotations {DCU.pod_devices_allocated} are written only by hami-dcu" in response["status"]["message"]
    # Removing it, or adding one to a pod that had none, the same.
    assert review("UPDATE", running(dcu(plain_pod("node0"))), old=old, user=KUBE_SCHEDULER,
                  sub="status")["allowed"] is False
    forged = running(plain_pod("node0", **{keys.HCU_NAMING.pod_devices_to_allocate: "DCU-A,DCU,65520,100:;"}))
    assert review("UPDATE", forged, old=running(plain_pod("node0")), user=KUBELET, sub="status")["allowed"] is False


def test_the_kubelets_ordinary_status_writes_pass():
    """A status change (phase, conditions) that leaves our keys as they were, on a DCU pod
    holding an allocation: allowed, and answered without a patch."""
    share = {DCU.pod_devices_allocated: "DCU-A,DCU,1000,10:;", keys.POD_NODE: "node0",
             keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS}
    pending = {**dcu(plain_pod("node0", **share)), "status": {"phase": "Pending"}}
    now = running(dcu(plain_pod("node0", **share)), conditions=[{"type": "Ready", "status": "True"}])
    response = review("UPDATE", now, old=pending, user=KUBELET, sub="status")
    assert response["allowed"] is True and "patch" not in response
    # Other metadata in a status write is not ours to judge.
    labelled = {**now, "metadata": {**now["metadata"], "labels": {"team": "a"}}}
    assert review("UPDATE", labelled, old=now, user=KUBE_SCHEDULER, sub="status")["allowed"] is True
