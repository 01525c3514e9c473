"""The node's ResourceSlice: Hygon's device shape, health as device taints, and change detection."""

import re
from dataclasses import replace

from dra_helpers import CARDS, DEV0, DEV1, NODE, node_cards

from hami_dcu.common.protocol.dra import names
from hami_dcu.dra import slices
from hami_dcu.node.health import (
    DEVICE_NODE_MISSING,
    KFD_MISSING,
    MOVED,
    NOT_REPORTED,
    SMI_FAILING,
    SMI_UNHEALTHY,
    Problem,
)


def test_one_device_per_card_with_hygons_names_and_ours(tmp_path):
    cards = node_cards(tmp_path)
    spec = slices.slice_spec(NODE, cards, {}, slots=4, generation=3)
    assert spec["driver"] == "dra.hygon.com" and spec["nodeName"] == NODE
    assert spec["pool"] == {"name": NODE, "generation": 3, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == [DEV0, DEV1] == ["hcu-0000-3d-00-0", "hcu-0000-9f-00-0"]
    device = spec["devices"][1]
    attrs = device["attributes"]
    assert attrs["type"] == {"string": "hcu"}
    assert attrs["uuid"] == attrs["serial"] == {"string": "SER1"}
    assert attrs["productName"] == attrs["model"] == {"string": "Z100"}
    assert attrs["pciBusID"] == {"string": "0000:9f:00.0"}
    assert attrs["numaNode"] == {"int": 1}
    assert {"architecture", "brand"} <= set(attrs)
    assert device["allowMultipleAllocations"] is True


def test_capacities_default_to_the_whole_card_and_each_claim_takes_one_slice(tmp_path):
    device = slices.slice_spec(NODE, node_cards(tmp_path), {}, slots=4, generation=1)["devices"][0]
    cores, memory, slots = (device["capacity"][k] for k in ("cores", "memory", "slices"))
    assert cores == {"value": "120", "requestPolicy": {"default": "120",
                                                       "validRange": {"min": "1", "max": "120", "step": "1"}}}
    mib = str(1024 * 1024)
    assert memory["value"] == str(65520 * 1024 * 1024)
    assert memory["requestPolicy"] == {"default": memory["value"],
                                       "validRange": {"min": mib, "max": memory["value"], "step": mib}}
    assert slots == {"value": "4", "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "4",
                                                                                    "step": "1"}}}


def test_a_single_slot_uses_a_valid_value_not_a_range(tmp_path):
    """min + step must not exceed the value: with one slot a range would be refused."""
    slots = slices.slice_spec(NODE, node_cards(tmp_path), {}, slots=1, generation=1)["devices"][0]["capacity"]["slices"]
    assert slots == {"value": "1", "requestPolicy": {"default": "1", "validValues": ["1"]}}


NOW = "2026-11-27T17:00:00Z"
SICK = Problem(SMI_UNHEALTHY, "reported unhealthy by SMI")


def test_an_unhealthy_card_stays_with_a_taint_saying_why(tmp_path):
    cards = node_cards(tmp_path)
    taints = slices.unhealthy_taints(cards, {cards[0].id: SICK, cards[1].id: None}, "NoSchedule", {}, None, NOW)
    spec = slices.slice_spec(NODE, cards, taints, slots=4, generation=1)
    assert [d["name"] for d in spec["devices"]] == [DEV0, DEV1]
    assert spec["devices"][0]["taints"] == [{"key": "dra.hygon.com/unhealthy", "value": "SMIReportsUnhealthy",
                                             "effect": "NoSchedule", "timeAdded": NOW}]
    assert "taints" not in spec["devices"][1]
    assert slices.has_taints(spec)
    # Every reason is a label value, as the API server requires of a taint's value.
    for reason in (NOT_REPORTED, MOVED, SMI_UNHEALTHY, KFD_MISSING, DEVICE_NODE_MISSING, SMI_FAILING):
        assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", reason) and len(reason) <= 63


