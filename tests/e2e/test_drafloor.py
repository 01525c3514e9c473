"""The DRA floor's objects (e2e/realcluster/drafloor.py): trivial enough to be a floor, and the
pods are the burst's plain twins with one claim each."""

from e2e.realcluster import drafloor, scalemix


def test_the_floor_pod_is_the_plain_twin_with_one_whole_device_claim():
    shape = scalemix.MIX[0]
    pod = drafloor.pod("floor-1-00000", shape, "floor-1")
    twin = scalemix.manifest("floor-1-00000", shape, "floor-1", dcu=False)
    assert pod["spec"]["resourceClaims"] == [{"name": "device", "resourceClaimTemplateName": drafloor.TEMPLATE}]
    for container in pod["spec"]["containers"]:
        assert container["resources"]["claims"] == [{"name": "device"}]
        container["resources"].pop("claims")
    pod["spec"].pop("resourceClaims")
    assert pod == twin  # nothing else differs from the plain burst's pod


def test_the_floor_objects_ask_the_allocator_for_nothing_but_names():
    request = drafloor.claim_template("scale")["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request == {"deviceClassName": drafloor.DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1}
    (selector,) = drafloor.device_class()["spec"]["selectors"]
    assert selector["cel"]["expression"] == f'device.driver == "{drafloor.DRIVER}"'
    spec = drafloor.resource_slice("fake-0001", 8)["spec"]
    assert spec["nodeName"] == "fake-0001" and spec["pool"]["resourceSliceCount"] == 1
    assert spec["devices"] == [{"name": f"device-{i}"} for i in range(8)]  # no attributes, no capacity
