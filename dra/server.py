"""The kubelet side of the driver: the DRAPlugin service (v1 and v1beta1) on its socket, and
the registration service (pluginregistration.v1) on a socket in the kubelet's
plugins_registry directory, where the kubelet's plugin watcher finds it.

This module only translates between gRPC and the driver (`Prepare`/`Unprepare` callables);
it makes no decision. Each claim of a call gets its own answer: one claim refused never
fails the others. A bug (common/errors.py's rule) is no refusal: it ends the whole call with
INTERNAL, its traceback logged naming the claim and counted; the kubelet retries the call, and
the claims prepared in it are answered again from their records.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from hami_dcu.common.dra import names
from hami_dcu.common.failures import Component, FailureReporter
from hami_dcu.dra.api.pluginregistration import api_pb2 as reg_pb2
from hami_dcu.dra.api.pluginregistration import api_pb2_grpc as reg_grpc
from hami_dcu.dra.api.v1 import api_pb2 as v1_pb2
from hami_dcu.dra.api.v1 import api_pb2_grpc as v1_grpc
from hami_dcu.dra.api.v1beta1 import api_pb2 as v1beta1_pb2
from hami_dcu.dra.api.v1beta1 import api_pb2_grpc as v1beta1_grpc
from hami_dcu.dra.records import PreparedClaim

log = logging.getLogger(__name__)

WORKERS = 8
MAX_CONCURRENT_RPCS = 64


class ClaimRef:
    """A claim as the kubelet names it."""

    __slots__ = ("name", "namespace", "uid")

    def __init__(self, namespace: str, name: str, uid: str) -> None:
        self.namespace, self.name, self.uid = namespace, name, uid

    def __repr__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


Prepare = Callable[[ClaimRef], PreparedClaim]  # raises with a message for the kubelet
Unprepare = Callable[[ClaimRef], None]


def _prepare(pb2: ModuleType, request: Any, prepare: Prepare, share_ids: bool, failures: FailureReporter,
             context: grpc.ServicerContext) -> Any:
    response = pb2.NodePrepareResourcesResponse()
    for claim in request.claims:
        answer = response.claims[claim.uid]
        ref = ClaimRef(claim.namespace, claim.name, claim.uid)
        try:
            record = prepare(ref)
        except Exception as exc:
            answer.error = _refusal(failures, exc, f"NodePrepareResources of claim {ref}", context)
            continue
        for device in record.devices:
            entry = answer.devices.add(request_names=[device.request], pool_name=device.pool,
                                       device_name=device.device, cdi_device_ids=record.cdi_ids(device))
            if share_ids and device.share_id:
                entry.share_id = device.share_id
    return response


def _unprepare(pb2: ModuleType, request: Any, unprepare: Unprepare, failures: FailureReporter,
               context: grpc.ServicerContext) -> Any:
    response = pb2.NodeUnprepareResourcesResponse()
    for claim in request.claims:
        answer = response.claims[claim.uid]
        ref = ClaimRef(claim.namespace, claim.name, claim.uid)
        try:
            unprepare(ref)
        except Exception as exc:
            answer.error = _refusal(failures, exc, f"NodeUnprepareResources of claim {ref}", context)
    return response


def _refusal(failures: FailureReporter, exc: Exception, subject: str, context: grpc.ServicerContext) -> str:
    """The claim's error for an expected failure; a bug ends the call with INTERNAL."""
    failure = failures.failed(exc, subject)
    if not failure.expected:
        context.abort(grpc.StatusCode[failure.grpc_code], failure.message)
    return failure.message


class DraServicerV1(v1_grpc.DRAPluginServicer):
    def __init__(self, prepare: Prepare, unprepare: Unprepare, failures: FailureReporter) -> None:
        self.prepare, self.unprepare, self.failures = prepare, unprepare, failures

    def NodePrepareResources(self, request: v1_pb2.NodePrepareResourcesRequest,
                             context: grpc.ServicerContext) -> v1_pb2.NodePrepareResourcesResponse:
        return _prepare(v1_pb2, request, self.prepare, True, self.failures, context)

    def NodeUnprepareResources(self, request: v1_pb2.NodeUnprepareResourcesRequest,
                               context: grpc.ServicerContext) -> v1_pb2.NodeUnprepareResourcesResponse:
        return _unprepare(v1_pb2, request, self.unprepare, self.failures, context)


