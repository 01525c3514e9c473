"""`hami-dcu status`'s waiting list tells a wait for Kueue from a wait for a card, and says
which pods the extender evicted for a pod (issue 37, item 3)."""

from datetime import UTC, datetime, timedelta

from hami_dcu.cli.pending import NO_EVENT, held_jobs, pending_pods
from hami_dcu.common.protocol.keys import DCU_NAMING

DCU = DCU_NAMING
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
SHARE = {DCU.resources.count: "1", DCU.resources.memory: "8000", DCU.resources.cores: "30"}


def _pod(name: str, gates: list[str] | None = None, limits: dict | None = None) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits or SHARE}}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"metadata": {"name": name, "namespace": "team", "creationTimestamp": (NOW - timedelta(minutes=3))
                         .isoformat()}, "spec": spec, "status": {"phase": "Pending"}}


def _event(pod: str, reason: str, message: str, kind: str, seconds_ago: int) -> dict:
    return {"involvedObject": {"kind": "Pod", "namespace": "team", "name": pod}, "type": kind, "reason": reason,
            "message": message, "source": {"component": "hami-scheduler"},
            "lastTimestamp": (NOW - timedelta(seconds=seconds_ago)).isoformat()}


def _job(name: str, suspend: bool = True, queue: str | None = "team-queue", limits: dict | None = None,
         namespace: str = "team") -> dict:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "creationTimestamp": (NOW - timedelta(minutes=5)).isoformat()},
            "spec": {"suspend": suspend, "template": {"spec": {"containers": [
                {"name": "train", "image": "x", "resources": {"limits": limits or SHARE}}]}}}}


def test_a_pod_behind_kueues_gate_waits_for_kueue_not_for_a_card():
    stale = _event("gated", "FailedScheduling", "0/2 nodes are available", "Warning", 10)
    (pod,) = pending_pods([_pod("gated", ["kueue.x-k8s.io/admission"])], [stale], [], NOW, DCU.resources)
    assert pod.reason_source == "Kueue"
    assert "waiting for Kueue to admit its workload" in pod.reason and "not for a card" in pod.reason


def test_another_gate_is_named():
    (pod,) = pending_pods([_pod("held", ["example.com/quota-check"])], [], [], NOW, DCU.resources)
    assert pod.reason_source == "schedulingGates" and "example.com/quota-check" in pod.reason


def test_a_pod_the_extender_evicted_for_says_whom_beside_its_latest_reason():
    warning = _event("urgent", "FilteringFailed", "no node fits the DCU request", "Warning", 5)
    evicted = _event("urgent", "DCUPreemption", "evicted 1 lower-priority pod(s) on node n1 card DCU-A so that this "
                     "pod fits: team/a1", "Normal", 8)
    unrelated = _event("urgent", "Scheduled", "bound", "Normal", 1)
    (pod,) = pending_pods([_pod("urgent")], [warning, evicted, unrelated], [], NOW, DCU.resources)
    assert pod.reason.startswith("preempting (evicted 1 lower-priority pod(s) on node n1 card DCU-A")
    assert pod.reason.endswith("no node fits the DCU request")
    (plain,) = pending_pods([_pod("urgent")], [warning], [], NOW, DCU.resources)
    assert plain.reason == "no node fits the DCU request"
    (quiet,) = pending_pods([_pod("urgent")], [], [], NOW, DCU.resources)
    assert quiet.reason == NO_EVENT


def test_suspended_dcu_jobs_with_a_queue_are_held_by_kueue():
    jobs = [_job("train"), _job("running", suspend=False), _job("no-queue", queue=None),
            _job("cpu-only", limits={"cpu": "1"}), _job("elsewhere", namespace="other")]
    held = held_jobs(jobs, NOW, DCU.resources)
    # The same age: by namespace, then name.
    assert [(p.namespace, p.name) for p in held] == [("other", "job/elsewhere"), ("team", "job/train")]
    (train,) = held_jobs(jobs, NOW, DCU.resources, namespace="team")
    assert train.reason_source == "Kueue" and "LocalQueue team-queue" in train.reason
    assert train.request == "train: 1 x (8000 MiB, 30%)"
    assert train.age_seconds == 300
