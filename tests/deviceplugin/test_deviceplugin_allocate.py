"""Allocate: golden vdev files, responses, and every failure path (pod marked failed, lock released)."""

import re

import pytest
from dp_helpers import dev

from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin.core import AllocateFailed, Ambiguous

DCU = keys.DCU_NAMING  # the naming set these tests speak

GOLDEN_15 = """PciBusId: 0000:3D:00.0
cu_mask: 0x000000000003ffff
cu_mask: 0x0000000000000000
cu_count: 18
mem: 2000 MiB
device_id: 0
vdev_id: 0
pipe_id: 0
enable: 1
"""


def vdev_dirs(node):
    return sorted(p.name for p in node.paths.vdev_dir.iterdir()) if node.paths.vdev_dir.exists() else []


def read_conf(node, pod, container):
    (d,) = [p for p in node.paths.vdev_dir.iterdir() if p.name.startswith(f"{pod['metadata']['uid']}_{container}_")]
    return (d / "vdev0.conf").read_text(), d.name


def test_shared_vdcu_golden_file_and_response(dcu_node):
    core = dcu_node.core()
    pod = dcu_node.bind("p", [("main", [dev("S1", 2000, 15)])])
    (response,) = core.allocate([["DCU-S1-fake-0"]])
    text, dirname = read_conf(dcu_node, pod, "main")
    assert text == GOLDEN_15
    assert dirname == f"{pod['metadata']['uid']}_main_0_0_0_000000000003ffff_0000000000000000"
    etc = (dcu_node.paths.etc_vdev / "vdev0.conf").read_text()
    assert etc == GOLDEN_15  # the exporter's copy: device_id is the card index, 0 here
    devices = {c: h for c, h, _ in response.devices}
    root = dcu_node.root / "dev"
    # card0/renderD128 belong to the other vendor's GPU laid out first: mapping is by PCI bus id
    assert devices == {
        "/dev/kfd": str(root / "kfd"),
        "/dev/mkfd": str(root / "mkfd"),
        "/dev/dri/card1": str(root / "dri/card1"),
        "/dev/dri/renderD129": str(root / "dri/renderD129"),
    }
    mounts = {c: (h, ro) for c, h, ro in response.mounts}
    # Read-only, every one (issue 11, findings 4 and 5): a tenant rewrote its vdev file, and
    # could plant a library in /opt/dtk, where the plugin loads librocm_smi64.so from.
    assert mounts["/etc/vdev/docker/"] == (str(dcu_node.paths.vdev_dir / dirname), True)
    assert mounts["/opt/hygondriver"] == ("/opt/dtk", True)
    assert mounts["/opt/hyhal"] == ("/opt/hyhal", True)
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert dcu_node.annotation("p", DCU.pod_devices_to_allocate) == ";"
    assert dcu_node.lock_value() is None


def test_second_card_gets_its_own_bus_id_masks_and_device_id(dcu_node):
    core = dcu_node.core()
    pod = dcu_node.bind("p", [("main", [dev("S2", 4096, 60)])])
    (response,) = core.allocate([["DCU-S2-fake-1"]])
    text, dirname = read_conf(dcu_node, pod, "main")
    golden = (
        "PciBusId: 0000:9F:00.0\n"
        "cu_mask: 0xffffffffffffffff\n"
        "cu_mask: 0x00000000000000ff\n"
        "cu_count: 72\n"
        "mem: 4096 MiB\n"
        "device_id: 0\n"
        "vdev_id: 0\n"
        "pipe_id: 0\n"
        "enable: 1\n"
    )
    assert text == golden  # the container sees its one card as device 0
    assert dirname == f"{pod['metadata']['uid']}_main_1_0_0_ffffffffffffffff_00000000000000ff"
    assert (dcu_node.paths.etc_vdev / "vdev0.conf").read_text() == golden.replace("device_id: 0", "device_id: 1")
    assert ("/dev/dri/card2", str(dcu_node.root / "dev/dri/card2"), "rw") in response.devices


GOLDEN_MEMORY_ONLY = """PciBusId: 0000:3D:00.0
cu_mask: 0xffffffffffffffff
cu_mask: 0x00ffffffffffffff
cu_count: 120
mem: 1024 MiB
device_id: 0
vdev_id: 0
pipe_id: 0
enable: 1
"""

