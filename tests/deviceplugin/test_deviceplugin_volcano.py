"""Volcano mode: Allocate for pods Volcano's Hygon deviceshare placed, with no node lock
(deviceplugin/lockless.py), and the node resources Volcano's fit reads (issue 24)."""

import pytest
from dp_helpers import dev

from hami_dcu.cli.startup import volcano_problems
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, encode_pod_devices
from hami_dcu.deviceplugin.core import AllocateFailed, Ambiguous

DCU = keys.DCU_NAMING  # the naming set these tests speak

VOLCANO = "volcano"


def fork_value(entries: list[list[ContainerDevice]]) -> str:
    """The fork's encoding: entries of HCU containers only, joined by ';', none after the last."""
    return encode_pod_devices(entries).removesuffix(";")


def volcano_bind(node, name: str, containers: list[tuple[str, list[ContainerDevice] | None]],
                 scheduler: str = VOLCANO, placed_on: str = "n1") -> dict:
    """What the fork's Allocate writes (no lock), then its Binding. A container with None
    requests no HCU and gets no entry."""
    specs = [{"name": cname, "image": "x",
              "resources": {"limits": {DCU.resources.count: str(len(devs))} if devs is not None else {}}}
             for cname, devs in containers]
    node.kube.create_pod("default", {"metadata": {"name": name},
                                     "spec": {"containers": specs, "schedulerName": scheduler}})
    value = fork_value([devs for _, devs in containers if devs is not None])
    node.kube.create_binding("default", name, "n1", annotations={
        keys.POD_NODE: placed_on, keys.POD_TIME: "1754532000", DCU.pod_devices_to_allocate: value,
        DCU.pod_devices_allocated: value, keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
        keys.POD_BIND_TIME: "1754532000"})
    return node.kube.get_pod("default", name)


def vdev_dirnames(node) -> list[str]:
    return sorted(p.name for p in node.paths.vdev_dir.iterdir()) if node.paths.vdev_dir.exists() else []


