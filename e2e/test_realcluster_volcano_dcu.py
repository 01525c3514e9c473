"""Upstream Volcano v1.15.1's scheduler places DCU shares through hami-dcu's extender (issue 34,
item 2) on a real control plane: the chart with `volcano.extender.enabled` (naming hcu, Volcano
mode: the device plugins advertise hcumem and hcucores in node status for Volcano's own fit),
vc-scheduler built from ../shared/peers with its `extender` plugin pointed at the extender's
Volcano verbs (the scheduler pod's address, port volcano.extender.port, /volcano), ignorable
false. Volcano keeps its gangs and binds; our extender decides the cards and writes the
allocation on each pod in Volcano's allocateFunc, and takes it back in deallocateFunc.

Two nodes of 2 mock cards each (65520 MiB, 100 percent of cores, 4 slots). What the API server
stores is asserted: the node side is the simulator, whose Allocate is not what is tested here.

1. A PodGroup (minMember 4) of 4 shares lands whole, each pod's allocation recorded, no card
   over its cores, no node lock.
2. A gang that cannot fit whole (5 shares that each need most of a card, 4 cards): Volcano's
   own fit lets 3 per node through, our predicate stops the third; the session rolls the gang
   back every time: nothing bound, no annotation; then 4 of them land, so no slot was kept.
3. A whole card and shares in one gang: the whole card's card carries no share.
4. A gang spread over two nodes: 4 shares that take a card each land on both nodes, on 4
   distinct cards.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.realcluster import volcano_peer as volcano
from e2e.realcluster.cluster import SYSTEM_NAMESPACE, RealCluster, unavailable
from e2e.realcluster.processes import wait_for
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import decode_pod_devices

_REASON = unavailable() or volcano.why_unavailable()
pytestmark = [pytest.mark.realcluster, pytest.mark.peer]
JSON = dict[str, Any]
NAMING = keys.HCU_NAMING
SHARES = NAMING.resources
PORT = 8446
VALUES = {"naming": "hcu", "volcano": {"enabled": True, "extender": {"enabled": True, "port": PORT}}}


class World:
    def __init__(self, cluster: RealCluster, scheduler: volcano.VolcanoScheduler) -> None:
        self.cluster, self.scheduler = cluster, scheduler
        self.kube, self.namespace = cluster.kube, cluster.namespace
        self.groups: list[str] = []

    def gang(self, group: str, members: list[list[Ctr]]) -> list[str]:
        """A PodGroup of `members` (minMember all of them), each pod Volcano's to place."""
        volcano.create_podgroup(self.kube, self.namespace, group, len(members))
        self.groups.append(group)
        names = []
        for i, containers in enumerate(members):
            pod = volcano.gang_member(pod_manifest(f"{group}-{i}", containers), group)
            self.kube.create_pod(self.namespace, pod)
            names.append(pod["metadata"]["name"])
        return names

    def pods(self, names: list[str]) -> dict[str, JSON]:
        return {n: self.kube.get_pod(self.namespace, n) for n in names}

    def bound(self, names: list[str]) -> bool:
        return all(p["spec"].get("nodeName") for p in self.pods(names).values())

    def wait_bound(self, names: list[str], what: str) -> dict[str, JSON]:
        try:
            wait_for(what, lambda: self.bound(names), 120, self.scheduler.processes)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.story()}") from None
        return self.pods(names)

    def sessions(self, count: int) -> None:
        """Let Volcano run `count` more sessions (its log counts them: one `Open Session` each)."""
        before = self.scheduler.log_text().count("Open Session")
        wait_for(f"{count} Volcano sessions", lambda: self.scheduler.log_text().count("Open Session") >= before + count,
                 60, self.scheduler.processes)

    def clear(self) -> None:
        self.cluster.clear_pods()
        for group in self.groups:
            volcano.delete_podgroup(self.kube, self.namespace, group)
        self.groups.clear()

    def story(self) -> str:
        return f"{self.cluster.diagnose()}\n--- vc-scheduler:\n{self.scheduler.log()}"


def share(memory: int, cores: int) -> list[Ctr]:
    return [Ctr("main", 1, memory, cores, names=SHARES)]


