"""Upstream Volcano v1.15.1's scheduler places DCU shares through hami-dcu's extender (issue 34,
item 2) on a real control plane: the chart with `volcano.extender.enabled` (Volcano mode: the
device plugins advertise the naming set's memory and cores in node status for Volcano's own
fit, hcumem/hcucores or dcumem/dcucores), vc-scheduler built from ../shared/peers with its
`extender` plugin pointed at the extender's Volcano verbs (the scheduler pod's address, port
volcano.extender.port, /volcano), ignorable false, in the layout under which its preemptable
and reclaimable answers count (last in the first tier; drf's preemptable and proportion's
reclaimable off) and with the preempt and reclaim actions on. Volcano keeps its gangs, queues
and binding; our extender decides the cards, writes the allocation on each pod in
allocateFunc, takes it back in deallocateFunc, and names the victims that free a card.

Two nodes of 2 mock cards each (65520 MiB, 100 percent of cores, 4 slots); the kubelet
stand-ins answer the pod resources API, so a gang's pods on one node all run. What the API
server stores is asserted.

1. A PodGroup (minMember 4) of 4 shares lands whole, each pod's allocation recorded, no card
   over its cores, no node lock: under naming hcu and naming dcu.
2. A gang that cannot fit whole (5 shares that each need most of a card, 4 cards): Volcano's
   own fit lets 3 per node through, our predicate stops the third; the session rolls the gang
   back every time: nothing bound, no annotation; then 4 of them land, so no slot was kept.
3. A whole card and shares in one gang: the whole card's card carries no share.
4. A gang spread over two nodes: 4 shares that take a card each land on both nodes, on 4
   distinct cards.
5. Two queues of weights 3 and 1 each submit 4 gangs of 4 quarter-card shares (32 for 16
   places): proportion's deserved share is 12 and 4 places, so 3 and 1 gangs land, whole.
6. Preemption in one queue: a higher-priority share that no card of node0 takes evicts the one
   lower-priority share whose card then takes it, not the lower-priority share of the other
   card (which Volcano's own order would evict first, for nothing), and lands on that card.
7. Reclaim: a share of an under-served queue takes the card of the one share of the
   over-served queue that frees a card, and lands there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.realcluster import volcano_peer as volcano
from e2e.realcluster.cluster import SYSTEM_NAMESPACE, RealCluster, unavailable
from e2e.realcluster.preemption import _priority_class
from e2e.realcluster.processes import wait_for
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import decode_pod_devices

_REASON = unavailable() or volcano.why_unavailable()
pytestmark = [pytest.mark.realcluster, pytest.mark.peer]
JSON = dict[str, Any]
PORT = 8446
NODES = ("node0", "node1")
CARD_MEMORY = 65520
# Volcano's actions with preempt and reclaim, in the order of its own documentation.
ACTIONS = "enqueue, allocate, preempt, reclaim, backfill"
# The module's cluster, by naming set: one at a time (pytest groups the tests by it).
HCU = pytest.mark.parametrize("world", ["hcu"], indirect=True)
BOTH = pytest.mark.parametrize("world", ["hcu", "dcu"], indirect=True)
LOWEST, LOW, MID, HIGH = "vc-dcu-lowest", "vc-dcu-low", "vc-dcu-mid", "vc-dcu-high"


class World:
    def __init__(self, cluster: RealCluster, scheduler: volcano.VolcanoScheduler) -> None:
        self.cluster, self.scheduler = cluster, scheduler
        self.kube, self.namespace = cluster.kube, cluster.namespace
        self.naming = cluster.naming
        self.groups: list[str] = []
        self.queues: list[str] = []

    def card(self, node: str, index: int) -> str:
        return self.cluster.cards[node][index].id_in(self.naming)

    def share(self, memory: int | None, cores: int) -> list[Ctr]:
        return [Ctr("main", 1, memory, cores, names=self.naming.resources)]

    def gang(self, group: str, members: list[list[Ctr]], queue: str = "default", min_member: int | None = None,
             priority_class: str | None = None, node: str | None = None,
             cards: list[str] | None = None, classes: list[str] | None = None) -> list[str]:
        """A PodGroup of `members` (minMember all of them unless given), each pod Volcano's to
        place; with `node` and `cards`, each pod pinned to that node and its card; `classes`:
        each pod's own priority class (else the group's)."""
        volcano.create_podgroup(self.kube, self.namespace, group, len(members) if min_member is None else min_member,
                                queue=queue, priority_class=priority_class)
        self.groups.append(group)
        names = []
        for i, containers in enumerate(members):
            annotations = {keys.USE_DCU_UUID: cards[i]} if cards else None
            pod = volcano.gang_member(pod_manifest(f"{group}-{i}", containers, annotations), group)
            if classes or priority_class is not None:
                pod["spec"]["priorityClassName"] = classes[i] if classes else priority_class
            if node is not None:
                pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            self.kube.create_pod(self.namespace, pod)
            names.append(pod["metadata"]["name"])
        return names

    def queue(self, name: str, weight: int, opened: bool = True) -> str:
        volcano.create_queue(self.kube, name, weight, opened=opened)
        self.queues.append(name)
        return name

    def pods(self, names: list[str]) -> dict[str, JSON]:
        return {n: self.kube.get_pod(self.namespace, n) for n in names}

    def bound(self, names: list[str]) -> bool:
        return all(p["spec"].get("nodeName") for p in self.pods(names).values())

    def running(self, names: list[str]) -> bool:
        return all((p.get("status") or {}).get("phase") == "Running" for p in self.pods(names).values())

    def gone(self, name: str) -> bool:
        return not any(p["metadata"]["name"] == name for p in self.kube.list_pods(namespace=self.namespace).items)

    def wait(self, what: str, check: Any, timeout: float = 120) -> None:
        try:
            wait_for(what, check, timeout, self.scheduler.processes)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.story()}") from None

    def wait_bound(self, names: list[str], what: str) -> dict[str, JSON]:
        self.wait(what, lambda: self.bound(names))
        return self.pods(names)

    def sessions(self, count: int) -> None:
        """Let Volcano run `count` more sessions (its log counts them: one `Open Session` each)."""
        before = self.scheduler.log_text().count("Open Session")
        wait_for(f"{count} Volcano sessions", lambda: self.scheduler.log_text().count("Open Session") >= before + count,
                 60, self.scheduler.processes)

    def clear(self) -> None:
        self.cluster.clear_pods()
        volcano.delete_made(self.kube, self.namespace, self.groups, self.queues)

    def story(self) -> str:
        return f"{self.cluster.diagnose()}\n--- vc-scheduler:\n{self.scheduler.log()}"

    def allocation(self, pod: JSON) -> dict[str, str]:
        annotations = pod["metadata"].get("annotations") or {}
        return {k: v for k, v in annotations.items() if k in keys.SCHEDULER_OWNED_POD_ANNOTATIONS}

    def held(self, pod: JSON) -> list[tuple[str, int, int]]:
        """(card, MiB, cores) of every share recorded in the pod's allocation."""
        value = self.allocation(pod)[self.naming.pod_devices_allocated]
        return [(d.uuid, d.usedmem, d.usedcores) for entry in decode_pod_devices(value) for d in entry]

    def assert_recorded(self, pods: dict[str, JSON]) -> Counter[str]:
        """Each pod's allocation is on the node it is bound to; no card is over its memory, its
        cores or its slots. The cores held per card."""
        cores: Counter[str] = Counter()
        memory: Counter[str] = Counter()
        slots: Counter[str] = Counter()
        for name, pod in pods.items():
            written = self.allocation(pod)
            assert written.get(keys.POD_NODE) == pod["spec"]["nodeName"], (name, written)
            assert written.get(self.naming.pod_devices_allocated), (name, written)
            for card, mib, used in self.held(pod):
                assert card.startswith(self.naming.id_prefix), card
                cores[card] += used
                memory[card] += mib
                slots[card] += 1
        assert all(used <= 100 for used in cores.values()), cores
        assert all(mib <= CARD_MEMORY for mib in memory.values()), memory
        assert all(count <= 4 for count in slots.values()), slots
        return cores

    def placed(self) -> dict[str, JSON]:
        """Every pod of the namespace bound to a node, by name."""
        return {p["metadata"]["name"]: p for p in self.kube.list_pods(namespace=self.namespace).items
                if p["spec"].get("nodeName")}


