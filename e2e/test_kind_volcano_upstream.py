"""Upstream Volcano v1.15.1's real scheduler on kind (issue 34): vc-scheduler (built from
../shared/peers by e2e/upstream/build-volcano.sh into the per-user cache) runs on the host with
kind's kubeconfig, its CRDs installed into the kind cluster, its `extender` plugin pointed at
hami-dcu's extender's Volcano verbs. The chart is in Volcano mode with the upstream extender
(`naming: hcu`, `volcano.enabled`, `volcano.extender.enabled`): Volcano keeps its gangs and
binds, our extender decides the cards and writes each pod's allocation in allocateFunc, and the
real kubelet admits what Volcano bound, calling our device plugin's Allocate with no node lock.

The extender is reached through `kubectl port-forward` to the scheduler pod: the host has no
route to kind's pod network (the pods' addresses live inside the node containers) and the
chart's Volcano Service is a ClusterIP one, so port-forward, which needs nothing but the API
server, is the offline way in. It is restarted on the same local port should it drop.

a. A PodGroup (minMember 4) of 4 shares that together fill one card (25 % of its cores each,
   its 4 slots): with 3 members created Volcano binds none; with the 4th all land, all Running,
   and the vdev0.conf each container sees names its own memory and compute units disjoint from
   the others'.
b. A gang that cannot fit (5 shares of 60 % cores: one per card, 4 cards): Volcano tries it,
   our predicate stops the fifth, the session rolls it back: nothing bound, no allocation
   annotation, no node lock; then 4 of that shape land, so no slot was kept.
c. A gang of 8 shares (45 % cores: 2 per card, 4 cards over the 2 workers): the time from
   PodGroup creation to all 8 Running, beside the same 8 pods without a PodGroup through
   hami-scheduler (the webhook routes them there: device-plugin mode's node-lock path), printed
   as `volcano-gang-timing: volcano_s=X hami_scheduler_s=Y`. No time is asserted; both end
   all Running with disjoint compute units where they share a card.
d. A whole card and 2 shares in one gang: the whole card's card carries no share; all Running.
e. Two Queues of weights 3 and 1 each submit 4 gangs of 2 half-card shares (16 for kind's 8
   places): proportion's deserved share, derived from kind's cards, is 6 and 2 shares, so 3 and 1
   gangs land whole; no card over its memory or cores; every placed pod Running.
f. Preemption through the verbs: a higher-priority share that no card of the first worker takes
   evicts the one lower-priority share whose card then takes it (not the lowest one, on the other
   card), and runs on that card.

The scheduler runs with the preempt and reclaim actions and the extender in the layout where its
preemptable and reclaimable answers count (scheduler_conf(evictions=True)), as on the real
control plane (e2e/test_realcluster_volcano_dcu.py).

    flock /tmp/kind.lock pytest -q -m kind e2e/test_kind_volcano_upstream.py
"""

from __future__ import annotations

import shlex
import socket
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.kind_metric_events import priority_class
from e2e.kindcluster import RELEASE_NAMESPACE, VOLCANO_EXTENDER_PORT, WORKERS, KindBackend
from e2e.realcluster import upstream
from e2e.realcluster import volcano_peer as volcano
from e2e.realcluster.processes import Process, wait_for
from hami_dcu.cli.localcluster.pods import Ctr, pod_manifest
from hami_dcu.common.io.kube import NotFoundError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import decode_pod_devices

_REASON = volcano.why_unavailable()
pytestmark = pytest.mark.kind
JSON = dict[str, Any]
HCU = keys.HCU_NAMING  # the chart speaks the hcu set in Volcano mode
MODE = "volcano-upstream"
# Volcano's actions with preempt and reclaim, as on the real control plane.
ACTIONS = "enqueue, allocate, preempt, reclaim, backfill"
LOWEST, LOW, MID, HIGH = "vc-dcu-lowest", "vc-dcu-low", "vc-dcu-mid", "vc-dcu-high"
PRIORITIES = ((LOWEST, 5), (LOW, 10), (MID, 100), (HIGH, 1000))


