"""HAMi v2.10 as a peer of the real-cluster suite: its scheduler process, built from the source
tarball in ../shared/peers (e2e/upstream/build-hami.sh, cached per user), and its own chart
(`charts/hami` of the same tarball), installed with helm as HAMi's users install it.

The kubelet stand-in runs HAMi's chart's pods as it runs ours (e2e/realcluster/runtime.py):
the extender container of HAMi's image runs the built `hami-scheduler` binary, the bundled
kube-scheduler the upstream one, and the chart's certificate hooks (kube-webhook-certgen, whose
image is not here) e2e/realcluster/certgen.py. Nothing of HAMi goes into hami-dcu.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from e2e.realcluster import upstream
from e2e.realcluster.processes import wait_for
from e2e.tools import ROOT
from hami_dcu.cli.localcluster.pods import Ctr, pod_manifest
from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError

BUILD_SCRIPT = ROOT / "e2e" / "upstream" / "build-hami.sh"
TARBALL = "hami-v2.10.0-src.tar.gz"
RELEASE = "hami"
NAMESPACE = "kube-system"
# The images HAMi's chart renders (values: scheduler.extender.image, scheduler.patch.imageNew).
IMAGE, IMAGE_TAG = "docker.io/projecthami/hami", "v2.10.0"
CERTGEN_IMAGE, CERTGEN_TAG = "docker.io/liangjw/kube-webhook-certgen", "v1.1.1"
CERTGEN = ROOT / "e2e" / "realcluster" / "certgen.py"
# The username HAMi's scheduler (its extender and its kube-scheduler share the pod's account) writes with.
IDENTITY = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-scheduler"
SCHEDULER_NAME = "hami-scheduler"  # HAMi chart's schedulerName, which its webhook sets
# HAMi's NVIDIA names (its chart's defaults; v2.10's pkg/device/nvidia).
GPU, GPU_MEMORY = "nvidia.com/gpu", "nvidia.com/gpumem"
NVIDIA_REGISTER = "hami.io/node-nvidia-register"
GPU_ALLOCATED = "hami.io/vgpu-devices-allocated"
JSON = dict[str, Any]


def source() -> Path:
    """The HAMi source tarball: $HAMI_SRC (the file or its folder), else ../shared/peers."""
    given = Path(os.environ.get("HAMI_SRC") or ROOT.parent / "shared" / "peers")
    return given / TARBALL if given.is_dir() else given


def why_unavailable() -> str | None:
    """The one-line reason HAMi's scheduler can be neither found nor built here, or None."""
    if shutil.which("go") is None:
        return "HAMi peer: no Go toolchain on PATH to build HAMi's scheduler"
    if not source().is_file():
        return f"HAMi peer: no HAMi source tarball at {source()} (set HAMI_SRC)"
    return None


def binary() -> Path:
    """The built hami-scheduler, building it first if needed (about 8 minutes cold, once)."""
    return Path(upstream.run_build(BUILD_SCRIPT, "HAMi's scheduler"))


def chart(built: Path) -> Path:
    """HAMi's chart as released in the same tarball (the build copies it beside the binary)."""
    return built.parent / "charts" / "hami"


def images(built: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """What the kubelet stand-in runs for the images of HAMi's chart."""
    return ((IMAGE, (str(built),)),
            (CERTGEN_IMAGE, (sys.executable, str(CERTGEN))))


def values(kube_version: str, extender_args: Sequence[str] = ()) -> JSON:
    """HAMi's chart as its users install it for DCUs: its defaults, with the bundled
    kube-scheduler image of this cluster's version, and its NVIDIA device plugin off (it needs
    NVML on the node; the DCU node side is hami-dcu's device plugin). `extender_args` go to its
    scheduler process (the chart's scheduler.extender.extraArgs), e.g. its API client's rate."""
    return {
        "scheduler": {
            "kubeScheduler": {"image": {"registry": "registry.k8s.io", "repository": "kube-scheduler",
                                        "tag": kube_version}},
            "extender": {"extraArgs": ["--debug", "-v=4", *extender_args]},
            "service": {"type": "ClusterIP"},
        },
        "devicePlugin": {"enabled": False},
    }


def gpu_pod(name: str, gpus: int = 1, memory_mib: int = 1000) -> JSON:
    """A pod asking HAMi for a share of an NVIDIA GPU (HAMi chart's resource names)."""
    pod = pod_manifest(name, [Ctr("main")])
    pod["spec"]["containers"][0]["resources"] = {"limits": {GPU: str(gpus), GPU_MEMORY: str(memory_mib)}}
    # The fake GPU node has no kubelet: the node lifecycle controller taints it unreachable.
    pod["spec"]["tolerations"] = [{"operator": "Exists"}]
    return pod


def fake_gpu_node(kube: Kube, name: str, gpus: int = 2, memory_mib: int = 24000) -> None:
    """A Node as HAMi's NVIDIA device plugin would leave it (its registration, the GPUs in
    allocatable), with no kubelet: HAMi's scheduler places and binds pods there; nothing runs
    them."""
    devices = [{"id": f"GPU-{name}-{i}", "index": i, "count": 10, "devmem": memory_mib, "devcore": 100,
                "type": "NVIDIA-Tesla T4", "numa": 0, "mode": "hami-core", "health": True} for i in range(gpus)]
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: str(10 * gpus)}
    # Tainted, so that only the GPU pods (which tolerate everything) land where nothing runs pods.
    kube.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "gpu": "on"},
                                   "annotations": {NVIDIA_REGISTER: json.dumps(devices)}},
                      "spec": {"taints": [{"key": "hami-e2e/no-kubelet", "effect": "NoSchedule"}]}})
    kube.patch_node_status(name, {"capacity": resources, "allocatable": resources,
                                  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                                  "message": "a fake GPU node"}]})


def webhook_routes(kube: Kube, namespace: str, probe: JSON | None = None) -> bool:
    """HAMi's webhook answers: a DCU pod (or `probe`) created with dryRun comes back routed to
    HAMi's scheduler. Its failurePolicy is Ignore, so until its Service routes to a ready pod a
    pod is silently left to the default scheduler; nothing else says when that ends."""
    probe = probe or pod_manifest("hami-webhook-probe", [Ctr("main", 1, 1000, 10)])
    try:
        made = kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", query={"dryRun": "All"}, body=probe)
    except KubeError:
        return False
    return made["spec"].get("schedulerName") == SCHEDULER_NAME


def serves(kube: Kube, namespace: str, timeout: float = 180.0) -> None:
    """Until HAMi's webhook routes DCU pods and its scheduler has registered the nodes' DCUs
    (its cache reads node registrations on its own 15 s cycle): one canary pod served end to
    end, then deleted."""
    wait_for("HAMi's webhook routing DCU pods", lambda: webhook_routes(kube, namespace), 60)
    kube.create_pod(namespace, pod_manifest("hami-canary", [Ctr("main", 1, 1000, 10)]))

    def running() -> bool:
        return (kube.get_pod(namespace, "hami-canary").get("status") or {}).get("phase") == "Running"

    wait_for("a canary DCU pod placed by HAMi and Running", running, timeout)
    kube.delete_pod(namespace, "hami-canary")
    wait_for("the canary gone", lambda: _gone(kube, namespace, "hami-canary"), 60)


def _gone(kube: Kube, namespace: str, name: str) -> bool:
    try:
        kube.get_pod(namespace, name)
    except NotFoundError:
        return True
    return False


__all__ = ["IDENTITY", "NAMESPACE", "RELEASE", "SCHEDULER_NAME", "binary", "chart", "images", "serves", "values",
           "webhook_routes", "why_unavailable"]
