"""The driver's gRPC side over real unix sockets, driven by the kubelet stand-in's DRA client:
registration as the kubelet's plugin watcher does it, NodePrepare/NodeUnprepare in v1 and
v1beta1, CDI ids a runtime can resolve, and serving again when a socket disappears."""

import shutil
import time
from pathlib import Path

import grpc
import pytest
from dra_helpers import DEV0, DEV1, NODE, claim, node_cards, paths, result
from fake_kube import FakeKube

from e2e.realcluster.dra_client import CdiError, DraEndpoint, register, resolve_cdi
from hami_dcu.cli.localcluster.kubelet import short_socket_dir
from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.dra.core import DriverCore
from hami_dcu.dra.server import KubeletPluginServer
from hami_dcu.dra.service import DriverService


@pytest.fixture
def driver(tmp_path):
    sockets = short_socket_dir("dra-t-")
    kube = FakeKube(NODE)
    core = DriverCore(NODE, node_cards(tmp_path), paths(tmp_path))
    service = DriverService(kube, core, 4, lambda: {}, naming=DCU_NAMING)
    server = KubeletPluginServer(service.prepare, service.unprepare, sockets / "registry", sockets / "plugins",
                                 poll_interval=0.1).start()
    yield server, kube, core
    server.stop()
    shutil.rmtree(sockets, ignore_errors=True)


def test_registration_names_the_driver_its_endpoint_and_both_services(driver):
    server, _, _ = driver
    endpoint = register(server.registry_socket, Path)
    assert endpoint.driver == "dra.hygon.com" and endpoint.service == "v1.DRAPlugin"
    assert endpoint.socket == server.plugin_socket
    assert server.registry_socket.name == "dra.hygon.com-reg.sock"
    assert server.plugin_socket.parent.name == "dra.hygon.com"
    assert server.registration.registered.is_set()
    endpoint.close()


def test_prepare_answers_per_claim_with_cdi_ids_the_runtime_resolves(driver, tmp_path):
    server, kube, core = driver
    kube.add_claim(claim("uid-a", result(cores="30", memory="2Gi", share_id="share-a")))
    kube.add_claim(claim("uid-bad", result(device="hcu-nope"), name="bad"))
    endpoint = DraEndpoint(names.DRIVER, "v1.DRAPlugin", server.plugin_socket)
    answers = endpoint.prepare([("ns", "uid-a", "c1"), ("ns", "uid-bad", "bad")])
    assert answers["uid-bad"].error and "not served on node n1" in answers["uid-bad"].error
    [device] = answers["uid-a"].devices
    assert (device.request_names, device.pool, device.device, device.share_id) == (("dcu",), NODE, DEV0, "share-a")
    [cdi_id] = device.cdi_ids
    assert cdi_id.startswith("dra.hygon.com/dcu=uid-a-")
    # The dtk and hyhal dirs exist on a real node: the runtime checks every host path.
    core.paths.driver_dir.mkdir()
    core.paths.hyhal_dir.mkdir()
    edits = resolve_cdi([cdi_id], core.paths.cdi_dir, Path)
    assert {n["path"] for n in edits.device_nodes} == {"/dev/kfd", "/dev/mkfd", "/dev/dri/card1", "/dev/dri/renderD129"}
    vdev_mount = next(m for m in edits.mounts if m["containerPath"] == "/etc/vdev/docker")
    assert "cu_count: 30\n" in (tmp_path / vdev_mount["hostPath"] / "vdev0.conf").read_text()
    with pytest.raises(CdiError, match="unresolvable CDI devices"):
        resolve_cdi(["dra.hygon.com/dcu=nope"], core.paths.cdi_dir, Path)

    assert endpoint.unprepare([("ns", "uid-a", "c1")]) == {"uid-a": ""}
    assert not core.prepared and not list(core.paths.cdi_dir.iterdir())
    endpoint.close()


def test_v1beta1_kubelets_are_served_too(driver):
    server, kube, _ = driver
    kube.add_claim(claim("uid-w", result(device=DEV1)))
    endpoint = DraEndpoint(names.DRIVER, "v1beta1.DRAPlugin", server.plugin_socket)
    [device] = endpoint.prepare([("ns", "uid-w", "c1")])["uid-w"].devices
    assert device.device == DEV1 and device.share_id is None and device.cdi_ids
    assert endpoint.unprepare([("ns", "uid-w", "c1")]) == {"uid-w": ""}
    endpoint.close()


def test_a_removed_socket_is_served_again_and_registers_again(driver):
    server, _, _ = driver
    before = server.serves
    server.registry_socket.unlink()
    deadline = time.monotonic() + 5
    # The socket file appears just before the server counts the serve: wait for both.
    while not (server.registry_socket.exists() and server.serves > before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.serves == before + 1
    endpoint = register(server.registry_socket, Path)
    assert endpoint.driver == names.DRIVER
    endpoint.close()


def test_a_kubelet_that_speaks_neither_service_refuses_the_plugin(driver, monkeypatch):
    server, _, _ = driver
    from e2e.realcluster import dra_client

    monkeypatch.setattr(dra_client, "KUBELET_SERVICES", ("v2.DRAPlugin",))
    with pytest.raises(dra_client.RegistrationRefused, match="none of the services"):
        register(server.registry_socket, Path)
    assert not server.registration.registered.is_set()
    assert "none of the services" in server.registration.last_error


def test_a_stopped_driver_removes_its_sockets(driver):
    server, _, _ = driver
    server.stop()
    assert not server.registry_socket.exists() and not server.plugin_socket.exists()
    with pytest.raises(grpc.RpcError):
        register(server.registry_socket, Path)
