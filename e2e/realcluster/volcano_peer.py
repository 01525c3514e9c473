"""Upstream Volcano v1.15.1 as a peer of the real-cluster suite (issue 34): its scheduler
process, built from the source tarball in ../shared/peers (e2e/upstream/build-volcano.sh,
cached per user), its CRDs (PodGroup, Queue, ... kept beside the binary by the build), and a
scheduler configuration with the default tiers and the `extender` plugin pointed at an HTTP
extender.

Volcano's controllers and admission are not run: PodGroups and pods are created directly, as
Volcano's own tests do. What the queue controller would do for the scheduler (a Queue's
status.state `Open`, which the proportion plugin requires) is done here. Nothing of Volcano goes
into hami-dcu.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from e2e.realcluster import crds, upstream
from e2e.realcluster.controlplane import free_port
from e2e.realcluster.processes import Process, wait_for
from e2e.tools import ROOT
from hami_dcu.common.io.kube import Kube, NotFoundError

BUILD_SCRIPT = ROOT / "e2e" / "upstream" / "build-volcano.sh"
TARBALL = "volcano-v1.15.1-src.tar.gz"
SCHEDULER_NAME = "volcano"  # vc-scheduler's default --scheduler-name
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # a pod's PodGroup (Volcano's api)
SCHEDULING = "/apis/scheduling.volcano.sh/v1beta1"
# The CRD files (of the build's crd/) the scheduler needs: PodGroup and Queue, and the HyperNode
# and Numatopology its cache watches too (it waits for every informer's first list before its
# first session).
CRD_FILES = ("scheduling.volcano.sh_podgroups.yaml", "scheduling.volcano.sh_queues.yaml",
             "topology.volcano.sh_hypernodes.yaml", "nodeinfo.volcano.sh_numatopologies.yaml")
# The extender plugin's verbs (pkg/scheduler/plugins/extender/extender.go), as argument name ->
# the path component Volcano POSTs to (urlPrefix + "/" + verb).
VERBS = {
    "onSessionOpenVerb": "onSessionOpen",
    "onSessionCloseVerb": "onSessionClose",
    "predicateVerb": "predicate",
    "prioritizeVerb": "prioritize",
    "preemptableVerb": "preemptable",
    "reclaimableVerb": "reclaimable",
    "queueOverusedVerb": "queueOverused",
    "jobEnqueueableVerb": "jobEnqueueable",
    "jobReadyVerb": "jobReady",
    "allocateFuncVerb": "allocateFunc",
    "deallocateFuncVerb": "deallocateFunc",
}
# The verbs hami-dcu's extender answers for upstream Volcano (scheduler/volcanoapp.py), under
# its urlPrefix http://<extender>:<volcano.extender.port>/volcano: what the chart's README has
# users paste (README, Volcano mode).
HAMI_DCU_VERBS = {
    "onSessionOpenVerb": "onSessionOpen",
    "onSessionCloseVerb": "onSessionClose",
    "predicateVerb": "predicate",
    "prioritizeVerb": "prioritize",
    "preemptableVerb": "preemptable",
    "reclaimableVerb": "reclaimable",
    "allocateFuncVerb": "allocateFunc",
    "deallocateFuncVerb": "deallocateFunc",
}
HAMI_DCU_PREFIX = "/volcano"
JSON = dict[str, Any]


def source() -> Path:
    """The Volcano source tarball: $VOLCANO_SRC (the file or its folder), else ../shared/peers."""
    given = Path(os.environ.get("VOLCANO_SRC") or ROOT.parent / "shared" / "peers")
    return given / TARBALL if given.is_dir() else given


def why_unavailable() -> str | None:
    """The one-line reason Volcano's scheduler can be neither found nor built here, or None."""
    if shutil.which("go") is None:
        return "Volcano peer: no Go toolchain on PATH to build Volcano's scheduler"
    if not source().is_file():
        return f"Volcano peer: no Volcano source tarball at {source()} (set VOLCANO_SRC)"
    return None


def binary() -> Path:
    """The built vc-scheduler, building it first if needed (minutes cold, once)."""
    return Path(upstream.run_build(BUILD_SCRIPT, "Volcano's scheduler"))


