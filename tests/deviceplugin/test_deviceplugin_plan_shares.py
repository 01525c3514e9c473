"""Allocate refuses an allocation whose shares are negative (the pod codec decodes them as
HAMi's ParseInt does; a vDCU of -1 MiB must never be created)."""

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin.plan import AllocateRefused, plan_container
from hami_dcu.node.discovery import DcuCard, DrmNodes
from hami_dcu.node.smi import Card

DCU = keys.DCU_NAMING  # the naming set these tests speak

CARD = DcuCard(Card(index=0, serial="S0", model="K100_AI", memory_mib=65520, compute_units=120,
                    pci_bus_id="0000:3d:00.0"), DrmNodes("/dev/dri/card1", "/dev/dri/renderD129"), DCU.id_prefix)


def pending_pod(allocation: str) -> dict:
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u1",
                         "annotations": {keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
                                         DCU.pod_devices_to_allocate: allocation,
                                         DCU.pod_devices_allocated: allocation}},
            "spec": {"nodeName": "n1", "containers": [{"name": "main"}]}, "status": {"phase": "Pending"}}


def test_a_positive_share_is_planned():
    plan = plan_container(pending_pod("DCU-S0,DCU,+2000,60:;"), "n1", ["DCU-S0-fake-0"], {CARD.id: CARD}, DCU)
    assert [(d.uuid, d.usedmem, d.usedcores) for d in plan.devices] == [("DCU-S0", 2000, 60)]


@pytest.mark.parametrize("allocation", ["DCU-S0,DCU,-1,60:;", "DCU-S0,DCU,2000,-5:;"])
def test_a_negative_share_is_refused(allocation):
    with pytest.raises(AllocateRefused, match="negative share of card DCU-S0"):
        plan_container(pending_pod(allocation), "n1", ["DCU-S0-fake-0"], {CARD.id: CARD}, DCU)
