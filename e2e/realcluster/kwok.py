"""kwok on the real control plane: thousands of fake Nodes kept Ready, and the pods bound to
them moved to Running, by one process (sigs.k8s.io/kwok, built by e2e/upstream/build-kwok.sh
into a per-user cache, once).

kwok runs the Stages it is given. Ours are kwok's own defaults (copied from its module by the
build script): node-initialize, node-heartbeat-with-lease, pod-ready, pod-complete, pod-delete,
with two changes: pod-ready waits for a DCU pod's allocation, and pod-complete leaves the
harness's own pods running (a Job's pods finishing the moment they run would free their cards
before the next pod is placed, and no packing could be seen). A real kubelet starts a DCU pod's
containers only after the device plugin's Allocate; here the node-side simulator
(nodesim.py) does Allocate's work, and kwok turns the pod Running once its bind phase says so.
"""

from __future__ import annotations

import os
import subprocess
from collections import deque
from pathlib import Path
from typing import Any

import yaml

from e2e.realcluster import scalemix, upstream
from e2e.realcluster.processes import Process
from e2e.tools import ROOT
from hami_dcu.common.protocol import keys

BUILD_SCRIPT = ROOT / "e2e" / "upstream" / "build-kwok.sh"
JSON = dict[str, Any]

# What marks a Node as kwok's (its --manage-nodes-with-annotation-selector) and keeps everything
# that does not tolerate it (the chart's Deployment, Jobs and DaemonSets) off the fake nodes.
MANAGED_ANNOTATION = "kwok.x-k8s.io/node"
MANAGED_VALUE = "fake"
TAINT = {"key": MANAGED_ANNOTATION, "value": MANAGED_VALUE, "effect": "NoSchedule"}
TOLERATION = {"key": MANAGED_ANNOTATION, "operator": "Equal", "value": MANAGED_VALUE, "effect": "NoSchedule"}
# The stage files build-kwok.sh copies next to the binary, in the order kwok gets them.
STAGES = ("node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete")
# kwok's workers per kind of work (its default is 4 each), each making one API request at a
# time. In a DCU burst the API server is the busy part and a request takes 100-200 ms: 4 workers
# started about 25 pods/s, so DCU pods waited 11-18 s to be Running behind kwok's queue (plain
# pods, on an API server with room, 12 ms), and 4 lease workers fell behind at 5,000 nodes
# (nodes marked NotReady). A kubelet per node starts its pod at once.
WORKERS = 16
# The bind phases after which no Allocate is coming that would let a container start.
_NOT_STARTED = (keys.BIND_PHASE_ALLOCATING, keys.BIND_PHASE_FAILED)


def binary(script: Path = BUILD_SCRIPT) -> Path:
    """The kwok binary, built first if needed (minutes, once); the build's progress lines go to
    upstream.announce as they come, as the control plane's do."""
    given = os.environ.get("HAMI_DCU_KWOK_BIN")
    if given:
        return Path(given)
    process = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    said: deque[str] = deque(maxlen=100)
    for line in process.stderr:
        said.append(line)
        upstream.announce(line.rstrip("\n"))
    out = process.stdout.read()
    if process.wait() != 0:
        raise RuntimeError(f"building kwok failed:\n{''.join(said)[-4000:]}")
    path = Path(out.strip().splitlines()[-1])
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"build-kwok.sh reported {path}, which is not an executable")
    return path


def stages(stage_dir: Path) -> list[JSON]:
    """kwok's default Stages, pod-ready narrowed to pods whose containers may start."""
    loaded = [yaml.safe_load((stage_dir / f"{name}.yaml").read_text()) for name in STAGES]
    for stage in loaded:
        if stage["metadata"]["name"] == "pod-ready":
            narrow_pod_ready(stage)
        if stage["metadata"]["name"] == "pod-complete":
            narrow_pod_complete(stage)
    return loaded


def configuration(workers: int = WORKERS) -> JSON:
    """kwok's own options (the rest come from its flags)."""
    return {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
            "options": {"podPlayStageParallelism": workers, "nodePlayStageParallelism": workers,
                        "nodeLeaseParallelism": workers}}


def narrow_pod_ready(stage: JSON) -> None:
    """A pod whose allocation is still under way (or failed) does not start: kwok leaves it
    Pending. Pods without a bind phase (plain pods) start as kwok's default has them."""
    expressions = stage["spec"]["selector"].setdefault("matchExpressions", [])
    expressions.append({"key": f'.metadata.annotations["{keys.POD_BIND_PHASE}"]', "operator": "NotIn",
                        "values": list(_NOT_STARTED)})


def narrow_pod_complete(stage: JSON) -> None:
    """The pods of the harness's runs (Job pods included) keep running until deleted."""
    expressions = stage["spec"]["selector"].setdefault("matchExpressions", [])
    expressions.append({"key": f'.metadata.labels["{scalemix.RUN_LABEL}"]', "operator": "DoesNotExist"})


def start(kwok: Path, kubeconfig: Path, workdir: Path, lease_seconds: int) -> Process:
    """kwok managing the Nodes annotated `kwok.x-k8s.io/node: fake`, renewing their Leases
    every lease_seconds / 4 (kube-controller-manager's grace period must exceed that)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "kwok.yaml"
    config.write_text(yaml.safe_dump_all([configuration(), *stages(kwok.parent / "stages")]))
    return Process("kwok", [
        str(kwok), f"--kubeconfig={kubeconfig}", f"--config={config}",
        f"--manage-nodes-with-annotation-selector={MANAGED_ANNOTATION}={MANAGED_VALUE}",
        f"--node-lease-duration-seconds={lease_seconds}",
        # Fake pod IPs, far from the pod network the stand-in node uses.
        "--cidr=10.128.0.0/10", "--node-ip=10.127.0.1",
    ], workdir / "kwok.log").start()
