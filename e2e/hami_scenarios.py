"""What HAMi v2.10's own scheduler and hami-dcu's device plugin must do together (issue 33):
HAMi's webhook admits and routes the pod, HAMi's extender places it, writes the allocation and
locks the node with its own lock, hami-dcu's device plugin serves the kubelet's Allocate from
that allocation (the right card, a vdev with the right compute units and memory), marks the
pod `bind-phase: success` and releases the lock.

Written on `ClusterBackend` like e2e/scenarios.py, so they mean the same on the real control
plane and on kind. Only what HAMi v2.10 supports: the dcu naming set, no `numa` policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from e2e.realcluster import hami
from e2e.scenarios import (
    DCU,
    ClusterBackend,
    allocation,
    assert_no_card_over_capacity,
    assert_no_lock_left,
    card_of,
    phase,
    vdev_for,
    wait_running,
    wait_until,
)
from hami_dcu.cli.cardusage import cluster_usage
from hami_dcu.cli.localcluster.pods import Ctr, pod_manifest
from hami_dcu.common.protocol import keys

JSON = dict[str, Any]
HAMI_SCHEDULER = hami.SCHEDULER_NAME
HAMI_SCENARIOS: list[Callable[[ClusterBackend], None]] = []


def hami_scenario(fn: Callable[[ClusterBackend], None]) -> Callable[[ClusterBackend], None]:
    HAMI_SCENARIOS.append(fn)
    return fn


def served(b: ClusterBackend, name: str, timeout: float = 90.0) -> JSON:
    """The pod Running, placed by HAMi and served to the end by hami-dcu's plugin, the node's
    lock released."""
    pod = wait_running(b, name, timeout)
    assert pod["spec"]["schedulerName"] == HAMI_SCHEDULER, "HAMi's webhook did not route the pod"
    annotations = pod["metadata"].get("annotations") or {}
    assert annotations.get(keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS, annotations
    # HAMi's Filter writes which node it chose; its Bind the time it bound.
    assert annotations.get(keys.POD_NODE) == pod["spec"]["nodeName"], annotations
    wait_until(f"{pod['spec']['nodeName']} unlocked", lambda: _unlocked(b, pod["spec"]["nodeName"]), 30)
    # What `hami-dcu status` prints, from the same nodes and pods: the pod's share on its cards.
    usage = cluster_usage(b.kube.list_nodes().items, b.kube.list_pods(namespace=b.namespace).items,
                          datetime.now(UTC), DCU)
    shown = {(card.id, share.bind_phase) for node in usage.nodes for card in node.cards for share in card.shares
             if share.pod == name}
    held = {dev.uuid for container in allocation(pod) for dev in container}
    assert {card for card, _ in shown} == held and all(p == keys.BIND_PHASE_SUCCESS for _, p in shown), shown
    return pod


def _unlocked(b: ClusterBackend, node: str) -> bool:
    return keys.NODE_LOCK not in (b.kube.get_node(node)["metadata"].get("annotations") or {})


def only_node(b: ClusterBackend) -> str:
    return sorted(b.cards)[0]


@hami_scenario
def one_share(b: ClusterBackend) -> None:
    b.kube.create_pod(b.namespace, pod_manifest("share", [Ctr("main", 1, 2000, 15)]))
    pod = served(b, "share")
    (dev,) = allocation(pod)[0]
    assert (dev.usedmem, dev.usedcores) == (2000, 15)
    card = card_of(b, pod["spec"]["nodeName"], dev.uuid)
    conf = vdev_for(b, pod, "main")
    assert conf["PciBusId"] == card.pci_bus_id
    assert conf["cu_count"] == str(15 * card.compute_units // 100)
    assert conf["mem"] == "2000 MiB"


@hami_scenario
def two_shares_on_one_card_get_disjoint_masks(b: ClusterBackend) -> None:
    card = b.cards[only_node(b)][0]
    pin = {keys.USE_DCU_UUID: card.id}
    for name in ("left", "right"):
        b.kube.create_pod(b.namespace, pod_manifest(name, [Ctr("c", 1, 3000, 30)], pin))
    left, right = served(b, "left"), served(b, "right")
    assert allocation(left)[0][0].uuid == allocation(right)[0][0].uuid == card.id
    masks = [vdev_for(b, p, "c") for p in (left, right)]
    for word in ("cu_mask1", "cu_mask2"):
        assert int(masks[0][word], 16) & int(masks[1][word], 16) == 0, masks
    assert_no_card_over_capacity(b)


@hami_scenario
def a_whole_card(b: ClusterBackend) -> None:
    b.kube.create_pod(b.namespace, pod_manifest("whole", [Ctr("c", 1)]))
    pod = served(b, "whole")
    (dev,) = allocation(pod)[0]
    node = pod["spec"]["nodeName"]
    assert dev.usedmem == card_of(b, node, dev.uuid).memory_mib and dev.usedcores == 100, dev
    assert not [d for d in b.vdev_files(node) if d.startswith(pod["metadata"]["uid"])], "whole cards get no vdev"
    b.kube.create_pod(b.namespace, pod_manifest("after", [Ctr("c", 1, 100, 1)], {keys.USE_DCU_UUID: dev.uuid}))
    time.sleep(2)
    assert phase(b.kube, b.namespace, "after") == "Pending", "HAMi shared a whole card"


@hami_scenario
def several_whole_cards(b: ClusterBackend) -> None:
    count = len(b.cards[only_node(b)])
    b.kube.create_pod(b.namespace, pod_manifest("cards", [Ctr("c", count)]))
    pod = served(b, "cards")
    devices = allocation(pod)[0]
    assert len({d.uuid for d in devices}) == count, devices


@hami_scenario
def card_type_selection(b: ClusterBackend) -> None:
    model = b.cards[only_node(b)][0].model
    b.kube.create_pod(b.namespace, pod_manifest("typed", [Ctr("c", 1, 1000, 10)], {DCU.use_type: model}))
    served(b, "typed")
    b.kube.create_pod(b.namespace, pod_manifest("untyped", [Ctr("c", 1, 1000, 10)], {DCU.nouse_type: model}))
    time.sleep(3)
    assert phase(b.kube, b.namespace, "untyped") == "Pending", "nouse-dcutype placed on the excluded type"


@hami_scenario
def card_uuid_selection(b: ClusterBackend) -> None:
    wanted = b.cards[only_node(b)][-1]
    b.kube.create_pod(b.namespace, pod_manifest("pinned", [Ctr("c", 1, 1000, 10)], {keys.USE_DCU_UUID: wanted.id}))
    assert allocation(served(b, "pinned"))[0][0].uuid == wanted.id
    b.kube.create_pod(b.namespace, pod_manifest("avoid", [Ctr("c", 1, 1000, 10)], {keys.NOUSE_DCU_UUID: wanted.id}))
    assert allocation(served(b, "avoid"))[0][0].uuid != wanted.id


def job_manifest(name: str, pods: int, ctr: Ctr) -> JSON:
    template = pod_manifest(name, [ctr])
    template["metadata"] = {"labels": {"job": name}}
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": template}}


@hami_scenario
def a_job_of_ten(b: ClusterBackend) -> None:
    """HAMi#1367's case: ten pods of one Job contend for the node lock (on the real control
    plane's one node, all for the same lock); each waits for the one before it to be served,
    and all are."""
    b.kube.request("POST", f"/apis/batch/v1/namespaces/{b.namespace}/jobs",
                   body=job_manifest("ten", 10, Ctr("c", 1, 1000, 5)))

    def running() -> list[JSON] | None:
        pods = b.kube.list_pods(namespace=b.namespace, label_selector="job=ten").items
        done = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return done if len(done) == 10 else None

    pods = wait_until("the Job's ten pods Running", running, timeout=240, interval=0.5)
    for pod in pods:
        served(b, pod["metadata"]["name"])
    assert_no_card_over_capacity(b)
    assert_no_lock_left(b)
    b.kube.request("DELETE", f"/apis/batch/v1/namespaces/{b.namespace}/jobs/ten",
                   query={"propagationPolicy": "Foreground"})
    wait_until("the Job's pods gone",
               lambda: not b.kube.list_pods(namespace=b.namespace, label_selector="job=ten").items, 120, 0.5)


@hami_scenario
def a_pod_deleted_while_bound(b: ClusterBackend) -> None:
    """Deleted the moment it is bound (before or while the kubelet allocates): whatever lock it
    held is released, nothing of it stays on the card, and the next pod is served."""
    card = b.cards[only_node(b)][0]
    pin = {keys.USE_DCU_UUID: card.id}
    b.kube.create_pod(b.namespace, pod_manifest("doomed", [Ctr("c", 1, 60000, 90)], pin))
    wait_until("doomed bound", lambda: b.kube.get_pod(b.namespace, "doomed")["spec"].get("nodeName"), 60, 0.02)
    uid = b.kube.get_pod(b.namespace, "doomed")["metadata"]["uid"]
    b.kube.delete_pod(b.namespace, "doomed")
    wait_until("doomed gone", lambda: phase(b.kube, b.namespace, "doomed") == "Gone", 60)
    b.kube.create_pod(b.namespace, pod_manifest("next", [Ctr("c", 1, 60000, 90)], pin))
    served(b, "next", timeout=120)
    wait_until("the deleted pod's vdev removed",
               lambda: not [d for d in b.vdev_files(only_node(b)) if d.startswith(uid)], 60)
