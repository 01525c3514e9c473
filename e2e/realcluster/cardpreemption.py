"""Preemption on card memory, through the real kube-scheduler and the extender (issue 37).

One node, two cards of 65,520 MiB, every card with a free slot: card 0 holds `a1` (30,000 MiB)
and `a2` (25,520), card 1 holds `b1`, `b2` (20,000 each) and `b3` (15,520), all of low
priority, started in that order. A high-priority pod asks for 40,000 MiB: no card has it
(10,000 free on each), though the node has 20,000 free and every card a slot, so
kube-scheduler's preemption, which sees slots, finds no victim. The extender evicts the
fewest low-priority pods of one card that free enough: `a1` alone.
"""

from __future__ import annotations

import time

from e2e.realcluster.cluster import RealCluster
from e2e.realcluster.preemption import HIGH, LOW, _priority_class
from e2e.scenarios import assert_no_card_over_capacity, phase, wait_running, wait_until
from hami_dcu.cli.localcluster.pods import Ctr, pod_manifest
from hami_dcu.common.protocol import keys

HOLDERS = {"a1": (0, 30000), "a2": (0, 25520), "b1": (1, 20000), "b2": (1, 20000), "b3": (1, 15520)}
PDB_PATH = "/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"


def _fill_cards(cluster: RealCluster, labels: dict[str, dict[str, str]] | None = None) -> None:
    _priority_class(cluster, LOW, 10)
    _priority_class(cluster, HIGH, 1000)
    cards = cluster.cards["node0"]
    for name, (card, memory) in HOLDERS.items():
        manifest = pod_manifest(name, [Ctr("main", 1, memory, 10)], {keys.USE_DCU_UUID: cards[card].id})
        manifest["spec"]["priorityClassName"] = LOW
        manifest["metadata"]["labels"] = {**manifest["metadata"].get("labels", {}), **(labels or {}).get(name, {})}
        cluster.kube.create_pod(cluster.namespace, manifest)
        wait_running(cluster, name)
        time.sleep(1.1)  # start times a second apart: the latest started goes first among equals


def _urgent(cluster: RealCluster, memory: int) -> None:
    manifest = pod_manifest("urgent", [Ctr("main", 1, memory, 10)])
    manifest["spec"]["priorityClassName"] = HIGH
    cluster.kube.create_pod(cluster.namespace, manifest)


def _gone(cluster: RealCluster) -> set[str]:
    return {name for name in HOLDERS if phase(cluster.kube, cluster.namespace, name) == "Gone"}


def _still_running(cluster: RealCluster, names: set[str]) -> None:
    wait_until(f"{sorted(names)} still running", lambda: all(
        phase(cluster.kube, cluster.namespace, name) == "Running" for name in names), timeout=10)


def a_40_gib_pod_evicts_the_one_share_that_frees_a_card(cluster: RealCluster) -> None:
    _fill_cards(cluster)
    _urgent(cluster, 40000)
    pod = wait_running(cluster, "urgent", timeout=120)
    assert pod["spec"]["nodeName"] == "node0"
    assert _gone(cluster) == {"a1"}, f"evicted {sorted(_gone(cluster))}, expected a1 alone"
    _still_running(cluster, {"a2", "b1", "b2", "b3"})
    assert_no_card_over_capacity(cluster)


def a_pod_no_eviction_helps_evicts_nobody(cluster: RealCluster) -> None:
    _fill_cards(cluster)
    _urgent(cluster, 70000)  # more than a card has
    time.sleep(12)  # kube-scheduler's attempts and the extender's settle time, several times over
    assert phase(cluster.kube, cluster.namespace, "urgent") == "Pending"
    assert _gone(cluster) == set()
    _still_running(cluster, set(HOLDERS))


def a_budget_protected_holder_is_spared_when_another_choice_exists(cluster: RealCluster) -> None:
    _fill_cards(cluster, labels={"a1": {"app": "a1"}})
    path = PDB_PATH.format(namespace=cluster.namespace)
    cluster.kube.request("POST", path, body={
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-a1"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a1"}}}})
    # kube-controller-manager's disruption controller computes what the budget allows.
    wait_until("the budget observed with no disruption allowed", lambda: (
        cluster.kube.request("GET", f"{path}/keep-a1").get("status") or {}).get("currentHealthy") == 1, timeout=60)
    try:
        _urgent(cluster, 40000)
        pod = wait_running(cluster, "urgent", timeout=120)
        assert pod["spec"]["nodeName"] == "node0"
        # a1 is protected and a2 alone frees too little: card 1's two latest started go.
        assert _gone(cluster) == {"b2", "b3"}, f"evicted {sorted(_gone(cluster))}, expected b2 and b3"
        _still_running(cluster, {"a1", "a2", "b1"})
    finally:
        cluster.kube.request("DELETE", f"{path}/keep-a1")