GOLDEN_CORES_ONLY = """PciBusId: 0000:9F:00.0
cu_mask: 0x000000003fffffff
cu_mask: 0x0000000000000000
cu_count: 30
mem: 65520 MiB
device_id: 0
vdev_id: 1
pipe_id: 0
enable: 1
"""


def test_memory_only_and_cores_only(dcu_node):
    """dcumem alone (cores default to 100) and dcucores alone (all memory): both are vDCUs, so
    the limit that was asked for is enforced (HAMi's plugin wrote no vdev file for dcucores
    alone: Project-HAMi/dcu-vgpu-device-plugin#19)."""
    core = dcu_node.core()
    mem_only = dcu_node.bind("m", [("c", [dev("S1", 1024, 100)])])
    core.allocate([["DCU-S1-fake-0"]])
    text, dirname = read_conf(dcu_node, mem_only, "c")
    assert text == GOLDEN_MEMORY_ONLY
    assert dirname.endswith("_c_0_0_0_ffffffffffffffff_00ffffffffffffff")
    cores_only = dcu_node.bind("k", [("c", [dev("S2", 65520, 25)])])
    core.allocate([["DCU-S2-fake-0"]])
    text, _ = read_conf(dcu_node, cores_only, "c")
    assert text == GOLDEN_CORES_ONLY
    assert (dcu_node.paths.etc_vdev / "vdev1.conf").read_text() == GOLDEN_CORES_ONLY.replace(
        "device_id: 0", "device_id: 1"
    )


def test_whole_card_gets_devices_and_driver_but_no_vdev(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("w", [("c", [dev("S1", 65520, 100), dev("S2", 65520, 100)])])
    (response,) = core.allocate([["DCU-S1-fake-0", "DCU-S2-fake-0"]])
    assert vdev_dirs(dcu_node) == []
    paths = [c for c, _, _ in response.devices]
    assert paths == [
        "/dev/kfd",
        "/dev/mkfd",
        "/dev/dri/card1",
        "/dev/dri/renderD129",
        "/dev/dri/card2",
        "/dev/dri/renderD130",
    ]
    assert [c for c, _, _ in response.mounts] == ["/opt/hygondriver", "/opt/hyhal"]


def test_second_vdcu_on_a_card_does_not_overlap(dcu_node):
    core = dcu_node.core()
    first = dcu_node.bind("a", [("c", [dev("S1", 1000, 15)])])
    core.allocate([["DCU-S1-fake-0"]])
    second = dcu_node.bind("b", [("c", [dev("S1", 1000, 15)])])
    core.allocate([["DCU-S1-fake-1"]])
    a, _ = read_conf(dcu_node, first, "c")
    b, _ = read_conf(dcu_node, second, "c")
    assert "cu_mask: 0x000000000003ffff" in a
    assert "cu_mask: 0x0000000fffffc0000" not in b and "cu_mask: 0x0000000ffffc0000" in b
    assert "vdev_id: 1" in b and "pipe_id: 1" in b


def test_several_containers_in_one_call_each_get_their_own_response(dcu_node):
    core = dcu_node.core()
    pod = dcu_node.bind("multi", [("a", [dev("S1", 1000, 10)]), ("none", []), ("b", [dev("S2", 3000, 30)])])
    first, second = core.allocate([["DCU-S1-fake-0"], ["DCU-S2-fake-0"]])
    mount = lambda r: dict((c, h) for c, h, _ in r.mounts)["/etc/vdev/docker/"]  # noqa: E731
    assert "_a_0_" in mount(first) and "_b_1_" in mount(second)
    assert read_conf(dcu_node, pod, "a")[0].count("mem: 1000 MiB") == 1
    assert read_conf(dcu_node, pod, "b")[0].count("mem: 3000 MiB") == 1
    assert dcu_node.annotation("multi", DCU.pod_devices_to_allocate) == ";;;"
    assert dcu_node.annotation("multi", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS


def test_containers_across_calls_and_init_first(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("seq", [("init", [dev("S1", 65520, 100)]), ("app", [dev("S2", 500, 5)])], init=1)
    core.allocate([["DCU-S1-fake-0"]])
    assert dcu_node.annotation("seq", keys.POD_BIND_PHASE) == keys.BIND_PHASE_ALLOCATING
    assert dcu_node.lock_value() is not None  # more containers to come: the lock stays
    core.allocate([["DCU-S2-fake-0"]])
    assert dcu_node.annotation("seq", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert dcu_node.lock_value() is None


def test_no_lock_fails_closed(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("nolock", [("c", [dev("S1", 1000, 10)])], lock=False)
    with pytest.raises(AllocateFailed, match="no pod holds the node lock"):
        core.allocate([["DCU-S1-fake-0"]])
    assert vdev_dirs(dcu_node) == []


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("count", "asks for 2 device(s), hami-scheduler allocated 1"),
        ("card", "card DCU-S9 is not served"),
    ],
)
def test_refusals_mark_failed_and_release_the_lock(dcu_node, case, fragment):
    core = dcu_node.core()
    if case == "count":
        dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])])
        ids = ["DCU-S1-fake-0", "DCU-S1-fake-1"]
    else:
        dcu_node.bind("p", [("c", [dev("S9", 1000, 10)])])
        ids = ["DCU-S1-fake-0"]
    with pytest.raises(AllocateFailed, match=re.escape(fragment)):
        core.allocate([ids])
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_FAILED
    assert dcu_node.lock_value() is None
    assert vdev_dirs(dcu_node) == []
    events = dcu_node.kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    assert any(e["reason"] == "DCUAllocationFailed" and fragment.split("'")[0] in e["message"] for e in events)


