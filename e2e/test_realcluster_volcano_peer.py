"""Upstream Volcano v1.15.1's scheduler on a real control plane (issue 34, first step): built
from ../shared/peers (e2e/upstream/build-volcano.sh), its PodGroup and Queue CRDs installed from
the same tarball, run with its default tiers (priority, gang, conformance; drf, predicates,
proportion, nodeorder, binpack) and its `extender` plugin pointed at a recording HTTP server of
this test, which answers every verb with "no objection" and keeps what Volcano sent.

1. A PodGroup of 4 plain pods (minMember 4) that fits lands whole, bound by Volcano.
2. Gangs that cannot fit whole bind none: 4 members asking more than the cluster has are not
   enqueued; 3 that fit the cluster's free CPUs in sum but only one per node are placed 2 in a
   session, then taken back (deallocate), every session.
3. The wire format Volcano's extender plugin really speaks, from those two gangs: which verbs it
   calls and the field names of each request, asserted here so that our answers to those verbs
   (hami-dcu as Volcano's DCU extender, the next step of issue 34) are built on what is sent,
   not on our reading of Volcano's Go structs.
4. A DCU share stops at Volcano's own resource fit while the nodes report only the card slots:
   the extender is never asked about it.

Skips with one line only where the real cluster cannot run, or Go or Volcano's tarball is missing.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from e2e.realcluster import volcano_peer as volcano
from e2e.realcluster.cluster import RELEASE, RealCluster, unavailable
from e2e.realcluster.processes import wait_for
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest

_REASON = unavailable() or volcano.why_unavailable()
pytestmark = [pytest.mark.realcluster, pytest.mark.peer]  # a peer of the background build (.ci/run)
JSON = dict[str, Any]


class Recorder:
    """An HTTP extender that says yes to everything Volcano asks and keeps each request."""

    # The "no objection" answer of each verb (extender/argument.go's response types):
    # predicate passes, no node preferred, a job enqueueable (util.Permit = 1) and ready as far
    # as the extender is concerned (gang still decides), no queue overused, no victim offered
    # (util.Abstain = 0), allocate and deallocate accepted.
    ANSWERS: dict[str, JSON] = {
        "predicate": {"status": "", "code": 0},
        "prioritize": {"nodeScore": {}, "errorMessage": ""},
        "preemptable": {"status": 0, "victims": []},
        "reclaimable": {"status": 0, "victims": []},
        "queueOverused": {"overused": False},
        "jobEnqueueable": {"status": 1},
        "jobReady": {"status": True},
        "allocateFunc": {"errorMessage": ""},
        "deallocateFunc": {"errorMessage": ""},
        "onSessionOpen": {},
        "onSessionClose": {},
    }

    def __init__(self) -> None:
        self.requests: list[tuple[str, JSON]] = []
        dump = os.environ.get("HAMI_DCU_VOLCANO_RECORD")  # a file to append every request to
        self.dump = Path(dump) if dump else None
        self.lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                verb = self.path.strip("/")
                with recorder.lock:
                    recorder.requests.append((verb, body))
                    if recorder.dump is not None:  # every request, for reading the wire format
                        with recorder.dump.open("a") as out:
                            out.write(json.dumps({"verb": verb, "body": body}) + "\n")
                answer = json.dumps(recorder.ANSWERS.get(verb, {})).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Recorder:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def of(self, verb: str, pod_prefix: str | None = None) -> list[JSON]:
        """The bodies of that verb, those about a task of `pod_prefix`'s pods only when given."""
        with self.lock:
            bodies = [body for v, body in self.requests if v == verb]
        if pod_prefix is None:
            return bodies
        return [b for b in bodies if any(str((t or {}).get("Name", "")).startswith(pod_prefix)
                                         for t in (b.get("task"), b.get("evictor")))]

    def verbs(self) -> set[str]:
        with self.lock:
            return {v for v, _ in self.requests}


