"""Kueue v0.17.0 in front of hami-dcu on the real control plane (issue 37, item 2): Kueue's
manager built from the Go module proxy (e2e/upstream/build-kueue.sh) runs beside kube-apiserver,
kube-scheduler and kube-controller-manager v1.37.2 with the chart installed by helm; batch/v1
Jobs asking DCU shares wait in Kueue's queues, and what Kueue admits goes through our webhook,
hami-scheduler and the device plugin.

Two nodes of five K100_AI cards (40 slots). A ResourceFlavor of the DCU nodes (label dcu=on);
ClusterQueues with quotas on hygon.com/dcunum, hygon.com/dcumem (MiB), hygon.com/dcucores
(percent) and cpu (the plain pods' requests): cq-a and cq-b in the cohort dcu-pool (each
reclaiming what it lent), each with a LocalQueue in its own namespace (team-a, team-b); cq-p
alone, preempting lower priorities; cq-bulk for the 40-pod measurement.

1. Held: a Job of cq-a (stopPolicy Hold) stays suspended, its Workload not admitted; no pod of
   it exists, and the extender counts nothing on any card and no node is locked. Released, its
   pods are routed to hami-scheduler and run with their allocations.
2. Quota: beyond cq-a's dcumem quota plus what the cohort lends, a Job stays suspended while
   another runs.
3. Borrowing: once room is made, the same Job is admitted by borrowing cq-b's unused dcumem.
4. Preemption: a higher-priority Job of cq-p makes Kueue evict the lower one (its Job
   suspended, its pods deleted); the extender's cards hold the new pods' shares only.
   Between queues: cq-b takes back, by eviction, the dcumem cq-a borrowed of its quota.
5. Admission to Running for 40 DCU pods and 40 plain pods: printed, not asserted.

Kueue's webhooks are not registered (e2e/realcluster/kueue_peer.py says why): the Jobs are
created suspended and labelled as its Job webhook would leave them.

    pytest -m realcluster e2e/test_realcluster_kueue.py
"""

from __future__ import annotations

import functools
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from e2e.realcluster import kueue_peer as kueue
from e2e.realcluster.cluster import SYSTEM_NAMESPACE, RealCluster, unavailable
from e2e.realcluster.processes import wait_for
from e2e.realcluster.upstream import BuildUnavailable
from e2e.scenarios import allocation, wait_until
from e2e.usage_agreement import extender_totals
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.io.kube import ConflictError, Kube
from hami_dcu.common.protocol import keys

_REASON = unavailable() or kueue.why_unavailable()
pytestmark = [pytest.mark.realcluster, pytest.mark.peer]  # a peer of the background build (.ci/run)
JSON = dict[str, Any]
NODES = ("node0", "node1")
CARDS_PER_NODE = 5  # 4 slots a card: 40 on the two nodes, one per pod of the 40-pod Job
FLAVOR = "dcu-nodes"
COHORT = "dcu-pool"
TEAM_A, TEAM_B = "team-a", "team-b"
# cq-a and cq-b: 4 slots, 16000 MiB and 200 % each; borrowing within the cohort doubles that.
POOL_QUOTA = {"cpu": "2", "hygon.com/dcunum": "4", "hygon.com/dcumem": "16000", "hygon.com/dcucores": "200"}
BULK_QUOTA = {"cpu": "4", "hygon.com/dcunum": "40", "hygon.com/dcumem": "400000", "hygon.com/dcucores": "4000"}
LOW, HIGH = "kueue-e2e-low", "kueue-e2e-high"


