"""The committed device plugin stubs' wire names are upstream's (that they are what
grpcio-tools generates from the committed proto: tests/test_stubs.py)."""

from pathlib import Path

from hami_dcu.deviceplugin.api.v1beta1 import api_pb2, api_pb2_grpc


def test_wire_names_are_upstreams():
    assert api_pb2.DESCRIPTOR.package == "v1beta1"
    assert api_pb2.DESCRIPTOR.services_by_name["DevicePlugin"].full_name == "v1beta1.DevicePlugin"
    assert "from hami_dcu.deviceplugin.api.v1beta1 import api_pb2" in Path(api_pb2_grpc.__file__).read_text()
    fields = {f.name: f.number for f in api_pb2.ContainerAllocateResponse.DESCRIPTOR.fields}
    assert fields == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
    assert [f.name for f in api_pb2.ContainerAllocateRequest.DESCRIPTOR.fields] == ["devices_ids"]
