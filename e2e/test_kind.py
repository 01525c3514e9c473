"""The shared scenarios on a real kind cluster, installed with `helm install hami-dcu ./chart`.

Runs only where Docker (with a reachable daemon), kind, helm and kubectl exist; everywhere
else every test is skipped with a one-line reason. The cluster has one control-plane and
two workers labelled `dcu=on`, and the chart runs the device plugin in mock-SMI mode, so
the pods get fake DCUs with real device files (character devices with /dev/null's numbers).

    pytest e2e/test_kind.py --kind-bin $(which kind) --kind-kubectl-bin $(which kubectl)
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_dcu.common.kube import Kube
from hami_dcu.e2e.scenarios import SCENARIOS, MockCard, Scenario, default_cards

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "hami-dcu:e2e"
NAMESPACE = "hami-e2e"
WORKERS = ["hami-dcu-e2e-worker", "hami-dcu-e2e-worker2"]
CARDS_PER_NODE = 2


def _missing_prerequisite() -> str | None:
    for tool in ("docker", "kind", "helm", "kubectl"):
        if shutil.which(tool) is None:
            return f"kind e2e: {tool} not found on PATH"
    try:
        subprocess.run(["docker", "info"], capture_output=True, check=True, timeout=20)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
        return "kind e2e: the Docker daemon is not reachable"
    return None


pytestmark = pytest.mark.kind
_REASON = _missing_prerequisite()


def _run(*cmd: str, **kwargs: Any) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs).stdout


class KindBackend:
    """ClusterBackend over a kind cluster: vdev files are read with `docker exec` on the node."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.kube = Kube.from_kubeconfig(str(kubeconfig))
        self.namespace = NAMESPACE
        self.cards: dict[str, list[MockCard]] = {node: default_cards(node, CARDS_PER_NODE) for node in WORKERS}

    def kubectl(self, *args: str) -> str:
        return _run("kubectl", "--kubeconfig", str(self.kubeconfig), *args)

    def vdev_files(self, node: str) -> dict[str, str]:
        script = (
            'for d in /usr/local/vgpu/dcu/*/; do [ -f "$d/vdev0.conf" ] && '
            'echo "==$(basename $d)" && cat "$d/vdev0.conf"; done'
        )
        out = _run("docker", "exec", node, "sh", "-c", script)
        files: dict[str, str] = {}
        current = None
        for line in out.splitlines():
            if line.startswith("=="):
                current = line[2:]
                files[current] = ""
            elif current:
                files[current] += line + "\n"
        return files

    def restart_device_plugin(self, node: str) -> None:
        self.kubectl(
            "-n",
            "kube-system",
            "delete",
            "pod",
            "-l",
            "app.kubernetes.io/component=device-plugin",
            "--field-selector",
            f"spec.nodeName={node}",
            "--wait=true",
        )
        self.kubectl(
            "-n",
            "kube-system",
            "rollout",
            "status",
            "daemonset",
            "-l",
            "app.kubernetes.io/component=device-plugin",
            "--timeout=120s",
        )

    def restart_scheduler(self) -> None:
        self.kubectl(
            "-n", "kube-system", "rollout", "restart", "deployment", "-l", "app.kubernetes.io/component=scheduler"
        )
        self.kubectl(
            "-n",
            "kube-system",
            "rollout",
            "status",
            "deployment",
            "-l",
            "app.kubernetes.io/component=scheduler",
            "--timeout=180s",
        )


@pytest.fixture(scope="session")
def kind_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindBackend]:
    if _REASON:
        pytest.skip(_REASON)
    work = tmp_path_factory.mktemp("kind")
    config = work / "kind.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kind": "Cluster",
                "apiVersion": "kind.x-k8s.io/v1alpha4",
                "nodes": [{"role": "control-plane"}, {"role": "worker"}, {"role": "worker"}],
            }
        )
    )
    kubeconfig = work / "kubeconfig"
    _run(
        "kind", "create", "cluster", "--name", "hami-dcu-e2e", "--config", str(config), "--kubeconfig", str(kubeconfig)
    )
    try:
        _run("docker", "build", "-t", IMAGE, str(ROOT), timeout=1800)
        _run("kind", "load", "docker-image", IMAGE, "--name", "hami-dcu-e2e")
        backend = KindBackend(kubeconfig)
        for node in WORKERS:
            backend.kubectl("label", "node", node, "dcu=on", "--overwrite")
        mock = {node: [c.as_mock_entry() for c in cards] for node, cards in backend.cards.items()}
        values = work / "values.yaml"
        values.write_text(
            yaml.safe_dump(
                {
                    "image": {"repository": "hami-dcu", "tag": "e2e", "pullPolicy": "Never"},
                    "devicePlugin": {"smi": "mock", "mockDevicesPerNode": mock},
                }
            )
        )
        _run(
            "helm",
            "install",
            "hami-dcu",
            str(ROOT / "chart"),
            "--namespace",
            "kube-system",
            "--kubeconfig",
            str(kubeconfig),
            "-f",
            str(values),
            "--wait",
            "--timeout",
            "10m",
        )
        backend.kubectl("create", "namespace", NAMESPACE)
        yield backend
    finally:
        subprocess.run(["kind", "delete", "cluster", "--name", "hami-dcu-e2e"], check=False)


def _fits_kind(s: Scenario) -> bool:
    """Scenarios need at least their topology; the 100-pod one needs ten nodes and runs locally only."""
    return s.nodes <= len(WORKERS) and s.cards_per_node <= CARDS_PER_NODE


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if _fits_kind(s)], ids=lambda s: s.name)
def test_scenario_on_kind(kind_backend: KindBackend, scenario: Scenario) -> None:
    kind_backend.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--wait=true")
    time.sleep(2)
    scenario.run(kind_backend)