@pytest.fixture(scope="module")
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    if _REASON:
        pytest.skip(_REASON)
    naming = getattr(request, "param", "hcu")
    built = volcano.binary()
    values = {"naming": naming, "volcano": {"enabled": True, "extender": {"enabled": True, "port": PORT}}}
    nodes = {n: default_cards(n) for n in NODES}
    with RealCluster(nodes, namespace="volcano-dcu", values=values) as cluster:
        volcano.install_crds(cluster.kube, built)
        [extender] = cluster.kube.list_pods(namespace=SYSTEM_NAMESPACE,
                                            label_selector="app.kubernetes.io/component=scheduler").items
        url = f"http://{extender['status']['podIP']}:{PORT}{volcano.HAMI_DCU_PREFIX}"
        conf = volcano.scheduler_conf(url, verbs=volcano.HAMI_DCU_VERBS, actions=ACTIONS, http_timeout="5s",
                                      ignorable=False, evictions=True)
        scheduler = volcano.VolcanoScheduler(built, cluster.kubeconfig, cluster.workdir / "volcano", conf)
        try:
            scheduler.start(cluster.kube)
            world = World(cluster, scheduler)
            memory = cluster.naming.resources.memory
            wait_for(f"Volcano to see {memory} on both nodes", lambda: all(
                memory in (cluster.kube.get_node(n).get("status") or {}).get("allocatable", {}) for n in nodes), 60)
            for name, value in ((LOWEST, 5), (LOW, 10), (MID, 100), (HIGH, 1000)):
                _priority_class(cluster, name, value)
            yield world
        finally:
            scheduler.stop()