def allocation(pod: JSON) -> dict[str, str]:
    annotations = pod["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k in keys.SCHEDULER_OWNED_POD_ANNOTATIONS}


def held(pod: JSON) -> list[tuple[str, int, int]]:
    """(card, MiB, cores) of every share recorded in the pod's allocation."""
    value = allocation(pod)[NAMING.pod_devices_allocated]
    return [(d.uuid, d.usedmem, d.usedcores) for entry in decode_pod_devices(value) for d in entry]


def assert_recorded(pods: dict[str, JSON]) -> Counter[str]:
    """Each pod's allocation is on the node it is bound to; no card is over its cores. The
    cores held per card."""
    cores: Counter[str] = Counter()
    for name, pod in pods.items():
        written = allocation(pod)
        assert written.get(keys.POD_NODE) == pod["spec"]["nodeName"], (name, written)
        assert written.get(NAMING.pod_devices_allocated), (name, written)
        for card, _memory, used in held(pod):
            cores[card] += used
    assert all(used <= 100 for used in cores.values()), cores
    return cores


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    if _REASON:
        pytest.skip(_REASON)
    built = volcano.binary()
    nodes = {n: default_cards(n) for n in ("node0", "node1")}
    with RealCluster(nodes, namespace="volcano-dcu", values=VALUES) as cluster:
        volcano.install_crds(cluster.kube, built)
        [extender] = cluster.kube.list_pods(namespace=SYSTEM_NAMESPACE,
                                            label_selector="app.kubernetes.io/component=scheduler").items
        url = f"http://{extender['status']['podIP']}:{PORT}{volcano.HAMI_DCU_PREFIX}"
        conf = volcano.scheduler_conf(url, verbs=volcano.HAMI_DCU_VERBS, http_timeout="5s", ignorable=False)
        scheduler = volcano.VolcanoScheduler(built, cluster.kubeconfig, cluster.workdir / "volcano", conf)
        try:
            scheduler.start(cluster.kube)
            world = World(cluster, scheduler)
            wait_for("Volcano to see hcumem on both nodes", lambda: all(
                SHARES.memory in (cluster.kube.get_node(n).get("status") or {}).get("allocatable", {})
                for n in nodes), 60)
            yield world
        finally:
            scheduler.stop()


@pytest.fixture
def clean(world: World) -> Iterator[World]:
    try:
        yield world
    finally:
        world.clear()


def test_a_gang_of_four_shares_lands_whole_with_its_cards_recorded(clean: World) -> None:
    names = clean.gang("four", [share(30000, 50) for _ in range(4)])
    pods = clean.wait_bound(names, "the gang of 4 bound by Volcano")
    assert_recorded(pods)
    assert all(keys.NODE_LOCK not in (clean.kube.get_node(n)["metadata"].get("annotations") or {})
               for n in ("node0", "node1"))


def test_a_gang_that_cannot_fit_whole_leaves_nothing(clean: World) -> None:
    # 60 percent each: one per card, 4 cards for 5 members. Volcano's own sum (200 percent per
    # node) lets 3 per node through; our predicate stops the third on each.
    names = clean.gang("five", [share(10000, 60) for _ in range(5)])
    clean.sessions(5)
    pods = clean.pods(names)
    assert not any(p["spec"].get("nodeName") for p in pods.values()), clean.story()
    assert {n: allocation(p) for n, p in pods.items()} == {n: {} for n in names}, clean.story()
    assert "deallocate" in clean.cluster.container_logs("extender"), "the gang was never tried and rolled back"
    # Nothing kept: 4 of the same shape land on the 4 cards.
    for name in names:
        clean.kube.delete_pod(clean.namespace, name)
    volcano.delete_podgroup(clean.kube, clean.namespace, "five")
    wait_for("the 5 gone", lambda: not clean.kube.list_pods(namespace=clean.namespace).items, 60)
    four = clean.gang("after", [share(10000, 60) for _ in range(4)])
    cores = assert_recorded(clean.wait_bound(four, "4 shares of a card each, after the rollback"))
    assert len(cores) == 4, cores


def test_a_whole_card_and_shares_in_one_gang(clean: World) -> None:
    whole = [Ctr("main", 1, None, 100, names=SHARES)]
    names = clean.gang("mixed", [whole, share(20000, 40), share(20000, 40)])
    pods = clean.wait_bound(names, "the mixed gang bound")
    assert_recorded(pods)
    [(whole_card, _, whole_cores)] = held(pods["mixed-0"])
    assert whole_cores == 100
    share_cards = {card for name in names[1:] for card, _, _ in held(pods[name])}
    assert whole_card not in share_cards, (whole_card, share_cards)


def test_a_gang_spread_over_two_nodes(clean: World) -> None:
    names = clean.gang("spread", [share(10000, 60) for _ in range(4)])
    pods = clean.wait_bound(names, "the spread gang bound")
    cores = assert_recorded(pods)
    assert {p["spec"]["nodeName"] for p in pods.values()} == {"node0", "node1"}
    assert len(cores) == 4, cores  # a card each