class VolcanoWorld:
    def __init__(self, cluster: RealCluster, scheduler: volcano.VolcanoScheduler, recorder: Recorder) -> None:
        self.cluster, self.scheduler, self.recorder = cluster, scheduler, recorder
        self.kube, self.namespace = cluster.kube, cluster.namespace

    def gang(self, group: str, members: int, cpu: str) -> list[str]:
        """A PodGroup of `members` plain pods (no DCU), minMember = members, each asking `cpu`;
        its minResources the members' sum, as Volcano's Job controller would set it."""
        total = str(members * int(cpu))
        volcano.create_podgroup(self.kube, self.namespace, group, members, min_resources={"cpu": total})
        names = []
        for i in range(members):
            pod = pod_manifest(f"{group}-{i}", [Ctr("main")])
            pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
            self.kube.create_pod(self.namespace, volcano.gang_member(pod, group))
            names.append(pod["metadata"]["name"])
        return names

    def nodes_of(self, names: list[str]) -> dict[str, str | None]:
        return {n: self.kube.get_pod(self.namespace, n)["spec"].get("nodeName") for n in names}

    def phases(self, names: list[str]) -> dict[str, str]:
        return {n: (self.kube.get_pod(self.namespace, n).get("status") or {}).get("phase", "") for n in names}

    def story(self) -> str:
        return f"{self.cluster.diagnose()}\n--- vc-scheduler:\n{self.scheduler.log()}"


@pytest.fixture(scope="module")
def world() -> Iterator[VolcanoWorld]:
    if _REASON:
        pytest.skip(_REASON)
    built = volcano.binary()
    recorder = Recorder().start()
    nodes = {n: default_cards(n) for n in ("node0", "node1")}
    with RealCluster(nodes, namespace="volcano-e2e") as cluster:
        volcano.install_crds(cluster.kube, built)
        conf = volcano.scheduler_conf(recorder.url)
        scheduler = volcano.VolcanoScheduler(built, cluster.kubeconfig, cluster.workdir / "volcano", conf)
        try:
            scheduler.start(cluster.kube)
            yield VolcanoWorld(cluster, scheduler, recorder)
        finally:
            scheduler.stop()
            recorder.stop()


def test_a_gang_of_four_that_fits_lands_whole(world: VolcanoWorld) -> None:
    names = world.gang("fits", 4, "1")
    try:
        wait_for("the 4 members bound by Volcano and Running",
                 lambda: set(world.phases(names).values()) == {"Running"}, 120, world.scheduler.processes)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{world.story()}") from None
    assert all(world.nodes_of(names).values())
    # Volcano's session close writes the PodGroup's status from what it saw.
    def group_running() -> bool:
        status = volcano.get_podgroup(world.kube, world.namespace, "fits").get("status") or {}
        return status.get("phase") == "Running" and status.get("running") == 4

    wait_for("PodGroup fits Running with 4 running", group_running, 30, world.scheduler.processes)


def test_a_gang_that_cannot_fit_whole_binds_none(world: VolcanoWorld) -> None:
    # 2 nodes of 16 CPUs, the 4 of the gang above and the chart's pods on them (some 27 CPUs
    # free, under 16 on each). 4 members of 10 CPUs ask more than the cluster has: the enqueue
    # action keeps the gang out (its minResources do not fit). 3 of 8 fit the free CPUs in sum
    # but one per node: the gang is enqueued, the allocate action places 2 members in a session,
    # finds no node for the third and takes the 2 back. Neither binds anything.
    toobig = world.gang("toobig", 4, "10")
    split = world.gang("split", 3, "8")
    sessions = len(world.recorder.of("onSessionClose"))
    wait_for("Volcano to have tried the gangs over 5 sessions",
             lambda: len(world.recorder.of("onSessionClose")) >= sessions + 5, 60, world.scheduler.processes)
    assert world.recorder.of("allocateFunc", "split-"), world.story()
    assert world.recorder.of("deallocateFunc", "split-"), world.story()
    assert not world.recorder.of("allocateFunc", "toobig-"), world.story()
    # The session asks the plugins in tier order and stops at the first that rejects: proportion
    # (the queue's capacity) turns toobig away before the extender's jobEnqueueable is asked.
    enqueue_asked = {b["job"]["Name"] for b in world.recorder.of("jobEnqueueable")}
    assert "split" in enqueue_asked and "toobig" not in enqueue_asked, enqueue_asked
    names = toobig + split
    assert world.nodes_of(names) == dict.fromkeys(names), world.story()
    assert set(world.phases(names).values()) == {"Pending"}
    phases = {g: (volcano.get_podgroup(world.kube, world.namespace, g).get("status") or {}).get("phase")
              for g in ("toobig", "split")}
    assert phases == {"toobig": "Pending", "split": "Inqueue"}, phases
    for name in names:
        world.kube.delete_pod(world.namespace, name)
    volcano.delete_podgroup(world.kube, world.namespace, "toobig")
    volcano.delete_podgroup(world.kube, world.namespace, "split")


