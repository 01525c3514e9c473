"""Idle ListAndWatch streams over the real unix socket must not starve unary calls.

The kubelet holds one stream; anything that can reach the socket can open more. Each stream
occupies a server thread for its whole life, so without a bound 16 idle streams took every
worker and the next Allocate timed out."""

import time
from collections.abc import Iterator

import grpc
import pytest
from dp_helpers import dev

from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin.api.v1beta1 import api_pb2, api_pb2_grpc
from hami_dcu.deviceplugin.server import MAX_STREAMS, DevicePluginServer

DCU = keys.DCU_NAMING  # the naming set these tests speak

HEALTH: dict[str, bool] = {}


@pytest.fixture
def plugin(dcu_node) -> Iterator[tuple[object, DevicePluginServer, object]]:
    # No kubelet: the test is the only client, so it owns every stream and every Allocate.
    HEALTH.clear()
    server = DevicePluginServer(dcu_node.core(), dcu_node.plugin_dir, DCU.resources.count,
                                health=lambda: dict(HEALTH), poll_interval=0.1).start()
    channels: list[grpc.Channel] = []

    def stub() -> api_pb2_grpc.DevicePluginStub:
        channels.append(grpc.insecure_channel(f"unix://{server.socket}"))
        return api_pb2_grpc.DevicePluginStub(channels[-1])

    yield dcu_node, server, stub
    for channel in channels:
        channel.close()
    server.stop()


def open_streams(stub, count: int) -> tuple[list, list[grpc.RpcError]]:
    """`count` ListAndWatch streams, each read once and then left idle."""
    opened, refused = [], []
    for _ in range(count):
        stream = stub.ListAndWatch(api_pb2.Empty(), timeout=30)
        try:
            assert len(next(stream).devices) == 8
            opened.append(stream)
        except grpc.RpcError as exc:
            refused.append(exc)
    return opened, refused


def test_idle_streams_do_not_starve_allocate(plugin):
    node, _, stub = plugin
    streams, refused = open_streams(stub(), 24)
    try:
        assert len(streams) == MAX_STREAMS
        assert refused and all(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for e in refused)
        assert "ListAndWatch streams" in refused[0].details()
        node.bind("p", [("main", [dev("S2", 2000, 15)])])
        request = api_pb2.AllocateRequest(container_requests=[
            api_pb2.ContainerAllocateRequest(devices_ids=["DCU-S2-fake-0"])])
        response = stub().Allocate(request, timeout=5)
        assert response.container_responses[0].devices[-1].container_path == "/dev/dri/renderD130"
        options = stub().GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
        assert options.get_preferred_allocation_available
    finally:
        for stream in streams:
            stream.cancel()


def test_a_closed_stream_frees_its_place(plugin):
    _, _, stub = plugin
    streams, _ = open_streams(stub(), MAX_STREAMS)
    assert len(streams) == MAX_STREAMS
    streams.pop().cancel()
    # The server notices the cancellation within its wait interval; a new stream then fits.
    reopened: list = []
    for _ in range(50):
        reopened, refused = open_streams(stub(), 1)
        if reopened:
            break
        assert refused[0].code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        time.sleep(0.1)
    assert len(reopened) == 1
    for stream in streams + reopened:
        stream.cancel()


def test_health_change_still_reaches_every_open_stream(plugin):
    _, server, stub = plugin
    streams, _ = open_streams(stub(), 2)
    HEALTH["DCU-S1"] = False
    assert server.refresh_health()
    for stream in streams:
        devices = next(stream).devices
        assert sorted({d.health for d in devices}) == ["Healthy", "Unhealthy"]
        stream.cancel()
