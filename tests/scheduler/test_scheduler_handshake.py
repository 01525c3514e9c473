"""Plugin liveness from the handshake annotation, event rate limiting, per-card metrics."""

from datetime import UTC, datetime, timedelta

from prometheus_client import generate_latest
from scheduler_helpers import dcu_pod, node_object

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import encode_requesting
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.events import EventLimiter
from hami_dcu.scheduler.filtering import Filter, FilterSettings, plan_pod
from hami_dcu.scheduler.handshake import handshake_problem, observe
from hami_dcu.scheduler.metrics import SchedulerMetrics
from hami_dcu.scheduler.reasons import Code

DCU = keys.DCU_NAMING  # the naming set these tests speak

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def judge(node: dict, at: datetime):
    cache = ClusterCache(naming=DCU_NAMING)
    cache.apply_node(node, T0)
    flt = Filter(cache, FilterSettings(naming=DCU))
    return flt.run(plan_pod(dcu_pod("p"), flt.settings), ["n1"], at)


def test_reported_handshake_ages_out_after_60_seconds():
    node = node_object("n1", handshake=T0)
    assert judge(node, T0 + timedelta(seconds=59)).chosen == "n1"
    late = judge(node, T0 + timedelta(seconds=61))
    assert late.chosen is None
    assert late.failed["n1"].code == Code.NODE_HANDSHAKE_STALE
    assert "last reported 61s ago" in late.failed["n1"].message


def test_requesting_from_a_hami_scheduler_gets_60_seconds_grace():
    node = node_object("n1", extra={DCU.node_handshake: encode_requesting(T0)})
    assert judge(node, T0 + timedelta(seconds=30)).chosen == "n1"
    assert judge(node, T0 + timedelta(seconds=90)).failed["n1"].code == Code.NODE_HANDSHAKE_STALE


def test_a_request_stamped_by_volcano_gets_the_same_60_seconds_then_the_allocatable_guard():
    """Volcano's Hygon deviceshare stamps `Requesting_2006.01.02 15:04:05` (read as UTC, as
    the fork reads it): read, it ages like HAMi's; unread, it counted as a time nobody can
    read, alive for ever."""
    stamp = {DCU.node_handshake: "Requesting_2026.03.01 12:00:00"}  # T0
    assert judge(node_object("n1", extra=stamp), T0 + timedelta(seconds=30)).chosen == "n1"
    late = judge(with_allocatable(node_object("n1", extra=stamp), "0"), T0 + timedelta(seconds=90))
    assert late.chosen is None and late.failed["n1"].code == Code.NODE_HANDSHAKE_STALE
    assert "did not answer a handshake request for 90s" in late.failed["n1"].message


def test_missing_handshake_is_not_usable():
    node = node_object("n1")
    del node["metadata"]["annotations"][DCU.node_handshake]
    assert "never reported" in judge(node, T0).failed["n1"].message


def with_allocatable(node: dict, count: str) -> dict:
    node["status"] = {"allocatable": {DCU.resources.count: count}}
    return node


def test_an_expired_request_keeps_the_node_while_it_still_allocates_dcus():
    """HAMi's guard: past the 60 s grace a Requesting_ node stays while status.allocatable
    shows DCUs (the kubelet still has the plugin)."""
    late = T0 + timedelta(seconds=600)
    requesting = {DCU.node_handshake: encode_requesting(T0)}
    assert judge(with_allocatable(node_object("n1", extra=requesting), "8"), late).chosen == "n1"
    gone = judge(with_allocatable(node_object("n1", extra=requesting), "0"), late).failed["n1"]
    assert gone.code == Code.NODE_HANDSHAKE_STALE and "allocates no DCU" in gone.message
    # A stale plugin report of our own kind is judged by its own clock alone.
    reported = with_allocatable(node_object("n1", handshake=T0), "8")
    assert judge(reported, late).failed["n1"].code == Code.NODE_HANDSHAKE_STALE