def test_the_wire_format_volcanos_extender_plugin_speaks(world: VolcanoWorld) -> None:
    """What Volcano v1.15.1's extender plugin POSTs (urlPrefix + "/" + verb, JSON), as recorded
    from the two gangs above. The request wrappers have lower-case json tags (`task`, `node`,
    `nodes`, `job`, `queue`); what they carry, Volcano's TaskInfo, NodeInfo, JobInfo and QueueInfo,
    have none and go out with their Go field names. Set HAMI_DCU_VOLCANO_RECORD to a file to
    have every request appended there as JSON lines."""
    rec = world.recorder
    called = rec.verbs()
    # The session's frame, the enqueue action's jobEnqueueable (a PodGroup with minResources),
    # the allocate action's queueOverused, predicate, prioritize, allocateFunc and, for a gang
    # rolled back, deallocateFunc, and jobReady. preemptable and reclaimable belong to the
    # preempt and reclaim actions, not configured here.
    assert {"onSessionOpen", "onSessionClose", "jobEnqueueable", "queueOverused", "predicate", "prioritize",
            "allocateFunc", "deallocateFunc", "jobReady"} <= called, sorted(called)

    # onSessionOpen: the session's snapshot (OnSessionOpenRequest has no tags), maps keyed by
    # JobID ("namespace/podgroup"), node name and queue name.
    opened = rec.of("onSessionOpen")[-1]
    assert set(opened) == {"Jobs", "Nodes", "Queues", "NamespaceInfo", "RevocableNodes", "NodeList"}, sorted(opened)
    assert {"node0", "node1"} <= set(opened["Nodes"] or {}), sorted(opened["Nodes"] or {})
    assert {"root", "default"} <= set(opened["Queues"] or {})
    assert rec.of("onSessionClose")[-1] == {}

    # predicate: {"task": TaskInfo, "node": NodeInfo}, one call per task and node tried.
    predicate = rec.of("predicate", "fits-")[0]
    assert set(predicate) == {"task", "node"}, sorted(predicate)
    task, node = predicate["task"], predicate["node"]
    assert {"UID", "Job", "Name", "Namespace", "TaskRole", "Resreq", "InitResreq", "NodeName", "Status", "Priority",
            "Preemptable", "BestEffort", "LastTransaction", "Pod"} <= set(task), sorted(task)
    pod = world.kube.get_pod(world.namespace, task["Name"])
    assert task["UID"] == pod["metadata"]["uid"]  # TaskID: the pod's UID
    assert task["Namespace"] == world.namespace and task["Name"].startswith("fits-")
    assert task["Job"] == f"{world.namespace}/fits"  # JobID: the PodGroup's namespace/name
    assert task["Pod"]["metadata"]["annotations"][volcano.GROUP_ANNOTATION] == "fits"  # the whole v1.Pod
    # Resources: CPU in millicores, memory in bytes, every other resource (extended ones
    # included) in ScalarResources, in thousandths of the quantity.
    assert task["Resreq"]["MilliCPU"] == 1000 and "ScalarResources" in task["Resreq"], task["Resreq"]
    assert {"Name", "Node", "State", "Allocatable", "Capacity", "Idle", "Used", "Releasing", "Pipelined",
            "Tasks"} <= set(node), sorted(node)
    assert node["Name"] in ("node0", "node1")
    assert node["Node"]["metadata"]["name"] == node["Name"]  # the whole v1.Node, annotations included
    assert world.cluster.naming.node_register in node["Node"]["metadata"]["annotations"]
    count = world.cluster.naming.resources.count
    assert node["Allocatable"]["ScalarResources"][count] == 1000 * 4 * 2, node["Allocatable"]  # 2 cards, 4 slots
    # Its Tasks (the pods bound there, TaskInfo each) keyed by "namespace/name": our device plugin's.
    assert any(key.startswith(f"kube-system/{RELEASE}-device-plugin-") for key in node["Tasks"]), sorted(node["Tasks"])

    # prioritize, with the nodes that passed: {"task", "nodes": [NodeInfo...]}.
    for body in rec.of("prioritize", "fits-"):
        assert set(body) == {"task", "nodes"} and {n["Name"] for n in body["nodes"]} <= {"node0", "node1"}

    # allocateFunc: {"task": TaskInfo}, the session's choice in TaskInfo.NodeName (and in the
    # carried Pod's spec.nodeName; not yet bound), Status Allocated (2).
    allocated = rec.of("allocateFunc", "fits-")
    assert {b["task"]["Name"] for b in allocated} == {f"fits-{i}" for i in range(4)}
    for body in allocated:
        assert set(body) == {"task"}
        assert body["task"]["NodeName"] in ("node0", "node1") and body["task"]["Status"] == 2, body["task"]["Status"]
        assert body["task"]["Pod"]["spec"]["nodeName"] == body["task"]["NodeName"]
    # deallocateFunc: {"task": TaskInfo}, Status back to Pending (1), NodeName still the node
    # it is taken from; only members allocated before in the same session.
    taken_back = rec.of("deallocateFunc", "split-")
    for body in taken_back:
        assert set(body) == {"task"} and body["task"]["Name"].startswith("split-")
        assert body["task"]["Status"] == 1 and body["task"]["NodeName"] in ("node0", "node1"), body["task"]
    assert {b["task"]["Name"] for b in taken_back} <= {b["task"]["Name"] for b in rec.of("allocateFunc", "split-")}

    # jobEnqueueable and jobReady: {"job": JobInfo}, Go field names; its Tasks keyed by pod UID.
    for verb in ("jobEnqueueable", "jobReady"):
        body = rec.of(verb)[-1]
        assert set(body) == {"job"}, sorted(body)
        job = body["job"]
        assert {"UID", "Name", "Namespace", "Queue", "MinAvailable", "Priority", "PgUID", "PodGroup", "Tasks",
                "TaskStatusIndex", "TotalRequest", "Allocated"} <= set(job), sorted(job)
        assert job["UID"] == f"{job['Namespace']}/{job['Name']}" and job["Queue"] == "default"
        assert job["PodGroup"]["spec"]["minMember"] == job["MinAvailable"], job["PodGroup"]["spec"]

    # queueOverused: {"queue": QueueInfo}, the v1beta1 Queue inside.
    queue = rec.of("queueOverused")[-1]["queue"]
    assert {"UID", "Name", "Weight", "Queue"} <= set(queue) and queue["Queue"]["metadata"]["name"] == queue["Name"]


