"""Upstream Kueue v0.17.0 in front of hami-dcu on the real-cluster suite's control plane
(issue 37): its controller manager (./cmd/kueue, built from the Go module proxy by
e2e/upstream/build-kueue.sh, cached per user) as a process of the host acting with the admin
kubeconfig, its CRDs as released in the same module, and a Configuration managing batch/v1 Jobs.

Kueue's admission webhooks are not registered. What they do for a Job is defaulting (a Job
naming a queue is created suspended) and validation; queueing, quota, admission, borrowing and
preemption are its controllers', and those are what sit in front of hami-dcu. The Jobs of the
suite are created as that webhook would leave them: `suspend: true` and the
`kueue.x-k8s.io/queue-name` label. Registering them would put Kueue on the path of every
pod and Job write of the cluster (its manifests name pod, Deployment and StatefulSet hooks
too, failurePolicy Fail), for integrations not run here. Kueue's manager starts its webhook
server whether or not anything calls it, so it gets a serving pair signed by the cluster's CA;
Kueue's internal certificate management is off.

Kueue reads its metrics serving pair from a fixed path when its own certificate management is
off (/etc/kueue/metrics/certs, where its Deployment mounts a Secret); the pair is written there
when that directory lacks one. Nothing of Kueue goes into hami-dcu.
"""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from e2e.realcluster import crds, upstream
from e2e.realcluster.controlplane import free_port
from e2e.realcluster.pki import Pki
from e2e.realcluster.processes import Process, wait_for
from e2e.tools import ROOT
from hami_dcu.common.io.kube import ConflictError, Kube, NotFoundError

BUILD_SCRIPT = ROOT / "e2e" / "upstream" / "build-kueue.sh"
VERSION = "v0.17.0"
API = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NAMESPACE = "kueue-system"  # the Configuration's namespace (Kueue's own objects, none here)
METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # fixed in cmd/kueue/main.go without cert management
JSON = dict[str, Any]


def why_unavailable() -> str | None:
    """The one-line reason Kueue can be neither found nor built here, or None (the build
    script says so itself, exit status 3, when the module proxy does not serve Kueue)."""
    if shutil.which("go") is None:
        return "Kueue peer: no Go toolchain on PATH to build Kueue"
    return None


def binary() -> Path:
    """The built kueue manager, building it first if needed (minutes cold, once)."""
    return Path(upstream.run_build(BUILD_SCRIPT, "Kueue"))


def install_crds(kube: Kube, built: Path) -> None:
    """Create every CRD of Kueue's release (the manager's caches watch most of them, not only
    the queue kinds) and wait until they serve."""
    crds.install(kube, sorted((built.parent / "crd").glob("*.yaml")), "Kueue's")


def configuration(health_port: int, metrics_port: int, webhook_port: int, cert_dir: Path) -> str:
    """Kueue's Configuration: batch/v1 Jobs only, those naming a queue only, no leader
    election (one replica), its own certificate management off, every port on loopback."""
    return yaml.safe_dump({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
    }, sort_keys=False)


class Kueue:
    """Kueue's manager as a process of the cluster's host."""

    def __init__(self, built: Path, kubeconfig: Path, workdir: Path, pki: Pki) -> None:
        self.built, self.kubeconfig, self.workdir, self.pki = built, kubeconfig, workdir, pki
        self.process: Process | None = None
        self.health_port = 0

    def start(self, kube: Kube) -> Kueue:
        self.workdir.mkdir(parents=True, exist_ok=True)
        install_crds(kube, self.built)
        try:
            kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
        except ConflictError:
            pass
        serving = self.pki.server("kueue-webhook", ["localhost"], ["127.0.0.1"])
        cert_dir = self.workdir / "webhook-certs"
        cert_dir.mkdir(exist_ok=True)
        shutil.copy(serving.cert, cert_dir / "tls.crt")
        shutil.copy(serving.key, cert_dir / "tls.key")
        if not (METRICS_CERTS / "tls.crt").exists() or not (METRICS_CERTS / "tls.key").exists():
            METRICS_CERTS.mkdir(parents=True, exist_ok=True)
            shutil.copy(serving.cert, METRICS_CERTS / "tls.crt")
            shutil.copy(serving.key, METRICS_CERTS / "tls.key")
        self.health_port = free_port("127.0.0.1")
        config = self.workdir / "kueue-config.yaml"
        config.write_text(configuration(self.health_port, free_port("127.0.0.1"), free_port("127.0.0.1"), cert_dir))
        argv = [str(self.built), f"--config={config}", f"--kubeconfig={self.kubeconfig}",
                # The visibility API is an aggregated API server of its own: not used here.
                "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2"]
        self.process = Process("kueue", argv, self.workdir / "kueue.log").start()

        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=3) as answer:
                return answer.status == 200

        wait_for("Kueue's manager ready", ready, 120, [self.process])
        return self

    @property
    def processes(self) -> list[Process]:
        return [self.process] if self.process is not None else []

    def log(self, lines: int = 80) -> str:
        return self.process.tail(lines) if self.process is not None else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=5)