def test_an_allocatable_change_alone_refreshes_the_verdict():
    cache = ClusterCache(naming=DCU_NAMING)
    node = with_allocatable(node_object("n1", extra={DCU.node_handshake: encode_requesting(T0)}), "0")
    cache.apply_node(node, T0)
    assert cache.node("n1").handshake_fresh_until == (T0 + timedelta(seconds=60)).timestamp()
    node = with_allocatable(node_object("n1", extra={DCU.node_handshake: encode_requesting(T0)}), "2k")
    node["metadata"]["resourceVersion"] = "2"
    cache.apply_node(node, T0)
    assert cache.node("n1").handshake_fresh_until == float("inf")


def test_a_value_that_is_neither_report_nor_request_is_healthy_as_in_hami():
    """HAMi counts it healthy and re-stamps Requesting_<now>: alive for 60 s from when it
    appeared, then only while the node allocates DCUs."""
    deleted = {DCU.node_handshake: "Deleted_2026-03-01 12:00:00"}
    assert judge(node_object("n1", extra=deleted), T0 + timedelta(seconds=59)).chosen == "n1"
    stale = judge(node_object("n1", extra=deleted), T0 + timedelta(seconds=61)).failed["n1"]
    assert stale.code == Code.NODE_HANDSHAKE_STALE and "not a plugin report" in stale.message
    odd = with_allocatable(node_object("n1", extra={DCU.node_handshake: "restarting"}), "4")
    assert judge(odd, T0 + timedelta(seconds=600)).chosen == "n1"


def test_a_request_whose_time_cannot_be_read_counts_as_healthy_as_in_hami():
    seen = observe("Requesting_yesterday", None, T0)
    assert handshake_problem(seen, T0 + timedelta(days=1), key=DCU.node_handshake) is None


def test_go_time_string_from_hamis_plugin_is_read():
    seen = observe("Reported 2026-03-01 12:00:00.123456789 +0000 UTC m=+30.001", None, T0)
    assert handshake_problem(seen, T0 + timedelta(seconds=30), key=DCU.node_handshake) is None
    assert handshake_problem(seen, T0 + timedelta(seconds=70), key=DCU.node_handshake) is not None


def test_unreadable_reported_time_falls_back_to_when_the_value_changed():
    seen = observe("Reported sometime", None, T0)
    assert handshake_problem(seen, T0 + timedelta(seconds=30), key=DCU.node_handshake) is None
    assert handshake_problem(observe("Reported sometime", seen, T0 + timedelta(seconds=30)),
                             T0 + timedelta(seconds=61), key=DCU.node_handshake) is not None


def test_event_limiter_allows_changes_but_not_floods():
    clock = [0.0]
    limiter = EventLimiter(interval=60, min_interval=10, clock=lambda: clock[0])
    assert limiter.allow("p", "FilteringFailed", "a")
    assert not limiter.allow("p", "FilteringFailed", "b")  # within min_interval
    clock[0] = 11
    assert not limiter.allow("p", "FilteringFailed", "a")  # same message within interval
    assert limiter.allow("p", "FilteringFailed", "b")  # changed message after min_interval
    assert limiter.allow("q", "FilteringFailed", "b")  # other pod
    clock[0] = 80
    assert limiter.allow("p", "FilteringFailed", "b")


def test_per_card_metrics_are_labelled_node_card_model():
    cache = ClusterCache(naming=DCU_NAMING)
    cache.apply_node(node_object("n1"), T0)
    cache.apply_pod({"metadata": {"uid": "u", "name": "x", "namespace": "default", "resourceVersion": "3",
                                  "annotations": {DCU.pod_devices_allocated: "DCU-n1-S1,DCU,2000,60:;"}},
                     "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}})
    text = generate_latest(SchedulerMetrics(cache).registry).decode()
    assert 'hami_dcu_card_allocated_memory_mib{card="DCU-n1-S1",model="DCU-K100_AI",node="n1"} 2000.0' in text
    assert 'hami_dcu_card_allocated_cores_percent{card="DCU-n1-S1",model="DCU-K100_AI",node="n1"} 60.0' in text
    assert 'hami_dcu_card_allocated_slots{card="DCU-n1-S0",model="DCU-K100_AI",node="n1"} 0.0' in text