def test_a_dcu_share_is_stopped_by_volcanos_own_fit_while_nodes_report_only_the_count(world: VolcanoWorld) -> None:
    """Ground for issue 34, item 2: our device plugin puts only the card slots (dcunum) in node
    status, so Volcano, which counts every requested scalar against the node's allocatable,
    finds no node for a pod asking dcumem and dcucores, and never asks the extender about it
    (no predicate, no allocateFunc). The nodes must report memory and cores
    too for Volcano to get as far as our extender."""
    volcano.create_podgroup(world.kube, world.namespace, "share", 1)
    pod = volcano.gang_member(pod_manifest("share-0", [Ctr("main", 1, 1000, 10)]), "share")
    world.kube.create_pod(world.namespace, pod)
    sessions = len(world.recorder.of("onSessionClose"))
    wait_for("Volcano to have tried the share over 5 sessions",
             lambda: len(world.recorder.of("onSessionClose")) >= sessions + 5, 60, world.scheduler.processes)
    assert world.nodes_of(["share-0"]) == {"share-0": None}, world.story()
    assert not world.recorder.of("allocateFunc", "share-"), world.story()
    names = world.cluster.naming.resources
    # Not even the extender's predicate: Volcano's own fit turned every node down first.
    assert not world.recorder.of("predicate", "share-"), world.story()
    # How Volcano counts the share (onSessionOpen's Jobs, keyed by JobID, Tasks by pod UID):
    # extended resources in thousandths, "pods" as it is.
    job = world.recorder.of("onSessionOpen")[-1]["Jobs"][f"{world.namespace}/share"]
    task = next(iter(job["Tasks"].values()))
    assert task["Resreq"]["ScalarResources"] == {names.count: 1000, names.memory: 1000 * 1000,
                                                 names.cores: 10 * 1000, "pods": 1}, task["Resreq"]
    world.kube.delete_pod(world.namespace, "share-0")
    volcano.delete_podgroup(world.kube, world.namespace, "share")
