"""A high-priority shared-DCU pod preempts low-priority ones on a full card, through the real
kube-scheduler's preemption and the extender's preempt verb (issue 13, HAMi#1494).

One card, four slots, all taken: `l0` holds 60 percent of its cores, `l1`..`l3` 10 each,
started in that order. The preemptor asks for 50 percent. kube-scheduler sees slots only:
it frees one slot and, sparing the earlier-started pods, proposes `l3`, which frees 10
percent, not enough. The extender adds the fewest further lower-priority pods that free
the card (`l0`), so `l3` and `l0` go, `l1` and `l2` keep running, the preemptor runs. Without
the verb `l3` would be evicted for nothing and the preemptor would stay Pending.
"""

from __future__ import annotations

import time

from e2e.realcluster.cluster import RealCluster
from e2e.scenarios import assert_no_card_over_capacity, phase, wait_running, wait_until
from hami_dcu.cli.localcluster.pods import Ctr, pod_manifest
from hami_dcu.common.io.kube import NotFoundError

LOW, HIGH = "hami-e2e-low", "hami-e2e-high"


def _priority_class(cluster: RealCluster, name: str, value: int) -> None:
    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    try:
        cluster.kube.request("GET", f"{path}/{name}")
    except NotFoundError:
        cluster.kube.request("POST", path, body={"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                 "metadata": {"name": name}, "value": value})


def _pod(name: str, cores: int, priority_class: str) -> dict:
    manifest = pod_manifest(name, [Ctr("main", 1, 1000, cores)])
    manifest["spec"]["priorityClassName"] = priority_class
    return manifest


def preempts_the_pods_that_free_the_card(cluster: RealCluster) -> None:
    _priority_class(cluster, LOW, 10)
    _priority_class(cluster, HIGH, 1000)
    for name, cores in (("l0", 60), ("l1", 10), ("l2", 10), ("l3", 10)):
        cluster.kube.create_pod(cluster.namespace, _pod(name, cores, LOW))
        wait_running(cluster, name)
        time.sleep(1.1)  # start times a second apart: kube-scheduler orders victims by them
    cluster.kube.create_pod(cluster.namespace, _pod("urgent", 50, HIGH))
    pod = wait_running(cluster, "urgent", timeout=120)
    assert pod["spec"]["nodeName"] in cluster.cards
    gone = {name for name in ("l0", "l1", "l2", "l3") if phase(cluster.kube, cluster.namespace, name) == "Gone"}
    assert gone == {"l0", "l3"}, f"evicted {sorted(gone)}, expected l3 (kube-scheduler's) and l0 (the extender's)"
    wait_until("l1 and l2 still running", lambda: all(
        phase(cluster.kube, cluster.namespace, name) == "Running" for name in ("l1", "l2")), timeout=10)
    assert_no_card_over_capacity(cluster)
