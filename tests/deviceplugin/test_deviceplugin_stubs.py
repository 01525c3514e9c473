"""The committed gRPC stubs are what grpcio-tools generates from the committed proto."""

import shutil
from pathlib import Path

import pytest

from hami_dcu.deviceplugin.api.v1beta1 import api_pb2, api_pb2_grpc

API = Path(api_pb2.__file__).parent
PACKAGE = Path("hami_dcu/deviceplugin/api/v1beta1")


def test_stubs_match_a_fresh_generation(tmp_path):
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools is a test dependency")
    (tmp_path / PACKAGE).mkdir(parents=True)
    shutil.copy(API / "api.proto", tmp_path / PACKAGE / "api.proto")
    status = protoc.main([
        "protoc", f"-I{tmp_path}", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}",
        f"--grpc_python_out={tmp_path}", str(tmp_path / PACKAGE / "api.proto"),
    ])
    assert status == 0
    for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
        assert (tmp_path / PACKAGE / name).read_text() == (API / name).read_text(), f"{name} is stale: regenerate"


def test_wire_names_are_upstreams():
    assert api_pb2.DESCRIPTOR.package == "v1beta1"
    assert api_pb2.DESCRIPTOR.services_by_name["DevicePlugin"].full_name == "v1beta1.DevicePlugin"
    assert "from hami_dcu.deviceplugin.api.v1beta1 import api_pb2" in Path(api_pb2_grpc.__file__).read_text()
    fields = {f.name: f.number for f in api_pb2.ContainerAllocateResponse.DESCRIPTOR.fields}
    assert fields == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
    assert [f.name for f in api_pb2.ContainerAllocateRequest.DESCRIPTOR.fields] == ["devices_ids"]