def test_pod_deleted_meanwhile_releases_the_lock(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("gone", [("c", [dev("S1", 1000, 10)])])
    dcu_node.kube.delete_pod("default", "gone")
    with pytest.raises(AllocateFailed, match="was deleted"):
        core.allocate([["DCU-S1-fake-0"]])
    assert dcu_node.lock_value() is None


def test_failure_in_second_container_undoes_the_first(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("half", [("a", [dev("S1", 1000, 10)]), ("b", [dev("S2", 1000, 10)])])
    with pytest.raises(AllocateFailed):
        core.allocate([["DCU-S1-fake-0"], ["DCU-S2-fake-0", "DCU-S2-fake-1"]])
    assert vdev_dirs(dcu_node) == []
    assert list(dcu_node.paths.etc_vdev.iterdir()) == []
    assert core.vdevs.state.cu_used.get(0, 0) == 0 and not core.vdevs.state.vdevs_used


def test_cu_shortfall_is_an_error_not_a_smaller_mask(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("big", [("c", [dev("S1", 1000, 90)])])
    core.allocate([["DCU-S1-fake-0"]])
    dcu_node.bind("more", [("c", [dev("S1", 1000, 20)])])
    with pytest.raises(AllocateFailed, match="24 compute units requested, 12 free"):
        core.allocate([["DCU-S1-fake-1"]])


def test_restart_rebuilds_identical_state_and_reconcile_removes_gone_pods(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("a", [("c", [dev("S1", 1000, 15)])])
    core.allocate([["DCU-S1-fake-0"]])
    dcu_node.bind("b", [("c", [dev("S2", 1000, 50)])])
    core.allocate([["DCU-S2-fake-0"]])
    restarted = dcu_node.core()
    assert restarted.vdevs.state == core.vdevs.state
    dcu_node.kube.delete_pod("default", "a")
    removed = restarted.reconcile()
    assert len(removed) == 1 and "_c_0_" in removed[0]
    assert len(vdev_dirs(dcu_node)) == 1
    assert restarted.vdevs.state.cu_used[0] == 0 and restarted.vdevs.state.vdevs_used == {1}
    assert not (dcu_node.paths.etc_vdev / "vdev0.conf").exists()
    dcu_node.kube.patch_pod_status("default", "b", {"phase": "Succeeded"})
    assert len(restarted.reconcile()) == 1 and vdev_dirs(dcu_node) == []


def test_register_node_publishes_the_nine_field_record(dcu_node):
    core = dcu_node.core()
    core.register_node({"DCU-S2": False})
    annotations = dcu_node.kube.get_node("n1")["metadata"]["annotations"]
    assert annotations[DCU.node_register] == (
        "DCU-S1,4,65520,100,DCU-K100_AI,0,true,0,hami:DCU-S2,4,65520,100,DCU-K100_AI,0,false,1,hami:"
    )
    assert annotations[DCU.node_handshake].startswith("Reported ")


def test_shortfall_caused_by_a_deleted_pod_is_cleaned_up_at_once(dcu_node):
    """The scheduler frees a deleted pod's share at once; Allocate must not wait for the next cycle."""
    core = dcu_node.core()
    dcu_node.bind("old", [("c", [dev("S1", 1000, 90)])])
    core.allocate([["DCU-S1-fake-0"]])
    dcu_node.kube.delete_pod("default", "old")
    pod = dcu_node.bind("new", [("c", [dev("S1", 1000, 90)])])
    core.allocate([["DCU-S1-fake-1"]])
    assert [d for d in vdev_dirs(dcu_node) if d.startswith(pod["metadata"]["uid"])]
    assert len(vdev_dirs(dcu_node)) == 1


def test_vdcu_is_decided_by_the_chosen_cards_memory_not_card_zeros(dcu_node):
    """HAMi's plugin compared with device 0's memory, whichever card was chosen."""
    import yaml

    cards = yaml.safe_load(dcu_node.mock_file.read_text())
    cards[0]["memory_mib"] = 16000
    dcu_node.mock_file.write_text(yaml.safe_dump(cards))
    core = dcu_node.core()
    pod = dcu_node.bind("big-share", [("c", [dev("S2", 20000, 100)])])
    core.allocate([["DCU-S2-fake-0"]])
    text, _ = read_conf(dcu_node, pod, "c")
    assert "mem: 20000 MiB" in text and "PciBusId: 0000:9F:00.0" in text
    dcu_node.bind("whole-small", [("c", [dev("S1", 16000, 100)])])
    core.allocate([["DCU-S1-fake-0"]])
    assert len(vdev_dirs(dcu_node)) == 1  # all of card S1's memory and cores: a whole card, no vdev


def test_kubelet_slots_on_another_card_serve_the_scheduled_card_and_are_counted(dcu_node):
    """The scheduler's record is what was accounted, so it wins (Project-HAMi/HAMi#1741)."""
    core = dcu_node.core()
    pod = dcu_node.bind("p", [("c", [dev("S2", 1000, 10)])])
    (response,) = core.allocate([["DCU-S1-fake-3"]])
    text, _ = read_conf(dcu_node, pod, "c")
    assert "PciBusId: 0000:9F:00.0" in text
    assert ("/dev/dri/card2", str(dcu_node.root / "dev/dri/card2"), "rw") in response.devices
    assert core.metrics.value("hami_dcu_plugin_device_id_mismatches_total", node="n1") == 1
    assert core.metrics.value("hami_dcu_plugin_allocations_total", node="n1", result="success") == 1


def test_a_device_id_the_plugin_never_advertised_is_refused(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])])
    with pytest.raises(AllocateFailed, match="'GPU-0', which this plugin does not advertise"):
        core.allocate([["GPU-0"]])
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_FAILED
    assert dcu_node.lock_value() is None
    assert core.metrics.value("hami_dcu_plugin_allocations_total", node="n1", result="failed") == 1


def test_a_call_without_container_requests_fails_the_locked_pod(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])])
    with pytest.raises(AllocateFailed, match="without container requests"):
        core.allocate([])
    assert dcu_node.lock_value() is None


