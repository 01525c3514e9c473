"""HAMi v2.10's card order for DCU pods, as vectors: which card HAMi tries first, then next,
for every card policy with and without `nvidia.com/numa-bind`, and across a pod's containers.

Where the order comes from in HAMi v2.10.0:
* pkg/scheduler/policy/gpu_policy.go, `DeviceUsageList.Less`: a single word sorts ascending by
  binpack (score asc, NUMA asc), spread and anything else (score desc, NUMA asc) or mutex
  (slots in use desc, NUMA asc; it never looks at NumaBind). With NumaBind, binpack sorts
  NUMA *desc* then score asc, every other word but mutex NUMA asc then score desc. No index
  key: equal cards keep the order the list had.
* the same file, `lessByChain` (a value with a comma, or "numa" alone): the keys binpack (score
  asc), spread (score desc), numa (NUMA asc) in the order written, repeats dropped, spread when
  no word is a key ("mutex,topology-aware"); NumaBind moves numa to the front; then index asc.
* pkg/scheduler/score.go, `fitInDevices`: scores the cards and `sort.Sort`s the node's list in
  place once per container; `scoreNode` fits each init container on a fresh copy of the node
  (cards in registration order) and the app containers one after another on one copy, so an
  app container's sort starts from the order the previous one left. `sort.Sort` is Go's
  pdqsort, an insertion sort (stable) up to 12 cards: equal cards keep that order.
* pkg/device/hygon/device.go, `DCUDevices.Fit`: walks the sorted list backwards
  (`slices.Backward`), so the card that sorts last is tried first.

Every vector below is what HAMi v2.10.0's own `fitInDevices` and `scoreNode` answered for
these cards (a throwaway Go test run against the extracted source; nothing of HAMi is kept
here), not our reading of its code.
"""

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.counting import StartOrder, Usage
from hami_dcu.common.protocol.requests import DcuRequest
from hami_dcu.scheduler import policy
from hami_dcu.scheduler.fit import CardSpec, PodFit, Selection, fit_pod

# Seven cards, registered in index order: (NUMA node, what is on it). c0/c3 and c4/c5 tie on
# score across NUMA nodes, c2/c6 tie on score and NUMA node, c1 ties with them on score only.
ONE = Usage(1, 8000, 20)
TWO = Usage(2, 30000, 50)
SEVEN = [(0, ONE), (1, Usage()), (0, Usage()), (1, ONE), (0, TWO), (1, TWO), (0, Usage())]

SPREAD = [1, 6, 2, 3, 0, 5, 4]
SPREAD_NUMA_BIND = [1, 3, 5, 6, 2, 0, 4]  # NUMA 1 first, least used first within it
BINPACK = [5, 4, 3, 0, 1, 6, 2]
BINPACK_NUMA_BIND = [4, 0, 6, 2, 5, 3, 1]  # NUMA 0 first (HAMi sorts NUMA desc), fullest first
NUMA_THEN_BINPACK = [5, 3, 1, 4, 0, 6, 2]
NUMA_THEN_INDEX = [5, 3, 1, 6, 4, 2, 0]
SPREAD_THEN_INDEX = [6, 2, 1, 3, 0, 5, 4]  # a chain: no NUMA key, the index breaks ties
BINPACK_THEN_INDEX = [5, 4, 3, 0, 6, 2, 1]

# (gpu-scheduler-policy, numa-bind) -> HAMi's walk: card indexes in the order Fit tries them.
WALKS = {
    ("spread", False): SPREAD,
    ("spread", True): SPREAD_NUMA_BIND,
    ("binpack", False): BINPACK,
    ("binpack", True): BINPACK_NUMA_BIND,
    ("mutex", False): SPREAD,  # no share on c1, c2, c6: slots in use order like spread's score here
    ("mutex", True): SPREAD,  # mutex never reads NumaBind
    ("topology-aware", False): SPREAD,
    ("topology-aware", True): SPREAD_NUMA_BIND,
    ("numa", False): NUMA_THEN_INDEX,
    ("numa", True): NUMA_THEN_INDEX,
    ("binpack,numa", False): BINPACK,
    ("binpack,numa", True): NUMA_THEN_BINPACK,  # NUMA asc in a chain, unlike binpack alone
    ("numa,binpack", False): NUMA_THEN_BINPACK,
    ("numa,binpack", True): NUMA_THEN_BINPACK,
    ("spread,numa", False): SPREAD,
    ("spread,numa", True): SPREAD_NUMA_BIND,
    ("numa,spread", False): SPREAD_NUMA_BIND,
    ("numa,spread", True): SPREAD_NUMA_BIND,
    ("binpack,spread", False): BINPACK_THEN_INDEX,
    ("binpack,spread", True): NUMA_THEN_BINPACK,
    ("spread,binpack", False): SPREAD_THEN_INDEX,
    ("spread,binpack", True): SPREAD_NUMA_BIND,
    ("mutex,topology-aware", False): SPREAD_THEN_INDEX,
    ("mutex,topology-aware", True): SPREAD_NUMA_BIND,
    ("topology-aware,mutex", False): SPREAD_THEN_INDEX,
    ("mutex,binpack", False): BINPACK_THEN_INDEX,
    ("mutex,binpack", True): NUMA_THEN_BINPACK,
    ("spread,mutex", False): SPREAD_THEN_INDEX,
    ("spread,mutex", True): SPREAD_NUMA_BIND,
    ("topology-aware,numa", False): NUMA_THEN_INDEX,
    ("numa,numa", True): NUMA_THEN_INDEX,
}

