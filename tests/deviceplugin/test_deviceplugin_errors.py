"""The device plugin answers Allocate by common/protocol/errors.py's rule: a bug is gRPC INTERNAL with a
short message, its traceback logged naming the pod and node, counted, and the pod still marked
failed with its lock released; an expected refusal is FAILED_PRECONDITION with its message, no
traceback, uncounted; a call the kubelet should never send is refused as it always was."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import grpc
import pytest
from dp_helpers import dev

from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin import plan
from hami_dcu.deviceplugin.api.v1beta1 import api_pb2, api_pb2_grpc
from hami_dcu.deviceplugin.server import DevicePluginServer

BUG = "internal error in the device-plugin (ZeroDivisionError); its log has the details"


@pytest.fixture
def served(dcu_node) -> Iterator[tuple[DevicePluginServer, api_pb2_grpc.DevicePluginStub]]:
    server = DevicePluginServer(dcu_node.core(), dcu_node.plugin_dir, keys.DCU_NAMING.resources.count).start()
    try:
        with grpc.insecure_channel(f"unix://{server.socket}") as channel:
            yield server, api_pb2_grpc.DevicePluginStub(channel)
    finally:
        server.stop()


def allocate(stub: api_pb2_grpc.DevicePluginStub, *ids: str) -> grpc.RpcError:
    request = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(ids))]
                                      if ids else [])
    with pytest.raises(grpc.RpcError) as refused:
        stub.Allocate(request, timeout=10)
    return refused.value


def bugs(server: DevicePluginServer) -> float:
    return server.service.metrics.value("hami_dcu_internal_errors_total", component="device-plugin")


def tracebacks(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None]


def test_a_bug_is_internal_logged_naming_pod_and_node_counted_and_the_pod_still_failed(dcu_node, served, monkeypatch,
                                                                                       caplog):
    server, stub = served
    assert bugs(server) == 0
    dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])])

    def broken(*_args: object) -> object:
        return 1 / 0

    monkeypatch.setattr(plan, "plan_container", broken)
    error = allocate(stub, "DCU-S1-fake-0")
    assert error.code() == grpc.StatusCode.INTERNAL and error.details() == BUG
    [record] = tracebacks(caplog)
    assert record.exc_info[0] is ZeroDivisionError
    assert "pod default/p on node n1" in caplog.text  # the note on the traceback
    assert bugs(server) == 1
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_FAILED
    assert dcu_node.lock_value() is None
    assert server.service.metrics.value("hami_dcu_plugin_allocations_total", node="n1", result="failed") == 1


def test_an_expected_refusal_is_failed_precondition_without_a_traceback(dcu_node, served, caplog):
    server, stub = served
    dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])], lock=False)
    error = allocate(stub, "DCU-S1-fake-0")
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no pod holds the node lock" in error.details()
    assert not tracebacks(caplog) and bugs(server) == 0


def test_a_call_without_container_requests_is_refused_as_before(dcu_node, served, caplog):
    server, stub = served
    dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])])
    error = allocate(stub)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error.details() == "the kubelet sent an Allocate call without container requests"
    assert not tracebacks(caplog) and bugs(server) == 0
