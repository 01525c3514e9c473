"""The kubelet side: the DevicePlugin gRPC service on a unix socket, registration with
`kubelet.sock`, re-registration when the kubelet restarts, and health-driven ListAndWatch.

This module only translates between gRPC and `PluginService` (service.py); it makes no
allocation decision.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import NoReturn

import grpc

from hami_dcu.common.io.failures import Component, FailureReporter
from hami_dcu.deviceplugin.api.v1beta1 import api_pb2, api_pb2_grpc
from hami_dcu.deviceplugin.core import ContainerResponse
from hami_dcu.deviceplugin.plan import fake_device_id
from hami_dcu.deviceplugin.service import PluginService
from hami_dcu.node.unixchannel import unix_channel

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"

# A ListAndWatch stream holds a server thread for its whole life. The kubelet keeps one
# (two for a moment across its restart); more are refused, so at least WORKERS - MAX_STREAMS
# threads always remain for Allocate and the other unary calls.
MAX_STREAMS = 4
WORKERS = 16
# Calls beyond this (running plus queued) are refused at once instead of piling up.
MAX_CONCURRENT_RPCS = 64


class StreamSlots:
    """A thread-safe count of open streams with a ceiling."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self._open >= self.limit:
                return False
            self._open += 1
            return True

    def give(self) -> None:
        with self._lock:
            self._open -= 1

    @property
    def open(self) -> int:
        return self._open


def socket_name(resource: str) -> str:
    """`hygon.com/dcunum` -> `hygon.com_dcunum.sock`, the name HAMi's plugin uses."""
    return resource.replace("/", "_") + ".sock"


def to_proto(response: ContainerResponse) -> api_pb2.ContainerAllocateResponse:
    return api_pb2.ContainerAllocateResponse(
        envs=response.envs,
        devices=[api_pb2.DeviceSpec(container_path=c, host_path=h, permissions=p) for c, h, p in response.devices],
        mounts=[api_pb2.Mount(container_path=c, host_path=h, read_only=ro) for c, h, ro in response.mounts],
    )


class Servicer(api_pb2_grpc.DevicePluginServicer):
    def __init__(
        self,
        service: PluginService,
        health: Callable[[], dict[str, bool]],
        changed: threading.Condition,
        stopping: threading.Event,
    ) -> None:
        self.service = service
        self.health = health
        self.changed = changed
        self.stopping = stopping
        self.generation = 0
        self.streams = StreamSlots(MAX_STREAMS)
        self.failures = FailureReporter(Component.DEVICE_PLUGIN, service.metrics.registry, log)

    def devices(self) -> list[api_pb2.Device]:
        health = self.health()
        out = []
        for card in sorted(self.service.core.cards.values(), key=lambda c: c.index):
            state = HEALTHY if health.get(card.id, card.card.healthy) else UNHEALTHY
            topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=card.card.numa)])
            out += [
                api_pb2.Device(ID=fake_device_id(card.id, slot), health=state, topology=topology)
                for slot in range(self.service.core.slots_per_card)
            ]
        return out

    def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        if not self.streams.take():
            log.warning("refused a ListAndWatch stream from %s: %d already open", context.peer(), MAX_STREAMS)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"too many ListAndWatch streams open (max {MAX_STREAMS}); close one and retry")
        try:
            # Wake the wait below when the client goes away, so its place frees at once.
            context.add_callback(self._wake)
            seen = -1
            while not self.stopping.is_set() and context.is_active():
                with self.changed:
                    if seen == self.generation:
                        self.changed.wait(1.0)
                        if seen == self.generation:
                            continue
                    seen = self.generation
                yield api_pb2.ListAndWatchResponse(devices=self.devices())
        finally:
            self.streams.give()

    def _wake(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreferredAllocationResponse:
        try:
            responses = [
                api_pb2.ContainerPreferredAllocationResponse(
                    deviceIDs=self.service.preferred(
                        list(r.available_deviceIDs), list(r.must_include_deviceIDs), r.allocation_size
                    )
                )
                for r in request.container_requests
            ]
        except Exception as exc:
            self._abort(context, exc, f"GetPreferredAllocation on node {self.service.node}")
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext) -> api_pb2.AllocateResponse:
        try:
            responses = self.service.allocate([list(r.devices_ids) for r in request.container_requests])
        except Exception as exc:  # a bug must fail this one admission, never the server
            self._abort(context, exc, f"Allocate on node {self.service.node}")
        return api_pb2.AllocateResponse(container_responses=[to_proto(r) for r in responses])

    def _abort(self, context: grpc.ServicerContext, exc: Exception, subject: str) -> NoReturn:
        """End the call as common/protocol/errors.py's rule answers `exc`: an expected failure with its
        own code (an AllocateFailed: FAILED_PRECONDITION) and message, a bug with INTERNAL."""
        failure = self.failures.failed(exc, subject)
        context.abort(grpc.StatusCode[failure.grpc_code], failure.message)
        raise AssertionError("context.abort raises")  # for the type checker: abort never returns

    def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()


