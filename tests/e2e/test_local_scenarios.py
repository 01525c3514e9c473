"""The shared whole-system scenarios on the local cluster (the kind suite runs the same ones)."""

import pytest

from hami_dcu.e2e.cluster import LocalCluster
from hami_dcu.e2e.scenarios import SCENARIOS, Scenario, default_cards


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_scenario_on_the_local_cluster(scenario: Scenario):
    nodes = {f"node{i}": default_cards(f"node{i}", scenario.cards_per_node) for i in range(scenario.nodes)}
    with LocalCluster(nodes) as cluster:
        scenario.run(cluster)
