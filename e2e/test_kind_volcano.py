"""The Volcano scenarios (e2e/volcano_scenarios.py) on kind: the chart in Volcano mode
(`naming: hcu`, `volcano.enabled`), Volcano's Hygon deviceshare played by the protocol stand-in
under its own ServiceAccount, the real kubelet admitting what it binds and calling `Allocate`
with no node lock. Runs after the DRA module, on the same session cluster (issue 24).

    pytest -m kind e2e/test_kind_volcano.py
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.kindcluster import KindBackend
from e2e.volcano_scenarios import VOLCANO_SCENARIOS, VolcanoScenario
from hami_dcu.common import keys

pytestmark = pytest.mark.kind


@pytest.fixture
def volcano_mode(kind: KindBackend) -> Iterator[KindBackend]:
    kind.ensure_mode("volcano")
    kind.clean()
    keys.select_naming("hcu")  # this process reads and writes what the hcu-speaking cluster does
    try:
        yield kind
    finally:
        keys.select_naming("dcu")


@pytest.mark.parametrize("scenario", VOLCANO_SCENARIOS, ids=lambda s: s.name)
def test_volcano_scenario_on_kind(volcano_mode: KindBackend, scenario: VolcanoScenario) -> None:
    scenario.run(volcano_mode)
