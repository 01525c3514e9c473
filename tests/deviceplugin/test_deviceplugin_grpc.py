"""The plugin over real gRPC with the local kubelet: registration, capacity, Allocate, restarts."""

import time

import grpc
import pytest
import yaml
from dp_helpers import dev

from hami_dcu.cli.localcluster.kubelet import LocalKubelet
from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin.api.v1beta1 import api_pb2, api_pb2_grpc
from hami_dcu.deviceplugin.server import DevicePluginServer
from hami_dcu.node.smi import MockBackend

DCU = keys.DCU_NAMING  # the naming set these tests speak


def until(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


@pytest.fixture
def running(dcu_node):
    kubelet = LocalKubelet(dcu_node.kube, "n1", dcu_node.plugin_dir).start()
    core = dcu_node.core()
    backend = MockBackend(dcu_node.mock_file)
    server = DevicePluginServer(
        core,
        dcu_node.plugin_dir,
        DCU.resources.count,
        poll_interval=0.1,
        health=lambda: {f"DCU-{c.serial}": c.healthy for c in backend.cards()},
    )
    server.refresh_health()
    server.start()
    yield dcu_node, kubelet, server
    server.stop()
    kubelet.stop()


def capacity(node):
    status = node.kube.get_node("n1").get("status") or {}
    return (status.get("capacity") or {}).get(DCU.resources.count), (status.get("allocatable") or {}).get(
        DCU.resources.count
    )


def test_registration_and_list_and_watch_fill_capacity(running):
    node, kubelet, _ = running
    assert until(lambda: capacity(node) == ("8", "8"))
    assert kubelet.registrations == 1
    assert sorted(kubelet.endpoints[DCU.resources.count].devices)[:2] == ["DCU-S1-fake-0", "DCU-S1-fake-1"]


def test_health_change_is_resent(running):
    node, _, _ = running
    until(lambda: capacity(node) == ("8", "8"))
    cards = yaml.safe_load(node.mock_file.read_text())
    cards[1]["healthy"] = False
    node.mock_file.write_text(yaml.safe_dump(cards))
    assert until(lambda: capacity(node) == ("8", "4"))


def test_kubelet_allocates_over_grpc_and_pod_runs(running):
    node, kubelet, _ = running
    until(lambda: capacity(node) == ("8", "8"))
    pod = node.bind("p", [("main", [dev("S2", 2000, 15)])])
    assert until(lambda: node.kube.get_pod("default", "p")["status"]["phase"] == "Running")
    response = kubelet.responses[pod["metadata"]["uid"]]["main"]
    assert [d.container_path for d in response.devices][-2:] == ["/dev/dri/card2", "/dev/dri/renderD130"]
    assert kubelet.assigned[pod["metadata"]["uid"]] == {"DCU-S2-fake-0"}  # the preferred slot on the right card
    assert node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS


def test_allocate_error_fails_the_pod_with_the_plugins_message(running):
    node, _, _ = running
    until(lambda: capacity(node) == ("8", "8"))
    node.bind("bad", [("c", [dev("S1", 1000, 10)])], lock=False)
    pod = until(lambda: (p := node.kube.get_pod("default", "bad"))["status"]["phase"] == "Failed" and p)
    assert pod["status"]["reason"] == "UnexpectedAdmissionError"
    assert "no pod holds the node lock" in pod["status"]["message"]


def test_kubelet_restart_leads_to_re_registration(running):
    node, kubelet, server = running
    until(lambda: kubelet.registrations == 1)
    kubelet.restart()
    assert until(lambda: kubelet.registrations == 2)
    # the kubelet counts inside Register, the plugin once Register has returned
    assert until(lambda: server.registrations == 2)
    node.bind("after", [("c", [dev("S1", 1000, 10)])])
    assert until(lambda: node.kube.get_pod("default", "after")["status"]["phase"] == "Running")


def test_plugin_started_before_the_kubelet_registers_when_it_appears(dcu_node):
    core = dcu_node.core()
    server = DevicePluginServer(core, dcu_node.plugin_dir, DCU.resources.count, poll_interval=0.1).start()
    try:
        assert server.registrations == 0
        kubelet = LocalKubelet(dcu_node.kube, "n1", dcu_node.plugin_dir).start()
        try:
            assert until(lambda: kubelet.registrations == 1)
            assert until(lambda: capacity(dcu_node) == ("8", "8"))
        finally:
            kubelet.stop()
    finally:
        server.stop()


def test_plugin_gone_leaves_capacity_but_no_allocatable(running):
    node, kubelet, server = running
    until(lambda: capacity(node) == ("8", "8"))
    server.stop()
    assert until(lambda: capacity(node) == ("8", "0"))
    assert kubelet.free_ids(DCU.resources.count) == []


def test_ids_are_freed_when_the_pod_goes(running):
    node, kubelet, _ = running
    until(lambda: capacity(node) == ("8", "8"))
    node.bind("p", [("main", [dev("S1", 2000, 15)])])
    until(lambda: node.kube.get_pod("default", "p")["status"]["phase"] == "Running")
    assert len(kubelet.free_ids(DCU.resources.count)) == 7
    node.kube.delete_pod("default", "p")
    assert until(lambda: len(kubelet.free_ids(DCU.resources.count)) == 8)


def test_several_container_requests_in_one_call_over_the_wire(dcu_node):
    """Each ContainerRequest gets its own response (HAMi's plugin reused one variable for all)."""
    server = DevicePluginServer(dcu_node.core(), dcu_node.plugin_dir, DCU.resources.count).start()
    try:
        with grpc.insecure_channel(f"unix://{server.socket}") as channel:
            stub = api_pb2_grpc.DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
            assert options.get_preferred_allocation_available and not options.pre_start_required
            pod = dcu_node.bind("two", [("a", [dev("S1", 1000, 10)]), ("b", [dev("S2", 65520, 100)])])
            reply = stub.Allocate(api_pb2.AllocateRequest(container_requests=[
                api_pb2.ContainerAllocateRequest(devices_ids=["DCU-S1-fake-0"]),
                api_pb2.ContainerAllocateRequest(devices_ids=["DCU-S2-fake-0"]),
            ]), timeout=10)
            first, second = reply.container_responses
            assert [m.container_path for m in first.mounts] == ["/etc/vdev/docker/", "/opt/hygondriver", "/opt/hyhal"]
            assert f"{pod['metadata']['uid']}_a_0_" in first.mounts[0].host_path
            assert [m.container_path for m in second.mounts] == ["/opt/hygondriver", "/opt/hyhal"]
            assert [d.container_path for d in second.devices][2:] == ["/dev/dri/card2", "/dev/dri/renderD130"]
            assert [d.permissions for d in first.devices] == ["rwm", "rwm", "rw", "rw"]
            with pytest.raises(grpc.RpcError) as refused:
                stub.Allocate(api_pb2.AllocateRequest(container_requests=[
                    api_pb2.ContainerAllocateRequest(devices_ids=["DCU-S1-fake-1"])]), timeout=10)
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "no pod holds the node lock" in refused.value.details()
    finally:
        server.stop()


def test_kubelet_restart_before_the_plugin_is_back_offers_nothing_and_refuses_as_the_real_one(running):
    """Seen on kind: after a kubelet restart, until the plugin registers again, the devices it
    served are known only from the checkpoint, unhealthy; a pod asking for them is refused with
    the real kubelet's words, and allocatable reads 0 meanwhile."""
    node, kubelet, server = running
    until(lambda: capacity(node) == ("8", "8"))
    server.stop()
    kubelet.restart()
    assert until(lambda: capacity(node) == ("8", "0"))
    node.bind("early", [("c", [dev("S1", 1000, 10)])])
    pod = until(lambda: (p := node.kube.get_pod("default", "early"))["status"]["phase"] == "Failed" and p)
    assert pod["status"]["reason"] == "UnexpectedAdmissionError"
    assert pod["status"]["message"] == ("Allocate failed due to no healthy devices present; cannot allocate "
                                        "unhealthy devices hygon.com/dcunum, which is unexpected")