class KueueWorld:
    def __init__(self, cluster: RealCluster, manager: kueue.Kueue) -> None:
        self.cluster, self.manager, self.kube = cluster, manager, cluster.kube

    def create_job(self, namespace: str, job: JSON) -> JSON:
        return self.kube.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=job)

    def job(self, namespace: str, name: str) -> JSON:
        return self.kube.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")

    def workload(self, namespace: str, name: str) -> JSON | None:
        return kueue.workload_of(self.kube, namespace, self.job(namespace, name))

    def pods(self, namespace: str, job: str) -> list[JSON]:
        return self.kube.list_pods(namespace=namespace, label_selector=f"job={job}").items

    def running(self, namespace: str, job: str, count: int) -> list[JSON] | None:
        pods = [p for p in self.pods(namespace, job) if (p.get("status") or {}).get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]
        return pods if len(pods) == count else None

    def wait_running(self, namespace: str, job: str, count: int, timeout: float = 180) -> list[JSON]:
        try:
            pods: list[JSON] = wait_until(f"{count} pods of {namespace}/{job} Running",
                                          lambda: self.running(namespace, job, count), timeout, 0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.story(namespace)}") from None
        return pods

    def story(self, namespace: str) -> str:
        """What a failed wait needs: the namespace's Workloads' conditions, Kueue's log tail."""
        lines = []
        for workload in self.kube.request("GET", f"{kueue.API}/namespaces/{namespace}/workloads").get("items") or []:
            conditions = "; ".join(f"{c['type']}={c['status']} {c.get('reason', '')} {c.get('message', '')}"
                                   for c in (workload.get("status") or {}).get("conditions") or [])
            lines.append(f"workload {workload['metadata']['name']}: {conditions}")
        return "\n".join([*lines, "--- kueue:", self.manager.log(40), self.cluster.diagnose()])

    def delete_job(self, namespace: str, name: str, timeout: float = 120) -> None:
        kueue.delete_job(self.kube, namespace, name)
        wait_until(f"the pods of {namespace}/{name} gone", lambda: not self.pods(namespace, name), timeout, 0.5)

    def extender_cards(self) -> dict[tuple[str, str], tuple[int, int, int]]:
        """(node, card) -> (slots, MiB, %) as the extender's cache holds them (its /metrics)."""
        pods = self.kube.list_pods(namespace=SYSTEM_NAMESPACE, label_selector="app.kubernetes.io/component=scheduler")
        ip = next(p["status"]["podIP"] for p in pods.items if (p.get("status") or {}).get("podIP"))
        port = self.cluster.values().get("scheduler", {}).get("metricsPort", 9395)
        return extender_totals(f"http://{ip}:{port}/metrics")

    def extender_holds(self, pods: list[JSON]) -> bool:
        """The extender's cards hold exactly these pods' allocations, nothing else."""
        expected: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        for pod in pods:
            for container in allocation(pod):
                for dev in container:
                    slot = expected[(pod["spec"]["nodeName"], dev.uuid)]
                    slot[0], slot[1], slot[2] = slot[0] + 1, slot[1] + dev.usedmem, slot[2] + dev.usedcores
        held = {k: v for k, v in self.extender_cards().items() if v != (0, 0, 0)}
        return held == {k: tuple(v) for k, v in expected.items()}


@pytest.fixture(scope="module")
def world() -> Iterator[KueueWorld]:
    if _REASON:
        pytest.skip(_REASON)
    try:
        built = kueue.binary()
    except BuildUnavailable as exc:
        pytest.skip(str(exc))
    with RealCluster({n: default_cards(n, CARDS_PER_NODE) for n in NODES}, namespace="kueue-e2e") as cluster:
        assert cluster.control_plane is not None
        manager = kueue.Kueue(built, cluster.kubeconfig, cluster.workdir / "kueue", cluster.control_plane.pki)
        try:
            manager.start(cluster.kube)
            _queues(cluster.kube)
            yield KueueWorld(cluster, manager)
        finally:
            manager.stop()


