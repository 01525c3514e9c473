"""The cache's seam (cache.py, placements.py, nodetable.py) and /filter's declared steps
(filtersteps.py): what the binder and the filter may rely on when they ask the cache."""

from __future__ import annotations

from datetime import UTC, datetime

from scheduler_helpers import dcu_pod, dcu_settings, filter_args, node_object

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, encode_pod_devices
from hami_dcu.common.protocol.counting import Usage
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler import filtersteps, nodetable
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.extender import parse_filter_args
from hami_dcu.scheduler.filtering import FilterSettings
from hami_dcu.scheduler.fit import PodFit
from hami_dcu.scheduler.service import SchedulerService, ServiceSettings

DCU = keys.DCU_NAMING
NOW = datetime.now(UTC)


def cache_with(*names: str) -> ClusterCache:
    cache = ClusterCache(assume_ttl=10.0, bound_ttl=100.0, naming=DCU_NAMING)
    for name in names:
        cache.apply_node(node_object(name), NOW)
    return cache


def fit_on(cache: ClusterCache, node: str, memory: int, card: int = 0) -> PodFit:
    """A one-container placement of `memory` MiB and 10% on the node's card `card`."""
    entry = cache.node(node)
    assert entry is not None
    card_id = entry.cards[card].id
    return PodFit(devices=[[ContainerDevice(card_id, "DCU", memory, 10)]],
                  held={card_id: Usage(1, memory, 10)})


def used_memory(cache: ClusterCache, node: str) -> list[int]:
    entry = cache.node(node)
    assert entry is not None
    return [u.memory for u in entry.used]


def test_a_bind_holding_a_superseded_placement_can_neither_confirm_nor_drop_the_new_one():
    """A newer /filter for the same pod replaces the placement an older bind carries: the
    old object is no longer current, and confirming or withdrawing it touches nothing."""
    cache = cache_with("n1")
    old = cache.placements.reserve("u1", "default", "p", "n1", fit_on(cache, "n1", 1000), 0, now=0.0)
    new = cache.placements.reserve("u1", "default", "p", "n1", fit_on(cache, "n1", 3000, card=1), 0, now=1.0)
    assert not cache.placements.is_current(old) and cache.placements.is_current(new)
    cache.placements.confirm(old, now=2.0)
    cache.placements.withdraw(old)
    assert cache.placements.find("u1", "default", "p") is new and not new.bound
    assert used_memory(cache, "n1") == [0, 3000]  # only the new choice counts, once


def test_withdraw_drops_an_unbound_placement_and_keeps_a_confirmed_one():
    cache = cache_with("n1")
    failed = cache.placements.reserve("u1", "default", "a", "n1", fit_on(cache, "n1", 1000), 0, now=0.0)
    bound = cache.placements.reserve("u2", "default", "b", "n1", fit_on(cache, "n1", 2000), 0, now=0.0)
    cache.placements.confirm(bound, now=5.0)
    assert bound.bound and bound.expires == 105.0  # kept bound_ttl longer, for the watch to show it
    cache.placements.withdraw(failed)
    cache.placements.withdraw(bound)
    assert cache.placements.all() == [bound]
    assert used_memory(cache, "n1") == [2000, 0]
    assert cache.bound_node("u2", "default", "b") == "n1"
    assert cache.bound_node(None, "default", "b") == "n1"  # known by name too
    assert cache.bound_node("u1", "default", "a") is None


def test_a_confirmed_placement_stops_saying_bound_once_it_expires():
    cache = cache_with("n1")
    bound = cache.placements.reserve("u1", "default", "p", "n1", fit_on(cache, "n1", 1000), 0, now=0.0)
    cache.placements.confirm(bound, now=0.0)
    assert cache.placements.expire(99.0) == 0 and cache.bound_node("u1", "default", "p") == "n1"
    assert cache.placements.expire(100.0) == 1
    assert cache.bound_node("u1", "default", "p") is None and used_memory(cache, "n1") == [0, 0]


def test_the_pods_own_allocation_replaces_its_placement_and_forgetting_never_frees_it():
    cache = cache_with("n1")
    fit = fit_on(cache, "n1", 1000)
    cache.placements.reserve("u1", "default", "p", "n1", fit, 0, now=0.0)
    cache.apply_pod({"metadata": {"uid": "u1", "name": "p", "namespace": "default", "resourceVersion": "5",
                                  "annotations": {DCU.pod_devices_allocated: encode_pod_devices(fit.devices)}},
                     "spec": {"nodeName": "n1", "containers": [{"name": "main"}]}, "status": {"phase": "Running"}})
    assert cache.placements.all() == [] and used_memory(cache, "n1") == [1000, 0]  # counted once
    cache.placements.forget("u1")  # a bind failing late forgets its placement, not the pod
    assert used_memory(cache, "n1") == [1000, 0] and "u1" in cache.pods


