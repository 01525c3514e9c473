"""The plugin over real gRPC with the local kubelet: registration, capacity, Allocate, restarts."""

import time

import pytest
import yaml
from dp_helpers import dev

from hami_dcu.common import keys
from hami_dcu.deviceplugin.server import DevicePluginServer
from hami_dcu.deviceplugin.smi import MockBackend
from hami_dcu.e2e.kubelet import LocalKubelet


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
        keys.DEFAULT_COUNT_RESOURCE,
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
    return (status.get("capacity") or {}).get(keys.DEFAULT_COUNT_RESOURCE), (status.get("allocatable") or {}).get(
        keys.DEFAULT_COUNT_RESOURCE
    )


def test_registration_and_list_and_watch_fill_capacity(running):
    node, kubelet, _ = running
    assert until(lambda: capacity(node) == ("8", "8"))
    assert kubelet.registrations == 1
    assert sorted(kubelet.endpoints[keys.DEFAULT_COUNT_RESOURCE].devices)[:2] == ["DCU-S1-fake-0", "DCU-S1-fake-1"]


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
    assert server.registrations == 2
    node.bind("after", [("c", [dev("S1", 1000, 10)])])
    assert until(lambda: node.kube.get_pod("default", "after")["status"]["phase"] == "Running")


def test_plugin_started_before_the_kubelet_registers_when_it_appears(dcu_node):
    core = dcu_node.core()
    server = DevicePluginServer(core, dcu_node.plugin_dir, keys.DEFAULT_COUNT_RESOURCE, poll_interval=0.1).start()
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
    assert kubelet.free_ids(keys.DEFAULT_COUNT_RESOURCE) == []
