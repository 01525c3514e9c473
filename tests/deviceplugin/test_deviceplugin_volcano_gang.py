"""Volcano mode, a gang placed together (issue 34): several pods await an Allocate on one node
with no node lock, and the kubelet's pod resources List, asked during the call, names the one
it admits (deviceplugin/admissions.py over admitting.py). Allocations are written with the
bytes our extender's Volcano allocate writes (scheduler/allocation.py)."""

from datetime import UTC, datetime

import pytest
from dp_helpers import dev

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice
from hami_dcu.deviceplugin.core import AllocateFailed, Ambiguous
from hami_dcu.node.api.podresources.v1 import api_pb2
from hami_dcu.node.podresources import PodResourcesError
from hami_dcu.node.vdev import conf_share
from hami_dcu.scheduler.allocation import allocation_annotations

DCU = keys.DCU_NAMING
VOLCANO = "volcano"
COUNT = DCU.resources.count


def placed(node, name: str, devices: list[ContainerDevice]) -> dict:
    """A one-container Volcano pod with what our extender's allocate writes, then bound by
    Volcano (no node lock)."""
    node.kube.create_pod("default", {"metadata": {"name": name}, "spec": {
        "schedulerName": VOLCANO,
        "containers": [{"name": "main", "image": "x", "resources": {"limits": {COUNT: str(len(devices))}}}]}})
    annotations = allocation_annotations(DCU, [devices], "n1", datetime(2026, 11, 28, tzinfo=UTC))
    node.kube.create_binding("default", name, "n1", annotations=annotations)
    return node.kube.get_pod("default", name)


class Kubelet:
    """The kubelet's pod resources List: pods it has taken up, with the ids recorded so far."""

    def __init__(self) -> None:
        self.pods: dict[str, list[str]] = {}  # name -> ids of its one container (empty: being admitted)
        self.asked = 0
        self.down = False

    def admit(self, name: str) -> None:
        self.pods[name] = []

    def record(self, name: str, ids: list[str]) -> None:
        self.pods[name] = ids

    def __call__(self) -> api_pb2.ListPodResourcesResponse:
        self.asked += 1
        if self.down:
            raise PodResourcesError("kubelet pod resources API at /var/lib/kubelet/pod-resources/kubelet.sock: "
                                    "StatusCode.UNAVAILABLE: connection refused")
        return api_pb2.ListPodResourcesResponse(pod_resources=[
            api_pb2.PodResources(name=name, namespace="default", containers=[api_pb2.ContainerResources(
                name="main", devices=[api_pb2.ContainerDevices(resource_name=COUNT, device_ids=ids)] if ids else [])])
            for name, ids in self.pods.items()])


@pytest.fixture
def kubelet() -> Kubelet:
    return Kubelet()


def admit(core, kubelet: Kubelet, name: str, ids: list[str]) -> None:
    """The kubelet takes `name` up and calls Allocate for it, recording its ids once served."""
    kubelet.admit(name)
    core.allocate([ids])
    kubelet.record(name, ids)


def shares(node) -> dict[str, tuple[str, tuple[int, int] | None]]:
    """Pod UID -> (the card's bus id line, (cu_count, MiB)) of each vDCU written."""
    found = {}
    for conf in sorted(node.paths.vdev_dir.glob("*/vdev0.conf")):
        text = conf.read_text()
        found[conf.parent.name.split("_")[0]] = (text.splitlines()[0], conf_share(text))
    return found


def masks(node) -> list[int]:
    found = []
    for conf in sorted(node.paths.vdev_dir.glob("*/vdev0.conf")):
        lines = conf.read_text().splitlines()
        low, high = [int(line.split(":")[1], 16) for line in lines if line.startswith("cu_mask")]
        found.append(low | high << 64)
    return found