def _queues(kube: Kube) -> None:
    for namespace in (TEAM_A, TEAM_B):
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        account = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        # wait_for: a 404 until the controller manager made it is "not yet", not a failure.
        wait_for(f"ServiceAccount default in {namespace}", functools.partial(kube.request, "GET", account), 60)
    for name, value in ((LOW, 100), (HIGH, 1000)):
        try:
            kube.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body={
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value})
        except ConflictError:
            pass
    kueue.resource_flavor(kube, FLAVOR, {"dcu": "on"})
    # A queue of the cohort takes back what another borrowed of its nominal quota, by eviction.
    reclaim = {"reclaimWithinCohort": "Any"}
    kueue.cluster_queue(kube, "cq-a", FLAVOR, POOL_QUOTA, cohort=COHORT, preemption=reclaim, held=True)
    kueue.cluster_queue(kube, "cq-b", FLAVOR, POOL_QUOTA, cohort=COHORT, preemption=reclaim)
    kueue.cluster_queue(kube, "cq-p", FLAVOR, POOL_QUOTA, preemption={"withinClusterQueue": "LowerPriority"})
    kueue.cluster_queue(kube, "cq-bulk", FLAVOR, BULK_QUOTA)
    kueue.local_queue(kube, TEAM_A, "lq-a", "cq-a")
    kueue.local_queue(kube, TEAM_B, "lq-b", "cq-b")
    kueue.local_queue(kube, TEAM_A, "lq-p", "cq-p")
    kueue.local_queue(kube, TEAM_B, "lq-bulk", "cq-bulk")

    def active() -> bool:
        return all(kueue.is_true(kueue.get_cluster_queue(kube, cq), "Active") for cq in ("cq-b", "cq-p", "cq-bulk"))

    wait_until("the ClusterQueues active", active, 60, 0.5)


def dcu_spec(memory: int, cores: int = 10) -> JSON:
    spec: JSON = pod_manifest("x", [Ctr("c", 1, memory, cores)])["spec"]
    return spec


def _no_lock(world: KueueWorld) -> bool:
    return all(keys.NODE_LOCK not in (world.kube.get_node(n)["metadata"].get("annotations") or {}) for n in NODES)