def crd_dir(built: Path) -> Path:
    """Volcano's CRDs as released in the same tarball (the build copies them beside the binary)."""
    return built.parent / "crd"


def install_crds(kube: Kube, built: Path, files: Iterable[str] = CRD_FILES) -> None:
    """Create Volcano's CRDs (read from the cache, as released) and wait until they serve."""
    crds.install(kube, [crd_dir(built) / name for name in files], "Volcano's")


def scheduler_conf(extender_url: str | None, verbs: Mapping[str, str] = VERBS,
                   managed_resources: Iterable[str] = (), actions: str = "enqueue, allocate, backfill",
                   http_timeout: str = "2s", ignorable: bool | None = None, evictions: bool = False) -> str:
    """Volcano's scheduler configuration: its default tiers (priority, gang, conformance; drf,
    predicates, proportion, nodeorder, binpack) and, with `extender_url`, the extender plugin
    in the second tier, calling `verbs` there (extender.* arguments of Volcano's argument
    names). `managed_resources` empty: every task is of interest to the extender. `ignorable`
    False: an extender that cannot answer rejects (Volcano's default), never lets through.

    `evictions`: the layout under which the extender's preemptable and reclaimable answers
    count (README, Volcano mode): the extender last in the first tier, where Volcano
    intersects its victims with priority's, gang's and conformance's (a plugin of the second
    tier is never asked while the first tier decides), and drf's preemptable and proportion's
    reclaimable off, so a tier left undecided by the extender's REJECT is not decided by them."""
    first: list[JSON] = [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]
    second: list[JSON] = [{"name": "drf"}, {"name": "predicates"}, {"name": "proportion"},
                          {"name": "nodeorder"}, {"name": "binpack"}]
    if extender_url is not None:
        arguments: JSON = {"extender.urlPrefix": extender_url, "extender.httpTimeout": http_timeout}
        arguments.update({f"extender.{arg}": verb for arg, verb in verbs.items()})
        managed = list(managed_resources)
        if managed:
            arguments["extender.managedResources"] = managed
        if ignorable is not None:
            arguments["extender.ignorable"] = ignorable
        (first if evictions else second).append({"name": "extender", "arguments": arguments})
    if evictions:
        second[0]["enablePreemptable"] = False  # drf
        second[2]["enableReclaimable"] = False  # proportion
    return yaml.safe_dump({"actions": actions, "tiers": [{"plugins": first}, {"plugins": second}]},
                          sort_keys=False)


class VolcanoScheduler:
    """vc-scheduler as a process of the cluster's host, acting with the given kubeconfig."""

    def __init__(self, built: Path, kubeconfig: Path, workdir: Path, conf: str, verbosity: int = 4) -> None:
        self.built = built
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.conf_path = workdir / "volcano-scheduler.conf"
        self.conf = conf
        self.verbosity = verbosity
        self.process: Process | None = None

    def start(self, kube: Kube) -> VolcanoScheduler:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.conf_path.write_text(self.conf)
        argv = [str(self.built), f"--kubeconfig={self.kubeconfig}", f"--scheduler-conf={self.conf_path}",
                f"--scheduler-name={SCHEDULER_NAME}", "--leader-elect=false",
                f"--listen-address=127.0.0.1:{free_port('127.0.0.1')}",
                f"--healthz-address=127.0.0.1:{free_port('127.0.0.1')}",
                f"--cache-dump-dir={self.workdir}", "--schedule-period=1s", f"-v={self.verbosity}"]
        self.process = Process("vc-scheduler", argv, self.workdir / "vc-scheduler.log").start()
        # It creates the root and default queues at start; the queue controller (not run) would
        # open them.
        wait_for("Volcano's default queue created", lambda: _queue(kube, "default"), 90, [self.process])
        open_queue(kube, "root")
        open_queue(kube, "default")
        return self

    @property
    def processes(self) -> list[Process]:
        """To wait on: a wait fails early, with its log, if the scheduler dies."""
        return [self.process] if self.process is not None else []

    def log(self) -> str:
        return self.process.tail(200) if self.process is not None else ""

    def log_text(self) -> str:
        """Everything it has logged so far (a session opens with "Open Session" at -v=3)."""
        if self.process is None:
            return ""
        try:
            return self.process.log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=5)