class PortForward:
    """`kubectl port-forward` to a pod's port on a fixed local port, started again whenever it
    exits (a dropped stream ends kubectl): a shell loop, one process group to stop."""

    def __init__(self, kind: KindBackend, pod: str, port: int, log: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.local = int(s.getsockname()[1])
        forward = shlex.join([str(kind.world.kubectl), "--kubeconfig", str(kind.kubeconfig), "-n",
                              RELEASE_NAMESPACE, "port-forward", f"pod/{pod}", f"{self.local}:{port}"])
        self.process = Process("port-forward", ["bash", "-c", f"while true; do {forward}; sleep 0.2; done"], log)

    def start(self) -> PortForward:
        self.process.start()
        return self

    def stop(self) -> None:
        self.process.stop(grace=2)


class Upstream:
    """The kind cluster with Volcano's scheduler beside it, and what the scenarios do there."""

    def __init__(self, kind: KindBackend, scheduler: volcano.VolcanoScheduler) -> None:
        self.kind, self.scheduler = kind, scheduler
        self.kube, self.namespace = kind.kube, kind.namespace
        self.groups: list[str] = []
        self.queues: list[str] = []

    def podgroup(self, group: str, min_member: int, queue: str = "default", priority: str | None = None) -> None:
        volcano.create_podgroup(self.kube, self.namespace, group, min_member, queue=queue, priority_class=priority)
        self.groups.append(group)

    def queue(self, name: str, weight: int, opened: bool = True) -> str:
        volcano.create_queue(self.kube, name, weight, opened=opened)
        self.queues.append(name)
        return name

    def submit(self, group: str, members: list[list[Ctr]], queue: str = "default", min_member: int | None = None,
               priority: str | None = None, node: str | None = None, cards: list[str] | None = None,
               classes: list[str] | None = None) -> list[str]:
        """A PodGroup of `members` (minMember all of them unless given); with `node` and `cards`
        each pod pinned to that node and its card; `classes`: each pod's own priority class
        (else the group's)."""
        self.podgroup(group, len(members) if min_member is None else min_member, queue, priority)
        names = []
        for i, containers in enumerate(members):
            pod = volcano.gang_member(pod_manifest(f"{group}-{i}", containers,
                                                   {keys.USE_DCU_UUID: cards[i]} if cards else None), group)
            if classes or priority is not None:
                pod["spec"]["priorityClassName"] = classes[i] if classes else priority
            if node is not None:
                pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            created = self.kube.create_pod(self.namespace, pod)
            assert created["spec"]["schedulerName"] == volcano.SCHEDULER_NAME, "the webhook took the pod from Volcano"
            names.append(pod["metadata"]["name"])
        return names

    def placed(self) -> dict[str, JSON]:
        """Every pod of the namespace bound to a node, by name."""
        return {p["metadata"]["name"]: p for p in self.kube.list_pods(namespace=self.namespace).items
                if p["spec"].get("nodeName")}

    def gone(self, name: str) -> bool:
        try:
            self.kube.get_pod(self.namespace, name)
            return False
        except NotFoundError:
            return True

    def wait(self, what: str, check: Any, timeout: float = 180) -> None:
        try:
            wait_for(what, check, timeout, self.scheduler.processes)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.story()}") from None

    def member(self, group: str, name: str, containers: list[Ctr], annotations: dict[str, str] | None = None) -> str:
        pod = volcano.gang_member(pod_manifest(name, containers, annotations), group)
        created = self.kube.create_pod(self.namespace, pod)
        assert created["spec"]["schedulerName"] == volcano.SCHEDULER_NAME, "the webhook took the pod from Volcano"
        return name

    def gang(self, group: str, members: int, containers: list[Ctr],
             annotations: dict[str, str] | None = None) -> list[str]:
        self.podgroup(group, members)
        return [self.member(group, f"{group}-{i}", containers, annotations) for i in range(members)]

    def pods(self, names: list[str]) -> dict[str, JSON]:
        return {n: self.kube.get_pod(self.namespace, n) for n in names}

    def sessions(self, count: int) -> None:
        """Let Volcano run `count` more sessions (one `Open Session` in its log each)."""
        before = self.scheduler.log_text().count("Open Session")
        wait_for(f"{count} Volcano sessions", lambda: self.scheduler.log_text().count("Open Session") >= before + count,
                 90, self.scheduler.processes)

    def wait_running(self, names: list[str], what: str, timeout: float = 240) -> float:
        """Wait until every pod is Running (a Failed one fails at once, with its reason); the
        monotonic time it was seen."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self.scheduler.processes:
                process.check_alive()
            phases = {}
            for name, pod in self.pods(names).items():
                status = pod.get("status") or {}
                assert status.get("phase") != "Failed", \
                    f"{name} failed: {status.get('reason')}: {status.get('message')}\n{self.story()}"
                phases[name] = status.get("phase")
            if all(phase == "Running" for phase in phases.values()):
                return time.monotonic()
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.story()}")

    def clear(self) -> None:
        self.kind.clean()
        volcano.delete_made(self.kube, self.namespace, self.groups, self.queues)

    def extender_log(self) -> str:
        pod = scheduler_pod(self.kind)
        return self.kind.kubectl("logs", "-n", RELEASE_NAMESPACE, pod, "-c", "extender", "--since=15m", timeout=30)

    def story(self) -> str:
        lines = []
        for pod in self.kube.list_pods(namespace=self.namespace).items:
            status = pod.get("status") or {}
            conditions = [f"{c.get('type')}={c.get('status')}:{c.get('reason', '')}:{c.get('message', '')}"
                          for c in status.get("conditions") or []]
            lines.append(f"{pod['metadata']['name']} node={pod['spec'].get('nodeName')} "
                         f"phase={status.get('phase')} {status.get('reason', '')} {conditions}")
        return "\n".join([*lines, "--- vc-scheduler:", self.scheduler.log()])


def scheduler_pod(kind: KindBackend) -> str:
    for pod in kind.kube.list_pods(namespace=RELEASE_NAMESPACE,
                                   label_selector="app.kubernetes.io/component=scheduler").items:
        if pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"):
            return str(pod["metadata"]["name"])
    raise AssertionError(f"no hami-dcu scheduler pod running in {RELEASE_NAMESPACE}")


def share(memory: int | None, cores: int) -> list[Ctr]:
    return [Ctr("main", 1, memory, cores, names=HCU.resources)]


def allocation(pod: JSON) -> dict[str, str]:
    annotations = pod["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k in keys.SCHEDULER_OWNED_POD_ANNOTATIONS}


def held(pod: JSON) -> list[tuple[str, int, int]]:
    """(card, MiB, cores) of every share recorded in the pod's allocation."""
    value = allocation(pod)[HCU.pod_devices_allocated]
    return [(d.uuid, d.usedmem, d.usedcores) for entry in decode_pod_devices(value) for d in entry]