def test_a_lone_volcano_pod_is_served_without_a_lock_and_its_entry_maps_to_its_hcu_container(dcu_node):
    core = dcu_node.core(volcano_scheduler=VOLCANO)
    pod = volcano_bind(dcu_node, "v", [("sidecar", None), ("main", [dev("S2", 2000, 50)])])
    assert dcu_node.lock_value() is None
    core.allocate([["DCU-S2-fake-0"]])
    assert dcu_node.annotation("v", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    # Entry 0 is the first HCU container, "main", not pod container 0 ("sidecar").
    (dirname,) = vdev_dirnames(dcu_node)
    assert dirname.startswith(f"{pod['metadata']['uid']}_main_1_")
    assert dcu_node.lock_value() is None


def test_each_hcu_container_of_a_volcano_pod_is_served_in_turn(dcu_node):
    core = dcu_node.core(volcano_scheduler=VOLCANO)
    pod = volcano_bind(dcu_node, "v", [("a", [dev("S1", 1000, 10)]), ("plain", None), ("b", [dev("S2", 3000, 30)])])
    core.allocate([["DCU-S1-fake-0"]])
    assert dcu_node.annotation("v", keys.POD_BIND_PHASE) == keys.BIND_PHASE_ALLOCATING
    core.allocate([["DCU-S2-fake-0"]])
    assert dcu_node.annotation("v", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    uid = pod["metadata"]["uid"]
    assert sorted(d.split("_")[1] for d in vdev_dirnames(dcu_node) if d.startswith(uid)) == ["a", "b"]


def test_two_volcano_pods_allocating_at_once_are_refused_as_ambiguous_never_guessed(dcu_node):
    core = dcu_node.core(volcano_scheduler=VOLCANO)
    volcano_bind(dcu_node, "a", [("main", [dev("S1", 2000, 10)])])
    volcano_bind(dcu_node, "b", [("main", [dev("S2", 2000, 10)])])
    # The kubelet's ids match pod a's card, but they name no pod: b may be the one admitted.
    with pytest.raises(Ambiguous, match=r"2 pods await .*default/a .*default/b"):
        core.allocate([["DCU-S1-fake-0"]])
    assert vdev_dirnames(dcu_node) == []
    for name in ("a", "b"):  # neither allocation consumed nor failed
        assert dcu_node.annotation(name, keys.POD_BIND_PHASE) == keys.BIND_PHASE_ALLOCATING
    # The kubelet fails the pod it was admitting (say a); then b alone awaits and is served.
    dcu_node.kube.patch_pod_status("default", "a", {"phase": "Failed", "reason": "UnexpectedAdmissionError"})
    core.allocate([["DCU-S2-fake-0"]])
    assert dcu_node.annotation("b", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS


def test_an_ambiguous_call_is_judged_again_once_the_kubelet_has_failed_the_refused_pod(dcu_node):
    """The kubelet fails the pod whose admission a refusal hit, and writes that status a moment
    after it calls Allocate for the next pod. Judged on the list taken before that status
    landed, two pods placed together would refuse each other round after round (seen on kind);
    a fresher list taken before refusing shows the failed pod gone and serves the other."""
    naps: list[float] = []
    core = dcu_node.core(volcano_scheduler=VOLCANO, sleep=naps.append)
    volcano_bind(dcu_node, "a", [("main", [dev("S1", 2000, 10)])])
    volcano_bind(dcu_node, "b", [("main", [dev("S2", 2000, 10)])])

    def kubelet_status_lands(seconds: float) -> None:
        naps.append(seconds)
        dcu_node.kube.patch_pod_status("default", "a", {"phase": "Failed", "reason": "UnexpectedAdmissionError"})

    core.sleep = kubelet_status_lands
    core.allocate([["DCU-S2-fake-0"]])
    assert dcu_node.annotation("b", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert len(naps) == 1 and 0 < naps[0] <= 1


def test_a_call_still_ambiguous_after_the_fresher_lists_is_refused(dcu_node):
    naps: list[float] = []
    core = dcu_node.core(volcano_scheduler=VOLCANO, sleep=naps.append)
    volcano_bind(dcu_node, "a", [("main", [dev("S1", 2000, 10)])])
    volcano_bind(dcu_node, "b", [("main", [dev("S2", 2000, 10)])])
    with pytest.raises(Ambiguous):
        core.allocate([["DCU-S1-fake-0"]])
    assert len(naps) >= 2 and sum(naps) <= 2  # bounded: a refusal still comes within seconds


def test_a_lone_pod_whose_cards_are_not_the_kubelets_is_refused(dcu_node):
    core = dcu_node.core(volcano_scheduler=VOLCANO)
    volcano_bind(dcu_node, "v", [("main", [dev("S1", 2000, 10)])])
    with pytest.raises(AllocateFailed, match=r"the kubelet passed devices on DCU-S2, .* names DCU-S1"):
        core.allocate([["DCU-S2-fake-0"]])
    assert vdev_dirnames(dcu_node) == []


@pytest.mark.parametrize(("scheduler", "placed_on", "fragment"), [
    ("hami-scheduler", "n1", "only 'volcano' allocates without the lock"),
    (VOLCANO, "n2", "its hami.io/vgpu-node names 'n2'"),
])
def test_without_a_lock_only_a_volcano_pod_placed_on_this_node_is_served(dcu_node, scheduler, placed_on, fragment):
    core = dcu_node.core(volcano_scheduler=VOLCANO)
    volcano_bind(dcu_node, "v", [("main", [dev("S1", 2000, 10)])], scheduler=scheduler, placed_on=placed_on)
    with pytest.raises(AllocateFailed, match=fragment):
        core.allocate([["DCU-S1-fake-0"]])


def test_a_pod_bound_by_hand_beside_the_volcano_pod_makes_the_call_ambiguous(dcu_node):
    core = dcu_node.core(volcano_scheduler=VOLCANO)
    volcano_bind(dcu_node, "v", [("main", [dev("S1", 2000, 10)])])
    dcu_node.kube.create_pod("default", {"metadata": {"name": "by-hand"}, "spec": {"nodeName": "n1", "containers": [
        {"name": "c", "image": "x", "resources": {"limits": {DCU.resources.count: "1"}}}]}})
    with pytest.raises(Ambiguous, match=r"by-hand .*bound without a bind-phase"):
        core.allocate([["DCU-S1-fake-0"]])


def test_a_pending_pod_asking_for_zero_hcus_beside_the_volcano_pod_is_not_awaiting(dcu_node):
    """Issue 35, finding 1, lockless: the zero-count pod made every call ambiguous, and no
    Allocate ever came to clear it (the kubelet calls none for a count of 0)."""
    core = dcu_node.core(volcano_scheduler=VOLCANO)
    dcu_node.kube.create_pod("default", {"metadata": {"name": "zero"}, "spec": {"nodeName": "n1", "containers": [
        {"name": "c", "image": "x", "resources": {"limits": {DCU.resources.count: "0"}}}]}})
    volcano_bind(dcu_node, "v", [("main", [dev("S1", 2000, 10)])])
    available = [f"DCU-S{c}-fake-{s}" for c in (1, 2) for s in range(4)]
    assert core.preferred(available, [], 1) == ["DCU-S1-fake-0"]  # steered: one pod awaits
    core.allocate([["DCU-S1-fake-0"]])
    assert dcu_node.annotation("v", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS


def test_without_volcano_mode_a_lockless_call_is_refused_as_before(dcu_node):
    core = dcu_node.core()
    volcano_bind(dcu_node, "v", [("main", [dev("S1", 2000, 10)])])
    with pytest.raises(AllocateFailed, match="no pod holds the node lock"):
        core.allocate([["DCU-S1-fake-0"]])


def test_preferred_allocation_steers_to_the_lone_pods_card_and_guesses_for_none(dcu_node):
    core = dcu_node.core(volcano_scheduler=VOLCANO)
    available = [f"DCU-S{c}-fake-{s}" for c in (1, 2) for s in range(4)]
    volcano_bind(dcu_node, "a", [("main", [dev("S2", 2000, 10)])])
    assert core.preferred(available, [], 1) == ["DCU-S2-fake-0"]
    volcano_bind(dcu_node, "b", [("main", [dev("S2", 2000, 10)])])
    assert core.preferred(available, [], 1) == ["DCU-S1-fake-0"]  # the kubelet's own order: no advice


def test_volcano_mode_advertises_memory_mib_and_cores_as_node_resources(dcu_node):
    core = dcu_node.core(volcano_scheduler=VOLCANO)
    core.register_node({"DCU-S2": False})
    status = dcu_node.kube.get_node("n1")["status"]
    assert status["capacity"][DCU.resources.memory] == str(2 * 65520)
    assert status["capacity"][DCU.resources.cores] == "200"
    assert status["allocatable"][DCU.resources.memory] == "65520"  # the unhealthy card is not offered
    assert status["allocatable"][DCU.resources.cores] == "100"


def test_outside_volcano_mode_no_share_resources_are_advertised(dcu_node):
    dcu_node.core().register_node()
    status = dcu_node.kube.get_node("n1").get("status") or {}
    assert DCU.resources.memory not in (status.get("capacity") or {})


@pytest.mark.parametrize("naming", ["hcu", "dcu"])
def test_volcano_mode_refuses_what_volcano_cannot_read(naming):
    (problem,) = volcano_problems({"volcano_scheduler_name": "volcano", "naming": naming, "register_interval": 45.0})
    assert "at most 30" in problem


def test_volcano_mode_with_either_naming_and_a_short_interval_starts():
    # Upstream Volcano through the extender reads the set's memory and cores from node status:
    # either set; the fork's need for hcu is the chart's rule (it knows which Volcano runs).
    for naming in ("hcu", "dcu"):
        values = {"volcano_scheduler_name": "volcano", "naming": naming, "register_interval": 30.0}
        assert volcano_problems(values) == []
    assert volcano_problems({"volcano_scheduler_name": "", "naming": "dcu"}) == []
