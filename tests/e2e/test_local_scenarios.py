"""The shared whole-system scenarios on the local cluster (the kind suite runs the same ones).
After each, `hami-dcu status` and the extender must count the same on every card."""

import time

import pytest

from e2e.scenarios import SCENARIOS, Scenario
from e2e.usage_agreement import disagreement
from hami_dcu.cli.localcluster.cluster import LocalCluster
from hami_dcu.cli.localcluster.pods import default_cards
from hami_dcu.common.protocol import keys


def assert_status_agrees_with_the_extender(cluster: LocalCluster, timeout: float = 15.0) -> None:
    # The extender's cache follows the API by watch: give it until the watch has caught up.
    deadline = time.monotonic() + timeout
    while True:
        differ = disagreement(cluster.kube, f"http://127.0.0.1:{cluster.scheduler_port}/metrics", cluster.naming)
        if differ is None:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"status and the extender count differently: {differ}")
        time.sleep(0.2)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_scenario_on_the_local_cluster(scenario: Scenario):
    nodes = {f"node{i}": default_cards(f"node{i}", scenario.cards_per_node) for i in range(scenario.nodes)}
    with LocalCluster(nodes, naming=keys.DCU_NAMING) as cluster:
        scenario.run(cluster)
        assert_status_agrees_with_the_extender(cluster)
