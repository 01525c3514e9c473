"""A throwaway device plugin for e2e/test_kind_admission_order.py, run on a kind node in the
project's image (its generated stubs): it serves a resource of its own and, inside every
Allocate, asks the kubelet's pod resources List what it lists, then holds the call a moment so
that a second Allocate, were the kubelet to make one meanwhile, would overlap it. Each event is
a JSON line on stdout; each container it serves gets `PROBE_SEQ`, the number of its Allocate,
so the test knows which container each call really served.

    python3 admission_probe.py <resource> <hold seconds>
"""

import json
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc

from hami_dcu.deviceplugin.api.v1beta1 import api_pb2 as dp
from hami_dcu.deviceplugin.api.v1beta1 import api_pb2_grpc as dp_grpc
from hami_dcu.node.api.podresources.v1 import api_pb2 as pr
from hami_dcu.node.api.podresources.v1 import api_pb2_grpc as pr_grpc

RESOURCE, HOLD = sys.argv[1], float(sys.argv[2])
PLUGINS = "/var/lib/kubelet/device-plugins"
ENDPOINT = "hami-dcu-admission-probe.sock"
PODRESOURCES = "unix:///var/lib/kubelet/pod-resources/kubelet.sock"

lock = threading.Lock()
state = {"seq": 0, "inflight": 0}
lister = pr_grpc.PodResourcesListerStub(grpc.insecure_channel(PODRESOURCES))


def emit(**event: object) -> None:
    print(json.dumps(event), flush=True)


class Probe(dp_grpc.DevicePluginServicer):
    def GetDevicePluginOptions(self, request: dp.Empty, context: grpc.ServicerContext) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions()

    def ListAndWatch(self, request: dp.Empty, context: grpc.ServicerContext) -> Iterator[dp.ListAndWatchResponse]:
        yield dp.ListAndWatchResponse(devices=[dp.Device(ID=f"probe-{i}", health="Healthy") for i in range(16)])
        while context.is_active():
            time.sleep(1)

    def Allocate(self, request: dp.AllocateRequest, context: grpc.ServicerContext) -> dp.AllocateResponse:
        with lock:
            state["seq"] += 1
            state["inflight"] += 1
            seq, inflight = state["seq"], state["inflight"]
        emit(event="enter", seq=seq, inflight=inflight, ids=[list(c.devices_ids) for c in request.container_requests])
        try:
            answer = lister.List(pr.ListPodResourcesRequest(), timeout=10)
            pods = [{"namespace": p.namespace, "name": p.name,
                     "containers": {c.name: [i for d in c.devices if d.resource_name == RESOURCE for i in d.device_ids]
                                    for c in p.containers}}
                    for p in answer.pod_resources]
            emit(event="list", seq=seq, pods=pods)
        except grpc.RpcError as err:
            emit(event="list-failed", seq=seq, error=str(err))
        time.sleep(HOLD)
        with lock:
            state["inflight"] -= 1
        emit(event="exit", seq=seq)
        return dp.AllocateResponse(container_responses=[
            dp.ContainerAllocateResponse(envs={"PROBE_SEQ": str(seq)}) for _ in request.container_requests])

    def PreStartContainer(self, request: dp.PreStartContainerRequest,
                          context: grpc.ServicerContext) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()


def main() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    dp_grpc.add_DevicePluginServicer_to_server(Probe(), server)
    server.add_insecure_port(f"unix://{PLUGINS}/{ENDPOINT}")
    server.start()
    with grpc.insecure_channel(f"unix://{PLUGINS}/kubelet.sock") as channel:
        dp_grpc.RegistrationStub(channel).Register(dp.RegisterRequest(
            version="v1beta1", endpoint=ENDPOINT, resource_name=RESOURCE, options=dp.DevicePluginOptions()))
    emit(event="registered", resource=RESOURCE)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
