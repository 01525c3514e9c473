"""HAMi v2.10 against hami-dcu on a real control plane (issue 33): HAMi's own chart (its
scheduler process built from ../shared/peers, its webhook with TLS, its kube-scheduler profile)
and hami-dcu's chart with the node side only (scheduler.enabled=false), on upstream
kube-apiserver, kube-scheduler and kube-controller-manager. Every scenario of
e2e/hami_scenarios.py: admitted by HAMi's webhook, placed and bound by HAMi's extender under
HAMi's node lock, served by hami-dcu's Allocate.

Skips with one line only where the real cluster cannot run, or Go or HAMi's tarball is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from e2e.hami_scenarios import HAMI_SCENARIOS
from e2e.realcluster import hami
from e2e.realcluster.cluster import RealCluster, unavailable
from e2e.scenarios import ClusterBackend
from hami_dcu.cli.localcluster.pods import default_cards

_REASON = unavailable() or hami.why_unavailable()
pytestmark = [pytest.mark.realcluster, pytest.mark.peer]  # a peer of the background build (.ci/run)


@pytest.fixture(scope="module")
def beside_hami() -> Iterator[RealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    with RealCluster({"node0": default_cards("node0", 3)}, hami_peer=True) as cluster:
        yield cluster


@pytest.mark.parametrize("scenario", HAMI_SCENARIOS, ids=lambda s: s.__name__)
def test_hamis_scheduler_with_our_device_plugin(beside_hami: RealCluster,
                                                scenario: Callable[[ClusterBackend], None]) -> None:
    beside_hami.clear_pods()
    try:
        scenario(beside_hami)
    except BaseException:
        print(beside_hami.diagnose())
        raise