def assert_within_cards(kind: KindBackend, pods: dict[str, JSON]) -> Counter[str]:
    """Each pod's allocation is on the node it is bound to, on that node's cards; no card is
    over its memory, its cores or its 4 slots. The cores held per card."""
    memory_of = {c.id_in(HCU): (node, c.memory_mib) for node, cards in kind.cards.items() for c in cards}
    cores: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    slots: Counter[str] = Counter()
    for name, pod in pods.items():
        written = allocation(pod)
        assert written.get(keys.POD_NODE) == pod["spec"]["nodeName"], (name, written)
        for card, mib, used in held(pod):
            assert memory_of[card][0] == pod["spec"]["nodeName"], (name, card, memory_of)
            cores[card] += used
            memory[card] += mib
            slots[card] += 1
    assert all(used <= 100 for used in cores.values()), cores
    assert all(mib <= memory_of[card][1] for card, mib in memory.items()), memory
    assert all(count <= 4 for count in slots.values()), slots
    return cores


def no_lock_left(kind: KindBackend) -> None:
    for node in WORKERS:
        annotations = kind.kube.get_node(node)["metadata"].get("annotations") or {}
        assert keys.NODE_LOCK not in annotations, f"node {node} still locked: {annotations[keys.NODE_LOCK]}"


