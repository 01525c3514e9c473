"""The committed pod resources stubs' wire names are the kubelet's (that they are what
grpcio-tools generates from the committed proto: tests/test_stubs.py)."""

from hami_dcu.node.api.podresources.v1 import api_pb2


def numbers(message) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}


def test_service_path_is_the_kubelets():
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert {m.name for m in service.methods} == {"List", "Get", "GetAllocatableResources"}


def test_field_numbers_are_upstreams():
    assert numbers(api_pb2.PodResources) == {"name": 1, "namespace": 2, "containers": 3}
    assert numbers(api_pb2.ContainerResources) == {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4,
                                                   "dynamic_resources": 5}
    assert numbers(api_pb2.ContainerDevices) == {"resource_name": 1, "device_ids": 2, "topology": 3}
    assert numbers(api_pb2.DynamicResource) == {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4}
    assert numbers(api_pb2.ClaimResource) == {"cdi_devices": 1, "driver_name": 2, "pool_name": 3, "device_name": 4}
    assert numbers(api_pb2.GetPodResourcesRequest) == {"name": 1, "namespace": 2}
