"""HAMi v2.10 against hami-dcu on kind (issue 33): HAMi's own chart (its scheduler image built
from the binary of e2e/upstream/build-hami.sh) and hami-dcu's chart with the node side only, on a
real kubelet and containerd. The scenarios of e2e/hami_scenarios.py: admitted by HAMi's webhook,
placed and bound by HAMi's extender under its node lock, served by our Allocate through the real
kubelet, which starts the container with its vDCU. Runs after the DRA module, on the same
session cluster.

    pytest -m kind e2e/test_kind_hami.py
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from e2e.hami_scenarios import HAMI_SCENARIOS
from e2e.kindcluster import KindBackend
from e2e.realcluster import hami
from e2e.scenarios import ClusterBackend

pytestmark = pytest.mark.kind
_REASON = hami.why_unavailable()


@pytest.fixture
def beside_hami(kind: KindBackend) -> KindBackend:
    if _REASON:
        pytest.skip(_REASON)
    kind.ensure_mode("hami")
    kind.clean()
    return kind


@pytest.mark.parametrize("scenario", HAMI_SCENARIOS, ids=lambda s: s.__name__)
def test_hamis_scheduler_with_our_device_plugin_on_kind(beside_hami: KindBackend,
                                                        scenario: Callable[[ClusterBackend], None]) -> None:
    scenario(beside_hami)