def _mask(conf: dict[str, list[str]]) -> int:
    low, high = (int(word, 16) for word in conf["cu_mask"])
    return low | high << 64


def assert_own_disjoint_shares(up: Upstream, names: list[str]) -> dict[tuple[str, str], list[str]]:
    """Each pod's allocation names one share, and the vdev0.conf its container reads names that
    card, memory and cu_count; pods on one card have pairwise disjoint CU masks. The pods by
    (node, card's PCI bus id)."""
    kind = up.kind
    by_card: dict[tuple[str, str], list[str]] = {}
    masks: dict[str, int] = {}
    for name, pod in up.pods(names).items():
        node = pod["spec"]["nodeName"]
        assert pod["metadata"]["annotations"].get(keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS, (name, pod)
        [[device]] = decode_pod_devices(allocation(pod)[HCU.pod_devices_allocated])
        [card] = [c for c in kind.cards[node] if c.id_in(HCU) == device.uuid]
        conf = kind.vdev_conf_inside(name)  # read inside the container
        assert conf["PciBusId"] == [card.pci_bus_id], (name, device, conf)
        assert conf["mem"] == [f"{device.usedmem} MiB"], (name, device, conf)
        cus = device.usedcores * card.compute_units // 100
        assert conf["cu_count"] == [str(cus)], (name, device, conf)
        masks[name] = _mask(conf)
        assert bin(masks[name]).count("1") == cus, (name, conf)
        by_card.setdefault((node, card.pci_bus_id), []).append(name)
    for (node, bus), sharing in by_card.items():
        for i, first in enumerate(sharing):
            for second in sharing[i + 1:]:
                assert masks[first] & masks[second] == 0, \
                    f"{first} and {second} share compute units of {node}'s card {bus}: {masks}"
    return by_card


@pytest.fixture(scope="module")
def upstream_volcano(kind: KindBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    if _REASON:
        pytest.skip(_REASON)
    try:
        built = volcano.binary()
    except upstream.BuildUnavailable as exc:  # build-volcano.sh's exit 3
        pytest.skip(str(exc))
    kind.ensure_mode(MODE)
    kind.clean()
    volcano.install_crds(kind.kube, built)
    workdir = tmp_path_factory.mktemp("volcano")
    forward = PortForward(kind, scheduler_pod(kind), VOLCANO_EXTENDER_PORT, workdir / "port-forward.log").start()
    scheduler: volcano.VolcanoScheduler | None = None
    try:
        base = f"http://127.0.0.1:{forward.local}{volcano.HAMI_DCU_PREFIX}"

        def answers() -> bool:
            try:
                with urllib.request.urlopen(urllib.request.Request(f"{base}/onSessionClose", data=b"{}"),
                                            timeout=5) as reply:
                    return bool(reply.status == 200)
            except (OSError, urllib.error.URLError):
                return False

        wait_for("the extender's Volcano verbs through port-forward", answers, 60, [forward.process])
        conf = volcano.scheduler_conf(base, verbs=volcano.HAMI_DCU_VERBS, actions=ACTIONS, http_timeout="5s",
                                      ignorable=False, evictions=True)
        scheduler = volcano.VolcanoScheduler(built, kind.kubeconfig, workdir, conf).start(kind.kube)
        wait_for("Volcano to see hcumem on both workers", lambda: all(
            HCU.resources.memory in (kind.kube.get_node(n).get("status") or {}).get("allocatable", {})
            for n in WORKERS), 60)
        for name, value in PRIORITIES:
            priority_class(kind, name, value)
        yield Upstream(kind, scheduler)
    finally:
        if scheduler is not None:
            scheduler.stop()
        forward.stop()
        for name, _ in PRIORITIES:
            try:
                kind.kube.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
            except NotFoundError:
                pass


@pytest.fixture
def up(upstream_volcano: Upstream) -> Iterator[Upstream]:
    upstream_volcano.clear()
    try:
        yield upstream_volcano
    finally:
        upstream_volcano.clear()


def test_a_gang_of_four_shares_of_one_card_lands_whole_and_runs(up: Upstream) -> None:
    node = WORKERS[0]
    card = up.kind.cards[node][0]
    pin = {keys.USE_DCU_UUID: card.id_in(HCU)}  # all four on one card: its 4 slots, 100 % of its CUs
    shapes = [(4000, 25), (6000, 25), (8000, 25), (10000, 25)]
    up.podgroup("four", 4)
    names = [up.member("four", f"four-{i}", share(memory, cores), pin) for i, (memory, cores) in enumerate(shapes[:3])]
    # Three of minMember 4: the gang is not whole, Volcano places none of them.
    up.sessions(3)
    partial = up.pods(names)
    assert not any(p["spec"].get("nodeName") for p in partial.values()), up.story()
    assert {n: allocation(p) for n, p in partial.items()} == {n: {} for n in names}, up.story()
    names.append(up.member("four", "four-3", share(*shapes[3]), pin))
    up.wait_running(names, "the gang of 4 Running")
    by_card = assert_own_disjoint_shares(up, names)
    assert {k: sorted(v) for k, v in by_card.items()} == {(node, card.pci_bus_id): sorted(names)}, by_card
    no_lock_left(up.kind)
    # Volcano bound the gang at once: some Allocate found several members awaiting on the node
    # and was told which one it admits by the kubelet's pod resources List.
    plugin = up.kind.plugin_pod(node)
    assert plugin is not None
    log = up.kind.kubectl("logs", "-n", RELEASE_NAMESPACE, plugin, "--since=15m", timeout=30)
    named = [line for line in log.splitlines() if "as the pod being admitted" in line and "/four-" in line]
    print("device plugin, the kubelet's List naming the admitted member:", *named, sep="\n  ")
    assert named, "no Allocate found several members of the gang awaiting"


def test_a_gang_that_cannot_fit_leaves_nothing_then_one_that_fits_lands(up: Upstream) -> None:
    # 60 % of the cores each: one per card, 4 cards for 5 members. Volcano's own sum of hcucores
    # (200 per node) lets 3 per node through; our predicate stops the third on each.
    # In a queue of its own, closed once the gang was tried: each session writes its members'
    # allocations and removes them again, so only a gang left alone shows what is kept.
    tries = up.queue("tries", 1)
    names = up.submit("five", [share(10000, 60) for _ in range(5)], queue=tries)
    up.sessions(5)
    volcano.close_queue(up.kube, tries)
    up.sessions(3)
    pods = up.pods(names)
    assert not any(p["spec"].get("nodeName") for p in pods.values()), up.story()
    assert {n: allocation(p) for n, p in pods.items()} == {n: {} for n in names}, up.story()
    no_lock_left(up.kind)
    tried = [line for line in up.extender_log().splitlines() if "volcano " in line and "/five-" in line]
    allocated = any("volcano allocate " in line for line in tried)
    assert allocated and any("volcano deallocate " in line for line in tried), \
        f"the gang was never tried and rolled back: {tried}"
    up.clear()
    four = up.gang("after", 4, share(10000, 60))
    up.wait_running(four, "4 shares of a card each, after the rollback")
    by_card = assert_own_disjoint_shares(up, four)
    assert len(by_card) == 4, by_card  # a card each: nothing of the rolled-back gang was kept
    no_lock_left(up.kind)


def test_a_gang_of_eight_over_two_workers_beside_hami_scheduler(up: Upstream) -> None:
    shape = share(8000, 45)  # 2 per card: 4 cards, both workers
    started = time.monotonic()
    names = up.gang("eight", 8, shape)
    volcano_s = up.wait_running(names, "the gang of 8 Running", timeout=300) - started
    by_card = assert_own_disjoint_shares(up, names)
    assert {node for node, _ in by_card} == set(WORKERS), by_card
    no_lock_left(up.kind)
    up.clear()

    # The same 8 pods, no PodGroup and no schedulerName: the webhook routes them to hami-scheduler.
    started = time.monotonic()
    plain = []
    for i in range(8):
        created = up.kube.create_pod(up.namespace, pod_manifest(f"plain-{i}", shape))
        assert created["spec"]["schedulerName"] == keys.DEFAULT_SCHEDULER_NAME, created["spec"]
        plain.append(f"plain-{i}")
    hami_s = up.wait_running(plain, "the 8 through hami-scheduler Running", timeout=300) - started
    by_card = assert_own_disjoint_shares(up, plain)
    assert {node for node, _ in by_card} == set(WORKERS), by_card
    no_lock_left(up.kind)
    line = f"volcano-gang-timing: volcano_s={volcano_s:.1f} hami_scheduler_s={hami_s:.1f}"
    print(line)
    upstream.announce(line)  # to the terminal, past pytest's capture


def test_a_whole_card_and_shares_in_one_gang(up: Upstream) -> None:
    names = up.submit("mixed", [share(None, 100), share(20000, 40), share(20000, 40)])
    up.wait_running(names, "the mixed gang Running")
    pods = up.pods(names)
    assert_within_cards(up.kind, pods)
    [(whole_card, _, whole_cores)] = held(pods["mixed-0"])
    assert whole_cores == 100, held(pods["mixed-0"])
    share_cards = {card for name in names[1:] for card, _, _ in held(pods[name])}
    print(f"mixed gang: whole card {whole_card}, shares on {sorted(share_cards)}")
    assert whole_card not in share_cards, (whole_card, share_cards)
    assert_own_disjoint_shares(up, names[1:])
    no_lock_left(up.kind)


def test_two_queues_share_the_cards_by_their_weights(up: Upstream) -> None:
    """Proportion (pkg/scheduler/plugins/proportion): a queue's deserved share is the
    cluster's total times its weight over the weights of the queues with jobs, capped by what
    it asks; a task is allocated only while its queue's allocated plus it stays within that.
    kind's workers report their cards' memory, cores and slots; each queue asks 4 gangs of 2
    half-card shares (32,000 MiB, 50 percent: 2 per card), twice what the cards hold."""
    memory, cores, size, gangs_each = 32000, 50, 2, 4
    cards = [card for node in WORKERS for card in up.kind.cards[node]]
    total_memory, total_cores = sum(c.memory_mib for c in cards), 100 * len(cards)
    places = len(cards) * min(100 // cores, cards[0].memory_mib // memory)
    assert 2 * gangs_each * size > places, "the queues must ask beyond capacity"
    weights = {"heavy": 3, "light": 1}
    expected = {}
    for queue, weight in weights.items():
        deserved_memory = total_memory * weight / sum(weights.values())
        deserved_cores = total_cores * weight / sum(weights.values())
        shares = min(int(deserved_memory // memory), int(deserved_cores // cores), gangs_each * size)
        expected[queue] = shares // size
    print(f"queues: {len(cards)} cards, {places} places, deserved gangs {expected}")
    # Unopened until every gang exists: deserved is capped by what a queue asks, so a session
    # that saw only some of the gangs would share the cards by those.
    for queue, weight in weights.items():
        up.queue(queue, weight, opened=False)
    gangs = {f"{queue}-{i}": up.submit(f"{queue}-{i}", [share(memory, cores) for _ in range(size)], queue=queue)
             for i in range(gangs_each) for queue in weights}
    for queue in weights:
        volcano.open_queue(up.kube, queue)
    want = size * sum(expected.values())
    up.wait(f"{want} shares placed", lambda: len(up.placed()) >= want)
    up.sessions(3)  # and nothing moves after
    placed = up.placed()
    landed = {group: sum(name in placed for name in names) for group, names in gangs.items()}
    print(f"queues: landed {landed}")
    assert len(placed) == want, (sorted(placed), up.story())
    assert set(landed.values()) <= {0, size}, landed  # gangs whole or not at all
    by_queue = Counter(group.split("-")[0] for group, count in landed.items() if count == size)
    assert by_queue == expected, (landed, up.story())
    unplaced = [name for names in gangs.values() for name in names if name not in placed]
    assert all(allocation(up.kube.get_pod(up.namespace, n)) == {} for n in unplaced), unplaced
    assert_within_cards(up.kind, placed)
    up.wait_running(sorted(placed), "every placed share Running")
    assert_own_disjoint_shares(up, sorted(placed))
    no_lock_left(up.kind)


def test_a_higher_priority_share_preempts_the_one_share_whose_card_then_takes_it(up: Upstream) -> None:
    """The first worker: card 0 holds a (lowest, 30,000 MiB, 50 percent) and x (high, 30,000,
    50), card 1 holds b (low, 40,000, 50); the second worker's cards whole to high-priority
    shares. urgent (mid) asks 40,000 on the first worker: its cards have 5,520 and 25,520 MiB
    free. Volcano's priority plugin allows a and b, its own order would evict a (lowest) first,
    for nothing (card 0 would then have 35,520); the extender allows b alone, whose card then
    has 65,520."""
    node0, node1 = WORKERS
    c0, c1 = (card.id_in(HCU) for card in up.kind.cards[node0][:2])
    low = up.submit("low", [share(30000, 50), share(40000, 50)], min_member=0, priority=LOW, node=node0,
                    cards=[c0, c1], classes=[LOWEST, LOW])
    high = up.submit("high", [share(30000, 50)], priority=HIGH, node=node0, cards=[c0])
    full = up.submit("full", [share(65000, 100), share(65000, 100)], priority=HIGH, node=node1,
                     cards=[card.id_in(HCU) for card in up.kind.cards[node1][:2]])
    up.wait_running(low + high + full, "the cards filled and running")
    a, b = low
    [urgent] = up.submit("urgent", [share(40000, 40)], priority=MID, node=node0)
    up.wait(f"{b} evicted", lambda: up.gone(b))
    up.wait_running([urgent], "the preemptor Running")
    pod = up.kube.get_pod(up.namespace, urgent)
    print(f"preempt: {urgent} on {pod['spec']['nodeName']} card {held(pod)}; b's card {c1}")
    assert pod["spec"]["nodeName"] == node0, pod["spec"]
    assert [card for card, _, _ in held(pod)] == [c1], held(pod)
    survivors = [a, *high, *full]
    assert not any(up.gone(n) for n in survivors), f"evicted beyond b: {[n for n in survivors if up.gone(n)]}"
    up.wait_running(survivors, "the others still Running")
    assert_within_cards(up.kind, up.placed())
    by_card = assert_own_disjoint_shares(up, [a, *high, urgent])
    assert {k: sorted(v) for k, v in by_card.items()} == {
        (node0, up.kind.cards[node0][0].pci_bus_id): sorted([a, *high]),
        (node0, up.kind.cards[node0][1].pci_bus_id): [urgent]}, by_card
    assert "volcano preemptable for" in up.extender_log()
    no_lock_left(up.kind)
