"""Cache accounting: a hypothesis state machine over pod create / delete / phase changes /
terminating / filter assumptions, checked against a model after every step; plus the
degraded-node and relist rules."""

from collections import defaultdict
from datetime import UTC, datetime
from itertools import count

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, multiple, rule
from scheduler_helpers import node_object

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import encode_pod_devices
from hami_dcu.common.protocol.counting import StartOrder, Usage
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.common.protocol.requests import DcuRequest
from hami_dcu.scheduler.cache import ClusterCache, NeedlessLock
from hami_dcu.scheduler.fit import PodFit, Selection, fit_pod
from hami_dcu.scheduler.policy import CardPolicy

DCU = keys.DCU_NAMING  # the naming set these tests speak

NOW = datetime.now(UTC)
NODES = ["a", "b"]


def pod_object(uid: str, node: str, fit: PodFit, init: bool, phase: str = "Running", rv: int = 1) -> dict:
    spec = {"nodeName": node, "containers": [{"name": "main"}]}
    if init:
        spec["initContainers"] = [{"name": "init"}]
    return {
        "metadata": {"uid": uid, "name": f"pod-{uid}", "namespace": "default", "resourceVersion": str(rv),
                     "annotations": {DCU.pod_devices_allocated: encode_pod_devices(fit.devices)}},
        "spec": spec,
        "status": {"phase": phase},
    }


class CacheMachine(RuleBasedStateMachine):
    pods = Bundle("pods")
    assumed = Bundle("assumed")

    def __init__(self) -> None:
        super().__init__()
        self.cache = ClusterCache(naming=DCU_NAMING)
        for name in NODES:
            self.cache.apply_node(node_object(name, count=2, memory=8000), NOW)
        self.holding: dict[str, tuple[str, dict[str, Usage]]] = {}  # the model: uid -> (node, held)
        self.objects: dict[str, dict] = {}
        self.ids = count()
        self.rv = count(2)

    def _fit(self, node: str, memory: int, cores: int, n: int, init: bool) -> PodFit | None:
        entry = self.cache.node(node)
        requests = [DcuRequest(1, memory, cores), DcuRequest(n, memory, cores)] if init else [
            DcuRequest(n, memory, cores)]
        names = ["init", "main"] if init else ["main"]
        result = fit_pod(entry.cards, entry.used, requests, names, StartOrder(1 if init else 0), Selection(DCU),
                         CardPolicy(("spread",)))
        return result if isinstance(result, PodFit) else None

    @rule(target=pods, node=st.sampled_from(NODES), memory=st.integers(1, 5000), cores=st.integers(0, 100),
          n=st.integers(1, 2), init=st.booleans())
    def create_running_pod(self, node, memory, cores, n, init):
        fit = self._fit(node, memory, cores, n, init)
        if fit is None:
            return multiple()
        uid = f"u{next(self.ids)}"
        obj = pod_object(uid, node, fit, init, rv=next(self.rv))
        self.cache.apply_pod(obj)
        self.objects[uid] = obj
        self.holding[uid] = (node, fit.held)
        return uid

    @rule(target=assumed, node=st.sampled_from(NODES), memory=st.integers(1, 5000), cores=st.integers(0, 100))
    def filter_assumes(self, node, memory, cores):
        fit = self._fit(node, memory, cores, 1, False)
        if fit is None:
            return multiple()
        uid = f"u{next(self.ids)}"
        self.cache.placements.reserve(uid, "default", f"pod-{uid}", node, fit, 0, now=0.0)
        self.holding[uid] = (node, fit.held)
        self.objects[uid] = pod_object(uid, node, fit, False, rv=next(self.rv))
        return uid

    @rule(target=pods, uid=consumes(assumed))
    def bind_lands(self, uid):
        obj = dict(self.objects[uid], metadata=dict(self.objects[uid]["metadata"], resourceVersion=str(next(self.rv))))
        self.cache.apply_pod(obj)  # the watch shows the allocation: it replaces the assumption
        return uid

    @rule(uid=consumes(assumed))
    def bind_fails(self, uid):
        self.cache.placements.forget(uid)
        del self.holding[uid]

    @rule(uid=consumes(assumed))
    def assumption_expires(self, uid):
        assumption = self.cache.placements.find(uid, "default", f"pod-{uid}")
        assert assumption is not None
        assumption.expires = 0.0
        self.cache.placements.expire(1.0)
        del self.holding[uid]

    @rule(uid=consumes(pods))
    def delete(self, uid):
        self.cache.delete_pod(self.objects[uid])
        del self.holding[uid]

    @rule(uid=consumes(pods), phase=st.sampled_from(["Succeeded", "Failed"]))
    def finishes(self, uid, phase):
        obj = self.objects[uid]
        self.cache.apply_pod(dict(obj, status={"phase": phase},
                                  metadata=dict(obj["metadata"], resourceVersion=str(next(self.rv)))))
        del self.holding[uid]

    @rule(uid=pods)
    def starts_terminating(self, uid):
        obj = self.objects[uid]
        meta = dict(obj["metadata"], deletionTimestamp="2026-01-01T00:00:00Z", resourceVersion=str(next(self.rv)))
        self.objects[uid] = dict(obj, metadata=meta)
        self.cache.apply_pod(self.objects[uid])  # still holds its share

    @rule()
    def relist(self):
        live = [self.objects[uid] for uid in self.holding if uid in self.cache.pods]
        self.cache.replace_pods(live)

    @invariant()
    def usage_matches_model_and_never_exceeds_capacity(self):
        expected: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for _node, held in self.holding.values():
            for card, share in held.items():
                expected[card][0] += share.slots
                expected[card][1] += share.memory
                expected[card][2] += share.cores
        for entry in self.cache.nodes():
            assert not entry.degraded
            for spec, used in zip(entry.cards, entry.used, strict=True):
                assert [used.slots, used.memory, used.cores] == expected[spec.id], spec.id
                assert used.slots <= spec.slots and used.memory <= spec.memory and used.cores <= spec.cores


CacheMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
TestCacheAccounting = CacheMachine.TestCase


def allocated_pod(uid: str, node: str, value: str, phase: str = "Running") -> dict:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "default", "resourceVersion": "5",
                         "annotations": {DCU.pod_devices_allocated: value}},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]}, "status": {"phase": phase}}


def test_an_unknown_card_degrades_that_pods_claim_not_the_node():
    """Issue 11, finding 3: a pod naming a card that does not exist made the whole node
    unusable. The card it names counts nowhere; what it holds of real cards still counts."""
    cache = ClusterCache(naming=DCU_NAMING)
    cache.apply_node(node_object("n1"), NOW)
    cache.apply_pod(allocated_pod("u1", "n1", "DCU-GONE,DCU,1000,10:DCU-n1-S0,DCU,2000,20:;"))
    entry = cache.node("n1")
    assert entry.degraded == []
    assert entry.ignored_claims == ["pod default/u1 holds card DCU-GONE that the node does not report"]
    assert [(u.slots, u.memory, u.cores) for u in entry.used] == [(1, 2000, 20), (0, 0, 0)]
    cache.delete_pod(allocated_pod("u1", "n1", ""))
    assert entry.ignored_claims == [] and entry.used[0].memory == 0


@pytest.mark.parametrize(("bound_to", "claimed"), [(None, "n1"), ("n2", "n1"), ("n1", "n2")],
                         ids=["never-bound", "bound-elsewhere", "claims-elsewhere"])
def test_an_allocation_counts_only_on_the_node_the_pod_is_bound_to(bound_to, claimed):
    """Issue 11, finding 3: a pod never scheduled, carrying -allocated and vgpu-node, reserved
    cards. A holding counts only where spec.nodeName and vgpu-node agree."""
    cache = ClusterCache(naming=DCU_NAMING)
    for name in ("n1", "n2"):
        cache.apply_node(node_object(name), NOW)
    pod = allocated_pod("u1", bound_to or "", "DCU-n1-S0,DCU,65520,100:;")
    pod["metadata"]["annotations"][keys.POD_NODE] = claimed
    if bound_to is None:
        del pod["spec"]["nodeName"]
    cache.apply_pod(pod)
    assert all(u.memory == 0 for entry in cache.nodes() for u in entry.used)
    assert "u1" not in cache.pods
    pod["spec"]["nodeName"] = pod["metadata"]["annotations"][keys.POD_NODE] = "n1"
    cache.apply_pod(pod)  # the same pod, bound where it claims: it holds
    assert cache.node("n1").used[0].memory == 65520


def test_unreadable_allocation_degrades_the_node():
    cache = ClusterCache(naming=DCU_NAMING)
    cache.apply_node(node_object("n1"), NOW)
    cache.apply_pod(allocated_pod("u1", "n1", "DCU-n1-S0,DCU,lots,10:;"))
    assert "unreadable hami.io/dcu-devices-allocated" in cache.node("n1").degraded[0]


def test_relist_drops_pods_whose_delete_was_missed_and_reports_orphaned_locks():
    cache = ClusterCache(naming=DCU_NAMING)
    node = node_object("n1", extra={keys.NODE_LOCK: "2026-01-01T00:00:00Z,default,gone"})
    cache.apply_node(node, NOW)
    cache.apply_pod(allocated_pod("u1", "n1", "DCU-n1-S0,DCU,1000,10:;"))
    assert cache.node("n1").used[0] == Usage(1, 1000, 10)
    cache.replace_pods([])
    assert cache.node("n1").used[0] == Usage()
    assert cache.take_needless_locks() == [
        NeedlessLock("n1", "2026-01-01T00:00:00Z,default,gone", "default/gone", "holder-gone")]
    assert cache.drift == {"missed-delete": 1}


def test_older_watch_event_after_a_list_does_not_undo_it():
    cache = ClusterCache(naming=DCU_NAMING)
    cache.apply_node(node_object("n1"), NOW)
    newer = allocated_pod("u1", "n1", "DCU-n1-S0,DCU,1000,10:;")
    newer["metadata"]["resourceVersion"] = "9"
    cache.apply_pod(newer)
    stale = allocated_pod("u1", "n1", "")
    stale["metadata"]["resourceVersion"] = "3"
    cache.apply_pod(stale)
    assert cache.node("n1").used[0] == Usage(1, 1000, 10)


def test_lock_holders_of_another_replica_settle_by_allocation_or_by_watch_progress():
    cache = ClusterCache(naming=DCU_NAMING)
    locked = node_object("n1", extra={keys.NODE_LOCK: "2026-01-01T00:00:00Z,default,other"})
    locked["metadata"]["resourceVersion"] = "10"
    cache.apply_node(locked, NOW)
    assert not cache.settled("n1")
    released = node_object("n1")
    released["metadata"]["resourceVersion"] = "12"
    cache.apply_node(released, NOW)
    assert not cache.settled("n1")  # the pod watch has not passed the release yet
    cache.pods_listed_at("12")
    assert cache.settled("n1")  # passed it without an allocation: that bind never happened
