"""Scenarios only a real control plane exercises: kubectl through the real admission chain,
the webhook's failurePolicy with the webhook down, what `kubectl describe` shows for a Pending
pod, kube-scheduler retrying a bind after its extender timeout, and two kube-scheduler replicas
losing their leader in the middle of a burst."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import time

import yaml

from e2e.realcluster.cluster import RELEASE, SYSTEM_NAMESPACE, RealCluster
from e2e.scenarios import allocation, assert_no_card_over_capacity, assert_no_lock_left, phase, wait_running, wait_until
from hami_dcu.cli.localcluster.pods import Ctr, events_for, pod_manifest
from hami_dcu.common.io.kube import KubeError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import LockValue, encode_lock

SCHEDULER_DEPLOYMENT = "hami-dcu-scheduler"


def _apply(cluster: RealCluster, manifest: dict, check: bool = True) -> subprocess.CompletedProcess[str]:
    path = cluster.workdir / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return cluster.kubectl("apply", "-n", cluster.namespace, "-f", str(path), check=check)


def kubectl_apply_goes_through_the_webhook(cluster: RealCluster) -> None:
    _apply(cluster, pod_manifest("applied", [Ctr("main", 1, 3000, 25)]))
    pod = wait_running(cluster, "applied")
    assert pod["spec"]["schedulerName"] == keys.DEFAULT_SCHEDULER_NAME
    (dev,) = allocation(pod)[0]
    assert (dev.usedmem, dev.usedcores) == (3000, 25)
    out = cluster.kubectl("get", "pod", "applied", "-n", cluster.namespace, "-o", "wide").stdout
    assert "Running" in out and pod["spec"]["nodeName"] in out, out
    # Our writes name their writer in managedFields (and the audit log): kube-apiserver takes
    # the field manager from the User-Agent each component sends.
    node = cluster.kube.get_node(pod["spec"]["nodeName"])
    for obj, what in ((pod, "the pod's allocation"), (node, "the node's registration")):
        managers = {entry.get("manager") for entry in obj["metadata"].get("managedFields") or []}
        assert "hami-dcu-device-plugin" in managers, f"{what} written by {sorted(map(str, managers))}"


def describe_shows_the_extenders_reasons(cluster: RealCluster) -> str:
    """Returns the Events part of `kubectl describe pod`, which the README quotes."""
    _apply(cluster, pod_manifest("too-big", [Ctr("main", 1, 70000, 10)]))

    def failed_scheduling() -> str | None:
        for event in events_for(cluster.kube, cluster.namespace, "too-big"):
            if event.get("reason") == "FailedScheduling":
                return event.get("message")
        return None

    message = wait_until("a FailedScheduling event", failed_scheduling, timeout=60)
    nodes = len(cluster.cards)
    # kube-scheduler counts nodes per distinct reason, and printf-formats the text ("%" in a
    # reason came out as "%!c(MISSING)").
    assert message.startswith(f"0/{nodes} nodes are available: {nodes} insufficient card memory: container main "
                              "needs 1 card x (70000 MiB, 10 percent of cores)."), message
    assert "%!" not in message, message
    described = cluster.kubectl("describe", "pod", "too-big", "-n", cluster.namespace).stdout
    events = described[described.index("Events:"):]
    assert "FailedScheduling" in events and "FilteringFailed" in events, events
    assert "MiB free < 70000 MiB requested" in events, "no card figures in our FilteringFailed event"
    assert phase(cluster.kube, cluster.namespace, "too-big") == "Pending"
    return events


def _scale_scheduler(cluster: RealCluster, replicas: int) -> None:
    cluster.kubectl("scale", "deployment", SCHEDULER_DEPLOYMENT, "-n", SYSTEM_NAMESPACE, f"--replicas={replicas}")
    if replicas:
        cluster.wait_scheduler_ready()
    else:
        wait_until("scheduler pods gone", lambda: not cluster.kube.list_pods(
            namespace=SYSTEM_NAMESPACE, label_selector="app.kubernetes.io/component=scheduler").items, timeout=60)


def webhook_down_fails_closed_for_dcu_pods_only(cluster: RealCluster) -> None:
    _scale_scheduler(cluster, 0)
    try:
        refused = _apply(cluster, pod_manifest("while-down", [Ctr("main", 1, 1000, 10)]), check=False)
        assert refused.returncode != 0, "a DCU pod was admitted with the webhook down and failurePolicy Fail"
        assert "failed calling webhook" in refused.stderr and "dcu.hami.io" in refused.stderr, refused.stderr
        assert phase(cluster.kube, cluster.namespace, "while-down") == "Gone"
        plain = _apply(cluster, pod_manifest("plain", [Ctr("main")]), check=False)
        assert plain.returncode == 0, f"a pod without DCUs was refused with the webhook down: {plain.stderr}"
        assert cluster.kube.get_pod(cluster.namespace, "plain")["spec"]["schedulerName"] == "default-scheduler"
    finally:
        _scale_scheduler(cluster, 1)
    _apply(cluster, pod_manifest("after-up", [Ctr("main", 1, 1000, 10)]))
    wait_running(cluster, "after-up")


def _lock_every_node(cluster: RealCluster, holder: str) -> None:
    # As another scheduler replica would: only hami-dcu's identities may write the node lock.
    extender = cluster.kube_as(f"{RELEASE}-scheduler")
    value = encode_lock(LockValue(dt.datetime.now(dt.UTC), cluster.namespace, holder))
    for node in cluster.cards:
        extender.patch_node_metadata(node, annotations={keys.NODE_LOCK: value})


def _unlock_every_node(cluster: RealCluster) -> None:
    extender = cluster.kube_as(f"{RELEASE}-scheduler")
    for node in cluster.cards:
        extender.patch_node_metadata(node, annotations={keys.NODE_LOCK: None})


def bind_retried_after_extender_timeout(cluster: RealCluster) -> None:
    """kube-scheduler gives up on a /bind after its extender timeout and sends another for the
    same pod while the first is still being served. Here the extender stalls (SIGSTOP, as in a
    long GC pause or CPU starvation) while its first bind waits on a node locked by a pod still
    being admitted; when it resumes, the holder has let go: the first bind completes after its
    caller left, and the retries find the pod bound. The pod is bound once, runs, and no lock is
    left behind by either attempt."""
    holder = pod_manifest("lock-holder", [Ctr("main")])
    holder["spec"]["schedulerName"] = "nobody"  # stays Pending and unbound, a live holder
    cluster.kube.create_pod(cluster.namespace, holder)
    _lock_every_node(cluster, "lock-holder")
    cluster.kube.create_pod(cluster.namespace, pod_manifest("retried", [Ctr("main", 1, 2000, 20)]))
    extenders = [p for kubelet in cluster.kubelets.values() for running in list(kubelet.running.values())
                 for name, p in running.containers.items() if name == "extender"]
    wait_until("the first /bind waiting for the lock", lambda: any(
        f"bind {cluster.namespace}/retried to node" in line and "waiting for the node lock" in line
        for line in cluster.container_logs("extender").splitlines()), timeout=30)
    for process in extenders:
        process.signal(signal.SIGSTOP)
    try:
        time.sleep(extender_timeout(cluster) + 2)  # past kube-scheduler's extender timeout
        _unlock_every_node(cluster)
    finally:
        for process in extenders:
            process.signal(signal.SIGCONT)
    pod = wait_running(cluster, "retried", timeout=90)
    assert len(allocation(pod)[0]) == 1
    timeouts = [line for line in cluster.container_logs("kube-scheduler").splitlines()
                if f"{cluster.namespace}/retried" in line and "Client.Timeout exceeded" in line and "/bind" in line]
    assert timeouts, "kube-scheduler never timed out a /bind: the scenario did not exercise a retry"
    wait_until("no node lock left after the duplicate binds", lambda: _no_lock(cluster), timeout=30)
    assert_no_card_over_capacity(cluster)


def extender_timeout(cluster: RealCluster) -> float:
    """kube-scheduler's timeout for one extender call, as the chart was installed with."""
    return float((cluster.values().get("scheduler") or {}).get("httpTimeoutSeconds", 30))  # chart default: 30


