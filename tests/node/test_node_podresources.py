"""The kubelet's pod resources answer, decoded; and the client against a kubelet stand-in on a
real unix socket: it answers, it fails with a clear error, it recovers."""

from concurrent import futures

import grpc
import pytest

from hami_dcu.node.api.podresources.v1 import api_pb2 as pr
from hami_dcu.node.api.podresources.v1 import api_pb2_grpc
from hami_dcu.node.podresources import (
    MAX_MESSAGE,
    Claim,
    ClaimDevice,
    ContainerHoldings,
    DeviceIds,
    PodResourcesClient,
    PodResourcesError,
    containers_of,
)


def answer() -> pr.ListPodResourcesResponse:
    share = pr.ContainerResources(name="main", devices=[
        pr.ContainerDevices(resource_name="hygon.com/dcunum", device_ids=["DCU-S0-fake-1"]),
        pr.ContainerDevices(resource_name="example.com/nothing", device_ids=[])], cpu_ids=[3])
    claim = pr.ContainerResources(name="worker", dynamic_resources=[pr.DynamicResource(
        claim_name="share-a", claim_namespace="team", claim_resources=[pr.ClaimResource(
            driver_name="dra.hygon.com", pool_name="n1", device_name="hcu-0000-3d-00-0",
            cdi_devices=[pr.CDIDevice(name="dra.hygon.com/dcu=u1-hcu-0000-3d-00-0-dcu")])])])
    return pr.ListPodResourcesResponse(pod_resources=[
        pr.PodResources(name="infer", namespace="team", containers=[share, pr.ContainerResources(name="sidecar")]),
        pr.PodResources(name="train", namespace="team", containers=[claim]),
    ])


def test_containers_of_keeps_only_containers_that_hold_something():
    assert containers_of(answer()) == [
        ContainerHoldings("team", "infer", "main", devices=(DeviceIds("hygon.com/dcunum", ("DCU-S0-fake-1",)),)),
        ContainerHoldings("team", "train", "worker", claims=(Claim("team", "share-a", (
            ClaimDevice("dra.hygon.com", "n1", "hcu-0000-3d-00-0", ("dra.hygon.com/dcu=u1-hcu-0000-3d-00-0-dcu",)),
        )),)),
    ]


def test_a_claim_without_its_namespace_is_in_the_pods():
    bare = pr.ListPodResourcesResponse(pod_resources=[pr.PodResources(name="p", namespace="ns", containers=[
        pr.ContainerResources(name="c", dynamic_resources=[pr.DynamicResource(claim_name="x")])])])
    (container,) = containers_of(bare)
    assert container.claims == (Claim("ns", "x", ()),)


class Kubelet(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self) -> None:
        self.calls = 0

    def List(self, request, context):
        self.calls += 1
        return answer()


@pytest.fixture
def socket_path(tmp_path):
    return str(tmp_path / "kubelet.sock")


def serve(path: str) -> tuple[grpc.Server, Kubelet]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    kubelet = Kubelet()
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(kubelet, server)
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server, kubelet


def test_the_client_lists_through_the_socket_and_keeps_one_channel(socket_path):
    server, kubelet = serve(socket_path)
    client = PodResourcesClient(socket_path, timeout=5)
    try:
        assert [c.pod for c in client.list()] == ["infer", "train"]
        channel = client._channel
        assert len(client.list()) == 2 and client._channel is channel
        assert kubelet.calls == 2
    finally:
        client.close()
        server.stop(None)


def test_no_kubelet_is_a_clear_error_and_a_kubelet_that_comes_back_is_used(socket_path):
    # No socket fails at once (UNAVAILABLE, not the deadline): the deadline only has to let a
    # loaded machine connect.
    client = PodResourcesClient(socket_path, timeout=10)
    with pytest.raises(PodResourcesError, match=f"pod resources API at {socket_path}"):
        client.list()
    server, _ = serve(socket_path)
    try:  # at once: no reconnect backoff left from the failed call
        assert client.list()[0].container == "main"
    finally:
        client.close()
        server.stop(None)


def test_a_fresh_channel_does_not_inherit_another_channels_reconnect_backoff(socket_path):
    """gRPC shares a connection to a target between channels (its global subchannel pool):
    a channel still waiting out its reconnect backoff to the socket would fail the client's
    fresh channel at once with the old error, as a CI run under load saw. Each of the client's
    channels connects on its own."""
    other = grpc.insecure_channel(f"unix://{socket_path}", options=[("grpc.max_receive_message_length", MAX_MESSAGE)])
    stub = api_pb2_grpc.PodResourcesListerStub(other)
    with pytest.raises(grpc.RpcError):
        stub.List(pr.ListPodResourcesRequest(), timeout=10)  # no socket: into backoff, kept
    server, _ = serve(socket_path)
    client = PodResourcesClient(socket_path, timeout=10)
    try:
        assert client.list()[0].container == "main"
    finally:
        client.close()
        other.close()
        server.stop(None)
