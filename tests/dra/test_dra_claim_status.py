"""Issue 36, item 2: the driver says on the ResourceClaim what it prepared (status.devices), by
server-side apply of its own entries; a refused claim says why; Unprepare clears them."""

import pytest
from dra_helpers import CARDS, DEV0, DEV1, NODE, claim, node_cards, paths, result
from fake_kube import FakeKube

from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.dra import claimstatus
from hami_dcu.dra.core import DriverCore, PrepareFailed
from hami_dcu.dra.records import PreparedClaim, PreparedDevice, VdevGrant
from hami_dcu.dra.server import ClaimRef
from hami_dcu.dra.service import DriverService

NOW = "2026-11-27T17:00:00Z"
SHARE = "7d5b2c3e-0000-4000-8000-000000000001"


def service_for(tmp_path, kube: FakeKube) -> DriverService:
    cards = node_cards(tmp_path)
    return DriverService(kube, DriverCore(NODE, cards, paths(tmp_path)), slots=4,
                         health=lambda: dict.fromkeys(c.id for c in cards), now=lambda: NOW, naming=DCU_NAMING)


# --- pure -------------------------------------------------------------------------------------


def test_a_vdcu_entry_names_its_card_compute_units_mask_memory_and_vdev(tmp_path):
    cards = {names.device_name(c.card.pci_bus_id): c for c in node_cards(tmp_path)}
    grant = VdevGrant(card_index=0, cu_mask=0x3FFFFFFF, pipe=1, vdev=3, cu_count=30, memory_mib=8192)
    record = PreparedClaim("uid-1", "ns", "c1", (
        PreparedDevice("dcu", NODE, DEV0, SHARE, "0000:3D:00.0", "/dev/dri/card0", "/dev/dri/renderD128", grant),
        PreparedDevice("whole", NODE, DEV1, None, "0000:9F:00.0", "/dev/dri/card1", "/dev/dri/renderD129", None)))
    share, whole = claimstatus.prepared_entries(record, cards, NOW, generation=2)
    assert share == {
        "driver": "dra.hygon.com", "pool": NODE, "device": DEV0, "shareID": SHARE,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared", "lastTransitionTime": NOW,
                        "observedGeneration": 2,
                        "message": f"node {NODE}: vDCU 3 on card 0: 30 compute units, 8192 MiB"}],
        "data": {"card": 0, "pciBusID": "0000:3D:00.0", "model": "K100_AI", "serial": "SER0", "vdev": 3,
                 "computeUnits": 30, "cuMask": "0x3fffffff", "memoryMiB": 8192, "pipe": 1}}
    assert "shareID" not in whole
    assert whole["data"] == {"card": 1, "pciBusID": "0000:9F:00.0", "model": "Z100", "serial": "SER1",
                             "computeUnits": 60, "memoryMiB": 32752, "whole": True}


def test_a_failure_is_said_only_for_our_devices_in_this_nodes_pool():
    refused = claim("uid-1", result(cores="10", memory="1Gi", share_id=SHARE),
                    result(device="elsewhere", pool="other-node"), result(driver="gpu.nvidia.com"))
    [entry] = claimstatus.failed_entries(refused, NODE, claimstatus.QUOTA_EXCEEDED, "over the quota", NOW)
    assert (entry["pool"], entry["device"], entry["shareID"]) == (NODE, DEV0, SHARE)
    assert entry["conditions"][0] | {"lastTransitionTime": ""} == {
        "type": "Ready", "status": "False", "reason": "QuotaExceeded", "message": "over the quota",
        "lastTransitionTime": "", "observedGeneration": 0}
    assert not claimstatus.says_already(refused, [entry])
    refused["status"]["devices"] = [entry | {"conditions": [entry["conditions"][0] | {"lastTransitionTime": "x"}]}]
    assert claimstatus.says_already(refused, [entry])  # the same refusal again is not written again


def test_the_apply_names_the_claims_uid_and_only_status_devices():
    body = claimstatus.apply_body({"name": "c1", "namespace": "ns", "uid": "uid-1", "labels": {"a": "b"}}, [])
    assert body == {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": "c1", "namespace": "ns", "uid": "uid-1"}, "status": {"devices": []}}


# --- the service ------------------------------------------------------------------------------


def test_prepare_applies_the_status_and_unprepare_clears_it(tmp_path):
    kube = FakeKube(NODE)
    service = service_for(tmp_path, kube)
    kube.add_claim(claim("uid-1", result(cores="30", memory="8Gi", share_id=SHARE)))
    service.prepare(ClaimRef("ns", "c1", "uid-1"))
    [(path, query, body)] = kube.status_patches
    assert path == "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c1/status"
    assert query == {"fieldManager": "hami-dcu-dra-driver", "force": "true"}
    [entry] = body["status"]["devices"]
    assert entry["data"]["computeUnits"] == 30 and entry["data"]["memoryMiB"] == 8192
    assert bin(int(entry["data"]["cuMask"], 16)).count("1") == 30
    assert entry["conditions"][0]["status"] == "True"

    service.unprepare(ClaimRef("ns", "c1", "uid-1"))
    assert kube.status_patches[-1][2]["status"] == {"devices": []}
    assert kube.claims[("ns", "c1")]["status"]["devices"] == []


def test_a_status_write_that_fails_does_not_fail_the_prepare_and_is_written_later(tmp_path, caplog):
    kube = FakeKube(NODE)
    service = service_for(tmp_path, kube)
    kube.add_claim(claim("uid-1", result(cores="30", memory="8Gi", share_id=SHARE)))
    kube.status_down = True
    record = service.prepare(ClaimRef("ns", "c1", "uid-1"))
    assert record.devices[0].vdev is not None  # prepared: the pod runs
    assert "could not write status.devices of ResourceClaim ns/c1" in caplog.text and f"node {NODE}" in caplog.text
    assert service.metrics.status_writes.labels(NODE, "failed")._value.get() == 1
    kube.status_down = False
    service.reconcile()
    [(_path, _query, body)] = kube.status_patches
    assert body["status"]["devices"][0]["data"]["computeUnits"] == 30
    service.reconcile()
    assert len(kube.status_patches) == 1  # written once


def test_a_claim_the_driver_cannot_prepare_says_why(tmp_path):
    kube = FakeKube(NODE)
    service = service_for(tmp_path, kube)
    # More compute units than the card has: refused by the plan.
    kube.add_claim(claim("uid-1", result(cores=str(CARDS[0].compute_units + 1), memory="1Gi", share_id=SHARE)))
    with pytest.raises(PrepareFailed, match="compute units"):
        service.prepare(ClaimRef("ns", "c1", "uid-1"))
    [(_path, _query, body)] = kube.status_patches
    [entry] = body["status"]["devices"]
    assert entry["conditions"][0]["reason"] == "PrepareFailed" and "compute units" in entry["conditions"][0][
        "message"]