def _no_lock(cluster: RealCluster) -> bool:
    try:
        assert_no_lock_left(cluster)
    except AssertionError:
        return False
    return True


def _create_retrying(cluster: RealCluster, manifest: dict, timeout: float = 30) -> None:
    """Create as a controller does: until the dead pod's webhook endpoint is gone (its kubelet
    marks it not ready; the endpoint controllers drop it), the apiserver may still dial it, and
    with failurePolicy Fail the create fails with 500 "failed calling webhook"."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            cluster.kube.create_pod(cluster.namespace, manifest)
            return
        except KubeError as exc:
            if "failed calling webhook" not in exc.message or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _leader_pod(cluster: RealCluster, lease: str) -> str:
    obj = cluster.kube.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NAMESPACE}/leases/{lease}")
    holder = obj["spec"]["holderIdentity"]
    return holder.split("_")[0]  # <hostname>_<uuid>; the hostname is the pod's name


# The chart's leader-election Lease: one per release (<fullname>-kube-scheduler), never HAMi's.
SCHEDULER_LEASE = f"{RELEASE}-kube-scheduler"


def leader_killed_mid_burst(cluster: RealCluster, lease: str = SCHEDULER_LEASE) -> None:
    """Two scheduler replicas; the leader's whole pod dies (SIGKILL to kube-scheduler and the
    extender, as when its node fails) halfway through a burst, with binds in flight. The other
    replica takes the lease, locks the dead pod's binds left are freed, and every pod is placed,
    none over capacity, no lock left."""
    cluster.wait_scheduler_ready()
    names = [f"burst{i:02d}" for i in range(12)]
    for name in names[:6]:
        cluster.kube.create_pod(cluster.namespace, pod_manifest(name, [Ctr("c", 1, 2000, 10)]))
    leader = _leader_pod(cluster, lease)
    killed = False
    for kubelet in cluster.kubelets.values():
        for running in kubelet.running.values():
            if running.name == leader and "kube-scheduler" in running.containers:
                for process in running.containers.values():
                    process.signal(signal.SIGKILL)
                killed = True
    assert killed, f"leader {leader} not found among the running scheduler pods"
    for name in names[6:]:
        _create_retrying(cluster, pod_manifest(name, [Ctr("c", 1, 2000, 10)]))
    wait_until("all 12 pods Running after the leader died",
               lambda: sum(phase(cluster.kube, cluster.namespace, n) == "Running" for n in names) == len(names),
               timeout=120, interval=0.5)
    assert_no_card_over_capacity(cluster)
    wait_until("no node lock left", lambda: _no_lock(cluster), timeout=30)


__all__ = [
    "bind_retried_after_extender_timeout",
    "describe_shows_the_extenders_reasons",
    "kubectl_apply_goes_through_the_webhook",
    "leader_killed_mid_burst",
    "webhook_down_fails_closed_for_dcu_pods_only",
]
