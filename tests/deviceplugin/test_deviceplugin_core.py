"""The device plugin's pure core (deviceplugin/core.py): a snapshot in, a decision out. No API
server, no socket, no file: the node object, the pods and the cards are plain values here."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from dp_helpers import dev

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol import lockpurpose as purpose
from hami_dcu.common.protocol.codec import ContainerDevice, decode_node_devices, encode_pod_devices
from hami_dcu.deviceplugin.core import (
    UNSERVED_CARD,
    AllocateFailed,
    Paths,
    PluginCore,
    VdevShare,
    stale_records,
)
from hami_dcu.deviceplugin.plan import AllocateRefused
from hami_dcu.node.allocator import Grant
from hami_dcu.node.discovery import DcuCard, DrmNodes
from hami_dcu.node.smi import Card
from hami_dcu.node.vdev import VdevDir

DCU = keys.DCU_NAMING
NODE = "n1"
VOLCANO = "volcano"
LOCK = "2026-01-01T00:00:00Z,default,holder"
PATHS = Paths(dev_root=Path("/host/dev"), driver_dir=Path("/host/dtk"), hyhal_dir=Path("/host/hyhal"))


def card(index: int, serial: str, bus: str, healthy: bool = True) -> DcuCard:
    return DcuCard(Card(index=index, serial=serial, model="K100_AI", memory_mib=65520, compute_units=120,
                        pci_bus_id=bus, numa=index, healthy=healthy),
                   DrmNodes(card=f"/dev/dri/card{index + 1}", render=f"/dev/dri/renderD{129 + index}"), DCU.id_prefix)


CARDS = [card(0, "S1", "0000:3D:00.0"), card(1, "S2", "0000:9F:00.0")]


def core(volcano: str = "") -> PluginCore:
    return PluginCore(NODE, CARDS, DCU, PATHS, slots_per_card=4, volcano_scheduler=volcano)


def node_obj(lock: str | None = LOCK) -> dict:
    return {"metadata": {"name": NODE, "annotations": {keys.NODE_LOCK: lock} if lock else {}}}


def pod(name: str = "holder", entries: list[list[ContainerDevice]] | None = None, *, phase: str = "Pending",
        node: str | None = NODE, bind_phase: str | None = keys.BIND_PHASE_ALLOCATING, scheduler: str = "hami-scheduler",
        containers: int | None = None) -> dict:
    """A pod as hami-scheduler's Binding leaves it: one container per entry, asking its count."""
    entries = [[dev("S1", 1000, 25)]] if entries is None else entries
    count = len(entries) if containers is None else containers
    specs = [{"name": f"c{i}", "image": "x", "resources": {"limits": {
        DCU.resources.count: str(len(entries[i]) if i < len(entries) else 1)}}} for i in range(count)]
    value = encode_pod_devices(entries)
    annotations = {DCU.pod_devices_to_allocate: value, DCU.pod_devices_allocated: value, keys.POD_NODE: NODE}
    if bind_phase is not None:
        annotations[keys.POD_BIND_PHASE] = bind_phase
    spec: dict = {"containers": specs, "schedulerName": scheduler}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}", "annotations": annotations},
            "spec": spec, "status": {"phase": phase}}


# --- which pod -------------------------------------------------------------------------------


def test_the_lock_names_the_pod_being_admitted():
    assert core().lock_holder(node_obj()) == ("default", "holder")


@pytest.mark.parametrize(("lock", "message"), [
    (None, f"no pod holds the node lock {keys.NODE_LOCK} of node n1"),
    ("2026-01-01T00:00:00Z", "names no pod (legacy lock)"),
    ("not a lock,at,all", "node n1: "),
])
def test_a_lock_that_names_no_pod_refuses_the_call(lock, message):
    with pytest.raises(AllocateFailed, match=message.replace("(", r"\(").replace(")", r"\)")):
        core().lock_holder(node_obj(lock))


def test_only_volcano_mode_without_a_lock_serves_a_pod_that_proves_itself():
    assert core(VOLCANO).lockless(node_obj(None))
    assert not core(VOLCANO).lockless(node_obj())
    assert not core().lockless(node_obj(None))


