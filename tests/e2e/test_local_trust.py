"""Issue 21's attacks on the whole local cluster: admission nobody can skip.

* a DCU pod labelled `hami.io/webhook: ignore` is judged by the webhook as any other;
* with the webhook down under `failurePolicy: Ignore` and `schedulerName` set by hand, the
  extender refuses the pod with the webhook's words and no card is handed out;
* pod UPDATEs and Bindings pass through admission as in kube-apiserver, and only hami-dcu's
  identities may set or change a DCU pod's allocation (the rule below Kubernetes 1.30).
"""

from __future__ import annotations

import copy

import pytest

from e2e.scenarios import wait_running, wait_until
from hami_dcu.cli.localcluster.cluster import EXTENDER_IDENTITY, WEBHOOK_CONFIG, LocalCluster
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, events_for, pod_manifest
from hami_dcu.cli.localcluster.servers import free_port
from hami_dcu.common.io.kube import Kube, KubeError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.podchecks import CheckSettings, Stage, refusal_of
from hami_dcu.webhook import certs

DCU = keys.DCU_NAMING  # the naming set these tests speak

OPTED_OUT = {keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}
HAMI_SCHEDULER = "system:serviceaccount:kube-system:hami-scheduler"  # HAMi's own, beside us


def two_card_share(name: str = "twocards") -> dict:
    manifest = pod_manifest(name, [Ctr("train", count=2, memory=1000, cores=10)])
    manifest["metadata"]["labels"] = dict(OPTED_OUT)
    return manifest