def test_the_taint_time_is_when_the_card_turned_unhealthy(tmp_path):
    cards = node_cards(tmp_path)
    since = {cards[1].id: "2026-11-27T16:00:00Z"}
    taints = slices.unhealthy_taints(cards, {cards[1].id: SICK}, "NoExecute", since, None, NOW)
    assert taints[cards[1].id]["timeAdded"] == "2026-11-27T16:00:00Z" and taints[cards[1].id]["effect"] == "NoExecute"
    # The published slice's time wins for the same key and effect (a restarted driver).
    published = {"spec": slices.slice_spec(NODE, cards, {cards[1].id: {**taints[cards[1].id],
                                                                       "timeAdded": "2026-11-27T15:00:00Z"}}, 4, 1)}
    again = slices.unhealthy_taints(cards, {cards[1].id: SICK}, "NoExecute", {}, published, NOW)
    assert again[cards[1].id]["timeAdded"] == "2026-11-27T15:00:00Z"
    other = slices.unhealthy_taints(cards, {cards[1].id: SICK}, "NoSchedule", {}, published, NOW)
    assert other[cards[1].id]["timeAdded"] == NOW


def test_a_card_smi_called_unhealthy_at_discovery_is_tainted_until_health_is_read(tmp_path):
    cards = node_cards(tmp_path, [CARDS[0], replace(CARDS[1], healthy=False)])
    taints = slices.unhealthy_taints(cards, {}, "NoSchedule", {}, None, NOW)
    assert list(taints) == [cards[1].id] and taints[cards[1].id]["value"] == SMI_UNHEALTHY


def test_without_taints_an_unhealthy_card_is_left_out_as_before(tmp_path):
    cards = node_cards(tmp_path)
    taints = slices.unhealthy_taints(cards, {cards[0].id: SICK}, "NoSchedule", {}, None, NOW)
    spec = slices.slice_spec(NODE, cards, taints, slots=4, generation=1, tainting=False)
    assert [d["name"] for d in spec["devices"]] == [DEV1] and not slices.has_taints(spec)


def test_taints_dropped_by_the_api_server_are_seen(tmp_path):
    cards = node_cards(tmp_path)
    spec = slices.slice_spec(NODE, cards, slices.unhealthy_taints(cards, {cards[0].id: SICK}, "NoSchedule", {},
                                                                  None, NOW), 4, 1)
    stored = {"spec": {**spec, "devices": [{k: v for k, v in d.items() if k != "taints"} for d in spec["devices"]]}}
    assert slices.taints_dropped(stored, spec)
    assert not slices.taints_dropped({"spec": spec}, spec)
    healthy = slices.slice_spec(NODE, cards, {}, 4, 1)
    assert not slices.taints_dropped({"spec": healthy}, healthy)


def test_the_slice_is_owned_by_its_node(tmp_path):
    obj = slices.resource_slice(NODE, "node-uid", slices.slice_spec(NODE, node_cards(tmp_path), {}, 4, 1))
    assert obj["metadata"]["name"] == f"{NODE}-dra.hygon.com"
    assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": NODE,
                                                   "uid": "node-uid", "controller": True}]
    assert "ownerReferences" not in slices.resource_slice(NODE, None, obj["spec"])["metadata"]


def test_same_devices_reads_canonical_quantities_and_ignores_the_generation(tmp_path):
    cards = node_cards(tmp_path)
    spec = slices.slice_spec(NODE, cards, {}, 4, 1)
    published = {"spec": {**spec, "pool": {**spec["pool"], "generation": 7}}}
    # What the API server returns: memory canonical in Mi.
    published["spec"]["devices"] = [dict(d) for d in spec["devices"]]
    published["spec"]["devices"][0] = {**spec["devices"][0], "capacity": {
        **spec["devices"][0]["capacity"], "memory": {"value": "65520Mi", "requestPolicy": {
            "default": "65520Mi", "validRange": {"min": "1Mi", "max": "65520Mi", "step": "1Mi"}}}}}
    assert slices.same_devices(published, spec)
    assert not slices.same_devices(None, spec)
    tainted = slices.unhealthy_taints(cards, {cards[1].id: SICK}, "NoSchedule", {}, None, NOW)
    assert not slices.same_devices(published, slices.slice_spec(NODE, cards, tainted, 4, 1))
    assert not slices.same_devices(published, slices.slice_spec(NODE, cards, {}, 2, 1))


def test_device_names_are_dns_labels():
    for card in CARDS:
        name = names.device_name(card.pci_bus_id)
        assert name == name.lower() and all(ch.isalnum() or ch == "-" for ch in name) and len(name) <= 63