def test_a_holder_that_no_longer_needs_the_lock_refuses_and_releases_it():
    refusal = core().holder_refusal(pod(phase="Running"))
    assert refusal is not None and refusal.release_reason == purpose.HOLDER_RUNNING
    assert "which no longer needs it (holder-running)" in refusal.why


def test_a_holder_not_bound_yet_refuses_but_keeps_the_lock():
    refusal = core().holder_refusal(pod(node=None))
    assert refusal is not None and refusal.release_reason is None
    assert "which is not bound yet (its bind is in flight)" in refusal.why


def test_a_holder_waiting_here_is_served():
    assert core().holder_refusal(pod()) is None


def test_another_pod_awaiting_an_allocate_here_makes_the_call_ambiguous():
    holder, rival = pod(), pod("rival", bind_phase=None)
    why = core().ambiguity(holder, [holder, rival])
    assert why is not None and "default/holder holds the lock of node n1, but default/rival" in why
    # Once served, it waits for no Allocate: the holder is the only one the call can be for.
    assert core().ambiguity(holder, [holder, pod("rival", bind_phase=keys.BIND_PHASE_SUCCESS)]) is None


# --- what each container gets ----------------------------------------------------------------


def test_an_allocate_without_container_requests_is_refused():
    assert core().serve_refusal(pod(), []) == "the kubelet sent an Allocate call without container requests"


def test_admissions_checks_run_again_before_serving():
    privileged = pod()
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    refusal = core().serve_refusal(privileged, [["DCU-S1-fake-0"]])
    assert refusal is not None and refusal.startswith("pod default/holder: refused (")
    assert core().serve_refusal(pod(), [["DCU-S1-fake-0"]]) is None


def test_each_container_erases_its_entry_and_the_last_one_marks_success():
    plugin = core()
    admitted = pod(entries=[[dev("S1", 1000, 25)], [dev("S2", 65520, 100)]])
    first = plugin.decide_container(admitted, ["DCU-S1-fake-0"], None, lockless_call=False)
    assert first.plan.container == "c0" and keys.POD_BIND_PHASE not in first.update
    assert first.update[DCU.pod_devices_to_allocate] == encode_pod_devices([[], [dev("S2", 65520, 100)]])
    # The share of one card: a vDCU of 25% of its 120 CUs and the memory asked.
    assert first.share == VdevShare(CARDS[0], cu_count=30, memory_mib=1000)
    admitted["metadata"]["annotations"].update(first.update)  # what the service's pod write returns
    second = plugin.decide_container(admitted, ["DCU-S2-fake-1"], None, lockless_call=False)
    assert second.plan.container == "c1" and second.share is None  # a whole card has no vDCU
    assert second.update[keys.POD_BIND_PHASE] == keys.BIND_PHASE_SUCCESS


def test_the_kubelets_other_card_is_served_the_schedulers_with_a_lock_and_refused_without():
    plugin = core(VOLCANO)
    decision = plugin.decide_container(pod(), ["DCU-S2-fake-0"], None, lockless_call=False)
    assert not decision.plan.ids_match and decision.plan.devices == [dev("S1", 1000, 25)]
    with pytest.raises(AllocateRefused, match="without a node lock only matching cards prove the call is this pod's"):
        plugin.decide_container(pod(), ["DCU-S2-fake-0"], None, lockless_call=True)


def test_volcanos_entries_belong_to_its_hcu_containers_only():
    plugin = core(VOLCANO)
    volcanos = pod(scheduler=VOLCANO, containers=2)
    volcanos["spec"]["containers"][0]["resources"] = {}  # no HCU: the fork writes it no entry
    assert [c["name"] for c in plugin.entry_containers(volcanos) or []] == ["c1"]
    assert plugin.entry_containers(pod(containers=2)) is None  # HAMi's layout: every container