def privileged(name: str = "priv") -> dict:
    manifest = pod_manifest(name, [Ctr("main", count=1, memory=1000)])
    manifest["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return manifest


def init_share(name: str = "initshare") -> dict:
    manifest = pod_manifest(name, [Ctr("main", count=1)])
    manifest["spec"]["initContainers"] = [{"name": "setup", "image": "x", "resources": {"limits": {
        DCU.resources.count: "1", DCU.resources.memory: "500"}}}]
    return manifest


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster({"node0": default_cards("node0")}, namespace="trust", naming=DCU) as local:
        yield local


def refused(create, *args: object) -> str:
    with pytest.raises(KubeError) as info:
        create(*args)
    return info.value.message


def test_an_opted_out_dcu_pod_meets_the_webhook(cluster):
    message = refused(cluster.kube.create_pod, cluster.namespace, two_card_share())
    assert "denied the request" in message and "one shared vDCU" in message
    plain = pod_manifest("plain", [Ctr("main")])
    plain["metadata"]["labels"] = dict(OPTED_OUT)
    assert cluster.kube.create_pod(cluster.namespace, plain)["spec"]["schedulerName"] == "default-scheduler"


@pytest.fixture
def webhook_down(cluster):
    """failurePolicy: Ignore, and the webhook unreachable: the API server admits unreviewed."""
    path = f"{certs.WEBHOOK_CONFIG_PATH}/{WEBHOOK_CONFIG}"
    config = cluster.kube.request("GET", path)
    saved = copy.deepcopy(config)
    routing = config["webhooks"][0]
    routing["failurePolicy"] = "Ignore"
    routing["clientConfig"] = {"url": f"https://127.0.0.1:{free_port()}/webhook",
                               "caBundle": routing["clientConfig"]["caBundle"]}
    cluster.kube.request("PUT", path, body=config)
    yield
    saved["metadata"].pop("resourceVersion", None)
    cluster.kube.request("PUT", path, body=saved)


@pytest.mark.parametrize("build", [two_card_share, privileged, init_share])
def test_a_pod_past_a_webhook_that_is_down_is_refused_by_the_extender(cluster, webhook_down, build):
    manifest = build(f"bypass-{build.__name__.replace('_', '-')}")
    manifest["spec"]["schedulerName"] = keys.DEFAULT_SCHEDULER_NAME  # set by hand: no webhook routed it
    pod = cluster.kube.create_pod(cluster.namespace, manifest)
    expected = refusal_of(pod, CheckSettings(DCU.resources), Stage.PLACE)
    assert expected is not None
    name = pod["metadata"]["name"]

    def refusal_event() -> str | None:
        return next((e["message"] for e in events_for(cluster.kube, cluster.namespace, name)
                     if e["reason"] == "FilteringFailed" and expected.message in e["message"]), None)

    wait_until(f"{name} refused by the extender", refusal_event, timeout=30)
    stored = cluster.kube.get_pod(cluster.namespace, name)
    assert not stored["spec"].get("nodeName")
    assert DCU.pod_devices_allocated not in (stored["metadata"].get("annotations") or {})
    assert cluster.vdev_files("node0") == {} or all(pod["metadata"]["uid"] not in d
                                                    for d in cluster.vdev_files("node0"))


def test_updates_and_bindings_meet_the_one_writer_rule(cluster):
    pod = cluster.kube.create_pod(cluster.namespace, pod_manifest("shared", [Ctr("main", count=1, memory=1000)]))
    running = wait_running(cluster, pod["metadata"]["name"])
    assert running["metadata"]["annotations"][keys.POD_BIND_PHASE] == keys.BIND_PHASE_SUCCESS  # plugin's writes
    # The owner rewrites its share into a whole card after the bind: refused at UPDATE.
    whole = "DCU-node0-0,DCU,65520,100:;"
    message = refused(cluster.kube.patch_pod_metadata, cluster.namespace, "shared",
                      {DCU.pod_devices_allocated: whole})
    assert "written only by hami-dcu" in message and "local-cluster may not" in message
    assert refused(cluster.kube.patch_pod_metadata, cluster.namespace, "shared", {keys.POD_BIND_PHASE: None})
    # Other changes of the same pod go through.
    cluster.kube.patch_pod_metadata(cluster.namespace, "shared", labels={"team": "a"})
    # A Binding carrying an allocation, from anyone but the extender: refused.
    victim = pod_manifest("victim", [Ctr("main")])
    victim["spec"]["schedulerName"] = "elsewhere"
    cluster.kube.create_pod(cluster.namespace, victim)
    message = refused(cluster.kube.create_binding, cluster.namespace, "victim", "node0", None,
                      {DCU.pod_devices_to_allocate: whole, DCU.pod_devices_allocated: whole})
    assert DCU.pod_devices_to_allocate in message
    assert not cluster.kube.get_pod(cluster.namespace, "victim")["spec"].get("nodeName")


def test_hamis_own_pods_keep_hamis_keys(cluster):
    # Beside HAMi: its scheduler writes the keys it shares with us on a pod that is not a DCU pod.
    assert cluster.api is not None
    hami = Kube.from_kubeconfig(str(cluster.api.credentials(HAMI_SCHEDULER)))
    gpu = pod_manifest("gpu", [Ctr("main")])
    gpu["spec"]["schedulerName"] = "elsewhere"
    cluster.kube.create_pod(cluster.namespace, gpu)
    shared = {keys.POD_NODE: "node0", keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING}
    hami.patch_pod_metadata(cluster.namespace, "gpu", shared)
    hami.create_binding(cluster.namespace, "gpu", "node0", None, {keys.POD_BIND_TIME: "1"})
    assert cluster.kube.get_pod(cluster.namespace, "gpu")["spec"]["nodeName"] == "node0"
    # The same identity on a DCU pod: refused (and the extender's own identity is not HAMi's).
    dcu = cluster.kube.create_pod(cluster.namespace, pod_manifest("dcu", [Ctr("main", count=1, memory=500)]))
    wait_running(cluster, dcu["metadata"]["name"])
    message = refused(hami.patch_pod_metadata, cluster.namespace, "dcu", {keys.POD_BIND_PHASE: "failed"})
    assert HAMI_SCHEDULER in message and EXTENDER_IDENTITY not in message
