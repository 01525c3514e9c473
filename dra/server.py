"""The kubelet side of the driver: the DRAPlugin service (v1 and v1beta1) on its socket, and
the registration service (pluginregistration.v1) on a socket in the kubelet's
plugins_registry directory, where the kubelet's plugin watcher finds it.

This module only translates between gRPC and the driver (`Prepare`/`Unprepare` callables);
it makes no decision. Each claim of a call gets its own answer: one claim refused never
fails the others. A bug (common/protocol/errors.py's rule) is no refusal: it ends the whole call with
INTERNAL, its traceback logged naming the claim and counted; the kubelet retries the call, and
the claims prepared in it are answered again from their records.

Rolling updates: given its pod's UID, the driver names both sockets after it, so the DaemonSet's
next pod registers beside this one instead of taking its sockets, and the kubelet (1.33+) keeps
both registrations and calls the newer one. At exit the driver removes its registration socket
first (the kubelet drops this registration and calls the other), lets the calls under way
finish, then removes its plugin socket: only the sockets it made, never a newer pod's of the
same name (docs/operations.md, "Upgrading the DRA driver").
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from hami_dcu.common.io.failures import Component, FailureReporter
from hami_dcu.common.protocol.dra import names
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
# AF_UNIX paths hold 108 bytes with the terminating NUL: a longer one cannot be bound.
UNIX_PATH_MAX = 107
POD_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")  # a Kubernetes UID; it names files, so nothing else
# At exit: how long the plugin socket keeps answering after the registration socket is gone (the
# kubelet's plugin watcher sees the removal and its reconciler, every second, deregisters), and
# then how long the calls under way may take to finish.
DEREGISTER_WAIT = 2.0
CALLS_GRACE = 10.0


def _fitting(directory: Path, candidates: list[str]) -> Path:
    """The first name whose path fits a unix socket address (the last one regardless)."""
    for name in candidates:
        if len(os.fsencode(directory / name)) <= UNIX_PATH_MAX:
            return directory / name
    return directory / candidates[-1]


def registration_socket(registry_dir: Path, pod_uid: str | None) -> Path:
    """`<driver>-reg.sock` without a pod UID (one instance per node, as before); with one,
    `<driver>-<uid>-reg.sock`, shortened to a hash of the UID where the directory is long."""
    if not pod_uid:
        return registry_dir / names.REGISTRATION_SOCKET
    digest = hashlib.sha256(pod_uid.encode()).hexdigest()
    # 64 bits of the UID's hash: ample to tell apart the two or three instances of one node.
    return _fitting(registry_dir, [f"{names.DRIVER}-{pod_uid}-reg.sock", f"{names.DRIVER}-{digest[:16]}-reg.sock",
                                   f"dra-{digest[:16]}-reg.sock"])


def plugin_socket(plugins_dir: Path, pod_uid: str | None) -> Path:
    """`<plugins dir>/<driver>/dra.sock` without a pod UID; with one, `dra-<uid>.sock` there."""
    directory = plugins_dir / names.DRIVER
    if not pod_uid:
        return directory / names.PLUGIN_SOCKET
    digest = hashlib.sha256(pod_uid.encode()).hexdigest()
    return _fitting(directory, [f"dra-{pod_uid}.sock", f"dra-{digest[:16]}.sock"])


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
    """The kubelet's registration calls. `ready_file`, when given, exists exactly while the
    kubelet has this instance registered: the pod's readiness probe, so a rolling update takes
    the old pod away only once the new one is called."""

    def __init__(self, endpoint: str, ready_file: Path | None = None) -> None:
        self.endpoint = endpoint
        self.ready_file = ready_file
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
            self._mark_ready()
        else:
            self.last_error = request.error
            self.unready()
            log.error("the kubelet refused DRA driver %s: %s", names.DRIVER, request.error)
        return reg_pb2.RegistrationStatusResponse()

    def _mark_ready(self) -> None:
        if self.ready_file is None:
            return
        try:
            self.ready_file.parent.mkdir(parents=True, exist_ok=True)
            self.ready_file.touch()
        except OSError as exc:  # the pod stays unready: a rolling update waits, nothing breaks
            log.error("could not write the readiness file %s: %s", self.ready_file, exc)

    def unready(self) -> None:
        self.registered.clear()
        if self.ready_file is not None:
            self.ready_file.unlink(missing_ok=True)


class KubeletPluginServer:
    """Serve the plugin socket first, then the registration socket (the kubelet dials the
    endpoint as soon as it sees the registration socket), and serve both again if either
    socket disappears (a kubelet or an operator cleaning the directories)."""

    def __init__(self, prepare: Prepare, unprepare: Unprepare, registry_dir: Path, plugins_dir: Path,
                 poll_interval: float = 1.0, metrics_registry: CollectorRegistry | None = None, *,
                 pod_uid: str | None = None, ready_file: Path | None = None,
                 deregister_wait: float = DEREGISTER_WAIT, calls_grace: float = CALLS_GRACE) -> None:
        if pod_uid and not POD_UID.fullmatch(pod_uid):
            raise ValueError(f"unusable pod UID {pod_uid!r}")
        self.registry_socket = registration_socket(registry_dir, pod_uid)
        self.plugin_socket = plugin_socket(plugins_dir, pod_uid)
        self.prepare, self.unprepare = prepare, unprepare
        # Bugs are counted in the driver's registry (served on --metrics-bind) when given.
        self.failures = FailureReporter(Component.DRA_DRIVER, metrics_registry or CollectorRegistry(), log)
        self.registration = RegistrationServicer(str(self.plugin_socket), ready_file)
        self.poll_interval = poll_interval
        self.deregister_wait, self.calls_grace = deregister_wait, calls_grace
        self.stopping = threading.Event()
        self.serves = 0
        self._registration_server: grpc.Server | None = None
        self._plugin_server: grpc.Server | None = None
        self._inodes: dict[Path, int] = {}  # the sockets this process bound: the only ones it removes
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
        self._plugin_server = plugin
        self._remember(self.plugin_socket)
        registration = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="dra-reg"))
        reg_grpc.add_RegistrationServicer_to_server(self.registration, registration)
        registration.add_insecure_port(f"unix://{self.registry_socket}")
        registration.start()
        self._registration_server = registration
        self._remember(self.registry_socket)
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

    def _remember(self, socket: Path) -> None:
        try:
            self._inodes[socket] = socket.stat().st_ino
        except OSError:  # gone already: the watcher serves again
            self._inodes.pop(socket, None)

    def _remove(self, socket: Path) -> None:
        """Remove the socket if it is still the one this process bound. gRPC's own stop already
        unlinks its path, whoever bound it since: with the fixed names of a driver given no pod
        UID, an old instance's exit takes a newer one's socket (whose watcher serves it again),
        one reason a rolling update needs the per-UID names."""
        inode = self._inodes.pop(socket, None)
        try:
            if inode is not None and socket.stat().st_ino == inode:
                socket.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove DRA socket %s: %s", socket, exc)

    def _stop_servers(self) -> None:
        for server in (self._registration_server, self._plugin_server):
            if server is not None:
                server.stop(grace=None).wait(5)
        self._registration_server = self._plugin_server = None

    def stop(self) -> None:
        """Leave the kubelet's registry, then finish the calls under way, then go; the sockets
        this process made are removed (a stale one would stay registered, unreachable)."""
        self.stopping.set()
        if self._watcher is not None:
            self._watcher.join(5)
        known = self.registration.registered.is_set()  # else no kubelet has this endpoint to forget
        self.registration.unready()
        registration, plugin = self._registration_server, self._plugin_server
        self._registration_server = self._plugin_server = None
        if registration is not None:
            registration.stop(grace=None).wait(5)
        self._remove(self.registry_socket)
        if plugin is not None:
            # Still answering while the kubelet notices the registration is gone: a call it
            # sends meanwhile is served, not refused.
            if known and self.deregister_wait > 0:
                time.sleep(self.deregister_wait)
            plugin.stop(grace=self.calls_grace).wait(self.calls_grace + 5)
        self._remove(self.plugin_socket)
        log.info("DRA driver %s stopped: sockets %s and %s removed", names.DRIVER, self.registry_socket,
                 self.plugin_socket)
