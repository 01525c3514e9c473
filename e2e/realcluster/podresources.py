"""The kubelet stand-in's pod resources API (`v1.PodResourcesLister/List`), answered as a
v1.37 kubelet answers it (docs/architecture.md, Which pod an Allocate serves without the
lock): the pods it has taken up and not rejected or finished, each app container with the
device ids recorded for it once its Allocate returned. So during an Allocate the pod being
admitted is listed with the container being served empty, earlier pods with their ids, and
pods the stand-in has not taken up yet not at all. The device plugin asks it to tell apart the
members of a Volcano gang that await an Allocate on one node.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from hami_dcu.node.api.podresources.v1 import api_pb2, api_pb2_grpc

SOCKET = "kubelet.sock"
HOST_DIR = "/var/lib/kubelet/pod-resources"  # the hostPath the device plugin mounts


@dataclass
class AdmittedPod:
    namespace: str
    name: str
    containers: list[str]  # app containers, in order
    ids: dict[str, list[str]] = field(default_factory=dict)  # container -> device ids, once allocated


class PodResourcesRecord:
    """What the stand-in records for List: thread-safe (the pod loop writes, gRPC reads)."""

    def __init__(self, resource: str) -> None:
        self.resource = resource
        self._pods: dict[str, AdmittedPod] = {}
        self._lock = threading.Lock()

    def admitting(self, uid: str, namespace: str, name: str, containers: list[str]) -> None:
        with self._lock:
            self._pods[uid] = AdmittedPod(namespace, name, containers)

    def allocated(self, uid: str, container: str, ids: list[str]) -> None:
        with self._lock:
            pod = self._pods.get(uid)
            if pod is not None:
                pod.ids[container] = list(ids)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._pods.pop(uid, None)

    def answer(self) -> api_pb2.ListPodResourcesResponse:
        with self._lock:
            pods = [(p.namespace, p.name, list(p.containers), dict(p.ids)) for p in self._pods.values()]
        return api_pb2.ListPodResourcesResponse(pod_resources=[
            api_pb2.PodResources(name=name, namespace=namespace, containers=[
                api_pb2.ContainerResources(name=c, devices=[
                    api_pb2.ContainerDevices(resource_name=self.resource, device_ids=ids[c])] if ids.get(c) else [])
                for c in containers])
            for namespace, name, containers, ids in pods])


class _Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, record: PodResourcesRecord) -> None:
        self.record = record

    def List(self, request: api_pb2.ListPodResourcesRequest,
             context: grpc.ServicerContext) -> api_pb2.ListPodResourcesResponse:
        return self.record.answer()


def serve(record: PodResourcesRecord, directory: Path) -> grpc.Server:
    """List on `directory`/kubelet.sock, as the kubelet serves it."""
    directory.mkdir(parents=True, exist_ok=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="pod-resources"))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(record), server)
    server.add_insecure_port(f"unix://{directory / SOCKET}")
    server.start()
    return server