def test_a_held_job_takes_nothing_of_ours_until_kueue_admits_it(world: KueueWorld) -> None:
    job = world.create_job(TEAM_A, kueue.queued_job("held", "lq-a", 2, dcu_spec(4000)))
    workload = wait_until("Kueue's Workload for the Job", lambda: world.workload(TEAM_A, "held"), 60, 0.5)
    assert workload["spec"]["queueName"] == "lq-a"
    time.sleep(5)  # a Kueue that let it through would have unsuspended it by now
    assert world.job(TEAM_A, "held")["spec"]["suspend"] is True
    assert not kueue.is_true(world.workload(TEAM_A, "held"), "Admitted")
    assert world.pods(TEAM_A, "held") == []
    # Nothing of it reached us: the extender's cache counts no share on any card, no node lock.
    assert world.extender_holds([]), world.extender_cards()
    assert _no_lock(world)

    kueue.release(world.kube, "cq-a")
    wait_until("the Workload admitted", lambda: kueue.is_true(world.workload(TEAM_A, "held"), "Admitted"), 60, 0.5)
    pods = world.wait_running(TEAM_A, "held", 2)
    job = world.job(TEAM_A, "held")
    assert job["spec"]["suspend"] is False
    # Kueue's admission put the flavor's node labels on the pods; our webhook routed them.
    assert job["spec"]["template"]["spec"].get("nodeSelector") == {"dcu": "on"}
    for pod in pods:
        assert pod["spec"]["schedulerName"] == keys.DEFAULT_SCHEDULER_NAME
        assert pod["metadata"]["annotations"].get(keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
        [[dev]] = allocation(pod)
        assert (dev.usedmem, dev.usedcores) == (4000, 10)
    wait_until("the extender holds the two shares", lambda: world.extender_holds(pods), 30, 0.5)
    wait_until("no node locked", lambda: _no_lock(world), 30, 0.5)
    world.delete_job(TEAM_A, "held")


def test_beyond_the_quota_a_job_waits_then_borrows_from_the_cohort(world: KueueWorld) -> None:
    # cq-a: 16000 MiB of its own, 16000 more to borrow from cq-b (idle). 12000 runs; 24000 more
    # would make 36000: held.
    world.create_job(TEAM_A, kueue.queued_job("small", "lq-a", 2, dcu_spec(6000)))
    small = world.wait_running(TEAM_A, "small", 2)
    world.create_job(TEAM_A, kueue.queued_job("big", "lq-a", 2, dcu_spec(12000)))

    def pending() -> JSON | None:
        reserved = kueue.condition(world.workload(TEAM_A, "big"), "QuotaReserved")
        return reserved if reserved is not None and reserved["status"] == "False" else None

    reason = wait_until("Kueue's verdict on the big Job", pending, 60, 0.5)
    assert "hygon.com/dcumem" in reason.get("message", ""), reason
    time.sleep(5)
    assert world.job(TEAM_A, "big")["spec"]["suspend"] is True
    assert world.pods(TEAM_A, "big") == []
    assert world.running(TEAM_A, "small", 2) is not None
    assert world.extender_holds(small), world.extender_cards()

    # Room made: 24000 fits 16000 + 8000 borrowed from cq-b.
    world.delete_job(TEAM_A, "small")
    wait_until("the big Job admitted", lambda: kueue.is_true(world.workload(TEAM_A, "big"), "Admitted"), 60, 0.5)
    big = world.wait_running(TEAM_A, "big", 2)

    def borrowed() -> int | None:
        usage = (kueue.get_cluster_queue(world.kube, "cq-a").get("status") or {}).get("flavorsUsage") or []
        for flavor in usage:
            for resource in flavor.get("resources") or []:
                if resource["name"] == "hygon.com/dcumem":
                    return _quantity(str(resource.get("borrowed", "0")))
        return None

    wait_until("cq-a borrowing 8000 MiB", lambda: borrowed() == 8000, 30, 0.5)
    for pod in big:
        [[dev]] = allocation(pod)
        assert dev.usedmem == 12000
    wait_until("the extender holds the big Job's shares only", lambda: world.extender_holds(big), 30, 0.5)
    world.delete_job(TEAM_A, "big")


def _quantity(text: str) -> int:
    """A whole-number Kubernetes quantity as Kueue writes it in status (8000 is "8k")."""
    for suffix, factor in (("Ki", 1024), ("Mi", 1024**2), ("Gi", 1024**3), ("k", 1000), ("M", 1000**2),
                           ("G", 1000**3)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def test_a_higher_priority_job_evicts_a_lower_one_and_gets_its_vdcus(world: KueueWorld) -> None:
    world.create_job(TEAM_A, kueue.queued_job("low", "lq-p", 2, dcu_spec(8000), LOW))
    low = world.wait_running(TEAM_A, "low", 2)
    wait_until("the extender holds the low Job's shares", lambda: world.extender_holds(low), 30, 0.5)
    # cq-p is full (16000 MiB): the high Job gets in only by evicting the low one.
    world.create_job(TEAM_A, kueue.queued_job("high", "lq-p", 2, dcu_spec(8000), HIGH))
    wait_until("the low Workload evicted", lambda: kueue.is_true(world.workload(TEAM_A, "low"), "Evicted"), 60, 0.5)
    evicted = kueue.condition(world.workload(TEAM_A, "low"), "Evicted")
    assert evicted is not None and evicted.get("reason") == "Preempted", evicted
    wait_until("the low Job suspended", lambda: world.job(TEAM_A, "low")["spec"]["suspend"] is True, 60, 0.5)
    wait_until("the low Job's pods deleted", lambda: not world.pods(TEAM_A, "low"), 120, 0.5)
    high = world.wait_running(TEAM_A, "high", 2)
    assert all(p["spec"].get("priorityClassName") == HIGH for p in high)
    # The evicted pods' vDCUs are gone from the extender's cards; the new pods' are there.
    wait_until("the extender holds the high Job's shares only", lambda: world.extender_holds(high), 30, 0.5)
    assert not kueue.is_true(world.workload(TEAM_A, "low"), "Admitted")
    assert world.job(TEAM_A, "low")["spec"]["suspend"] is True
    # The low one first: with the high one gone first, Kueue would admit it again meanwhile.
    world.delete_job(TEAM_A, "low")
    world.delete_job(TEAM_A, "high")


def test_a_queue_takes_back_what_the_other_borrowed(world: KueueWorld) -> None:
    # cq-a runs 24000 MiB, 8000 of them borrowed from cq-b; cq-b's own 16000 Job reclaims them.
    world.create_job(TEAM_A, kueue.queued_job("borrower", "lq-a", 2, dcu_spec(12000)))
    borrower = world.wait_running(TEAM_A, "borrower", 2)
    wait_until("the extender holds the borrower's shares", lambda: world.extender_holds(borrower), 30, 0.5)
    world.create_job(TEAM_B, kueue.queued_job("owner", "lq-b", 2, dcu_spec(8000)))
    wait_until("the borrower evicted", lambda: kueue.is_true(world.workload(TEAM_A, "borrower"), "Evicted"), 60, 0.5)
    preempted = kueue.condition(world.workload(TEAM_A, "borrower"), "Preempted")
    assert preempted is not None and preempted["status"] == "True", preempted
    assert preempted.get("reason") == "InCohortReclamation", preempted
    wait_until("the borrower's pods deleted", lambda: not world.pods(TEAM_A, "borrower"), 120, 0.5)
    owner = world.wait_running(TEAM_B, "owner", 2)
    wait_until("the extender holds the owner's shares only", lambda: world.extender_holds(owner), 30, 0.5)
    # Requeued, it does not fit beside the owner (24000 + 16000 > 32000): suspended, no pods.
    time.sleep(3)
    assert world.job(TEAM_A, "borrower")["spec"]["suspend"] is True
    assert not kueue.is_true(world.workload(TEAM_A, "borrower"), "Admitted")
    assert world.pods(TEAM_A, "borrower") == []
    world.delete_job(TEAM_A, "borrower")
    world.delete_job(TEAM_B, "owner")


def _time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _admission_to_running(world: KueueWorld, name: str, spec: JSON, pods: int) -> list[float]:
    world.create_job(TEAM_B, kueue.queued_job(name, "lq-bulk", pods, spec))
    running = world.wait_running(TEAM_B, name, pods, timeout=600)
    admitted = kueue.condition(world.workload(TEAM_B, name), "Admitted")
    assert admitted is not None and admitted["status"] == "True"
    start = _time(admitted["lastTransitionTime"])
    delays = []
    for pod in running:
        ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
        delays.append(_time(ready["lastTransitionTime"]) - start)
    world.delete_job(TEAM_B, name, timeout=300)
    return sorted(delays)


def test_admission_to_running_for_40_dcu_pods_and_40_plain_pods(world: KueueWorld) -> None:
    plain_spec: JSON = pod_manifest("x", [Ctr("c")])["spec"]
    plain_spec["containers"][0]["resources"] = {"requests": {"cpu": "10m"}}
    plain = _admission_to_running(world, "plain", plain_spec, 40)
    dcu = _admission_to_running(world, "dcu", dcu_spec(1000, 2), 40)
    # The timestamps are whole seconds (the API's): a delay is within a second of the printed one.
    print(f"\nkueue-admission-to-running: dcu_pods={len(dcu)} p50={statistics.median(dcu):.0f}s "
          f"max={max(dcu):.0f}s plain_pods={len(plain)} p50={statistics.median(plain):.0f}s max={max(plain):.0f}s")
    assert len(dcu) == len(plain) == 40
    assert all(d >= -1 for d in dcu + plain)  # nothing ran before Kueue admitted it