@pytest.fixture
def clean(world: World) -> Iterator[World]:
    try:
        yield world
    finally:
        world.clear()


@BOTH
def test_a_gang_of_four_shares_lands_whole_with_its_cards_recorded(clean: World) -> None:
    names = clean.gang("four", [clean.share(30000, 50) for _ in range(4)])
    pods = clean.wait_bound(names, "the gang of 4 bound by Volcano")
    clean.assert_recorded(pods)
    assert all(keys.NODE_LOCK not in (clean.kube.get_node(n)["metadata"].get("annotations") or {}) for n in NODES)
    clean.wait("the gang of 4 running", lambda: clean.running(names))


@HCU
def test_a_gang_that_cannot_fit_whole_leaves_nothing(clean: World) -> None:
    # 60 percent each: one per card, 4 cards for 5 members. Volcano's own sum (200 percent per
    # node) lets 3 per node through; our predicate stops the third on each.
    # In a queue of its own, closed once the gang was tried: each session writes its members'
    # allocations and removes them again, so only a gang left alone shows what is kept.
    tries = clean.queue("tries", 1)
    names = clean.gang("five", [clean.share(10000, 60) for _ in range(5)], queue=tries)
    clean.sessions(5)
    volcano.close_queue(clean.kube, tries)
    clean.sessions(3)
    pods = clean.pods(names)
    assert not any(p["spec"].get("nodeName") for p in pods.values()), clean.story()
    assert {n: clean.allocation(p) for n, p in pods.items()} == {n: {} for n in names}, clean.story()
    assert "deallocate" in clean.cluster.container_logs("extender"), "the gang was never tried and rolled back"
    # Nothing kept: 4 of the same shape land on the 4 cards.
    for name in names:
        clean.kube.delete_pod(clean.namespace, name)
    volcano.delete_podgroup(clean.kube, clean.namespace, "five")
    wait_for("the 5 gone", lambda: not clean.kube.list_pods(namespace=clean.namespace).items, 60)
    four = clean.gang("after", [clean.share(10000, 60) for _ in range(4)])
    cores = clean.assert_recorded(clean.wait_bound(four, "4 shares of a card each, after the rollback"))
    assert len(cores) == 4, cores


@HCU
def test_a_whole_card_and_shares_in_one_gang(clean: World) -> None:
    whole = clean.share(None, 100)
    names = clean.gang("mixed", [whole, clean.share(20000, 40), clean.share(20000, 40)])
    pods = clean.wait_bound(names, "the mixed gang bound")
    clean.assert_recorded(pods)
    [(whole_card, _, whole_cores)] = clean.held(pods["mixed-0"])
    assert whole_cores == 100
    share_cards = {card for name in names[1:] for card, _, _ in clean.held(pods[name])}
    assert whole_card not in share_cards, (whole_card, share_cards)


@HCU
def test_a_gang_spread_over_two_nodes(clean: World) -> None:
    names = clean.gang("spread", [clean.share(10000, 60) for _ in range(4)])
    pods = clean.wait_bound(names, "the spread gang bound")
    cores = clean.assert_recorded(pods)
    assert {p["spec"]["nodeName"] for p in pods.values()} == set(NODES)
    assert len(cores) == 4, cores  # a card each


@HCU
def test_two_queues_share_the_cards_by_their_weights(clean: World) -> None:
    """Proportion (pkg/scheduler/plugins/proportion): a queue's deserved share is the
    cluster's total times its weight over the weights of the queues with jobs, capped by what
    it asks; a task is allocated only while its queue's allocated plus it stays within that.
    The nodes report 16 slots, 262,080 MiB and 400 percent of cores; each queue asks 16
    shares of 16,000 MiB and 25 percent (4 per card), 32 shares for 16 places.
    Weights 3 and 1: deserved 300 and 100 percent, 196,560 and 65,520 MiB, 12 and 4 slots,
    so 12 and 4 shares: 3 gangs of the first queue and 1 of the second, each whole.
    The queues open only once all 32 pods exist: deserved is capped by what a queue asks, so a
    session that saw 2 gangs of each would deserve them 8 and 8 (a CI run saw 2 and 2 land)."""
    heavy, light = clean.queue("heavy", 3, opened=False), clean.queue("light", 1, opened=False)
    gangs = {f"{queue}-{i}": clean.gang(f"{queue}-{i}", [clean.share(16000, 25) for _ in range(4)], queue=queue)
             for i in range(4) for queue in (heavy, light)}
    for queue in (heavy, light):
        volcano.open_queue(clean.kube, queue)
    clean.wait("16 shares placed", lambda: len(clean.placed()) == 16)
    clean.sessions(3)  # and nothing moves after
    placed = clean.placed()
    assert len(placed) == 16, sorted(placed)
    landed = {group: sum(name in placed for name in names) for group, names in gangs.items()}
    assert set(landed.values()) <= {0, 4}, landed  # gangs whole or not at all
    by_queue = Counter(group.split("-")[0] for group, count in landed.items() if count == 4)
    assert by_queue == {"heavy": 3, "light": 1}, (landed, clean.story())
    unplaced = [name for names in gangs.values() for name in names if name not in placed]
    assert all(clean.allocation(clean.kube.get_pod(clean.namespace, n)) == {} for n in unplaced)
    clean.assert_recorded(placed)


