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
    queues.left_queue("a", served=True, now=0.0)
    assert queues.congested(0.0) == frozenset()  # no pace known yet, none seen so far
    queues.finished("a", 3.0)  # that bind held the node's turn for 3 s
    queues.left_queue("a", served=True, now=3.0)
    assert queues.expected_wait("a", 3.0) == 9.0  # 3 ahead (2 queued, 1 served) x 3 s
    assert queues.congested(3.0) == frozenset()
    queues.queued("a")
    assert queues.expected_wait("a", 3.0) == 12.0 and queues.congested(3.0) == {"a"}
    # A node with no pace of its own is judged by every node's.
    for _ in range(5):
        queues.queued("b")
    assert queues.expected_wait("b", 3.0) == 15.0 and queues.congested(3.0) == {"a", "b"}
    # Binds that give up or end take the node out again.
    for _ in range(3):
        queues.left_queue("a", served=False, now=4.0)
    queues.finished("a", 4.0)
    assert queues.congested(4.0) == {"b"} and not queues.waiting["a"] and not queues.serving["a"]


def test_before_any_bind_ends_the_one_holding_the_turn_sets_the_pace():
    """A burst queues a node's whole capacity at once: its first bind has not ended, and how
    long it has held the turn is already a lower bound on the pace."""
    queues = BindQueues(lock_wait=20.0)
    for _ in range(12):
        queues.queued("a")
    queues.left_queue("a", served=True, now=100.0)
    assert queues.congested(100.5) == frozenset()  # 12 x 0.5 s
    assert queues.congested(101.0) == {"a"}  # 12 x 1 s
    queues.finished("a", 101.0)
    assert queues.pace["a"] == 1.0


def test_a_node_that_speeds_up_stops_being_congested():
    queues = BindQueues(lock_wait=20.0)
    for _ in range(8):
        queues.queued("a")
    now = 0.0
    queues.left_queue("a", served=True, now=now)
    now += 2.0
    queues.finished("a", now)
    assert queues.congested(now) == {"a"}  # 7 x 2 s
    for _ in range(5):
        queues.left_queue("a", served=True, now=now)
        now += 0.2
        queues.finished("a", now)
    assert queues.pace["a"] < 0.6 and queues.congested(now) == frozenset()  # 2 x under 0.6 s


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