def _queue(kube: Kube, name: str) -> JSON | None:
    try:
        return kube.request("GET", f"{SCHEDULING}/queues/{name}")
    except NotFoundError:
        return None


def open_queue(kube: Kube, name: str) -> None:
    """What Volcano's queue controller does for a new queue: status.state Open."""
    _queue_state(kube, name, "Open")


def close_queue(kube: Kube, name: str) -> None:
    """status.state Closed: proportion allocates nothing more of the queue's jobs, so a gang it
    tried and rolled back every session is left alone (nothing written in flight) from the
    session after."""
    _queue_state(kube, name, "Closed")


def _queue_state(kube: Kube, name: str, state: str) -> None:
    kube.request("PATCH", f"{SCHEDULING}/queues/{name}/status", body={"status": {"state": state}},
                 content_type="application/merge-patch+json")


def create_queue(kube: Kube, name: str, weight: int = 1, reclaimable: bool = True, opened: bool = True) -> None:
    """A Queue; with `opened` false it stays unopened: proportion neither enqueues nor allocates
    its jobs until `open_queue`, yet counts them (and its weight) in every queue's deserved share."""
    kube.request("POST", f"{SCHEDULING}/queues", body={
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
        "spec": {"weight": weight, "reclaimable": reclaimable}})
    if opened:
        open_queue(kube, name)


def delete_queue(kube: Kube, name: str) -> None:
    try:
        kube.request("DELETE", f"{SCHEDULING}/queues/{name}")
    except NotFoundError:
        pass


def create_podgroup(kube: Kube, namespace: str, name: str, min_member: int, queue: str = "default",
                    min_resources: Mapping[str, str] | None = None, priority_class: str | None = None) -> JSON:
    """A PodGroup. With `min_resources` (as Volcano's Job controller sets them) the enqueue
    action asks the plugins, the extender's jobEnqueueable included, whether the gang may
    enter; without, it enqueues the gang at once. `priority_class`: the job's priority, which
    Volcano's priority plugin compares between jobs (its Job controller gives the pods the same
    class)."""
    spec: JSON = {"minMember": min_member, "queue": queue}
    if min_resources is not None:
        spec["minResources"] = dict(min_resources)
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return kube.request("POST", f"{SCHEDULING}/namespaces/{namespace}/podgroups", body={
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def get_podgroup(kube: Kube, namespace: str, name: str) -> JSON:
    return kube.request("GET", f"{SCHEDULING}/namespaces/{namespace}/podgroups/{name}")


def delete_podgroup(kube: Kube, namespace: str, name: str) -> None:
    try:
        kube.request("DELETE", f"{SCHEDULING}/namespaces/{namespace}/podgroups/{name}")
    except NotFoundError:
        pass


def delete_made(kube: Kube, namespace: str, groups: list[str], queues: list[str]) -> None:
    """Delete the PodGroups (in `namespace`) and Queues a scenario made, and forget them: what
    every Volcano scenario's teardown does once its pods are gone."""
    for group in groups:
        delete_podgroup(kube, namespace, group)
    for queue in queues:
        delete_queue(kube, queue)
    groups.clear()
    queues.clear()


def gang_member(pod: JSON, group: str) -> JSON:
    """`pod` as a member of PodGroup `group`, for Volcano's scheduler to place."""
    pod["metadata"].setdefault("annotations", {})[GROUP_ANNOTATION] = group
    pod["spec"]["schedulerName"] = SCHEDULER_NAME
    return pod


__all__ = [
    "GROUP_ANNOTATION",
    "HAMI_DCU_PREFIX",
    "HAMI_DCU_VERBS",
    "SCHEDULER_NAME",
    "VERBS",
    "VolcanoScheduler",
    "binary",
    "close_queue",
    "crd_dir",
    "create_podgroup",
    "create_queue",
    "delete_podgroup",
    "delete_queue",
    "gang_member",
    "get_podgroup",
    "install_crds",
    "open_queue",
    "scheduler_conf",
    "why_unavailable",
]
