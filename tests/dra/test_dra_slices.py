"""The node's ResourceSlice: Hygon's device shape, health, and change detection."""

from dra_helpers import CARDS, DEV0, DEV1, NODE, node_cards

from hami_dcu.dra import names, slices


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


def test_unhealthy_cards_are_left_out(tmp_path):
    cards = node_cards(tmp_path)
    spec = slices.slice_spec(NODE, cards, {cards[0].id: False, cards[1].id: True}, slots=4, generation=1)
    assert [d["name"] for d in spec["devices"]] == [DEV1]


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
    assert not slices.same_devices(published, slices.slice_spec(NODE, cards, {cards[1].id: False}, 4, 1))
    assert not slices.same_devices(published, slices.slice_spec(NODE, cards, {}, 2, 1))


def test_device_names_are_dns_labels():
    for card in CARDS:
        name = names.device_name(card.pci_bus_id)
        assert name == name.lower() and all(ch.isalnum() or ch == "-" for ch in name) and len(name) <= 63
