"""The Volcano scenarios (e2e/volcano_scenarios.py) on kind: the chart in Volcano mode
(`naming: hcu`, `volcano.enabled`), Volcano's Hygon deviceshare played by the protocol stand-in
under its own ServiceAccount, the real kubelet admitting what it binds and calling `Allocate`
with no node lock. Runs after the DRA module, on the same session cluster (issue 24).

    pytest -m kind e2e/test_kind_volcano.py
"""

from __future__ import annotations

import pytest

from e2e.kindcluster import KindBackend
from e2e.volcano_scenarios import VOLCANO_SCENARIOS, VolcanoScenario

pytestmark = pytest.mark.kind


@pytest.fixture
def volcano_mode(kind: KindBackend) -> KindBackend:
    kind.ensure_mode("volcano")
    kind.clean()
    return kind


@pytest.mark.parametrize("scenario", VOLCANO_SCENARIOS, ids=lambda s: s.name)
def test_volcano_scenario_on_kind(volcano_mode: KindBackend, scenario: VolcanoScenario) -> None:
    scenario.run(volcano_mode)
