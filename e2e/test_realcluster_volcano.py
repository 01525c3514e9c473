"""The Volcano scenarios (e2e/volcano_scenarios.py) on the real control plane: the chart in
Volcano mode (`naming: hcu`, `volcano.enabled`, a 5 s register interval), Volcano played by
the stand-in under its own ServiceAccount, the real admission chain (CEL policy and webhook)
judging its writes, the kubelet stand-in admitting what it binds (issue 24).

    pytest e2e/test_realcluster_volcano.py
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.realcluster.cluster import RealCluster, unavailable
from e2e.volcano_scenarios import VOLCANO_SCENARIOS, VolcanoScenario
from hami_dcu.cli.localcluster.pods import default_cards

_REASON = unavailable()
pytestmark = pytest.mark.realcluster
VALUES = {"naming": "hcu", "volcano": {"enabled": True}}


@pytest.fixture(scope="module")
def volcano_cluster() -> Iterator[RealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    with RealCluster({"node0": default_cards("node0", 2)}, values=VALUES) as cluster:
        yield cluster



@pytest.mark.parametrize("scenario", VOLCANO_SCENARIOS, ids=lambda s: s.name)
def test_volcano_scenario_on_a_real_control_plane(volcano_cluster: RealCluster, scenario: VolcanoScenario) -> None:
    volcano_cluster.clear_pods()
    try:
        scenario.run(volcano_cluster)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{volcano_cluster.diagnose()}") from None
