"""The DRA half of the pod-latency histograms: once a claim is prepared, each pod it is
reserved for is read (off the kubelet's call) and its bound-to-allocated and create-to-bound
observed with mode="dra", once per pod; a retried Prepare, a failed one, a pod of another node
or one that cannot be read count nothing."""

from datetime import UTC, datetime

import pytest
from dra_helpers import NODE, claim, node_cards, paths, result
from fake_kube import FakeKube

from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.dra.core import DriverCore, PrepareFailed
from hami_dcu.dra.latency import PODS_PER_CLAIM, PodLatency, reserved_pods
from hami_dcu.dra.metrics import DriverMetrics
from hami_dcu.dra.server import ClaimRef
from hami_dcu.dra.service import DriverService

ANSWERED = datetime(2026, 5, 1, 12, 0, 10, 500000, tzinfo=UTC)


def run_now(fn, *args):
    fn(*args)  # the reads done at once, so the test sees them


def pod(name: str, uid: str, node: str = NODE, created: str = "2026-05-01T11:59:50Z",
        scheduled: str | None = "2026-05-01T12:00:04Z", bind_time: str | None = None) -> dict:
    body = {"metadata": {"name": name, "namespace": "ns", "uid": uid, "creationTimestamp": created,
                         "annotations": {}},
            "spec": {"nodeName": node}, "status": {"conditions": []}}
    if scheduled:
        body["status"]["conditions"].append({"type": "PodScheduled", "status": "True",
                                             "lastTransitionTime": scheduled})
    if bind_time:
        body["metadata"]["annotations"]["hami.io/bind-time"] = bind_time
    return body


def reserved(body: dict, *pods: tuple[str, str]) -> dict:
    body["status"]["reservedFor"] = [{"resource": "pods", "name": n, "uid": u} for n, u in pods]
    return body


@pytest.fixture
def setup(tmp_path):
    kube = FakeKube(NODE)
    metrics = DriverMetrics()
    latency = PodLatency(kube, NODE, metrics, wall_clock=lambda: ANSWERED, submit=run_now)
    service = DriverService(kube, DriverCore(NODE, node_cards(tmp_path), paths(tmp_path)), 4, dict,
                            metrics=metrics, latency=latency, naming=DCU_NAMING)
    return service, kube, metrics


def value(metrics: DriverMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_prepared_claim_times_its_pod_once(setup):
    service, kube, metrics = setup
    kube.add_claim(reserved(claim("uid-1", result(cores="10", memory="1Gi")), ("p", "pod-1")))
    kube.pods[("ns", "p")] = pod("p", "pod-1")
    service.prepare(ClaimRef("ns", "c1", "uid-1"))
    bound = {"node": NODE, "mode": "dra"}
    assert value(metrics, "hami_dcu_pod_bound_to_allocated_seconds_count", **bound) == 1
    assert value(metrics, "hami_dcu_pod_bound_to_allocated_seconds_sum", **bound) == 6.5  # 12:00:04 -> 12:00:10.5
    assert value(metrics, "hami_dcu_pod_create_to_bound_seconds_count", mode="dra") == 1
    assert value(metrics, "hami_dcu_pod_create_to_bound_seconds_sum", mode="dra") == 14  # 11:59:50 -> 12:00:04
    assert value(metrics, "hami_dcu_dra_prepares_total", node=NODE, result="success") == 1
    service.prepare(ClaimRef("ns", "c1", "uid-1"))  # the kubelet asks again: answered from the record
    assert value(metrics, "hami_dcu_pod_bound_to_allocated_seconds_count", **bound) == 1
    assert kube.pod_reads == 1


def test_a_second_claim_of_the_same_pod_is_not_counted_again(setup):
    service, kube, metrics = setup
    kube.add_claim(reserved(claim("uid-1", result(cores="10", memory="1Gi")), ("p", "pod-1")))
    kube.add_claim(reserved(claim("uid-2", result(cores="10", memory="1Gi"), name="c2"), ("p", "pod-1")))
    kube.pods[("ns", "p")] = pod("p", "pod-1")
    service.prepare(ClaimRef("ns", "c1", "uid-1"))
    service.prepare(ClaimRef("ns", "c2", "uid-2"))
    assert value(metrics, "hami_dcu_pod_bound_to_allocated_seconds_count", node=NODE, mode="dra") == 1


def test_pods_of_other_nodes_recreated_or_unreadable_count_nothing(setup):
    service, kube, metrics = setup
    kube.add_claim(reserved(claim("uid-1", result(cores="10", memory="1Gi")),
                            ("elsewhere", "pod-1"), ("renamed", "pod-2"), ("gone", "pod-3")))
    kube.pods[("ns", "elsewhere")] = pod("elsewhere", "pod-1", node="other")
    kube.pods[("ns", "renamed")] = pod("renamed", "pod-2-new")
    service.prepare(ClaimRef("ns", "c1", "uid-1"))
    assert kube.pod_reads == 3
    assert value(metrics, "hami_dcu_pod_bound_to_allocated_seconds_count", node=NODE, mode="dra") == 0


def test_a_failed_prepare_reads_no_pod(setup):
    service, kube, metrics = setup
    kube.add_claim(reserved(claim("uid-1", result(device="nope", cores="10", memory="1Gi")), ("p", "pod-1")))
    kube.pods[("ns", "p")] = pod("p", "pod-1")
    with pytest.raises(PrepareFailed):
        service.prepare(ClaimRef("ns", "c1", "uid-1"))
    assert kube.pod_reads == 0
    assert value(metrics, "hami_dcu_dra_prepares_total", node=NODE, result="failed") == 1


def test_the_bind_time_annotation_wins_over_the_condition(setup):
    service, kube, metrics = setup
    kube.add_claim(reserved(claim("uid-1", result(cores="10", memory="1Gi")), ("p", "pod-1")))
    bind_time = str(int(datetime(2026, 5, 1, 12, 0, 8, tzinfo=UTC).timestamp()))
    kube.pods[("ns", "p")] = pod("p", "pod-1", scheduled=None, bind_time=bind_time)
    service.prepare(ClaimRef("ns", "c1", "uid-1"))
    assert value(metrics, "hami_dcu_pod_bound_to_allocated_seconds_sum", node=NODE, mode="dra") == 2.5


def test_reserved_pods_reads_only_core_pods_and_caps_them():
    body = claim()
    body["status"] = {"reservedFor": [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(9)]
                      + [{"apiGroup": "x.io", "resource": "pods", "name": "w", "uid": "w"}, "junk",
                         {"resource": "pods", "name": 3, "uid": "u"}]}
    assert [p.name for p in reserved_pods(body)] == [f"p{i}" for i in range(PODS_PER_CLAIM)]
    body["status"]["reservedFor"] = "not a list"
    assert reserved_pods(body) == []