# --- Kueue's objects -------------------------------------------------------------------------


def create(kube: Kube, path: str, body: JSON) -> JSON:
    return kube.request("POST", f"{API}/{path}", body=body)


def resource_flavor(kube: Kube, name: str, node_labels: Mapping[str, str]) -> JSON:
    return create(kube, "resourceflavors", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                            "metadata": {"name": name}, "spec": {"nodeLabels": dict(node_labels)}})


def cluster_queue(kube: Kube, name: str, flavor: str, quotas: Mapping[str, str], cohort: str | None = None,
                  preemption: JSON | None = None, held: bool = False) -> JSON:
    """One resource group of `quotas`' resources in one flavor; `held`: stopPolicy Hold (no new
    admission) until `release`."""
    spec: JSON = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": list(quotas), "flavors": [{
            "name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in quotas.items()]}]}],
    }
    if cohort is not None:
        spec["cohortName"] = cohort
    if preemption is not None:
        spec["preemption"] = preemption
    if held:
        spec["stopPolicy"] = "Hold"
    return create(kube, "clusterqueues", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                                          "metadata": {"name": name}, "spec": spec})


def release(kube: Kube, cluster_queue_name: str) -> None:
    kube.request("PATCH", f"{API}/clusterqueues/{cluster_queue_name}", body={"spec": {"stopPolicy": "None"}},
                 content_type="application/merge-patch+json")


def local_queue(kube: Kube, namespace: str, name: str, cluster_queue_name: str) -> JSON:
    return create(kube, f"namespaces/{namespace}/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue_name}})


def get_cluster_queue(kube: Kube, name: str) -> JSON:
    return kube.request("GET", f"{API}/clusterqueues/{name}")


def queued_job(name: str, queue: str, pods: int, pod_spec: JSON, priority_class: str | None = None) -> JSON:
    """A batch/v1 Job as Kueue's Job webhook leaves it: suspended, naming its LocalQueue."""
    spec = dict(pod_spec, restartPolicy="Never")
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0, "suspend": True,
                     "template": {"metadata": {"labels": {"job": name}}, "spec": spec}}}


def workload_of(kube: Kube, namespace: str, job: JSON) -> JSON | None:
    """The Workload Kueue made for the Job (owned by it), or None before it exists."""
    uid = job["metadata"]["uid"]
    for workload in kube.request("GET", f"{API}/namespaces/{namespace}/workloads").get("items") or []:
        if any(o.get("uid") == uid for o in workload["metadata"].get("ownerReferences") or []):
            return workload
    return None


def condition(obj: JSON | None, kind: str) -> JSON | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def is_true(obj: JSON | None, kind: str) -> bool:
    c = condition(obj, kind)
    return c is not None and c.get("status") == "True"


def delete_job(kube: Kube, namespace: str, name: str) -> None:
    try:
        kube.request("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                     query={"propagationPolicy": "Background"})
    except NotFoundError:
        pass


__all__ = [
    "QUEUE_LABEL",
    "VERSION",
    "Kueue",
    "binary",
    "cluster_queue",
    "condition",
    "configuration",
    "delete_job",
    "get_cluster_queue",
    "install_crds",
    "is_true",
    "local_queue",
    "queued_job",
    "release",
    "resource_flavor",
    "why_unavailable",
    "workload_of",
]
