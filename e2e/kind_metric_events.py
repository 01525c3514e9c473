"""The events behind the documented series a healthy run never shows, caused for real on the kind
cluster for e2e/test_kind_promql.py: the real kubelet, containerd, kube-scheduler, extender and
device plugins do the work; the test only creates pods, writes node locks as the extender's own
identity would have left them, and breaks the extender's connection to the API server.

* /preempt: a low-priority pod holds every DCU slot of a worker, so kube-scheduler's own fit
  fails there for a high-priority DCU pod; its preemption asks the extender's preempt verb which
  victims free a card (hami_dcu_scheduler_preempt_seconds).
* A device id mismatch: a pod whose init container takes a whole card (the only idle one) and
  whose app container a share the binpack policy puts on the other, fuller card. The kubelet
  hands the app container the init container's device id again (its devicesToReuse), so the
  Allocate call names a slot of the init container's card: the plugin serves the scheduler's card
  and counts the mismatch (hami_dcu_plugin_device_id_mismatches_total).
* Node locks, `<time>,<namespace>,<pod>` as a bind writes them, written with the extender's
  identity (the chart's ValidatingAdmissionPolicy lets no one else, cluster admins included):
  - taken over: a bind waits on a worker locked for a Pending pod; the lock is then replaced by
    one naming a pod that does not exist (the holder gone), just after the worker's plugin
    reconciled, so the bind's next look (within a second) finds it before the plugin's next
    reconcile (5 s on kind) and takes it over (takeovers_total{reason="holder-gone"});
  - released by the plugin: a young lock naming a pod that does not exist. The extender's watch
    never sees that pod and its sweep leaves locks younger than the bind window (30 s) alone, so
    the plugin's reconcile, which reads the holder from the API, releases it
    (plugin_node_lock_releases_total{reason="holder-gone"});
  - released by the extender: a lock naming a Pending pod, which is then deleted; the extender's
    watch shows the deletion and it releases the lock at once
    (scheduler_node_lock_releases_total{reason="holder-gone"});
  - held: a lock naming a Pending pod younger than the bind window is needed by its holder as
    far as anyone can tell, so it stays while Prometheus is asked (hami_dcu_node_lock_held_seconds).
* Cache drift: while the extender's network namespace drops what the API server sends it, a
  running DCU pod is deleted; then its connections are cut (`ss -K`) and the filter removed. The
  watch never delivered the deletion: the relist after the broken watch finds the pod gone and
  repairs the cache (hami_dcu_cache_drift_total{kind="missed-delete"}).
"""

from __future__ import annotations

import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from e2e.kindcluster import RELEASE_NAMESPACE, WORKERS, KindBackend
from e2e.scenarios import allocation, phase, wait_running, wait_until
from hami_dcu.cli.localcluster.pods import POD_IMAGE
from hami_dcu.common.io.kube import NotFoundError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import LockValue, encode_lock

JSON = dict[str, Any]
LOW, HIGH = "hami-e2e-promql-low", "hami-e2e-promql-high"
HOLDER_GONE = "holder-gone"  # hami_dcu.common.protocol.lockpurpose.HOLDER_GONE, the reason every lock here ends with
# The device plugin's cycle on kind (registerIntervalSeconds): a publication, then a reconcile.
PLUGIN_CYCLE = 5.0


@dataclass(frozen=True)
class Endpoints:
    """Local ports (kubectl port-forward) of the components' /metrics."""

    scheduler: int
    nodes: dict[str, int]  # worker -> its device plugin's (or DRA driver's)


