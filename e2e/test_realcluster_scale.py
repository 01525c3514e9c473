"""The kwok scale harness on the real control plane, small: 30 fake nodes x 8 mock cards, a
burst of 100 pods in the mix of bench/scale.py (shares, whole cards, two and four cards,
per-pod policies) through the real kube-scheduler, our extender and the device plugin's own
Allocate (e2e/realcluster/kwokscale.py). Every pod is bound and Running, no card holds more
than it has, no two vDCUs of a card share a compute unit, and no node lock is left behind;
the plain twins of the same pods go through the default kube-scheduler as the baseline.

    pytest -m realcluster e2e/test_realcluster_scale.py
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e import invariants
from e2e.realcluster import scalemix
from e2e.realcluster.cluster import unavailable
from e2e.realcluster.kwokscale import NAMESPACE, KwokScale
from e2e.scenarios import wait_until

NODES, PODS = 30, 100
_REASON = unavailable()
pytestmark = pytest.mark.realcluster


@pytest.fixture(scope="module")
def scale() -> Iterator[KwokScale]:
    if _REASON:
        pytest.skip(_REASON)
    with KwokScale(say=lambda _line: None) as harness:
        harness.grow(NODES)
        yield harness


def test_a_mixed_burst_on_kwok_nodes_is_bound_within_capacity_and_leaves_no_lock(scale: KwokScale) -> None:
    shapes = scalemix.shapes(PODS)
    burst = scale.burst("mixed", shapes, dcu=True)
    assert not burst.refused, burst.refused
    assert not burst.failed, burst.failed
    assert len(burst.bound) == len(burst.running) == PODS
    assert set(burst.nodes.values()) <= set(scale.nodes)
    pods = scale.kube.list_pods(namespace=NAMESPACE).items
    nodes = scale.kube.list_nodes(label_selector=f"{scalemix.FAKE_NODE_LABEL}=kwok").items
    assert invariants.over_capacity(nodes, pods) == []
    # One vDCU per share (whole cards get none), never two on a card sharing a compute unit.
    uids = {p["metadata"]["uid"] for p in pods if p["metadata"]["name"].startswith("mixed-")}
    vdevs = {node: {d: conf for d, conf in scale.vdev_files(node).items() if d.split("_")[0] in uids}
             for node in set(burst.nodes.values())}
    assert sum(len(files) for files in vdevs.values()) == sum(1 for s in shapes if s.memory is not None)
    assert invariants.overlapping_masks(vdevs) == []
    wait_until("no node lock left", lambda: not scale.locks_left(), timeout=30)
    scale.delete_run("mixed")


def test_the_plain_twins_are_the_baseline_through_the_default_scheduler(scale: KwokScale) -> None:
    burst = scale.burst("plain", scalemix.shapes(PODS), dcu=False)
    assert not burst.refused and not burst.failed
    assert len(burst.running) == PODS
    pods = scale.kube.list_pods(namespace=NAMESPACE, label_selector=f"{scalemix.RUN_LABEL}=plain").items
    assert {p["spec"]["schedulerName"] for p in pods} == {"default-scheduler"}
    assert all(not (p["metadata"].get("annotations") or {}).get("hami.io/bind-phase") for p in pods)
    scale.delete_run("plain")