class DevicePluginServer:
    """Serve, register, and keep registered across kubelet restarts."""

    def __init__(
        self,
        service: PluginService,
        plugin_dir: str | Path,
        resource: str,
        health: Callable[[], dict[str, bool]] | None = None,
        poll_interval: float = 1.0,
    ) -> None:
        self.service = service
        self.plugin_dir = Path(plugin_dir)
        self.resource = resource
        self.endpoint = socket_name(resource)
        self.socket = self.plugin_dir / self.endpoint
        self.poll_interval = poll_interval
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        self._health_now: dict[str, bool] = {}
        self._health_source = health or (lambda: {})
        self.servicer = Servicer(service, lambda: self._health_now, self.changed, self.stopping)
        self._server: grpc.Server | None = None
        self._kubelet_stamp: tuple[int, int] | None = None
        self._watcher: threading.Thread | None = None
        self.registrations = 0
        # Called (from the watcher thread) after health changed: the command republishes the
        # node registration at once instead of at the next cycle.
        self.on_health_change: Callable[[], None] | None = None

    def start(self) -> DevicePluginServer:
        self._serve()
        try:
            self.register()
        except grpc.RpcError as exc:
            # No kubelet yet (or it is restarting): the watcher registers when kubelet.sock appears.
            log.warning("kubelet not reachable at %s, will register when it is: %s",
                        self.plugin_dir / KUBELET_SOCKET, exc.details() if hasattr(exc, "details") else exc)
            self._kubelet_stamp = None
        self._watcher = threading.Thread(target=self._watch, name="dp-watch", daemon=True)
        self._watcher.start()
        return self

    def _serve(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="dp-grpc"),
                             maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS)
        api_pb2_grpc.add_DevicePluginServicer_to_server(self.servicer, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        log.info("device plugin serving on %s", self.socket)

    def register(self) -> None:
        kubelet = self.plugin_dir / KUBELET_SOCKET
        with unix_channel(kubelet) as channel:
            api_pb2_grpc.RegistrationStub(channel).Register(
                api_pb2.RegisterRequest(
                    version=API_VERSION,
                    endpoint=self.endpoint,
                    resource_name=self.resource,
                    options=api_pb2.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=15,
            )
        self._kubelet_stamp = _stamp(kubelet)
        self.registrations += 1
        log.info("registered %s with the kubelet (%s)", self.resource, kubelet)

    def health_snapshot(self) -> dict[str, bool]:
        return dict(self._health_now)

    def refresh_health(self) -> bool:
        """Re-read health; wake ListAndWatch when it changed. True if it changed."""
        try:
            health = self._health_source()
        except Exception as exc:  # an SMI failure must not kill the plugin: report it
            log.warning("health check failed: %s", exc)
            return False
        if health == self._health_now:
            return False
        for card_id, healthy in sorted(health.items()):
            if self._health_now.get(card_id, True) != healthy:
                log.log(logging.INFO if healthy else logging.WARNING, "card %s is now %s", card_id,
                        HEALTHY if healthy else UNHEALTHY)
        self._health_now = health
        with self.changed:
            self.servicer.generation += 1
            self.changed.notify_all()
        if self.on_health_change is not None:
            self.on_health_change()
        return True

    def _watch(self) -> None:
        while not self.stopping.wait(self.poll_interval):
            self.refresh_health()
            kubelet = self.plugin_dir / KUBELET_SOCKET
            stamp = _stamp(kubelet)
            # The kubelet deletes every socket in the directory when it restarts, then
            # creates a new kubelet.sock: either sign means "serve again and register again".
            if stamp is None:
                continue
            if not self.socket.exists() or stamp != self._kubelet_stamp:
                log.info("kubelet restarted (socket %s): registering again", kubelet)
                try:
                    self._serve()
                    self.register()
                except grpc.RpcError as exc:
                    log.warning("re-registration failed, will retry: %s", exc)
                    self._kubelet_stamp = None

    def stop(self) -> None:
        self.stopping.set()
        with self.changed:
            self.changed.notify_all()
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
        if self._watcher is not None:
            self._watcher.join(5)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_ctime_ns)
