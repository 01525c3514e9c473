"""The Volcano scenarios, written once for any backend (issue 24).

The backend runs hami-dcu in Volcano mode (chart values `naming: hcu`, `volcano.enabled`, a
register interval of at most 30 s) and gives what the shared scenarios use: a Kube client,
a namespace, its nodes and mock cards, the vdev files a node's plugin wrote. The scenarios
read and write the hcu names (`HCU` below), as the cluster does. Volcano itself is
played by the stand-in (volcano_standin.py), authenticated as the chart's `volcano.identity`,
so the real admission chain judges its writes; the real kubelet (or its stand-in) admits the
pods it binds, and hami-dcu's device plugin serves them without a node lock, telling pods that
await on one node together apart by the kubelet's pod resources List.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from e2e import volcano_fork as fork
from e2e.scenarios import (
    ClusterBackend,
    allocation,
    assert_no_card_over_capacity,
    assert_no_lock_left,
    card_of,
    phase,
    vdev_for,
    wait_until,
)
from e2e.volcano_standin import DEFAULT_IDENTITY, VolcanoStandIn
from hami_dcu.cli.localcluster.pods import Ctr, pod_manifest
from hami_dcu.common.protocol import keys

JSON = dict[str, Any]
HCU = fork.NAMING  # the naming set of a cluster in Volcano mode, and of these scenarios
VOLCANO_SCHEDULER = "volcano"  # the chart's volcano.schedulerName
SERVED, REFUSED = "served", "refused"
# The words of the device plugin's refusal when several pods await on its node and the
# kubelet's pod resources List does not name exactly one of them as the pod being admitted
# (lockless.py, admitting.py): List unavailable, or the API read behind the kubelet.
AMBIGUOUS = "await a hygon.com/hcunum allocation here"
# ... and when the kubelet passes devices of another card than the pod's allocation names, with
# no lock and no List naming the pod to steer it (GetPreferredAllocation gave no advice): the
# cards do not prove the call is this pod's, so it is refused too, never served the wrong card.
UNPROVEN = "without a node lock only matching cards prove the call is this pod's"


@dataclass(frozen=True)
class VolcanoScenario:
    name: str
    run: Callable[[ClusterBackend], None]


VOLCANO_SCENARIOS: list[VolcanoScenario] = []


def volcano_scenario(fn: Callable[[ClusterBackend], None]) -> Callable[[ClusterBackend], None]:
    VOLCANO_SCENARIOS.append(VolcanoScenario(fn.__name__, fn))
    return fn


# --- helpers ---------------------------------------------------------------------------------


def volcano(b: ClusterBackend, **options: Any) -> VolcanoStandIn:
    return VolcanoStandIn.acting_as(b.kube, DEFAULT_IDENTITY, **options)


def the_node(b: ClusterBackend) -> str:
    return sorted(b.cards)[0]


def volcano_pod(b: ClusterBackend, name: str, containers: list[Ctr],
                annotations: dict[str, str] | None = None) -> JSON:
    manifest = pod_manifest(name, containers, annotations)
    manifest["spec"]["schedulerName"] = VOLCANO_SCHEDULER
    created = b.kube.create_pod(b.namespace, manifest)
    assert created["spec"]["schedulerName"] == VOLCANO_SCHEDULER, "the webhook took the pod from Volcano"
    return created


def place_together(b: ClusterBackend, standin: VolcanoStandIn, pods: list[JSON], node: str) -> None:
    """One session allocates every pod on `node`, then binds them all at once, as Volcano
    dispatches a session's binds (a gang's together)."""
    session = standin.open_session([node])
    assert node in session.cards, f"Volcano does not use node {node}: {session.dropped.get(node)}"
    for pod in pods:
        standin.allocate(session, pod, node)
    with ThreadPoolExecutor(max_workers=len(pods)) as binds:
        for done in [binds.submit(standin.bind, pod, node) for pod in pods]:
            done.result()


def outcome(b: ClusterBackend, name: str, timeout: float = 90.0) -> str:
    """SERVED (Running) or REFUSED (failed at admission by the plugin's ambiguity refusal);
    anything else fails the scenario."""
    def settled() -> str | None:
        pod = b.kube.get_pod(b.namespace, name)
        status = pod.get("status") or {}
        if status.get("phase") == "Running":
            return SERVED
        if status.get("phase") == "Failed":
            message = status.get("message") or ""
            refused = AMBIGUOUS in message or UNPROVEN in message
            assert status.get("reason") == "UnexpectedAdmissionError" and refused, \
                f"pod {name} failed otherwise than as ambiguous: {status.get('reason')}: {message}"
            return REFUSED
        return None

    return wait_until(f"pod {name} Running or refused at admission", settled, timeout, interval=0.2)


def assert_served_its_own_cards(b: ClusterBackend, name: str) -> None:
    """The pod's vDCUs are on exactly the cards and shares its allocation names, entry i
    belonging to its i-th HCU container (the fork's layout): never a wrong card."""
    pod = b.kube.get_pod(b.namespace, name)
    annotations = pod["metadata"]["annotations"]
    assert annotations[keys.POD_BIND_PHASE] == keys.BIND_PHASE_SUCCESS, annotations
    assert not annotations[HCU.pod_devices_allocated].endswith(";"), "not the fork's encoding"
    node = pod["spec"]["nodeName"]
    entries = allocation(pod, HCU)
    containers = [c["name"] for c in fork.hcu_containers(pod)]
    assert len(entries) == len(containers), (entries, containers)
    for container, entry in zip(containers, entries, strict=True):
        (device,) = entry
        card = card_of(b, node, device.uuid, HCU)
        conf = vdev_for(b, pod, container)
        assert conf["PciBusId"] == card.pci_bus_id, f"{name}/{container} got {conf['PciBusId']}, not {device.uuid}"
        assert conf["mem"] == f"{device.usedmem} MiB"
        assert conf["cu_count"] == str(device.usedcores * card.compute_units // 100)


def shared(memory: int = 2000, cores: int = 10) -> Ctr:
    return Ctr("main", 1, memory, cores, names=HCU.resources)


def served_until_done(b: ClusterBackend, standin: VolcanoStandIn, specs: dict[str, tuple[list[Ctr], JSON]],
                      node: str, rounds: int) -> tuple[dict[str, str], list[int]]:
    """Place every pod of `specs` together (one session, binds at once) and wait for each to
    run or be refused at admission. Each served pod must be on exactly its allocated share.
    The device plugin tells the awaiting pods apart by the kubelet's pod resources List, so
    with a kubelet that answers it (kind's) every pod is served in the first round and the
    loop ends there. A refusal is still accepted as the fail-closed outcome (AMBIGUOUS or
    UNPROVEN, its allocation left unconsumed): it is what a kubelet whose List does not answer
    gets while several pods await. The loop then plays the refused pod's controller (a new pod
    of the same spec, placed with the other refused ones) for up to `rounds` rounds. Returns
    the running pod of each spec and the number refused per round ([0] when the first round
    served all)."""
    running: dict[str, str] = {}
    refused_per_round: list[int] = []
    pending = dict.fromkeys(specs, 0)
    for _ in range(rounds):
        names = {spec: spec if attempt == 0 else f"{spec}-r{attempt}" for spec, attempt in pending.items()}
        pods = [volcano_pod(b, names[spec], *specs[spec]) for spec in pending]
        place_together(b, standin, pods, node)
        results = {spec: outcome(b, names[spec]) for spec in pending}
        refused_per_round.append(sum(r == REFUSED for r in results.values()))
        for spec, result in results.items():
            if result == SERVED:
                assert_served_its_own_cards(b, names[spec])
                running[spec] = names[spec]
                del pending[spec]
            else:
                # Refused, never consumed: its allocation still waits, its pod is over.
                annotations = b.kube.get_pod(b.namespace, names[spec])["metadata"]["annotations"]
                assert annotations[keys.POD_BIND_PHASE] == keys.BIND_PHASE_ALLOCATING
                pending[spec] += 1
        if not pending:
            return running, refused_per_round
    raise AssertionError(f"still refused after {rounds} rounds: {sorted(pending)} ({refused_per_round})")


# --- the scenarios ----------------------------------------------------------------------------


@volcano_scenario
def what_volcano_reads_is_there_and_the_plugin_answers_its_handshake(b: ClusterBackend) -> None:
    """The fork uses a node only with the hcu register and a handshake it can stamp, and fits
    pods against hcunum, hcumem (MiB) and hcucores in node status; after it stamps
    `Requesting_<2006.01.02 15:04:05>` the plugin answers within its interval (at most 30 s),
    so the next session still uses the node instead of stamping `Deleted_`."""
    standin = volcano(b)
    first = standin.open_session(sorted(b.cards))
    assert sorted(first.cards) == sorted(b.cards), first.dropped
    for node, cards in b.cards.items():
        stamp = first.stamped.get(node, "")
        assert stamp.startswith("Requesting_") and "." in stamp, (node, stamp)
        obj = b.kube.get_node(node)
        # The plugin may already have answered the stamp (its register loop can tick between
        # the session's patch and this read): either the stamp or an answer is there.
        handshake = obj["metadata"]["annotations"][HCU.node_handshake]
        assert handshake == stamp or handshake.startswith(keys.HANDSHAKE_REPORTED), (stamp, handshake)
        allocatable = obj["status"]["allocatable"]
        assert allocatable[HCU.resources.count] == str(4 * len(cards))
        assert allocatable[HCU.resources.memory] == str(sum(c.memory_mib for c in cards))
        assert allocatable[HCU.resources.cores] == str(100 * len(cards))
        assert [c.uuid for c in first.cards[node]] == [c.id_in(HCU) for c in cards]
    for node in b.cards:
        wait_until(f"the plugin of {node} answering Volcano's handshake", lambda n=node: b.kube.get_node(n)[
            "metadata"]["annotations"][HCU.node_handshake].startswith(keys.HANDSHAKE_REPORTED), timeout=40)
    again = standin.open_session(sorted(b.cards))
    assert sorted(again.cards) == sorted(b.cards), again.dropped


@volcano_scenario
def single_pods_with_and_without_the_lock(b: ClusterBackend) -> None:
    """One pod at a time: with no lock (the fork's shipped configuration) and with its lock
    (deleted before the Binding), the plugin serves it on its cards; its entry belongs to its
    HCU container, not to the plain container before it."""
    node = the_node(b)
    for name, lock in (("vc-nolock", False), ("vc-lock", True)):
        standin = volcano(b, node_lock=lock)
        pod = volcano_pod(b, name, [Ctr("side"), Ctr("main", 1, 3000, 25, names=HCU.resources)])
        place_together(b, standin, [pod], node)
        assert outcome(b, name) == SERVED
        assert_served_its_own_cards(b, name)
        running = b.kube.get_pod(b.namespace, name)
        uid = running["metadata"]["uid"]
        assert not [d for d in b.vdev_files(node) if d.startswith(f"{uid}_side_")], "the plain container got a vDCU"
        assert_no_lock_left(b)
    assert_no_card_over_capacity(b, HCU)


@volcano_scenario
def two_pods_allocating_on_one_node_at_once_never_get_the_wrong_card(b: ClusterBackend) -> None:
    """Two pods of one session, on different cards of one node, bound at the same moment with
    no lock. The kubelet's Allocate names no pod; the plugin asks the kubelet's pod resources
    List which one it admits and serves that one on its own card, so both normally run in the
    first round. Where List cannot name one (a kubelet whose List does not answer), the call is
    refused while both await (the pod fails at admission and is made again, up to 4 rounds),
    never served a guess: each ends on its own card, never the other's. The refusals per round
    are printed."""
    node = the_node(b)
    first, second = b.cards[node][:2]
    specs = {"vc-a": ([shared(2000, 20)], {keys.USE_DCU_UUID: first.id_in(HCU)}),
             "vc-b": ([shared(3000, 30)], {keys.USE_DCU_UUID: second.id_in(HCU)})}
    running, refused = served_until_done(b, volcano(b), specs, node, rounds=4)
    print(f"two pods at once: refused per round {refused}")
    for spec, card in (("vc-a", first), ("vc-b", second)):
        pod = b.kube.get_pod(b.namespace, running[spec])
        assert allocation(pod, HCU)[0][0].uuid == card.id_in(HCU)
    assert_no_card_over_capacity(b, HCU)
    assert_no_lock_left(b)


@volcano_scenario
def a_gang_of_four_on_one_node_each_runs_on_its_own_share(b: ClusterBackend) -> None:
    """A gang of four allocated in one session on one node and bound together, no lock. The
    kubelet admits the four one at a time, and during each Allocate its pod resources List
    names the member being admitted (the others not yet taken up, or listed with their ids), so
    the plugin serves each member on its own share and the gang normally runs in the first
    round. Where List does not answer, a member admitted while others await is refused as
    ambiguous (never served a guess) and made again, so the gang is served about one member
    a round; six rounds are allowed. Every member ends on exactly its allocated share; the
    refusals per round are printed."""
    node = the_node(b)
    specs = {f"gang-{i}": ([shared(1000 + 500 * i, 10 + 5 * i)], {}) for i in range(4)}
    running, refused = served_until_done(b, volcano(b), specs, node, rounds=6)
    print(f"gang of four: refused per round {refused}")
    assert len(running) == 4
    assert_no_card_over_capacity(b, HCU)
    assert_no_lock_left(b)


@volcano_scenario
def release_strips_the_allocation_of_pods_never_served(b: ClusterBackend) -> None:
    """The fork's Release (a session rolled back, a gang not ready): a pod allocated but never
    served loses the six keys, so nothing is held for it; a served pod (bind-phase success)
    keeps its allocation. Both writes pass admission as Volcano's."""
    node = the_node(b)
    standin = volcano(b)
    unserved = volcano_pod(b, "vc-unserved", [shared()])
    served = volcano_pod(b, "vc-served", [shared()])
    session = standin.open_session([node])
    standin.allocate(session, unserved, node)
    standin.allocate(session, served, node)
    standin.bind(served, node)
    assert outcome(b, "vc-served") == SERVED
    before = set(b.kube.get_pod(b.namespace, "vc-unserved")["metadata"]["annotations"])
    assert set(fork.ALLOCATION_KEYS) <= before
    assert standin.release(unserved) is True
    assert standin.release(served) is False
    left = b.kube.get_pod(b.namespace, "vc-unserved")
    assert not set(fork.ALLOCATION_KEYS) & set(left["metadata"].get("annotations") or {})
    assert not left["spec"].get("nodeName") and phase(b.kube, b.namespace, "vc-unserved") == "Pending"
    assert_served_its_own_cards(b, "vc-served")
    # The stripped pod holds nothing: the next session counts only the served one.
    time.sleep(0.5)
    again = standin.open_session([node])
    used = {c.uuid: c.used_mem for c in again.cards[node]}
    assert sum(used.values()) == allocation(b.kube.get_pod(b.namespace, "vc-served"), HCU)[0][0].usedmem