def test_two_awaiting_pods_the_kubelets_list_names_each_in_turn(dcu_node, kubelet):
    core = dcu_node.core(volcano_scheduler=VOLCANO, pod_resources=kubelet)
    placed(dcu_node, "a", [dev("S1", 2000, 10)])
    placed(dcu_node, "b", [dev("S2", 3000, 20)])
    admit(core, kubelet, "b", ["DCU-S2-fake-0"])  # the kubelet admits b first: its card, not a's
    assert dcu_node.annotation("b", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert dcu_node.annotation("a", keys.POD_BIND_PHASE) == keys.BIND_PHASE_ALLOCATING
    admit(core, kubelet, "a", ["DCU-S1-fake-0"])
    assert dcu_node.annotation("a", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert kubelet.asked == 1  # a alone awaited at its call: no List needed
    assert dcu_node.lock_value() is None


def test_three_shares_of_one_card_each_get_their_own_memory_and_disjoint_compute_units(dcu_node, kubelet):
    core = dcu_node.core(volcano_scheduler=VOLCANO, pod_resources=kubelet)
    pods = {name: placed(dcu_node, name, [dev("S1", mem, cores)])
            for name, mem, cores in (("g0", 1000, 10), ("g1", 2000, 25), ("g2", 3000, 50))}
    for slot, name in enumerate(("g1", "g2", "g0")):  # the kubelet's order, not the creation order
        admit(core, kubelet, name, [f"DCU-S1-fake-{slot}"])
        assert dcu_node.annotation(name, keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    by_uid = shares(dcu_node)
    got = {name: by_uid[pod["metadata"]["uid"]][1] for name, pod in pods.items()}
    assert got == {"g0": (12, 1000), "g1": (30, 2000), "g2": (60, 3000)}
    found = masks(dcu_node)
    assert len(found) == 3 and all(m for m in found)
    assert found[0] & found[1] == found[0] & found[2] == found[1] & found[2] == 0
    assert kubelet.asked == 2  # two awaited at g1's call and at g2's; g0 was alone


def test_preferred_allocation_steers_the_kubelet_to_the_admitted_pods_card(dcu_node, kubelet):
    core = dcu_node.core(volcano_scheduler=VOLCANO, pod_resources=kubelet)
    available = [f"DCU-S{c}-fake-{s}" for c in (1, 2) for s in range(4)]
    placed(dcu_node, "a", [dev("S1", 2000, 10)])
    placed(dcu_node, "b", [dev("S2", 2000, 10)])
    kubelet.admit("b")
    assert core.preferred(available, [], 1) == ["DCU-S2-fake-0"]
    kubelet.pods = {"a": []}
    assert core.preferred(available, [], 1) == ["DCU-S1-fake-0"]
    kubelet.pods = {"a": [], "b": []}  # ambiguous: no advice, the kubelet's own order
    assert core.preferred(available, [], 1) == ["DCU-S1-fake-0"]
    kubelet.pods = {"b": []}
    kubelet.down = True
    assert core.preferred(available, [], 1) == ["DCU-S1-fake-0"]


def test_two_pods_listed_without_ids_are_refused_as_ambiguous(dcu_node, kubelet):
    naps: list[float] = []
    core = dcu_node.core(volcano_scheduler=VOLCANO, pod_resources=kubelet, sleep=naps.append)
    placed(dcu_node, "a", [dev("S1", 2000, 10)])
    placed(dcu_node, "b", [dev("S1", 2000, 10)])
    kubelet.admit("a")
    kubelet.admit("b")
    with pytest.raises(Ambiguous, match=r"2 pods await .*default/a .*default/b.*its pod resources answer does not "
                                        r"prove.*2 pods are listed by the kubelet without"):
        core.allocate([["DCU-S1-fake-0"]])
    assert naps  # judged again on fresher reads before the refusal
    assert not list(dcu_node.paths.vdev_dir.glob("*/vdev0.conf"))
    for name in ("a", "b"):  # neither allocation consumed nor failed
        assert dcu_node.annotation(name, keys.POD_BIND_PHASE) == keys.BIND_PHASE_ALLOCATING


def test_a_placed_pod_listed_without_ids_makes_the_call_ambiguous(dcu_node, kubelet):
    """A pod served already that the kubelet lists without ids may be in its re-Allocate
    (after a kubelet restart), beside the admission."""
    core = dcu_node.core(volcano_scheduler=VOLCANO, pod_resources=kubelet, sleep=lambda _s: None)
    placed(dcu_node, "a", [dev("S1", 2000, 10)])
    admit(core, kubelet, "a", ["DCU-S1-fake-0"])
    dcu_node.kube.patch_pod_status("default", "a", {"phase": "Running"})
    placed(dcu_node, "b", [dev("S1", 2000, 10)])
    placed(dcu_node, "c", [dev("S1", 2000, 10)])
    kubelet.pods = {"a": [], "b": []}
    with pytest.raises(Ambiguous, match=r"default/a \(awaits no allocation, yet is listed without"):
        core.allocate([["DCU-S1-fake-1"]])


def test_no_awaiting_pod_listed_is_refused_with_the_lists_reason(dcu_node, kubelet):
    core = dcu_node.core(volcano_scheduler=VOLCANO, pod_resources=kubelet)
    placed(dcu_node, "a", [dev("S1", 2000, 10)])
    placed(dcu_node, "b", [dev("S1", 2000, 10)])
    with pytest.raises(AllocateFailed, match=r"none of the 2 pods awaiting a .* is listed") as caught:
        core.allocate([["DCU-S1-fake-0"]])
    assert not isinstance(caught.value, Ambiguous)


def test_a_count_other_than_the_listed_pods_is_refused(dcu_node, kubelet):
    core = dcu_node.core(volcano_scheduler=VOLCANO, pod_resources=kubelet)
    placed(dcu_node, "a", [dev("S1", 2000, 10)])
    placed(dcu_node, "b", [dev("S1", 2000, 10)])
    kubelet.admit("a")
    with pytest.raises(AllocateFailed, match=r"default/a is being admitted, .* asks for 1 and the kubelet passed 2"):
        core.allocate([["DCU-S1-fake-0", "DCU-S1-fake-1"]])


def test_the_list_unavailable_refuses_clearly(dcu_node, kubelet):
    core = dcu_node.core(volcano_scheduler=VOLCANO, pod_resources=kubelet, sleep=lambda _s: None)
    placed(dcu_node, "a", [dev("S1", 2000, 10)])
    placed(dcu_node, "b", [dev("S2", 2000, 10)])
    kubelet.admit("a")
    kubelet.down = True
    with pytest.raises(Ambiguous, match=r"pod resources API, which names the pod being admitted, did not answer on "
                                        r"node n1 .*UNAVAILABLE"):
        core.allocate([["DCU-S1-fake-0"]])
    assert kubelet.asked == 1 + 3  # asked again with each fresher list
    assert dcu_node.annotation("a", keys.POD_BIND_PHASE) == keys.BIND_PHASE_ALLOCATING


def test_a_lone_awaiting_pod_is_served_without_asking_the_kubelet(dcu_node, kubelet):
    kubelet.down = True
    core = dcu_node.core(volcano_scheduler=VOLCANO, pod_resources=kubelet)
    placed(dcu_node, "v", [dev("S2", 2000, 10)])
    available = [f"DCU-S{c}-fake-{s}" for c in (1, 2) for s in range(4)]
    assert core.preferred(available, [], 1) == ["DCU-S2-fake-0"]
    core.allocate([["DCU-S2-fake-0"]])
    assert dcu_node.annotation("v", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert kubelet.asked == 0


def test_the_named_pod_still_needs_the_cards_the_kubelet_passed(dcu_node, kubelet):
    core = dcu_node.core(volcano_scheduler=VOLCANO, pod_resources=kubelet)
    placed(dcu_node, "a", [dev("S1", 2000, 10)])
    placed(dcu_node, "b", [dev("S2", 2000, 10)])
    kubelet.admit("a")
    with pytest.raises(AllocateFailed, match=r"pod default/a: the kubelet passed devices on DCU-S2"):
        core.allocate([["DCU-S2-fake-0"]])
