"""The committed DRA and plugin-registration stubs' wire names are upstream's (that they are
what grpcio-tools generates from the committed protos: tests/test_stubs.py)."""

from hami_dcu.dra.api.pluginregistration import api_pb2 as reg_pb2
from hami_dcu.dra.api.v1 import api_pb2 as v1_pb2
from hami_dcu.dra.api.v1beta1 import api_pb2 as v1beta1_pb2


def test_service_paths_are_upstreams():
    assert v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert (v1beta1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name
            == "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin")
    assert reg_pb2.DESCRIPTOR.services_by_name["Registration"].full_name == "pluginregistration.Registration"


def test_field_numbers_are_upstreams():
    def numbers(message):
        return {f.name: f.number for f in message.DESCRIPTOR.fields}

    assert numbers(v1_pb2.Device) == {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4,
                                      "share_id": 5}
    assert numbers(v1beta1_pb2.Device) == {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}
    assert numbers(v1_pb2.Claim) == {"namespace": 1, "uid": 2, "name": 3}
    assert numbers(v1_pb2.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
    assert numbers(reg_pb2.PluginInfo) == {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
    assert numbers(reg_pb2.RegistrationStatus) == {"plugin_registered": 1, "error": 2}


def test_v1_and_v1beta1_messages_share_a_wire_format():
    """A kubelet speaking either version decodes the other's bytes: the servicer serves both
    with one implementation."""
    claim = v1_pb2.Claim(namespace="ns", uid="u1", name="c")
    assert v1beta1_pb2.Claim.FromString(claim.SerializeToString()) == v1beta1_pb2.Claim(namespace="ns", uid="u1",
                                                                                        name="c")