def test_a_served_container_gets_the_device_nodes_of_its_cards_and_read_only_mounts():
    plugin = core()
    plan = plugin.decide_container(pod(), ["DCU-S1-fake-0"], None, lockless_call=False).plan
    shared = plugin.container_response(plan, Path("/host/vgpu/dir"))
    assert shared.devices == [("/dev/kfd", "/host/dev/kfd", "rwm"), ("/dev/mkfd", "/host/dev/mkfd", "rwm"),
                              ("/dev/dri/card1", "/dev/dri/card1", "rw"),
                              ("/dev/dri/renderD129", "/dev/dri/renderD129", "rw")]
    assert shared.mounts == [("/etc/vdev/docker/", "/host/vgpu/dir", True), ("/opt/hygondriver", "/host/dtk", True),
                             ("/opt/hyhal", "/host/hyhal", True)]
    assert [m[0] for m in plugin.container_response(plan, None).mounts] == ["/opt/hygondriver", "/opt/hyhal"]


def test_the_vdev_spec_joins_the_pod_the_share_and_the_grant():
    plugin = core()
    decision = plugin.decide_container(pod(), ["DCU-S1-fake-0"], None, lockless_call=False)
    assert decision.share is not None
    spec = plugin.vdev_spec(pod(), decision.plan, decision.share, Grant(card_index=0, pipe=2, vdev=5, cu_mask=0xF))
    assert (spec.pod_uid, spec.container, spec.card_index, spec.pipe, spec.vdev, spec.cu_mask) == (
        "uid-holder", "c0", 0, 2, 5, 0xF)
    assert (spec.cu_count, spec.memory_mib, spec.pci_bus_id) == (30, 1000, "0000:3D:00.0")


# --- GetPreferredAllocation ------------------------------------------------------------------


def test_advice_is_for_the_lock_holder_pending_here_and_keeps_the_reads():
    holder = pod()
    assert core().advice_target(node_obj(), [holder]) == (holder, True)
    assert core().advice_target(node_obj(), [pod("other")]) == ({}, False)


def test_without_a_lock_advice_steers_only_when_one_pod_awaits():
    one = pod("a", scheduler=VOLCANO)
    assert core(VOLCANO).advice_target(node_obj(None), [one]) == (one, False)
    assert core(VOLCANO).advice_target(node_obj(None), [one, pod("b", scheduler=VOLCANO)]) == ({}, False)


# --- registration and restart ----------------------------------------------------------------


def test_the_registration_carries_every_card_with_its_health_and_the_handshake():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    annotations = core().registration({"DCU-S2": False}, now)
    devices = decode_node_devices(annotations[DCU.node_register] or "")
    assert [(d.id, d.count, d.health, d.index, d.type) for d in devices] == [
        ("DCU-S1", 4, True, 0, "DCU-K100_AI"), ("DCU-S2", 4, False, 1, "DCU-K100_AI")]
    assert annotations[DCU.node_handshake] == "Reported 2026-01-01T00:00:00+00:00"


def test_volcano_counts_the_healthy_cards_memory_and_cores():
    status = core().share_resources({"DCU-S2": False})
    assert status["capacity"] == {DCU.resources.memory: "131040", DCU.resources.cores: "200"}
    assert status["allocatable"] == {DCU.resources.memory: "65520", DCU.resources.cores: "100"}


def test_a_restored_grant_follows_its_card_by_bus_id():
    record = VdevDir(pod_uid="u", container="c", card_index=0, pipe=0, vdev=0, cu_mask=1)
    plugin = core()
    assert plugin.current_index(record, "0000:9F:00.0").card_index == 1  # its card is index 1 now
    assert plugin.current_index(record, "0000:AA:00.0").card_index == UNSERVED_CARD
    assert plugin.current_index(record, None) is record  # adopted by name: kept where its name says


def test_grants_of_pods_gone_or_finished_are_stale():
    def grant(uid: str) -> tuple[str, VdevDir]:
        return uid, VdevDir(pod_uid=uid, container="c", card_index=0, pipe=0, vdev=0, cu_mask=1)

    pods = [pod("live"), pod("done", phase="Succeeded"), pod("starting", phase="Running")]
    records = [grant("uid-live"), grant("uid-done"), grant("uid-gone"), grant("uid-starting")]
    assert [d for d, _ in stale_records(records, pods)] == ["uid-done", "uid-gone"]
