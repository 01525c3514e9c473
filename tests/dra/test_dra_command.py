"""`hami-dcu dra-driver` wiring: flags into a driver over mock cards, the loop publishing and
reconciling, and a second process taking over what the first prepared."""

import shutil

import yaml
from dra_helpers import CARDS, NODE, claim, result
from fake_kube import FakeKube

from hami_dcu.cli.localcluster.kubelet import short_socket_dir
from hami_dcu.cli.main import build_parser
from hami_dcu.common.protocol.dra import names
from hami_dcu.dra.command import DriverLoop, build
from hami_dcu.dra.server import ClaimRef


def args_for(tmp_path, sockets, *extra):
    mock = tmp_path / "mock.yaml"
    mock.write_text(yaml.safe_dump([{"serial": c.serial, "model": c.model, "memory_mib": c.memory_mib,
                                     "compute_units": c.compute_units, "pci_bus_id": c.pci_bus_id, "numa": c.numa}
                                    for c in CARDS]))
    parser, _ = build_parser()
    return parser.parse_command_line([
        "dra-driver", "--node-name", NODE, "--smi", "mock", "--mock-devices", str(mock), "--mock-fake-tree",
        "--dev-root", str(tmp_path / "dev"), "--sys-root", str(tmp_path / "sys"),
        "--registry-dir", str(sockets / "reg"), "--kubelet-plugins-dir", str(sockets / "plugins"),
        "--cdi-dir", str(tmp_path / "cdi"), "--vdev-dir", str(tmp_path / "vgpu"), "--etc-vdev", str(tmp_path / "etc"),
        "--state-dir", str(tmp_path / "state"), "--slots-per-card", "2", *extra])


def test_the_command_builds_a_driver_that_publishes_and_reconciles(tmp_path):
    sockets = short_socket_dir("dra-c-")
    try:
        kube = FakeKube(NODE)
        service, server = build(args_for(tmp_path, sockets), kube)
        assert server.registry_socket == sockets / "reg" / "dra.hygon.com-reg.sock"
        assert sorted(service.core.cards) == [names.device_name(c.pci_bus_id) for c in CARDS]
        loop = DriverLoop(service, interval=30, health_interval=1)
        service.refresh_health()
        assert loop.once() is True
        [published] = kube.slices.values()
        assert published["spec"]["devices"][0]["capacity"]["slices"]["value"] == "2"

        kube.add_claim(claim("uid-1", result(cores="10", memory="1Gi")))
        service.prepare(ClaimRef("ns", "c1", "uid-1"))
        # A new process (the DaemonSet's next pod) takes the claim back from the records.
        again, _ = build(args_for(tmp_path, sockets), kube)
        assert set(again.core.prepared) == {"uid-1"}
        assert bin(again.core.state.cu_used[0]).count("1") == 10
        # ... and frees it once the claim is gone from the API server.
        del kube.claims[("ns", "c1")]
        assert DriverLoop(again, 30, 1).once() is True
        assert not again.core.prepared and again.core.state.cu_used[0] == 0
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def test_an_unreachable_api_server_is_retried_not_fatal(tmp_path):
    sockets = short_socket_dir("dra-c-")
    try:
        kube = FakeKube(NODE)
        service, _ = build(args_for(tmp_path, sockets), kube)
        kube.down = True
        assert DriverLoop(service, 30, 1).once() is False
        kube.down = False
        assert DriverLoop(service, 30, 1).once() is True
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def test_the_driver_looks_for_a_device_plugin_of_its_own_naming_set(tmp_path):
    """A device plugin of the driver's set advertising on its node is the conflict it reports."""
    sockets = short_socket_dir("dra-c-")
    (tmp_path / "dcu").mkdir()
    (tmp_path / "hcu").mkdir()
    try:
        dcu, _ = build(args_for(tmp_path / "dcu", sockets), FakeKube(NODE))
        hcu, _ = build(args_for(tmp_path / "hcu", sockets, "--naming", "hcu"), FakeKube(NODE))
        assert dcu.count_resources == ("hygon.com/dcunum",) and hcu.count_resources == ("hygon.com/hcunum",)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
