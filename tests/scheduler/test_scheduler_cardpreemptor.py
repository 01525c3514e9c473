"""The extender's card preemption (scheduler/cardpreemptor.py): what it reads, when it acts,
whom it evicts, and that a budget refusing at the API stops it."""

import asyncio
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry
from scheduler_helpers import dcu_pod, node_object

from hami_dcu.common.io.kube import KubeError, NotFoundError, ObjectList
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cardpreemptor import CardPreemptor, PreemptorSettings
from hami_dcu.scheduler.filtering import Filter, FilterSettings, PodPlan, plan_pod

DCU = DCU_NAMING
NOW = datetime.now(UTC)
SETTINGS = FilterSettings(naming=DCU)
CLOCK = [100.0]  # the preemptor's monotonic clock, moved by the tests


STARTED = {"a1": 1, "a2": 2, "b1": 3, "b2": 4, "b3": 5}  # seconds past 10:00: b3 started last


def _held(name: str, card: int, memory: int, priority: int = 10, labels: dict | None = None) -> dict:
    return {"metadata": {"uid": name, "name": name, "namespace": "team", "resourceVersion": "5",
                         "labels": labels or {},
                         "annotations": {DCU.pod_devices_allocated: f"DCU-n1-S{card},DCU,{memory},10:;"}},
            "spec": {"nodeName": "n1", "priority": priority, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running", "startTime": f"2026-11-27T10:00:0{STARTED[name]}Z"}}


class FakeKube:
    def __init__(self, pods: list[dict], budgets: list[dict] | None = None, refuse: set[str] | None = None) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.budgets = budgets or []
        self.refuse = refuse or set()
        self.evicted: list[str] = []
        self.lists: list[str] = []

    async def get_pod(self, namespace: str, name: str) -> dict:
        if name not in self.pods:
            raise NotFoundError(404, "NotFound", name)
        return self.pods[name]

    async def list_pods(self, namespace=None, field_selector=None, label_selector=None) -> ObjectList:
        self.lists.append(field_selector or "")
        node = (field_selector or "").split("=", 1)[1]
        return ObjectList([p for p in self.pods.values() if p["spec"].get("nodeName") == node], "9")

    async def list_disruption_budgets(self, namespace: str) -> ObjectList:
        return ObjectList([b for b in self.budgets if b["metadata"]["namespace"] == namespace], "9")

    async def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        if name in self.refuse:
            raise KubeError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
        assert self.pods[name]["metadata"]["uid"] == uid
        self.evicted.append(name)


def _urgent(memory: int = 40000, priority: int = 1000, **spec) -> dict:
    pod = dcu_pod("urgent", memory=memory, cores=10, uid="urgent-uid")
    pod["metadata"]["namespace"] = "team"
    pod["spec"].update({"priority": priority, **spec})
    return pod


def _setup(pods: list[dict], budgets: list[dict] | None = None, refuse: set[str] | None = None,
           urgent: dict | None = None):
    cache = ClusterCache(naming=DCU)
    cache.apply_node(node_object("n1", count=2), NOW)
    for pod in pods:
        cache.apply_pod(pod)
    preemptor_pod = urgent or _urgent()
    kube = FakeKube([*pods, preemptor_pod], budgets, refuse)
    events: list[tuple[str, str, str]] = []

    async def post(regarding, reason, message, event_type):
        events.append((regarding["metadata"]["name"], reason, message))

    async def no_wait(_seconds: float) -> None:
        return None

    preemptor = CardPreemptor(kube, cache, Filter(cache, SETTINGS), PreemptorSettings(), post, CollectorRegistry(),
                              lambda: NOW, no_wait, lambda: CLOCK[0])
    plan = plan_pod(preemptor_pod, SETTINGS)
    assert isinstance(plan, PodPlan)
    return preemptor, kube, events, preemptor_pod, plan


# Card 0: a1 30,000 + a2 25,520 MiB; card 1: b1, b2 20,000 and b3 15,520 (10,000 MiB free on each).
def _shares(**overrides) -> list[dict]:
    spec = {"a1": (0, 30000), "a2": (0, 25520), "b1": (1, 20000), "b2": (1, 20000), "b3": (1, 15520)}
    return [_held(name, card, memory, **overrides.get(name, {})) for name, (card, memory) in spec.items()]


async def _run(preemptor: CardPreemptor, pod: dict, plan: PodPlan) -> None:
    preemptor.consider(pod, plan)
    await asyncio.gather(*preemptor._running.values())


async def test_evicts_the_fewest_pods_of_one_card_and_says_so():
    preemptor, kube, events, pod, plan = _setup(_shares())
    await _run(preemptor, pod, plan)
    assert kube.evicted == ["a1"]
    assert ("a1", "DCUPreempted") in {(name, reason) for name, reason, _ in events}
    told = [message for name, reason, message in events if name == "urgent"]
    assert told and "node n1 card DCU-n1-S0" in told[0] and "team/a1" in told[0]
    assert preemptor.attempts.labels("evicted")._value.get() == 1


async def test_a_pod_no_eviction_helps_evicts_nobody():
    preemptor, kube, events, pod, plan = _setup(_shares(), urgent=_urgent(memory=70000))
    await _run(preemptor, pod, plan)
    assert kube.evicted == [] and events == []
    assert preemptor.attempts.labels("no-victims")._value.get() == 1


async def test_a_budget_protected_holder_is_spared_when_another_choice_exists():
    budget = {"metadata": {"namespace": "team", "name": "keep-a1"},
              "spec": {"selector": {"matchLabels": {"app": "a1"}}}, "status": {"disruptionsAllowed": 0}}
    preemptor, kube, _, pod, plan = _setup(_shares(a1={"labels": {"app": "a1"}}), [budget])
    await _run(preemptor, pod, plan)
    assert sorted(kube.evicted) == ["b2", "b3"]


async def test_an_eviction_a_budget_refuses_stops_the_rest():
    preemptor, kube, _, pod, plan = _setup(_shares(a1={"priority": 5000}), refuse={"b3"})
    await _run(preemptor, pod, plan)
    assert kube.evicted == []  # b3 (the latest started) is asked first and refused: b2 stays too
    assert preemptor.attempts.labels("failed")._value.get() == 1


@pytest.mark.parametrize("change, outcome", [
    ({"status": {"nominatedNodeName": "n1"}}, "nominated"),
    ({"spec": {"nodeName": "n1"}}, "skipped"),
])
async def test_a_pod_kube_scheduler_nominated_or_bound_meanwhile_is_left_alone(change, outcome):
    preemptor, kube, _, pod, plan = _setup(_shares())
    for part, value in change.items():
        kube.pods["urgent"].setdefault(part, {}).update(value)
    await _run(preemptor, pod, plan)
    assert kube.evicted == []
    assert preemptor.attempts.labels(outcome)._value.get() == 1


async def test_only_pods_that_may_preempt_are_considered():
    for urgent in (_urgent(priority=0), _urgent(preemptionPolicy="Never")):
        preemptor, kube, _, pod, plan = _setup(_shares(), urgent=urgent)
        preemptor.consider(pod, plan)
        assert preemptor._running == {} and kube.lists == []


async def test_not_again_while_its_victims_still_hold_the_card():
    preemptor, kube, _, pod, plan = _setup(_shares())
    await _run(preemptor, pod, plan)
    assert kube.evicted == ["a1"]
    preemptor.consider(pod, plan)  # a1 terminating: still in the cache
    assert preemptor._running == {}
    preemptor.cache.delete_pod(kube.pods["a1"])
    preemptor.consider(pod, plan)  # gone: a new attempt may run
    assert "urgent-uid" in preemptor._running
    await asyncio.gather(*preemptor._running.values())


async def test_after_an_attempt_that_evicted_nobody_it_rests():
    preemptor, _kube, _, pod, plan = _setup(_shares(), urgent=_urgent(memory=70000))
    await _run(preemptor, pod, plan)
    assert preemptor.attempts.labels("no-victims")._value.get() == 1
    preemptor.consider(pod, plan)  # kube-scheduler's retry a few seconds later
    assert preemptor._running == {}
    CLOCK[0] += PreemptorSettings().retry_seconds + 1
    await _run(preemptor, pod, plan)
    assert preemptor.attempts.labels("no-victims")._value.get() == 2
