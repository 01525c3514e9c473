"""What the kubelet says each container on this node holds: its pod resources API (gRPC
`v1.PodResourcesLister/List` on a unix socket), turned into plain values.

`containers_of` is the one decoder (pure); `PodResourcesClient` is the thin shell that asks.
Only containers holding something (device plugin ids or DRA claims) are kept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc

from hami_dcu.common.protocol.errors import NodeError
from hami_dcu.node.api.podresources.v1 import api_pb2, api_pb2_grpc
from hami_dcu.node.unixchannel import unix_channel

log = logging.getLogger(__name__)
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# A node with hundreds of pods answers in a few hundred kB; the kubelet's own limit is 16 MiB.
MAX_MESSAGE = 16 * 1024 * 1024


class PodResourcesError(NodeError, RuntimeError):
    """The kubelet's pod resources API did not answer."""


@dataclass(frozen=True)
class DeviceIds:
    """Device plugin ids of one resource, as the kubelet passed them to Allocate."""

    resource: str
    ids: tuple[str, ...]


@dataclass(frozen=True)
class ClaimDevice:
    """One device of a DRA claim, as the driver's NodePrepareResources answered for it."""

    driver: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    devices: tuple[ClaimDevice, ...]


@dataclass(frozen=True)
class ContainerHoldings:
    namespace: str
    pod: str
    container: str
    devices: tuple[DeviceIds, ...] = ()
    claims: tuple[Claim, ...] = ()


def containers_of(response: api_pb2.ListPodResourcesResponse) -> list[ContainerHoldings]:
    """Every container of the answer that holds device plugin ids or claim devices."""
    found = []
    for pod in response.pod_resources:
        for container in pod.containers:
            devices = tuple(DeviceIds(d.resource_name, tuple(d.device_ids)) for d in container.devices if d.device_ids)
            claims = tuple(
                Claim(namespace=r.claim_namespace or pod.namespace, name=r.claim_name, devices=tuple(
                    ClaimDevice(driver=c.driver_name, pool=c.pool_name, device=c.device_name,
                                cdi_ids=tuple(d.name for d in c.cdi_devices))
                    for c in r.claim_resources))
                for r in container.dynamic_resources)
            if devices or claims:
                found.append(ContainerHoldings(pod.namespace, pod.name, container.name, devices, claims))
    return found


class PodResourcesClient:
    """One channel to the kubelet's socket, kept across calls while they succeed; each List has
    a deadline, so a scrape never hangs on the kubelet."""

    def __init__(self, socket: str = DEFAULT_SOCKET, timeout: float = 2.0) -> None:
        self.socket = socket
        self.timeout = timeout
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None

    def list(self) -> list[ContainerHoldings]:
        return containers_of(self.answer())

    def answer(self) -> api_pb2.ListPodResourcesResponse:
        """The kubelet's List answer as it came, containers without devices included (the
        device plugin's lockless Allocate reads which pod is being admitted from those:
        deviceplugin/admitting.py)."""
        if self._stub is None:
            self._channel = unix_channel(self.socket, ("grpc.max_receive_message_length", MAX_MESSAGE))
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        try:
            response = self._stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            # A fresh channel next time: this one would wait out gRPC's reconnect backoff
            # (up to two minutes) after a kubelet restart, and every scrape in it would fail.
            self.close()
            code = exc.code() if isinstance(exc, grpc.Call) else None
            raise PodResourcesError(f"kubelet pod resources API at {self.socket}: {code}: "
                                    f"{exc.details() if isinstance(exc, grpc.Call) else exc}") from exc
        return response

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = self._stub = None
