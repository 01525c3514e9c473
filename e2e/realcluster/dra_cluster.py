"""`DraRealCluster`: the real control plane with the chart in DRA mode (`mode: dra`).

Like RealCluster, with kubelet stand-ins that also do a kubelet's DRA part (dra_kubelet.py):
the kubelet's `plugins_registry` and `plugins` directories are short socket directories per
node, mapped where the driver's hostPath volumes name them, so the driver's advertised
endpoint resolves as on a real node. Ready once every node's driver is registered with its
kubelet and has published its ResourceSlice. DRAConsumableCapacity is on by default from
Kubernetes 1.36 (beta), so the control plane runs with its default feature gates.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from e2e.realcluster.cluster import PLUGIN_SOCKET_DIR, RealCluster, _merge
from e2e.realcluster.dra_kubelet import DraKubelet, host_path_resolver
from e2e.realcluster.processes import wait_for
from e2e.realcluster.runtime import Images, PodRuntime
from hami_dcu.common.io.kube import Kube, NotFoundError
from hami_dcu.common.protocol.dra import names

JSON = dict[str, Any]
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
PLUGINS_DIR = "/var/lib/kubelet/plugins"
CDI_DIR = "/var/run/cdi"
DRIVER_DIR, HYHAL_DIR = "opt/dtk", "opt/hyhal"  # the chart's devicePlugin.driverDir and hyhalDir


class DraRealCluster(RealCluster):
    kubelets: dict[str, DraKubelet]  # type: ignore[assignment]

    def clear_claims(self) -> None:
        """Delete every ResourceClaim of the test namespace and wait until they are gone (between
        tests, after clear_pods: a claim in use is not deleted before its pod is)."""
        path = f"{names.RESOURCE_API}/namespaces/{self.namespace}/resourceclaims"
        for claim in self.kube.request("GET", path).get("items") or []:
            try:
                self.kube.request("DELETE", f"{path}/{claim['metadata']['name']}")
            except NotFoundError:
                pass
        wait_for("the previous test's claims gone", lambda: not self.kube.request("GET", path).get("items"), 60)

    def values(self) -> JSON:
        # The caller's values last: they may set the interval too (bench/realcluster.py does).
        dra = {"mode": "dra", "draDriver": {"registerIntervalSeconds": 5}}
        return _merge(_merge(super().values(), dra), self.extra_values)

    def _start_node(self, node: str, images: Images) -> None:
        assert self.control_plane is not None and self.network is not None
        root = self.workdir / "nodes" / node
        # Unix socket paths are limited to ~107 bytes: the kubelet's socket dirs live under /tmp.
        sockets = Path(tempfile.mkdtemp(prefix=f"hami-dra-{node}-", dir="/tmp"))
        host_paths = {PLUGIN_SOCKET_DIR: sockets, REGISTRY_DIR: sockets / "registry", PLUGINS_DIR: sockets / "plugins"}
        for path in host_paths.values():
            path.mkdir(exist_ok=True)
        # The DTK and hyhal a real node has installed: CDI specs mount them into containers.
        for installed in (DRIVER_DIR, HYHAL_DIR):
            (root / installed).mkdir(parents=True, exist_ok=True)
        node_kube = Kube.from_kubeconfig(str(self.control_plane.node_kubeconfig(node)))
        runtime = PodRuntime(node_kube, node, root, host_paths, self.network, images,
                             (self.control_plane.address, self.control_plane.port))
        host_path = host_path_resolver(root, host_paths)
        kubelet = DraKubelet(node_kube, node, sockets, runtime, self.network.gateway, root / "pods",
                             labels={"dcu": "on"}, registry_dir=host_paths[REGISTRY_DIR],
                             cdi_dir=host_path(CDI_DIR), host_path=host_path)
        self.node_roots[node] = root
        self.kubelets[node] = kubelet.start()

    def resource_slice(self, node: str) -> JSON | None:
        try:
            return self.kube.request("GET", f"{names.RESOURCE_API}/resourceslices/{names.slice_name(node)}")
        except NotFoundError:
            return None

    def _wait_plugins_registered(self) -> None:
        def ready() -> bool:
            for node, cards in self.node_specs.items():
                if names.DRIVER not in self.kubelets[node].drivers:
                    return False
                published = self.resource_slice(node)
                if published is None or len(published["spec"].get("devices") or []) != len(cards):
                    return False
            return True

        assert self.control_plane is not None
        wait_for("every DRA driver registered with its kubelet and its ResourceSlice published", ready, 120,
                 self.control_plane.processes)

    def cdi_specs(self, node: str) -> list[str]:
        base = self.node_roots[node] / CDI_DIR.lstrip("/")
        return sorted(p.name for p in base.glob("*.json")) if base.is_dir() else []

    def restart_dra_driver(self, node: str) -> None:
        """Delete the driver pod; the DaemonSet's new one registers again."""
        kubelet = self.kubelets[node]
        before = kubelet.dra_registrations
        for pod in self._system_pods("dra-driver", node):
            self.kube.delete_pod("kube-system", pod["metadata"]["name"])
        wait_for(f"the DRA driver on {node} to register again", lambda: kubelet.dra_registrations > before, 120)


__all__ = ["DraRealCluster"]
