"""A kubelet stand-in for the local cluster: the device-manager half of a real kubelet.

* serves `v1beta1.Registration` on `<plugin dir>/kubelet.sock`; on Register it dials the
  plugin back, reads its options and follows its ListAndWatch stream into the Node's
  `status.capacity` / `status.allocatable`;
* for every pod bound to its node, in container order (init containers first), asks
  GetPreferredAllocation (when offered) and Allocate over real gRPC with free device ids,
  one container per call as the real kubelet does; the pod then turns Running, or Failed
  with the plugin's error (UnexpectedAdmissionError); ids are freed when the pod goes;
* `restart()` does what a kubelet restart does to plugins: deletes every socket in the
  directory and serves a fresh kubelet.sock.
"""

from __future__ import annotations

import logging
import stat
import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.errors import CliError
from hami_dcu.common.protocol.requests import pod_containers
from hami_dcu.deviceplugin.api.v1beta1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)
JSON = dict[str, Any]


@dataclass
class PluginEndpoint:
    resource: str
    channel: grpc.Channel
    stub: api_pb2_grpc.DevicePluginStub
    options: api_pb2.DevicePluginOptions
    devices: dict[str, str] = field(default_factory=dict)  # id -> health


class _Registration(api_pb2_grpc.RegistrationServicer):
    def __init__(self, kubelet: LocalKubelet) -> None:
        self.kubelet = kubelet

    def Register(self, request: api_pb2.RegisterRequest, context: grpc.ServicerContext) -> api_pb2.Empty:
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        if "/" not in request.resource_name or request.resource_name.startswith("kubernetes.io/"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid resource name {request.resource_name}")
        self.kubelet.connect(request.resource_name, request.endpoint)
        return api_pb2.Empty()


class LocalKubelet:
    def __init__(self, kube: Kube, node: str, plugin_dir: str | Path, resource: str | None = None,
                 labels: dict[str, str] | None = None) -> None:
        self.kube = kube
        self.node = node
        self.plugin_dir = Path(plugin_dir)
        self.resource = resource or keys.DCU_NAMING.resources.count  # the plugin's advertised resource
        self.labels = labels or {"dcu": "on"}
        self.endpoints: dict[str, PluginEndpoint] = {}
        # Resources a plugin served before the last restart (the real kubelet checkpoints them).
        self.checkpointed: dict[str, PluginEndpoint] = {}
        self.assigned: dict[str, set[str]] = {}  # pod uid -> device ids
        self.responses: dict[str, dict[str, api_pb2.ContainerAllocateResponse]] = {}  # uid -> container -> resp
        self.registrations = 0
        self._lock = threading.RLock()
        self._server: grpc.Server | None = None
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._handled: set[str] = set()

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> LocalKubelet:
        self._register_node()
        self._serve_registration()
        pods = threading.Thread(target=self._pod_loop, name=f"kubelet-{self.node}", daemon=True)
        pods.start()
        self._threads.append(pods)
        return self

    def _register_node(self) -> None:
        try:
            # Ready and a version, as a kubelet reports them: what `kubectl get nodes` prints.
            self.kube.create_node({"metadata": {"name": self.node, "labels": self.labels},
                                   "status": {"capacity": {}, "allocatable": {},
                                              "conditions": [{"type": "Ready", "status": "True",
                                                              "reason": "KubeletReady"}],
                                              "nodeInfo": {"kubeletVersion": "v1.33.0-hami-local"}}})
        except KubeError as exc:
            if exc.status != 409:
                raise

    def _serve_registration(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"kubelet-reg-{self.node}"))
        api_pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.plugin_dir / 'kubelet.sock'}")
        server.start()
        self._server = server

    def restart(self) -> None:
        """A kubelet restart: plugins lose their sockets and must register again. Until one
        does, a real kubelet knows its devices only from its checkpoint, all unhealthy: it
        offers none (allocatable 0) and refuses pods asking for them (seen on kind)."""
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
        with self._lock:
            for endpoint in self.endpoints.values():
                endpoint.channel.close()
            self.checkpointed.update(self.endpoints)
            self.endpoints.clear()
        for resource in list(self.checkpointed):
            try:
                self.kube.patch_node_status(self.node, {"allocatable": {resource: "0"}})
            except KubeError as exc:
                log.warning("node %s: allocatable update failed: %s", self.node, exc)
        for entry in self.plugin_dir.iterdir():
            if stat.S_ISSOCK(entry.lstat().st_mode):
                entry.unlink()
        self._serve_registration()

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
        with self._lock:
            for endpoint in self.endpoints.values():
                endpoint.channel.close()
        for thread in self._threads:
            thread.join(5)

    # --- device plugins ------------------------------------------------------------------

    def connect(self, resource: str, endpoint: str) -> None:
        channel = grpc.insecure_channel(f"unix://{self.plugin_dir / endpoint}")
        stub = api_pb2_grpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=10)
        plugin = PluginEndpoint(resource, channel, stub, options)
        with self._lock:
            old = self.endpoints.get(resource)
            self.endpoints[resource] = plugin
            self.registrations += 1
        if old is not None:
            old.channel.close()
        thread = threading.Thread(target=self._list_and_watch, args=(plugin,), name=f"law-{self.node}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _list_and_watch(self, plugin: PluginEndpoint) -> None:
        try:
            for response in plugin.stub.ListAndWatch(api_pb2.Empty()):
                with self._lock:
                    plugin.devices = {d.ID: d.health for d in response.devices}
                    healthy = sum(1 for h in plugin.devices.values() if h == "Healthy")
                    total = len(plugin.devices)
                try:
                    self.kube.patch_node_status(self.node, {"capacity": {plugin.resource: str(total)},
                                                            "allocatable": {plugin.resource: str(healthy)}})
                except KubeError as exc:
                    log.warning("node %s: capacity update failed: %s", self.node, exc)
        except grpc.RpcError:
            pass
        # The stream ended, with an error or cleanly (a plugin stopping ends it cleanly): either
        # way the plugin went away. A real kubelet marks its devices unhealthy at once (capacity
        # stays for a 5-minute grace period); a restarted plugin registers again.
        with self._lock:
            current = self.endpoints.get(plugin.resource) is plugin
            if current:
                plugin.devices = dict.fromkeys(plugin.devices, "Unhealthy")
        if current and not self._stopping.is_set():
            try:
                self.kube.patch_node_status(self.node, {"allocatable": {plugin.resource: "0"}})
            except KubeError as exc:
                log.warning("node %s: allocatable update failed: %s", self.node, exc)

    def free_ids(self, resource: str) -> list[str]:
        with self._lock:
            plugin = self.endpoints.get(resource)
            if plugin is None:
                return []
            used = set().union(*self.assigned.values()) if self.assigned else set()
            return sorted(i for i, h in plugin.devices.items() if h == "Healthy" and i not in used)

    # --- pods ----------------------------------------------------------------------------

    def _pod_loop(self) -> None:
        """List the node's pods once, then watch on from the last version seen, as a kubelet's
        reflector does; list again only when the watch fails (410 Gone included). The watch
        ends every 2 s so that stop() is quick; it used to list again each time, a pod list
        per node every 2 s that the scale benches counted against every pod."""
        selector = f"spec.nodeName={self.node}"
        version: str | None = None
        while not self._stopping.is_set():
            try:
                if version is None:
                    listed = self.kube.list_pods(field_selector=selector)
                    self._sync(listed.items)
                    version = listed.resource_version
                for event in self.kube.watch_pods(version, timeout_seconds=2, field_selector=selector):
                    if self._stopping.is_set():
                        return
                    pod = event["object"]
                    version = (pod.get("metadata") or {}).get("resourceVersion") or version
                    if event["type"] == "DELETED":
                        self._forget(pod)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        self._sync([pod])
            except KubeError as exc:
                log.debug("kubelet %s: pod watch restarted from a new list: %s", self.node, exc)
                version = None
                self._stopping.wait(0.5)

    def _sync(self, pods: list[JSON]) -> None:
        for pod in pods:
            uid = pod["metadata"]["uid"]
            if pod["metadata"].get("deletionTimestamp"):
                self._finish_deletion(pod)
                continue
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                self._forget(pod)
                continue
            if uid in self._handled or phase != "Pending":
                continue
            self._handled.add(uid)
            self._admit(pod)

    def _finish_deletion(self, pod: JSON) -> None:
        """What a kubelet does with a pod marked for deletion: stop it (nothing runs here), free
        its devices, and delete it for good with grace 0 and a UID precondition."""
        meta = pod["metadata"]
        self._forget(pod)
        try:
            self.kube.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                              body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
        except KubeError as exc:
            if exc.status not in (404, 409):
                log.warning("kubelet %s: final delete of %s/%s failed: %s", self.node, meta["namespace"],
                            meta["name"], exc)

    def _forget(self, pod: JSON) -> None:
        with self._lock:
            self.assigned.pop(pod["metadata"]["uid"], None)

    def _admit(self, pod: JSON) -> None:
        if self._allocate_devices(pod):
            self._set_status(pod["metadata"], {"phase": "Running",
                                               "conditions": [{"type": "Ready", "status": "True"}]})

    def _allocate_devices(self, pod: JSON) -> bool:
        """Allocate per container, in order; on failure the pod is Failed as a kubelet fails it."""
        meta = pod["metadata"]
        uid, who = meta["uid"], f"{meta.get('namespace')}/{meta.get('name')}"
        try:
            for container in pod_containers(pod):
                need = _count(container, self.resource)
                if need:
                    self._allocate(uid, container["name"], need)
        except (grpc.RpcError, AdmissionFailed) as exc:
            message = exc.details() if isinstance(exc, grpc.RpcError) else str(exc)
            log.info("kubelet %s: pod %s failed admission: %s", self.node, who, message)
            self._forget(pod)
            self._set_status(meta, {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                                    "message": f"Allocate failed due to {message}, which is unexpected"})
            return False
        return True

    def _allocate(self, uid: str, container: str, need: int) -> None:
        with self._lock:
            plugin = self.endpoints.get(self.resource)
        if plugin is None and self.resource in self.checkpointed:
            # The real kubelet's words for devices it knows from before its restart.
            raise AdmissionFailed(f"no healthy devices present; cannot allocate unhealthy devices {self.resource}")
        if plugin is None:
            raise AdmissionFailed(f"no device plugin registered for {self.resource}")
        free = self.free_ids(self.resource)
        if len(free) < need:
            raise AdmissionFailed(f"{need} {self.resource} requested, {len(free)} free")
        chosen = free[:need]
        if plugin.options.get_preferred_allocation_available:
            preferred = plugin.stub.GetPreferredAllocation(api_pb2.PreferredAllocationRequest(container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(available_deviceIDs=free, allocation_size=need)]),
                timeout=10)
            advice = [i for i in preferred.container_responses[0].deviceIDs if i in free]
            if len(advice) == need:
                chosen = advice
        with self._lock:
            self.assigned.setdefault(uid, set()).update(chosen)
        response = plugin.stub.Allocate(api_pb2.AllocateRequest(container_requests=[
            api_pb2.ContainerAllocateRequest(devices_ids=chosen)]), timeout=30)
        if not response.container_responses:
            raise AdmissionFailed("no containers return in allocation response")
        self.responses.setdefault(uid, {})[container] = response.container_responses[0]

    def _set_status(self, meta: JSON, status: JSON) -> None:
        """A kubelet's status manager retries until the API takes the status (a lost "Running"
        would leave a pod Pending for ever); a pod that is gone needs none."""
        for attempt in range(8):
            try:
                self.kube.patch_pod_status(meta["namespace"], meta["name"], status)
                return
            except NotFoundError:
                return
            except KubeError as exc:
                log.info("kubelet %s: status of %s/%s not written (%s), retrying", self.node, meta["namespace"],
                         meta["name"], exc)
                if self._stopping.wait(min(0.1 * 2**attempt, 2.0)):
                    return
        log.warning("kubelet %s: gave up writing the status of %s/%s", self.node, meta["namespace"], meta["name"])


class AdmissionFailed(CliError, RuntimeError):
    pass


def _count(container: JSON, resource: str) -> int:
    resources = container.get("resources") or {}
    value = (resources.get("limits") or {}).get(resource, (resources.get("requests") or {}).get(resource, 0))
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def short_socket_dir(prefix: str) -> Path:
    """Unix socket paths are limited to ~107 bytes: keep plugin dirs short, under /tmp."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


__all__ = ["LocalKubelet", "short_socket_dir"]
