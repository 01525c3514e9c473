"""Preemption on card memory and cores (scheduler/cardvictims.py): the fewest lower-priority
pods on one card whose removal lets the preemptor fit, budgets respected where a choice exists,
nobody when no eviction helps."""

from datetime import UTC, datetime

from scheduler_helpers import dcu_pod, node_object

from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cardvictims import Budget, Holder, budget_violations, choose, selects
from hami_dcu.scheduler.filtering import FilterSettings, PodPlan, plan_pod
from hami_dcu.scheduler.fit import PodFit

DCU = DCU_NAMING
NOW = datetime.now(UTC)
CARD_MIB = 65520
# Two cards of 65,520 MiB, each with a free slot and 10,000 MiB free: card 0 holds a1 and a2,
# card 1 holds b1, b2 and b3. A 40,000 MiB pod fits on neither; node-wide 20,000 MiB are free.
SHARES = {"a1": (0, 30000), "a2": (0, 25520), "b1": (1, 20000), "b2": (1, 20000), "b3": (1, 15520)}
STARTED = {"a1": "2026-11-27T10:00:01Z", "a2": "2026-11-27T10:00:02Z", "b1": "2026-11-27T10:00:03Z",
           "b2": "2026-11-27T10:00:04Z", "b3": "2026-11-27T10:00:05Z"}


def _held(name: str, card: int, memory: int) -> dict:
    return {"metadata": {"uid": name, "name": name, "namespace": "team", "resourceVersion": "5",
                         "annotations": {DCU.pod_devices_allocated: f"DCU-n1-S{card},DCU,{memory},10:;"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


def _node() -> ClusterCache:
    cache = ClusterCache(naming=DCU)
    cache.apply_node(node_object("n1", count=2, memory=CARD_MIB), NOW)
    for name, (card, memory) in SHARES.items():
        cache.apply_pod(_held(name, card, memory))
    return cache


def _holders(priorities: dict[str, int] | None = None, labels: dict[str, dict[str, str]] | None = None
             ) -> list[Holder]:
    return [Holder(name, "team", name, (priorities or {}).get(name, 10), STARTED[name], (labels or {}).get(name, {}))
            for name in SHARES]


def _plan(memory: int) -> PodPlan:
    found = plan_pod(dcu_pod("urgent", memory=memory, cores=10), FilterSettings(naming=DCU))
    assert found is not None
    return found


def _names(choice) -> list[str]:
    return sorted(v.name for v in choice.victims)


def test_the_40_gib_pod_evicts_the_one_share_on_one_card_that_frees_enough():
    cache = _node()
    entry = cache.node("n1")
    assert entry is not None
    plan = _plan(40000)
    # Not a fit today, though every card has a free slot and the node 20,000 MiB free.
    assert not isinstance(plan.fit(entry.cards, entry.used), PodFit)
    choice = choose(plan, [(entry, _holders())], priority=1000, budgets=[])
    assert choice is not None
    assert (choice.node, choice.card, _names(choice)) == ("n1", "DCU-n1-S0", ["a1"])


def test_victims_are_never_of_equal_or_higher_priority():
    entry = _node().node("n1")
    assert entry is not None
    # a1 outranks the preemptor and a2 alone frees too little: card 1's two pods go instead.
    choice = choose(_plan(40000), [(entry, _holders({"a1": 2000}))], priority=1000, budgets=[])
    assert choice is not None
    assert (choice.card, _names(choice)) == ("DCU-n1-S1", ["b2", "b3"])
    # Equal priority is not lower: nobody on card 0 may go.
    choice = choose(_plan(40000), [(entry, _holders({"a1": 1000}))], priority=1000, budgets=[])
    assert choice is not None and choice.card == "DCU-n1-S1"


def test_a_pod_no_eviction_helps_evicts_nobody():
    entry = _node().node("n1")
    assert entry is not None
    assert choose(_plan(70000), [(entry, _holders())], priority=1000, budgets=[]) is None
    # Every holder outranks it: nothing to choose either.
    higher = {name: 5000 for name in SHARES}
    assert choose(_plan(40000), [(entry, _holders(higher))], priority=1000, budgets=[]) is None


def test_a_budget_protected_holder_is_spared_when_another_choice_exists():
    entry = _node().node("n1")
    assert entry is not None
    protect = Budget("team", "keep-a1", {"matchLabels": {"app": "a1"}}, allowed=0)
    holders = _holders(labels={"a1": {"app": "a1"}})
    choice = choose(_plan(40000), [(entry, holders)], priority=1000, budgets=[protect])
    assert choice is not None
    assert (choice.card, choice.budget_violations) == ("DCU-n1-S1", 0)
    assert "a1" not in _names(choice)
    # The budget allowing one disruption: a1 alone is the cheapest again.
    allowing = Budget("team", "keep-a1", {"matchLabels": {"app": "a1"}}, allowed=1)
    choice = choose(_plan(40000), [(entry, holders)], priority=1000, budgets=[allowing])
    assert choice is not None and _names(choice) == ["a1"]


def test_when_every_choice_breaks_a_budget_the_fewest_breaks_win():
    entry = _node().node("n1")
    assert entry is not None
    everyone = Budget("team", "all", {}, allowed=0)
    choice = choose(_plan(40000), [(entry, _holders())], priority=1000, budgets=[everyone])
    assert choice is not None
    assert (_names(choice), choice.budget_violations) == (["a1"], 1)


def test_the_latest_started_of_equals_goes_first():
    entry = _node().node("n1")
    assert entry is not None
    # 25,000 MiB: on card 1 any one of b1/b2 frees enough; b2 started later, so b2 goes.
    choice = choose(_plan(29000), [(entry, _holders({"a1": 5000, "a2": 5000}))], priority=1000, budgets=[])
    assert choice is not None and _names(choice) == ["b2"]


def test_budget_counting_and_selectors():
    a = Holder("u1", "team", "a", 0, "", {"app": "x", "tier": "web"})
    b = Holder("u2", "team", "b", 0, "", {"app": "x"})
    other = Holder("u3", "elsewhere", "c", 0, "", {"app": "x"})
    budget = Budget("team", "x", {"matchLabels": {"app": "x"}}, allowed=1)
    assert budget_violations([a, b, other], [budget]) == 1
    assert selects({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]}, a.labels)
    assert not selects({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]}, b.labels)
    assert selects({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, b.labels)
    assert not selects({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, b.labels)
    assert selects({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}, a.labels)
    assert not selects({"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]}, a.labels)
    assert selects({}, a.labels) and not selects(None, a.labels)