def _fill(clean: World, queue: str = "default", node1_queue: str | None = None) -> dict[str, list[str]]:
    """node0: card 0 holds a (lowest, 30,000 MiB, 50 percent) and x (high, 30,000, 50); card 1
    holds b (low, 40,000, 50). node1: both cards whole to high-priority shares. Each group
    pinned to its node and cards; a and b's group (low) with minMember 0, so gang lets both go.
    Volcano evicts its victims lowest task priority first: a before b."""
    c0, c1 = clean.card("node0", 0), clean.card("node0", 1)
    low = clean.gang("low", [clean.share(30000, 50), clean.share(40000, 50)], queue=queue, min_member=0,
                     priority_class=LOW, node="node0", cards=[c0, c1], classes=[LOWEST, LOW])
    high = clean.gang("high", [clean.share(30000, 50)], queue=queue, priority_class=HIGH, node="node0", cards=[c0])
    full = clean.gang("full", [clean.share(65000, 100), clean.share(65000, 100)], queue=node1_queue or queue,
                      priority_class=HIGH, node="node1", cards=[clean.card("node1", 0), clean.card("node1", 1)])
    everyone = low + high + full
    clean.wait("the cards filled and running", lambda: clean.running(everyone))
    return {"a": [low[0]], "b": [low[1]], "x": high, "full": full}


def _lands_where_b_was(clean: World, name: str, held: dict[str, list[str]], b_card: str) -> None:
    clean.wait(f"{name} bound", lambda: clean.bound([name]), 120)
    pod = clean.kube.get_pod(clean.namespace, name)
    assert pod["spec"]["nodeName"] == "node0"
    assert [card for card, _, _ in clean.held(pod)] == [b_card], clean.held(pod)
    assert clean.gone(held["b"][0]), "b still there"
    survivors = held["a"] + held["x"] + held["full"]
    assert not any(clean.gone(n) for n in survivors), f"evicted beyond b: {[n for n in survivors if clean.gone(n)]}"
    clean.wait(f"{name} running", lambda: clean.running([name]))
    clean.assert_recorded(clean.placed())


@HCU
def test_a_higher_priority_share_preempts_the_one_share_whose_card_then_takes_it(clean: World) -> None:
    """node0's cards have 5,520 MiB and 25,520 MiB free; urgent (mid priority) asks 40,000.
    Volcano's priority plugin allows a and b (their job is low); its own order evicts a first
    (lowest), and node0's total would then take urgent (61,040 MiB), but card 0 would not
    (35,520: x stays). The extender allows b alone: card 1 then has 65,520. (Without it, a is
    evicted for nothing: checked by hand with the verb abstaining.)"""
    held = _fill(clean)
    [urgent] = clean.gang("urgent", [clean.share(40000, 40)], priority_class=MID, node="node0")
    _lands_where_b_was(clean, urgent, held, clean.card("node0", 1))
    assert "volcano preemptable for" in clean.cluster.container_logs("extender")


@HCU
def test_an_under_served_queue_reclaims_the_one_share_whose_card_then_takes_it(clean: World) -> None:
    """Queues rich and poor, weight 1 each. rich holds a, b, x and node1's two (230,000 MiB);
    poor asks 40,000 for one share: poor deserves that much, rich 222,080, so rich is
    over-served and poor may reclaim. Of rich's shares on node0, b alone frees a card for it."""
    rich, poor = clean.queue("rich", 1), clean.queue("poor", 1)
    held = _fill(clean, queue=rich)
    [claim] = clean.gang("claim", [clean.share(40000, 40)], queue=poor, priority_class=LOW, node="node0")
    _lands_where_b_was(clean, claim, held, clean.card("node0", 1))
    assert "volcano reclaimable for" in clean.cluster.container_logs("extender")
