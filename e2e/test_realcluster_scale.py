"""The kwok scale harness on the real control plane, small, in both of the chart's modes: 30 fake
nodes x 8 mock cards, a burst of mixed pods in the mix of bench/scale.py (shares, whole cards,
two and four cards, per-pod policies) through the real kube-scheduler and our extender (e2e/
realcluster/kwokscale.py).

* device-plugin mode: 100 pods, served by the device plugin's own Allocate; every pod is bound
  and Running, no card holds more than it has, no two vDCUs of a card share a compute unit,
  and no node lock is left behind;
* DRA mode: 60 pods rewritten into claims by our webhook, allocated by kube-scheduler, their
  ResourceSlices published and their claims prepared by the DRA driver's own code; every pod is
  bound, no device is allocated over its capacity, no two vDCUs of a card share a compute unit;
* in both: a 40-pod Job of one share each lands on the fewest nodes that fit it, and the plain
  twins of the burst go through the default kube-scheduler as the baseline.

    pytest -m realcluster e2e/test_realcluster_scale.py
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from e2e import invariants
from e2e.realcluster import scalemix
from e2e.realcluster.cluster import unavailable
from e2e.realcluster.kwokscale import CARDS_PER_NODE, DEVICE_PLUGIN, DRA, NAMESPACE, KwokScale
from e2e.scenarios import wait_until

NODES = 30
PODS = {DEVICE_PLUGIN: 100, DRA: 60}
JOB_PODS = 40
JOB_SHAPE = scalemix.Shape("share-2g-10", 1, 2000, 10)  # bench/realcluster.py's Job: one slot each
_REASON = unavailable()
pytestmark = [pytest.mark.realcluster, pytest.mark.peer]  # a peer of the background build (.ci/run)


@pytest.fixture(scope="module", params=[DEVICE_PLUGIN, DRA])
def scale(request: pytest.FixtureRequest) -> Iterator[KwokScale]:
    # Module-scoped and parametrized: pytest runs every test of one mode, stops that cluster,
    # then starts the other, so the two never run at once.
    if _REASON:
        pytest.skip(_REASON)
    with KwokScale(say=lambda _line: None, mode=request.param) as harness:
        harness.grow(NODES)
        yield harness


def test_a_mixed_burst_on_kwok_nodes_is_bound_within_capacity(scale: KwokScale) -> None:
    shapes = scalemix.shapes(PODS[scale.mode])
    burst = scale.burst("mixed", shapes, dcu=True)
    assert not burst.refused, burst.refused
    assert not burst.failed, burst.failed
    assert len(burst.bound) == len(burst.running) == len(shapes)
    assert set(burst.nodes.values()) <= set(scale.nodes)
    pods = [p for p in scale.kube.list_pods(namespace=NAMESPACE).items if p["metadata"]["name"].startswith("mixed-")]
    if scale.mode == DRA:
        # Shares are rewritten into claims; on 1.37 a whole-card pod keeps its count resource and
        # kube-scheduler makes its claim (the DeviceClass's extendedResourceName, issue 36).
        assert all(p["spec"]["schedulerName"] == "hami-scheduler" and (
            p["spec"].get("resourceClaims") or (p.get("status") or {}).get("extendedResourceClaimStatus"))
            for p in pods)
        claims = scale.claims()
        assert len(claims) == len(shapes)
        assert invariants.claims_over_capacity(scale.resource_slices(), claims) == []
        # The driver's Prepare ran for every pod: one vDCU per share, on the node of its claim.
        wait_until("every claim prepared", lambda: sum(len(scale.vdev_files(n)) for n in scale.nodes)
                   >= sum(1 for s in shapes if s.memory is not None), timeout=60)
        vdevs = {node: scale.vdev_files(node) for node in set(burst.nodes.values())}
    else:
        nodes = scale.kube.list_nodes(label_selector=f"{scalemix.FAKE_NODE_LABEL}=kwok").items
        assert invariants.over_capacity(nodes, pods) == []
        uids = {p["metadata"]["uid"] for p in pods}
        vdevs = {node: {d: conf for d, conf in scale.vdev_files(node).items() if d.split("_")[0] in uids}
                 for node in set(burst.nodes.values())}
        wait_until("no node lock left", lambda: not scale.locks_left(), timeout=30)
    # One vDCU per share (whole cards get none), never two on a card sharing a compute unit.
    assert sum(len(files) for files in vdevs.values()) == sum(1 for s in shapes if s.memory is not None)
    assert invariants.overlapping_masks(vdevs) == []
    scale.delete_run("mixed")


def test_a_40_pod_job_lands_on_the_fewest_nodes_that_fit_it(scale: KwokScale) -> None:
    fewest = scalemix.fewest_nodes([JOB_SHAPE] * JOB_PODS, CARDS_PER_NODE)
    assert fewest == 2  # 40 slots of 8 cards x 4
    placed = scale.job("pack", JOB_SHAPE, JOB_PODS)
    per_node = Counter(placed.values())
    print(f"\n{scale.mode}: a Job of {JOB_PODS} shares on {len(per_node)} nodes (fewest that fit: {fewest}): "
          f"{dict(sorted(per_node.items()))}")
    assert len(per_node) == fewest, per_node
    scale.delete_job("pack")


def test_the_plain_twins_are_the_baseline_through_the_default_scheduler(scale: KwokScale) -> None:
    count = PODS[scale.mode]
    burst = scale.burst("plain", scalemix.shapes(count), dcu=False)
    assert not burst.refused and not burst.failed
    assert len(burst.running) == count
    pods = scale.kube.list_pods(namespace=NAMESPACE, label_selector=f"{scalemix.RUN_LABEL}=plain").items
    assert {p["spec"]["schedulerName"] for p in pods} == {"default-scheduler"}
    assert all(not (p["metadata"].get("annotations") or {}).get("hami.io/bind-phase") for p in pods)
    assert all(not p["spec"].get("resourceClaims") for p in pods)
    scale.delete_run("plain")