# The first card HAMi takes for a one-card share under each policy (the mutex ones skip busy cards).
FIRST = {
    ("spread", False): 1, ("spread", True): 1,
    ("binpack", False): 5, ("binpack", True): 4,
    ("mutex", False): 1, ("mutex", True): 1,
    ("numa", False): 5,
    ("binpack,numa", True): 5,
    ("mutex,topology-aware", False): 6, ("mutex,topology-aware", True): 1,
    ("mutex,binpack", False): 6, ("mutex,binpack", True): 1,
}

SHARE = DcuRequest(count=1, memory_mib=8000, cores=20)


def card(index: int, numa: int, slots: int = 4) -> CardSpec:
    return CardSpec(id=f"c{index}", index=index, model="DCU-K100_AI", slots=slots, memory=65520, cores=100, numa=numa)


def pod_policy(value: str, numa_bind: bool) -> policy.CardPolicy:
    annotations = {keys.DEVICE_SCHEDULER_POLICY: value}
    if numa_bind:
        annotations[keys.NUMA_BIND] = "true"
    _, card_policy = policy.pod_policies(annotations, "binpack", policy.CardPolicy(("spread",)))
    assert card_policy.words == tuple(w.strip() for w in value.split(","))
    return card_policy


def walk(cards: list[tuple[int, Usage]], card_policy: policy.CardPolicy) -> list[int]:
    states = [policy.CardState(policy.card_score(u.slots, 4, u.memory, 65520, u.cores, 100), u.slots, numa, i)
              for i, (numa, u) in enumerate(cards)]
    return policy.card_order(states, card_policy)


@pytest.mark.parametrize(("value", "numa_bind"), list(WALKS))
def test_the_walk_is_hamis(value, numa_bind):
    """gpu_policy.go Less/lessByChain sorted, hygon Fit walking from the end."""
    assert walk(SEVEN, pod_policy(value, numa_bind)) == WALKS[value, numa_bind]


@pytest.mark.parametrize(("value", "numa_bind"), list(FIRST))
def test_a_one_card_share_lands_where_hami_puts_it(value, numa_bind):
    cards = [card(i, numa) for i, (numa, _) in enumerate(SEVEN)]
    used = [u for _, u in SEVEN]
    result = fit_pod(cards, used, [SHARE], ["main"], StartOrder(), Selection(keys.DCU_NAMING),
                     pod_policy(value, numa_bind))
    assert isinstance(result, PodFit), result
    assert [d.uuid for d in result.devices[0]] == [f"c{FIRST[value, numa_bind]}"]


def test_binpack_with_numa_bind_tries_the_lowest_numa_node_first():
    """The case issue 33 names: HAMi's Less sorts NUMA desc for binpack with NumaBind, so its
    backward walk reaches NUMA 0 first; a chain with binpack keeps NUMA asc (NUMA 1 first)."""
    cards = [(1, TWO), (0, Usage()), (1, Usage()), (0, ONE)]
    assert walk(cards, pod_policy("binpack", True)) == [3, 1, 0, 2]
    assert walk(cards, pod_policy("binpack,numa", True)) == [0, 2, 3, 1]
    assert walk(cards, pod_policy("spread", True)) == [2, 0, 1, 3]


# --- across a pod's containers: each sort starts from the order the previous one left --------

def place(numas: list[int], used: list[Usage], value: str, init: int, app: int) -> list[str]:
    """HAMi's scoreNode for a pod of `init` + `app` one-card 8000 MiB / 20 % containers on
    8-slot cards."""
    cards = [card(i, numa, slots=8) for i, numa in enumerate(numas)]
    card_policy = policy.parse_card_policy(value)
    assert card_policy is not None
    names = [f"k{i}" for i in range(init + app)]
    result = fit_pod(cards, used, [SHARE] * (init + app), names, StartOrder(init), Selection(keys.DCU_NAMING),
                     card_policy)
    assert isinstance(result, PodFit), result
    return [container[0].uuid for container in result.devices]


@pytest.mark.parametrize(("value", "init", "app", "expected"), [
    # 3 idle cards: after three containers all tie again, and stay in the order the third
    # container's sort left them (c2, c1, c0 from the end), not in index order.
    ("spread", 0, 4, ["c2", "c1", "c0", "c0"]),
    ("spread", 0, 6, ["c2", "c1", "c0", "c0", "c1", "c2"]),
    # a chain ends on the index: no memory of the previous order
    ("spread,numa", 0, 4, ["c2", "c1", "c0", "c2"]),
    # every init container starts from a fresh copy of the node, in registration order
    ("spread", 3, 1, ["c2", "c2", "c2", "c2"]),
    ("binpack", 0, 3, ["c2", "c2", "c2"]),
])
def test_app_containers_sort_from_the_previous_containers_order(value, init, app, expected):
    assert place([0, 0, 0], [Usage()] * 3, value, init, app) == expected


def test_a_card_that_comes_to_tie_keeps_its_place_behind_the_one_it_caught_up_with():
    # c1 holds the same share the pod's containers ask for: the first takes idle c0, which then
    # ties with c1 but sorted after it, so HAMi tries c0 first again.
    assert place([0, 0], [Usage(), Usage(1, 8000, 20)], "spread", 0, 2) == ["c0", "c0"]


@pytest.mark.parametrize(("value", "expected"), [
    ("spread", ["c2", "c0", "c3", "c1", "c0"]),
    ("mutex", ["c2", "c0", "c3", "c1"]),
])
def test_numa_ties_across_containers(value, expected):
    numas = [1, 0, 1, 0]
    assert place(numas, [Usage()] * 4, value, 0, len(expected)) == expected