def test_the_node_view_is_read_through_methods_and_unknown_nodes_are_none():
    cache = cache_with("n1", "n2")
    assert cache.node("nope") is None
    assert sorted(cache.node_names()) == ["n1", "n2"]
    listed = cache.nodes()
    listed.clear()  # the caller's list, not the cache's table
    assert sorted(e.name for e in cache.nodes()) == ["n1", "n2"]
    drift = cache.drift
    drift["invented"] = 1  # a copy too
    assert cache.drift == {}


def test_a_node_read_from_the_api_settles_its_earlier_lock_holders():
    """What a bind does when the watches lag: it lists the node's pods and takes them in;
    an earlier holder (another replica's pod) that holds nothing there is settled then."""
    cache = ClusterCache(naming=DCU_NAMING)
    locked = node_object("n1", extra={keys.NODE_LOCK: "2026-01-01T00:00:00Z,default,other"})
    cache.apply_node(locked, NOW)
    assert not cache.settled("n1")
    cache.take_listed_pods("n1", [])
    assert cache.settled("n1")


def test_a_reader_behind_the_cut_of_the_change_log_starts_over(monkeypatch):
    monkeypatch.setattr(nodetable, "_CHANGES_KEPT", 4)
    log = nodetable.ChangeLog()
    assert log.since(-1) is None  # a reader that has read nothing rebuilds
    log.append("a")
    position = log.end
    log.append("b")
    assert log.since(position) == {"b"}
    for name in "cdef":
        log.append(name)
    assert log.end == 6
    assert log.since(position) is None  # "b" was cut from the front: rebuild
    assert log.since(log.end - 1) == {"f"}


def test_filter_steps_are_declared_in_their_order():
    assert [step.__name__ for step in filtersteps.STEPS] == [
        "left_to_volcano", "refused_by_admission", "request_invalid", "asks_no_dcu", "already_bound"]


def filter_outcomes(service: SchedulerService) -> dict[str, float]:
    """How many /filter answers of each outcome hami_dcu_scheduler_filter_seconds counted."""
    return {sample.labels["result"]: sample.value for family in service.metrics.registry.collect()
            if family.name == "hami_dcu_scheduler_filter_seconds"
            for sample in family.samples if sample.name.endswith("_count")}


def filter_once(service: SchedulerService, pod: dict, names: list[str]) -> tuple[str, dict]:
    """The outcome label this /filter was counted under, and its answer."""
    before = filter_outcomes(service)
    result = service.filter_pod(parse_filter_args(filter_args(pod, names)))
    after = filter_outcomes(service)
    [outcome] = [label for label, count in after.items() if count != before.get(label, 0)]
    return outcome, result


async def test_the_first_step_that_answers_stands():
    """A Volcano pod whose request cannot be honoured (weights HAMi refuses) is Volcano's (the
    first step), never judged as an invalid request, and nothing is placed for it."""
    service = SchedulerService(None, ServiceSettings(filter=FilterSettings(naming=DCU, volcano_scheduler="volcano")))
    service.cache.apply_node(node_object("n1"), NOW)
    pod = dcu_pod("v", uid="u1", scheduler="volcano", annotations={keys.DEVICE_SCORING_WEIGHTS: "slot=1,core=1"})
    outcome, result = filter_once(service, pod, ["n1"])
    assert outcome == "volcano" and "Volcano places this pod" in result["FailedAndUnresolvableNodes"]["n1"]
    assert service.cache.placements.all() == []
    pod["spec"]["schedulerName"] = keys.DEFAULT_SCHEDULER_NAME
    outcome, result = filter_once(service, pod, ["n1"])
    assert outcome == "invalid" and "memory missing" in result["FailedAndUnresolvableNodes"]["n1"]
    assert service.cache.placements.all() == []


async def test_a_placed_pod_is_reserved_and_a_bound_one_is_answered_before_placing():
    service = SchedulerService(None, dcu_settings())
    service.cache.apply_node(node_object("n1"), NOW)
    pod = dcu_pod("p", uid="u1")
    outcome, result = filter_once(service, pod, ["n1"])
    assert outcome == "ok" and result["NodeNames"] == ["n1"]
    [placement] = service.cache.placements.all()
    service.cache.placements.confirm(placement, service.monotonic())
    outcome, result = filter_once(service, pod, ["n1"])
    assert outcome == "already-bound" and result["NodeNames"] == []
    assert result["FailedNodes"] == {"n1": "pod already bound to node n1"}
    assert service.cache.placements.all() == [placement]  # what it holds stays counted as it is


async def test_a_pod_asking_no_dcu_passes_everywhere_unplaced():
    service = SchedulerService(None, dcu_settings())
    pod = {"metadata": {"name": "cpu", "namespace": "default", "uid": "u9"}, "spec": {"containers": [{"name": "c"}]}}
    outcome, result = filter_once(service, pod, ["n1", "n2"])
    assert outcome == "passthrough" and result["NodeNames"] == ["n1", "n2"]
    assert service.cache.placements.all() == []