def metric(port: int, name: str, **labels: str) -> float:
    """What the component serves now: the sum of the samples `name` whose labels include `labels`
    (0 when there are none)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items())


# --- pods ----------------------------------------------------------------------------------------


def container(name: str, count: int | None = None, memory: int | None = None, cores: int | None = None,
              command: tuple[str, ...] = ("sleep", "infinity")) -> JSON:
    names = keys.DCU_NAMING.resources
    limits = {resource: str(value) for resource, value in
              ((names.count, count), (names.memory, memory), (names.cores, cores)) if value is not None}
    return {"name": name, "image": POD_IMAGE, "imagePullPolicy": "IfNotPresent", "command": list(command),
            "resources": {"limits": limits}}


def pod(name: str, containers: list[JSON], *, node: str | None = None, init: list[JSON] | None = None,
        priority_class: str | None = None, annotations: dict[str, str] | None = None) -> JSON:
    spec: JSON = {"containers": containers, "initContainers": init or [], "terminationGracePeriodSeconds": 1}
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": spec}


def pending_pod(b: KindBackend, name: str) -> None:
    """A pod no node will take (no DCU): it exists and is never bound, as a pod between its
    bind's lock and its Binding looks."""
    made = pod(name, [container("main")])
    made["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "no-such-node"}
    b.kube.create_pod(b.namespace, made)


def priority_class(b: KindBackend, name: str, value: int) -> None:
    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    try:
        b.kube.request("GET", f"{path}/{name}")
    except NotFoundError:
        b.kube.request("POST", path, body={"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                           "metadata": {"name": name}, "value": value})


def remove_priority_classes(b: KindBackend) -> None:
    for name in (LOW, HIGH):
        try:
            b.kube.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
        except NotFoundError:
            pass


def wait_gone(b: KindBackend, *names: str, timeout: float = 60) -> None:
    wait_until(f"pods {', '.join(names)} gone", lambda: all(phase(b.kube, b.namespace, n) == "Gone" for n in names),
               timeout=timeout, interval=0.5)


# --- /preempt and the kubelet's reused device id -------------------------------------------------


def preemption_and_a_reused_device_id(b: KindBackend, at: Endpoints) -> None:
    """Both at once (they use different workers): a high-priority pod preempts a low-priority
    one through /preempt on WORKERS[1]; a pod's app container gets its init container's device
    id from the kubelet on WORKERS[0]."""
    full, shared = WORKERS[1], WORKERS[0]
    assert len(b.cards[shared]) >= 2, "the reused device id needs two cards on a worker"
    slots = int(b.kube.get_node(full)["status"]["allocatable"][b.naming.resources.count])
    priority_class(b, LOW, 10)
    priority_class(b, HIGH, 1000)
    # A share per slot (a container's share is one vDCU): the worker's slots all taken, its cards
    # far from full.
    low = pod("promql-low", [container(f"c{i}", 1, 1000, 10) for i in range(slots)], node=full, priority_class=LOW)
    # A share on the first card of the other worker: the init container's whole card must be the second.
    filler = pod("promql-filler", [container("main", 1, 2000, 20)],
                 annotations={keys.USE_DCU_UUID: b.cards[shared][0].id})
    for made in (low, filler):
        b.kube.create_pod(b.namespace, made)
    wait_running(b, "promql-low", timeout=120)
    wait_running(b, "promql-filler", timeout=120)
    preempts = metric(at.scheduler, "hami_dcu_scheduler_preempt_seconds_count")
    mismatches = metric(at.nodes[shared], "hami_dcu_plugin_device_id_mismatches_total")
    b.kube.create_pod(b.namespace, pod("promql-high", [container("main", 1, 1000, 10)], node=full,
                                       priority_class=HIGH))
    # binpack puts the app container's share on the fuller card, the filler's; the init
    # container's whole card can only be the idle one.
    b.kube.create_pod(b.namespace, pod(
        "promql-reused-id", [container("main", 1, 1000, 10)], node=shared,
        init=[container("setup", 1, command=("true",))], annotations={"hami.io/gpu-scheduler-policy": "binpack"}))
    high = wait_running(b, "promql-high", timeout=180)
    assert high["spec"]["nodeName"] == full
    assert phase(b.kube, b.namespace, "promql-low") in ("Gone", "Failed"), "the low-priority pod was not preempted"
    assert metric(at.scheduler, "hami_dcu_scheduler_preempt_seconds_count") > preempts, "no /preempt answered"
    reused = wait_running(b, "promql-reused-id", timeout=120)
    setup, main = allocation(reused)
    assert [d.uuid for d in setup] == [b.cards[shared][1].id] and [d.uuid for d in main] == [b.cards[shared][0].id], \
        (setup, main)
    assert metric(at.nodes[shared], "hami_dcu_plugin_device_id_mismatches_total") > mismatches, \
        "the kubelet passed the scheduler's card for the app container: no mismatch counted"


# --- node locks ----------------------------------------------------------------------------------


def scheduler_identity(b: KindBackend) -> str:
    """The extender's user name (its --scheduler-identity): the one writer of node locks."""
    for item in b.kube.list_pods(namespace=RELEASE_NAMESPACE,
                                 label_selector="app.kubernetes.io/component=scheduler").items:
        for c in item["spec"]["containers"]:
            for arg in c.get("args") or []:
                if arg.startswith("--scheduler-identity="):
                    return str(arg.split("=", 1)[1])
    raise AssertionError("no extender container with --scheduler-identity")


def lock_naming(b: KindBackend, holder: str) -> str:
    return encode_lock(LockValue(since=datetime.now(UTC), namespace=b.namespace, name=holder))


def write_lock(b: KindBackend, node: str, value: str | None, identity: str) -> None:
    change = f"{keys.NODE_LOCK}={value}" if value is not None else f"{keys.NODE_LOCK}-"
    b.kubectl("annotate", "node", node, change, "--overwrite", f"--as={identity}")


def lock_of(b: KindBackend, node: str) -> str | None:
    annotations = b.kube.get_node(node)["metadata"].get("annotations") or {}
    value = annotations.get(keys.NODE_LOCK)
    return str(value) if value is not None else None


def just_after_a_plugin_cycle(b: KindBackend, node: str) -> None:
    """Returns a moment after the node's plugin published its handshake and reconciled: its next
    reconcile is some PLUGIN_CYCLE - 1 seconds away."""
    def handshake() -> str | None:
        annotations = b.kube.get_node(node)["metadata"].get("annotations") or {}
        return annotations.get(b.naming.node_handshake)

    first = handshake()
    wait_until(f"{node}'s plugin publishing again", lambda: handshake() != first, timeout=3 * PLUGIN_CYCLE,
               interval=0.1)
    time.sleep(1.0)  # the reconcile follows the publication: two reads of the API


def lock_taken_over(b: KindBackend, at: Endpoints, identity: str, holder: str) -> int:
    """A bind waits on a node locked for `holder` (Pending); the lock then names a pod that no
    longer exists, and the bind takes it over. Tried again (another pod) when the plugin's
    reconcile released it first, which a loaded machine can make happen. Returns the attempt
    that succeeded (0 first)."""
    node = WORKERS[1]
    for attempt in range(3):
        write_lock(b, node, lock_naming(b, holder), identity)
        name = f"promql-takeover-{attempt}"
        started = time.monotonic()
        b.kube.create_pod(b.namespace, pod(name, [container("main", 1, 1000, 10)], node=node))
        before = metric(at.scheduler, "hami_dcu_scheduler_node_lock_takeovers_total", reason=HOLDER_GONE)
        just_after_a_plugin_cycle(b, node)
        time.sleep(max(0.0, 2.0 - (time.monotonic() - started)))  # the bind is waiting by now
        write_lock(b, node, lock_naming(b, f"promql-gone-{attempt}"), identity)
        wait_running(b, name, timeout=60)
        if metric(at.scheduler, "hami_dcu_scheduler_node_lock_takeovers_total", reason=HOLDER_GONE) > before:
            return attempt
    raise AssertionError("no bind took over a lock whose holder was gone, in 3 attempts")


def lock_released_by_the_plugin(b: KindBackend, at: Endpoints, identity: str) -> None:
    node = WORKERS[0]
    before = metric(at.nodes[node], "hami_dcu_plugin_node_lock_releases_total", reason=HOLDER_GONE)
    value = lock_naming(b, "promql-never-existed")
    write_lock(b, node, value, identity)
    wait_until("the plugin releasing a lock whose holder never existed",
               lambda: metric(at.nodes[node], "hami_dcu_plugin_node_lock_releases_total", reason=HOLDER_GONE)
               > before, timeout=4 * PLUGIN_CYCLE, interval=0.5)
    assert lock_of(b, node) != value


def lock_released_by_the_extender(b: KindBackend, at: Endpoints, identity: str, holder: str) -> None:
    node = WORKERS[0]
    write_lock(b, node, lock_naming(b, holder), identity)
    wait_until("the extender's cache showing the lock",
               lambda: metric(at.scheduler, "hami_dcu_node_lock_held", node=node) == 1, timeout=20, interval=0.2)
    before = metric(at.scheduler, "hami_dcu_scheduler_node_lock_releases_total", reason=HOLDER_GONE)
    b.kube.delete_pod(b.namespace, holder)
    wait_until("the extender releasing the lock of a deleted pod",
               lambda: metric(at.scheduler, "hami_dcu_scheduler_node_lock_releases_total", reason=HOLDER_GONE)
               > before, timeout=20, interval=0.2)
    assert lock_of(b, node) is None


def hold_a_lock(b: KindBackend, identity: str, holder: str) -> str:
    """The node locked for `holder` (Pending) until it is deleted or the bind window passes."""
    node = WORKERS[0]
    write_lock(b, node, lock_naming(b, holder), identity)
    return node


def no_lock_left(b: KindBackend, identity: str) -> None:
    """Every lock this module wrote is released by now; one still there (a failed step) is removed."""
    for node in WORKERS:
        value = lock_of(b, node)
        if value is not None and f",{b.namespace},promql-" in value:
            try:
                wait_until(f"{node}'s lock released", lambda n=node: lock_of(b, n) is None, timeout=10, interval=0.5)
            except AssertionError:
                write_lock(b, node, None, identity)


# --- cache drift ---------------------------------------------------------------------------------

# Run on the extender's node: finds a process in the network namespace that holds the pod's
# address, then `block` drops what the API server (the kubernetes Service, as the pod sees it)
# sends there, and `cut` aborts the pod's connections to it (ss -K) and removes the drop.
_NETNS = r"""
ip=$1 api=$2 port=$3 action=$4
host=$(readlink /proc/1/ns/net)
for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/net" 2>/dev/null)" != "$host" ] || continue
    if nsenter -t "${p#/proc/}" -n ip -o -4 addr show 2>/dev/null | grep -q "inet $ip/"; then pid=${p#/proc/}; break; fi
done
[ -n "${pid:-}" ] || { echo "no process in a network namespace holding $ip" >&2; exit 1; }
rule="INPUT -s $api -p tcp --sport $port -j DROP"
case $action in
    block) nsenter -t "$pid" -n iptables -I $rule ;;
    cut) nsenter -t "$pid" -n ss -K -t dst "$api" >/dev/null; nsenter -t "$pid" -n iptables -D $rule ;;
esac
"""


def cache_drift(b: KindBackend, at: Endpoints, victim: str) -> None:
    """`victim` (a running DCU pod) deleted while the extender hears nothing from the API server."""
    (extender,) = [p for p in b.kube.list_pods(namespace=RELEASE_NAMESPACE,
                                               label_selector="app.kubernetes.io/component=scheduler").items
                   if not p["metadata"].get("deletionTimestamp")]
    service = b.kube.request("GET", "/api/v1/namespaces/default/services/kubernetes")["spec"]
    args = [extender["status"]["podIP"], service["clusterIP"], str(service["ports"][0]["port"])]
    node = extender["spec"]["nodeName"]
    before = metric(at.scheduler, "hami_dcu_cache_drift_total", kind="missed-delete")
    b.node_exec(node, "sh", "-c", _NETNS, "sh", *args, "block")
    try:
        b.kube.request("DELETE", f"/api/v1/namespaces/{b.namespace}/pods/{victim}",
                       query={"gracePeriodSeconds": "0"})
        wait_gone(b, victim, timeout=30)
    finally:
        b.node_exec(node, "sh", "-c", _NETNS, "sh", *args, "cut")
    wait_until("the extender's relist repairing the deletion its watch missed",
               lambda: metric(at.scheduler, "hami_dcu_cache_drift_total", kind="missed-delete") > before,
               timeout=60, interval=0.5)
