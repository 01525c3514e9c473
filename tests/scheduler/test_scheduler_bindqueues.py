"""Congested nodes (scheduler/bindqueues.py) and /filter passing over them (filtering.py):
a bind must not be sent to wait behind more binds than its --lock-wait allows while another
fitting node is free."""

from datetime import UTC, datetime

from scheduler_helpers import dcu_pod, node_object

from hami_dcu.common import keys
from hami_dcu.scheduler.bindqueues import BindQueues
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.filtering import Filter, FilterSettings, plan_pod

DCU = keys.DCU_NAMING
NOW = datetime.now(UTC)


def test_a_node_is_congested_when_its_queued_binds_would_take_over_half_the_wait():
    queues = BindQueues(lock_wait=20.0)
    for _ in range(4):
        queues.queued("a")
    queues.left_queue("a", served=True)
    assert queues.congested() == frozenset()  # no pace known yet: nothing to judge by
    queues.finished("a", 3.0)  # one bind held the node's turn for 3 s
    assert queues.expected_wait("a") == 9.0  # 3 queued x 3 s
    assert queues.congested() == frozenset()
    queues.queued("a")
    assert queues.expected_wait("a") == 12.0 and queues.congested() == {"a"}
    # A node with no pace of its own is judged by every node's.
    for _ in range(5):
        queues.queued("b")
    assert queues.expected_wait("b") == 15.0 and queues.congested() == {"a", "b"}
    # Binds that give up or end take the node out again.
    for _ in range(4):
        queues.left_queue("a", served=False)
    assert queues.congested() == {"b"} and queues.waiting["a"] == 0


def test_a_node_that_speeds_up_stops_being_congested():
    queues = BindQueues(lock_wait=20.0)
    for _ in range(8):
        queues.queued("a")
    queues.left_queue("a", served=True)
    queues.finished("a", 2.0)
    assert queues.congested() == {"a"}  # 7 x 2 s
    for _ in range(5):
        queues.left_queue("a", served=True)
        queues.finished("a", 0.2)
    assert queues.pace["a"] < 0.6 and queues.congested() == frozenset()  # 2 x under 0.6 s


def two_node_cache() -> ClusterCache:
    """full: one card half used (binpack's first choice); empty: nothing used."""
    cache = ClusterCache()
    for name in ("full", "empty"):
        cache.apply_node(node_object(name), NOW)
    cache.apply_pod({
        "metadata": {"uid": "u1", "name": "x", "namespace": "default", "resourceVersion": "3",
                     "annotations": {DCU.pod_devices_allocated: "DCU-full-S1,DCU,30000,50:;"}},
        "spec": {"nodeName": "full", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}})
    return cache


def test_filter_passes_over_a_congested_node_while_another_fits():
    flt = Filter(two_node_cache(), FilterSettings())
    plan = plan_pod(dcu_pod("p"), flt.settings)
    assert flt.run(plan, ["full", "empty"], NOW).chosen == "full"  # binpack
    outcome = flt.run(plan, ["full", "empty"], NOW, congested=frozenset({"full"}))
    assert outcome.chosen == "empty" and "full" not in outcome.failed  # passed over, not failing


def test_filter_still_picks_a_congested_node_when_every_fitting_node_is():
    flt = Filter(two_node_cache(), FilterSettings())
    plan = plan_pod(dcu_pod("p"), flt.settings)
    assert flt.run(plan, ["full", "empty"], NOW, congested=frozenset({"full", "empty"})).chosen == "full"
    assert flt.run(plan, ["full"], NOW, congested=frozenset({"full"})).chosen == "full"
    # A pod that fits only the congested node still goes there (the empty one cannot take it).
    big = plan_pod(dcu_pod("big", count=2, cores=60), flt.settings)
    outcome = flt.run(big, ["full", "empty"], NOW, congested=frozenset({"empty"}))
    assert outcome.chosen == "empty"