def test_api_error_writing_the_pod_undoes_the_vdev_and_releases_the_lock(dcu_node, api_server):
    core = dcu_node.core()
    dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])])
    api_server.faults.configure(error_rate=1.0, match=lambda method, path: method == "PATCH" and "/pods/" in path)
    try:
        with pytest.raises(AllocateFailed, match="500"):
            core.allocate([["DCU-S1-fake-0"]])
    finally:
        api_server.faults.clear()
    assert vdev_dirs(dcu_node) == [] and list(dcu_node.paths.etc_vdev.iterdir()) == []
    assert not core.vdevs.state.vdevs_used and core.vdevs.state.cu_used.get(0, 0) == 0
    assert dcu_node.lock_value() is None  # the node write went through


def test_api_unreachable_for_the_node_is_a_clear_error_that_changes_nothing(dcu_node, api_server):
    core = dcu_node.core()
    dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])])
    api_server.faults.configure(error_rate=1.0, match=lambda method, path: method == "GET" and "/nodes/" in path)
    try:
        with pytest.raises(AllocateFailed, match="cannot read node n1"):
            core.allocate([["DCU-S1-fake-0"]])
    finally:
        api_server.faults.clear()
    assert vdev_dirs(dcu_node) == []
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_ALLOCATING
    assert api_server.faults.injected["500"] == 3  # two quick retries before giving up
    # nothing was half done: the same call succeeds once the API answers
    core.allocate([["DCU-S1-fake-0"]])
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS


def test_reconcile_never_removes_live_vdevs(dcu_node):
    core = dcu_node.core()
    live = dcu_node.bind("live", [("c", [dev("S1", 1000, 10)])])
    core.allocate([["DCU-S1-fake-0"]])
    assert core.reconcile() == []
    assert [d for d in vdev_dirs(dcu_node) if d.startswith(live["metadata"]["uid"])]
    assert core.metrics.value("hami_dcu_plugin_vdevs", node="n1") == 1


def rogue_pod(node, name="rogue"):
    """A pod that asks for a DCU but reached the node without hami-scheduler."""
    return node.kube.create_pod("default", {"metadata": {"name": name}, "spec": {"nodeName": "n1", "containers": [
        {"name": "c", "image": "x", "resources": {"limits": {DCU.resources.count: "1"}}}]}})


def test_a_pod_that_bypassed_the_scheduler_makes_the_call_ambiguous_and_the_holder_is_untouched(dcu_node):
    """As in Project-HAMi/dcu-vgpu-device-plugin#11: never hand the lock holder's vDCU to whichever pod is admitted."""
    core = dcu_node.core()
    dcu_node.bind("a", [("c", [dev("S1", 1000, 10)])])
    before = dcu_node.kube.get_pod("default", "a")["metadata"]["annotations"]
    rogue_pod(dcu_node)
    with pytest.raises(Ambiguous, match=r"default/rogue \(not bound by hami-scheduler: spec.nodeName set by hand"):
        core.allocate([["DCU-S1-fake-0"]])
    assert dcu_node.kube.get_pod("default", "a")["metadata"]["annotations"] == before
    assert dcu_node.lock_value() is not None and vdev_dirs(dcu_node) == []
    events = dcu_node.kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    assert [e["involvedObject"]["name"] for e in events if e["reason"] == "DCUAllocationAmbiguous"] == ["a"]
    # The kubelet fails the rogue pod's admission; the holder's own call then succeeds.
    dcu_node.kube.patch_pod_status("default", "rogue", {"phase": "Failed"})
    core.allocate([["DCU-S1-fake-0"]])
    assert dcu_node.annotation("a", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS


def zero_count_pod(node, name="zero"):
    """Issue 35, finding 1: a tenant pod naming the count with 0 (admitted as a no-DCU pod),
    placed here by another scheduler and kept Pending (an init container that keeps failing)."""
    return node.kube.create_pod("default", {"metadata": {"name": name}, "spec": {"nodeName": "n1", "initContainers": [
        {"name": "stuck", "image": "x", "resources": {"limits": {DCU.resources.count: "0"}}}], "containers": [
        {"name": "c", "image": "x", "resources": {"limits": {DCU.resources.count: "0"},
                                                  "requests": {DCU.resources.count: "0"}}}]}})


def test_a_pending_pod_asking_for_zero_dcus_does_not_stop_the_nodes_allocations(dcu_node):
    core = dcu_node.core()
    zero_count_pod(dcu_node)
    dcu_node.bind("a", [("c", [dev("S1", 1000, 10)])])
    core.allocate([["DCU-S1-fake-0"]])
    assert dcu_node.annotation("a", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert dcu_node.lock_value() is None


def test_a_pod_still_allocating_without_the_lock_is_a_rival(dcu_node):
    """As in Project-HAMi/HAMi#3096: an expired lock must not swap two pods' allocations."""
    core = dcu_node.core()
    dcu_node.bind("old", [("c", [dev("S1", 1000, 10)])], lock=False)
    dcu_node.bind("new", [("c", [dev("S2", 2000, 20)])])
    with pytest.raises(Ambiguous, match=r"default/old \(hami.io/bind-phase=allocating without the node lock"):
        core.allocate([["DCU-S2-fake-0"]])


def test_reconcile_releases_the_lock_of_a_holder_the_kubelet_failed(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("a", [("c", [dev("S1", 1000, 10)])])
    core.reconcile()
    assert dcu_node.lock_value() is not None  # Pending, its Allocate may still come
    dcu_node.kube.patch_pod_status("default", "a", {"phase": "Failed"})
    core.reconcile()
    assert dcu_node.lock_value() is None


def test_restart_after_a_card_vanished_keeps_each_grant_on_its_own_card(dcu_node):
    """SMI indices shift when a card disappears; grants follow the PCI bus id in their file."""
    import yaml

    core = dcu_node.core()
    on_s1 = dcu_node.bind("on-s1", [("c", [dev("S1", 1000, 50)])])
    core.allocate([["DCU-S1-fake-0"]])
    dcu_node.bind("on-s2", [("c", [dev("S2", 1000, 25)])])
    core.allocate([["DCU-S2-fake-0"]])
    cards = yaml.safe_load(dcu_node.mock_file.read_text())
    dcu_node.mock_file.write_text(yaml.safe_dump(cards[1:]))  # S1 is gone: S2 is now index 0
    restarted = dcu_node.core()
    assert list(restarted.core.by_index) == [0] and restarted.core.by_index[0].id == "DCU-S2"
    assert restarted.vdevs.state.cu_used[0] == (1 << 30) - 1  # S2's 30 CUs, not S1's 60
    assert restarted.vdevs.state.vdevs_used == {0, 1}  # S1's vDCU keeps its vdev id while its pod lives
    new = dcu_node.bind("new", [("c", [dev("S2", 1000, 25)])])
    restarted.allocate([["DCU-S2-fake-1"]])
    text, _ = read_conf(dcu_node, new, "c")
    assert "cu_mask: 0x0fffffffc0000000" in text and "vdev_id: 2" in text and "pipe_id: 1" in text
    dcu_node.kube.delete_pod("default", "on-s1")
    (removed,) = restarted.reconcile()
    assert removed.startswith(on_s1["metadata"]["uid"]) and restarted.vdevs.state.vdevs_used == {1, 2}
    assert restarted.vdevs.state.cu_used[0] == (1 << 60) - 1


@pytest.mark.parametrize("case", ["success", "running", "elsewhere"])
def test_a_lock_whose_holder_is_done_is_released_and_the_holder_never_marked_failed(dcu_node, case):
    """Issue 12, cause 8: the call is some other pod's; the holder must keep its phase."""
    core = dcu_node.core()
    if case == "elsewhere":
        dcu_node.kube.create_node({"metadata": {"name": "other"}})
        dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])], node="other")
    else:
        dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])], bind_phase=keys.BIND_PHASE_SUCCESS)
        if case == "running":
            dcu_node.kube.patch_pod_status("default", "p", {"phase": "Running"})
    before = dcu_node.annotation("p", keys.POD_BIND_PHASE)
    with pytest.raises(AllocateFailed, match="no longer needs it"):
        core.allocate([["DCU-S1-fake-0"]])
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == before
    assert dcu_node.lock_value() is None
    assert vdev_dirs(dcu_node) == []
    events = dcu_node.kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    assert any(e["reason"] == "DCUAllocationRefused" and e["involvedObject"]["kind"] == "Node" for e in events)


