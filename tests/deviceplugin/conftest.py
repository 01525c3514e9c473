"""A node for device plugin tests: mock cards, fake /sys and /dev, the local API server."""

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from dp_helpers import CARDS

from hami_dcu.cli.localcluster.kubelet import short_socket_dir
from hami_dcu.common.io.kube import Kube
from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, encode_pod_devices
from hami_dcu.deviceplugin.core import Paths
from hami_dcu.deviceplugin.service import PluginService
from hami_dcu.node.discovery import discover
from hami_dcu.node.faketree import lay_out
from hami_dcu.node.podresources import PodResourcesError
from hami_dcu.node.smi import MockBackend

DCU = keys.DCU_NAMING  # the naming set these tests speak

NODE = "n1"


def no_kubelet() -> object:
    """No kubelet here: its pod resources API never answers (tests that need one pass their own)."""
    raise PodResourcesError("no kubelet pod resources socket in these tests")


@dataclass
class Node:
    kube: Kube
    root: Path
    mock_file: Path
    paths: Paths
    plugin_dir: Path
    cores: list[PluginService] = field(default_factory=list)

    def core(self, **kwargs) -> PluginService:
        """The device plugin as its command builds it, minus gRPC: its service over its pure core."""
        cards = discover(MockBackend(self.mock_file).cards(), self.root / "sys", self.root / "dev", DCU)
        core = PluginService(self.kube, NODE, cards, self.paths,
                             **{"naming": DCU, "pod_resources": no_kubelet, **kwargs})
        self.cores.append(core)
        return core

    def bind(
        self,
        name: str,
        containers: list[tuple[str, list[ContainerDevice]]],
        init: int = 0,
        lock: bool = True,
        bind_phase: str = keys.BIND_PHASE_ALLOCATING,
        node: str = NODE,
    ) -> dict:
        """Create a pod and do what hami-scheduler's /bind does: lock, then Binding with annotations."""
        specs = [
            {
                "name": cname,
                "image": "x",
                "resources": {"limits": {DCU.resources.count: str(len(devs))} if devs else {}},
            }
            for cname, devs in containers
        ]
        pod = self.kube.create_pod(
            "default",
            {
                "metadata": {"name": name},
                "spec": {"initContainers": specs[:init], "containers": specs[init:], "schedulerName": "hami-scheduler"},
            },
        )
        value = encode_pod_devices([devs for _, devs in containers])
        if lock:
            NodeLock(self.kube).acquire(NODE, "default", name)
        self.kube.create_binding(
            "default",
            name,
            node,
            annotations={
                DCU.pod_devices_to_allocate: value,
                DCU.pod_devices_allocated: value,
                keys.POD_NODE: node,
                keys.POD_BIND_PHASE: bind_phase,
                keys.POD_BIND_TIME: "1754532001",
                keys.POD_TIME: "1754532000",
            },
        )
        return self.kube.get_pod("default", pod["metadata"]["name"])

    def lock_value(self) -> str | None:
        # Allocate answers before its lock release is done (the release follows the answer):
        # read the lock once every core here has finished what it started.
        for core in self.cores:
            assert core.idle(timeout=10), "an Allocate's lock release did not finish in 10 s"
        return (self.kube.get_node(NODE)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)

    def annotation(self, name: str, key: str) -> str | None:
        return self.kube.get_pod("default", name)["metadata"]["annotations"].get(key)


@pytest.fixture
def dcu_node(kube, tmp_path) -> Node:
    root = tmp_path / "root"
    mock_file = tmp_path / "cards.yaml"
    mock_file.write_text(yaml.safe_dump(CARDS))
    lay_out(MockBackend(mock_file).cards(), root / "sys", root / "dev", other_gpus=1)
    kube.create_node({"metadata": {"name": NODE}})
    plugin_dir = short_socket_dir("dp-")
    yield Node(
        kube,
        root,
        mock_file,
        Paths(vdev_dir=root / "vgpu", etc_vdev=root / "etc-vdev", state_dir=root / "state", dev_root=root / "dev",
              driver_dir=Path("/opt/dtk")),
        plugin_dir,
    )
    shutil.rmtree(plugin_dir, ignore_errors=True)
