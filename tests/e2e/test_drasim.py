"""The DRA side of the kwok scale harness, its pure parts: a DRA fake node offers no DCU
resource, kwok leaves the harness's Job pods running, the node simulator resolves and checks a
pod's claims as the kubelet does, and the claims-over-capacity invariant the DRA case asserts."""

import pytest

from e2e import invariants
from e2e.realcluster import kwok, scalemix
from e2e.realcluster.drasim import NotReady, check_claim, pod_claim_names
from e2e.realcluster.kwokscale import DRA, fake_node
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.dra import names


def test_a_dra_fake_node_offers_no_dcu_resource_so_the_driver_does_not_stand_back():
    node = fake_node("kwok-00001", cards=8, mode=DRA)
    assert keys.DCU_NAMING.resources.count not in node["status"]["allocatable"]
    assert node["status"]["allocatable"]["pods"] == "110"
    assert node["spec"]["taints"] == [kwok.TAINT]


def test_pod_complete_leaves_the_harness_pods_running():
    stage = {"metadata": {"name": "pod-complete"}, "spec": {"selector": {"matchExpressions": [
        {"key": ".status.phase", "operator": "In", "values": ["Running"]}]}}}
    kwok.narrow_pod_complete(stage)
    expressions = stage["spec"]["selector"]["matchExpressions"]
    assert expressions[0] == {"key": ".status.phase", "operator": "In", "values": ["Running"]}
    assert expressions[1] == {"key": f'.metadata.labels["{scalemix.RUN_LABEL}"]', "operator": "DoesNotExist"}


def _pod(claims, statuses=()):
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"resourceClaims": claims}, "status": {"resourceClaimStatuses": list(statuses)}}


def test_claim_names_come_from_the_pod_or_the_claim_controllers_status():
    pod = _pod([{"name": "dcu", "resourceClaimTemplateName": "t"}, {"name": "own", "resourceClaimName": "mine"}],
               [{"name": "dcu", "resourceClaimName": "p-dcu-x7k2"}])
    assert pod_claim_names(pod) == {"dcu": "p-dcu-x7k2", "own": "mine"}


def test_the_claim_kube_scheduler_made_for_extended_resources_is_prepared_too():
    """A whole-card pod the webhook left as written (1.37's extendedResourceName) has no pod
    claim; its claim is named in status.extendedResourceClaimStatus."""
    pod = _pod([])
    pod["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "p-extended-resources-abcde",
                                                    "requestMappings": []}
    assert list(pod_claim_names(pod).values()) == ["p-extended-resources-abcde"]


def test_a_template_claim_not_generated_yet_is_not_ready():
    with pytest.raises(NotReady, match="pod claim dcu"):
        pod_claim_names(_pod([{"name": "dcu", "resourceClaimTemplateName": "t"}]))


def _claim(reserved_for="pod-uid", allocated=True):
    status = {"reservedFor": [{"resource": "pods", "name": "p", "uid": reserved_for}]}
    if allocated:
        status["allocation"] = {"devices": {"results": []}}
    return {"metadata": {"name": "c", "namespace": "ns"}, "status": status}


def test_a_claim_is_prepared_only_once_allocated_and_reserved_for_the_pod():
    check_claim(_claim(), "pod-uid")
    with pytest.raises(NotReady, match="not allocated"):
        check_claim(_claim(allocated=False), "pod-uid")
    with pytest.raises(NotReady, match="not reserved"):
        check_claim(_claim(reserved_for="other"), "pod-uid")


def _slice(pool, devices):
    return {"spec": {"driver": names.DRIVER, "pool": {"name": pool}, "devices": [
        {"name": d, "capacity": {"cores": {"value": "120"}, "memory": {"value": "65520Mi"}, "slices": {"value": "4"}}}
        for d in devices]}}


def _allocated(*results):
    return {"status": {"allocation": {"devices": {"results": [
        {"driver": names.DRIVER, "pool": pool, "device": device, **({"consumedCapacity": used} if used else {})}
        for pool, device, used in results]}}}}


def test_claims_within_every_devices_capacity_pass():
    share = {"cores": "60", "memory": "32760Mi", "slices": "1"}
    claims = [_allocated(("n1", "hcu-a", share)), _allocated(("n1", "hcu-a", share)), _allocated(("n1", "hcu-b", None))]
    assert invariants.claims_over_capacity([_slice("n1", ["hcu-a", "hcu-b"])], claims) == []


def test_claims_over_a_devices_capacity_are_named():
    share = {"cores": "50", "memory": "2000Mi", "slices": "1"}
    claims = [_allocated(("n1", "hcu-a", share)) for _ in range(3)]
    found = invariants.claims_over_capacity([_slice("n1", ["hcu-a"])], claims)
    assert len(found) == 1 and "hcu-a" in found[0] and "'cores': '150/120'" in found[0]


def test_a_whole_card_and_a_share_on_one_device_are_over_capacity():
    claims = [_allocated(("n1", "hcu-a", None)), _allocated(("n1", "hcu-a", {"cores": "1", "memory": "1Mi"}))]
    found = invariants.claims_over_capacity([_slice("n1", ["hcu-a"])], claims)
    assert len(found) == 1 and "'cores': '121/120'" in found[0]


def test_a_device_no_slice_publishes_is_named():
    found = invariants.claims_over_capacity([_slice("n1", ["hcu-a"])], [_allocated(("n2", "hcu-a", None))])
    assert found == [f"device {names.DRIVER}/n2/hcu-a: allocated, but in no ResourceSlice"]