def test_a_lock_whose_holder_is_not_bound_yet_is_left_alone(dcu_node):
    """Its bind is between the lock and the Binding: the call is another pod's."""
    from hami_dcu.common.io.nodelock import NodeLock

    core = dcu_node.core()
    dcu_node.kube.create_pod("default", {"metadata": {"name": "p", "annotations": {"keep": "me"}},
                                         "spec": {"containers": [{"name": "c", "image": "x"}]}})
    held = NodeLock(dcu_node.kube).take("n1", "default", "p")
    with pytest.raises(AllocateFailed, match="not bound yet"):
        core.allocate([["DCU-S1-fake-0"]])
    assert dcu_node.lock_value() == held.value
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) is None


def test_restart_trusts_its_own_record_not_the_tenants_vdev_file(dcu_node):
    """Issue 11, finding 4: a tenant rewrote the PciBusId in its vdev file; after a restart the
    plugin charged the grant to the other card, and the next pod on the first card got the
    tampered pod's CU mask. The plugin now rebuilds from its own state dir."""
    core = dcu_node.core()
    tampered = dcu_node.bind("tampered", [("c", [dev("S1", 1000, 50)])])
    core.allocate([["DCU-S1-fake-0"]])
    text, dirname = read_conf(dcu_node, tampered, "c")
    (dcu_node.paths.vdev_dir / dirname / "vdev0.conf").write_text(text.replace("0000:3D:00.0", "0000:9F:00.0"))
    restarted = dcu_node.core()
    assert restarted.vdevs.state == core.vdevs.state and restarted.vdevs.state.cu_used[0] == (1 << 60) - 1
    victim = dcu_node.bind("next", [("c", [dev("S1", 1000, 50)])])
    restarted.allocate([["DCU-S1-fake-1"]])
    mine, _ = read_conf(dcu_node, victim, "c")
    assert "cu_mask: 0x0fffffffc0000000" in mine or "cu_mask: 0xf000000000000000" in mine
    assert "cu_mask: 0x0fffffffffffffff\ncu_mask: 0x0000000000000000" not in mine