class DraServicerV1beta1(v1beta1_grpc.DRAPluginServicer):
    def __init__(self, prepare: Prepare, unprepare: Unprepare, failures: FailureReporter) -> None:
        self.prepare, self.unprepare, self.failures = prepare, unprepare, failures

    def NodePrepareResources(self, request: v1beta1_pb2.NodePrepareResourcesRequest,
                             context: grpc.ServicerContext) -> v1beta1_pb2.NodePrepareResourcesResponse:
        return _prepare(v1beta1_pb2, request, self.prepare, False, self.failures, context)

    def NodeUnprepareResources(self, request: v1beta1_pb2.NodeUnprepareResourcesRequest,
                               context: grpc.ServicerContext) -> v1beta1_pb2.NodeUnprepareResourcesResponse:
        return _unprepare(v1beta1_pb2, request, self.unprepare, self.failures, context)


class RegistrationServicer(reg_grpc.RegistrationServicer):
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.registered = threading.Event()
        self.last_error = ""

    def GetInfo(self, request: reg_pb2.InfoRequest, context: grpc.ServicerContext) -> reg_pb2.PluginInfo:
        return reg_pb2.PluginInfo(type=names.PLUGIN_TYPE, name=names.DRIVER, endpoint=self.endpoint,
                                  supported_versions=list(names.SUPPORTED_SERVICES))

    def NotifyRegistrationStatus(self, request: reg_pb2.RegistrationStatus,
                                 context: grpc.ServicerContext) -> reg_pb2.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("the kubelet registered DRA driver %s (endpoint %s)", names.DRIVER, self.endpoint)
            self.last_error = ""
            self.registered.set()
        else:
            self.last_error = request.error
            self.registered.clear()
            log.error("the kubelet refused DRA driver %s: %s", names.DRIVER, request.error)
        return reg_pb2.RegistrationStatusResponse()


class KubeletPluginServer:
    """Serve the plugin socket first, then the registration socket (the kubelet dials the
    endpoint as soon as it sees the registration socket), and serve both again if either
    socket disappears (a kubelet or an operator cleaning the directories)."""

    def __init__(self, prepare: Prepare, unprepare: Unprepare, registry_dir: Path, plugins_dir: Path,
                 poll_interval: float = 1.0, metrics_registry: CollectorRegistry | None = None) -> None:
        self.registry_socket = registry_dir / names.REGISTRATION_SOCKET
        self.plugin_socket = plugins_dir / names.DRIVER / names.PLUGIN_SOCKET
        self.prepare, self.unprepare = prepare, unprepare
        # Bugs are counted in the driver's registry (served on --metrics-bind) when given.
        self.failures = FailureReporter(Component.DRA_DRIVER, metrics_registry or CollectorRegistry(), log)
        self.registration = RegistrationServicer(str(self.plugin_socket))
        self.poll_interval = poll_interval
        self.stopping = threading.Event()
        self.serves = 0
        self._servers: list[grpc.Server] = []
        self._watcher: threading.Thread | None = None

    def start(self) -> KubeletPluginServer:
        self._serve()
        self._watcher = threading.Thread(target=self._watch, name="dra-sockets", daemon=True)
        self._watcher.start()
        return self

    def _serve(self) -> None:
        self._stop_servers()
        self.plugin_socket.parent.mkdir(parents=True, exist_ok=True)
        self.registry_socket.parent.mkdir(parents=True, exist_ok=True)
        plugin = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="dra-grpc"),
                             maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS)
        v1_grpc.add_DRAPluginServicer_to_server(DraServicerV1(self.prepare, self.unprepare, self.failures), plugin)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraServicerV1beta1(self.prepare, self.unprepare, self.failures),
                                                     plugin)
        plugin.add_insecure_port(f"unix://{self.plugin_socket}")
        plugin.start()
        registration = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="dra-reg"))
        reg_grpc.add_RegistrationServicer_to_server(self.registration, registration)
        registration.add_insecure_port(f"unix://{self.registry_socket}")
        registration.start()
        self._servers = [registration, plugin]
        self.serves += 1
        log.info("DRA driver %s serving on %s, registration on %s", names.DRIVER, self.plugin_socket,
                 self.registry_socket)

    def _watch(self) -> None:
        while not self.stopping.wait(self.poll_interval):
            if not (self.plugin_socket.exists() and self.registry_socket.exists()):
                log.info("a DRA socket was removed: serving again so the kubelet registers the driver again")
                try:
                    self._serve()
                except (OSError, RuntimeError) as exc:
                    log.warning("could not serve the DRA sockets again, will retry: %s", exc)

    def _stop_servers(self) -> None:
        for server in self._servers:
            server.stop(grace=None).wait(5)
        self._servers = []

    def stop(self) -> None:
        self.stopping.set()
        if self._watcher is not None:
            self._watcher.join(5)
        self._stop_servers()