def test_vdev_dirs_without_a_record_of_ours_are_removed_not_trusted(dcu_node):
    core = dcu_node.core()
    live = dcu_node.bind("live", [("c", [dev("S1", 1000, 50)])])
    core.allocate([["DCU-S1-fake-0"]])
    planted = dcu_node.paths.vdev_dir / f"{live['metadata']['uid']}_x_1_0_7_ffffffffffffffff_0000000000000000"
    planted.mkdir()
    (planted / "vdev0.conf").write_text("PciBusId: 0000:9F:00.0\n")
    restarted = dcu_node.core()
    assert restarted.vdevs.state == core.vdevs.state  # the planted grant is not taken back
    assert restarted.reconcile() == [planted.name] and not planted.exists()
    assert restarted.vdevs.state == core.vdevs.state


def test_grants_from_before_the_state_dir_are_adopted_by_their_directory_name(dcu_node):
    """An upgrade from a plugin without a state dir keeps every live grant: the directory's
    own name (the plugin made it; a container cannot rename its mount root) is the record."""
    core = dcu_node.core()
    dcu_node.bind("old", [("c", [dev("S2", 1000, 25)])])
    core.allocate([["DCU-S2-fake-0"]])
    for record in dcu_node.paths.state_dir.iterdir():
        record.unlink()
    upgraded = dcu_node.core()
    assert upgraded.vdevs.state == core.vdevs.state
    assert [p.name for p in dcu_node.paths.state_dir.iterdir()] == [p.name + ".conf" for p in
                                                                   dcu_node.paths.vdev_dir.iterdir()]


@pytest.mark.parametrize("rewrite", [dev("S1", 65520, 100), dev("S1", 60000, 10), dev("S2", 1000, 10)],
                         ids=["whole-card", "60000MiB", "other-card"])
def test_a_to_allocate_that_disagrees_with_the_scheduler_is_refused(dcu_node, rewrite):
    """Issue 11, finding 2: a post-bind edit of dcu-devices-to-allocate was served as written.
    Allocate serves only what -allocated (the scheduler's record) says."""
    from hami_dcu.common.protocol.codec import encode_pod_devices

    core = dcu_node.core()
    dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])])
    dcu_node.kube.patch_pod_metadata("default", "p", annotations={
        DCU.pod_devices_to_allocate: encode_pod_devices([[rewrite]], DCU.pod_devices_to_allocate)})
    with pytest.raises(AllocateFailed, match=r"disagrees with hami\.io/dcu-devices-allocated"):
        core.allocate([[f"{rewrite.uuid}-fake-0"]])
    assert vdev_dirs(dcu_node) == [] and not any(core.vdevs.state.cu_used.values())
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_FAILED
