"""The kubelet stand-in against a real apiserver: the local cluster's device-manager half
(registration, ListAndWatch into node status, Allocate per container) plus what a kubelet
owes the control plane when there is a real one:

* it acts as `system:node:<name>` (client certificate), so the Node authorizer and
  NodeRestriction limit it as they limit kubelets;
* registers its Node with a Ready condition and renews its Lease in `kube-node-lease`, so the
  node lifecycle controller removes the `not-ready` taint and keeps the node schedulable;
* runs the chart's own pods (PodRuntime), restarts their containers by restartPolicy, probes
  readiness (httpGet) and reports pod IP, container states and conditions;
* finishes graceful deletion: a pod with a deletionTimestamp is stopped, then deleted with
  grace period 0 and a UID precondition (without this, deleted pods would stay forever);
* with `pod_resources_dir`, serves the pod resources API there (podresources.py), as the
  kubelet does: which pod it is admitting, for the device plugin's Volcano gangs.
"""

from __future__ import annotations

import datetime as dt
import logging
import ssl
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from e2e.realcluster.podresources import PodResourcesRecord, serve
from e2e.realcluster.runtime import PodRuntime, RunningPod
from hami_dcu.cli.localcluster.kubelet import LocalKubelet
from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError

log = logging.getLogger(__name__)
JSON = dict[str, Any]
LEASE_SECONDS = 40


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Readiness:
    ready: bool = False
    failures: int = 0  # in a row, since it was last ready
    probed_at: float = 0.0


class RealKubelet(LocalKubelet):
    def __init__(self, kube: Kube, node: str, plugin_dir: Path, runtime: PodRuntime, address: str,
                 workdir: Path, labels: dict[str, str] | None = None, resource: str | None = None,
                 pod_resources_dir: Path | None = None) -> None:
        super().__init__(kube, node, plugin_dir, resource, labels=labels)
        self.pod_resources = PodResourcesRecord(self.resource)
        self.pod_resources_dir = pod_resources_dir
        self._pod_resources_server: grpc.Server | None = None
        self.runtime = runtime
        self.address = address
        self.workdir = workdir
        self.running: dict[str, RunningPod] = {}
        self.specs: dict[str, JSON] = {}
        self.posted: dict[str, JSON] = {}
        self._to_start: dict[str, JSON] = {}
        self._terminating: set[str] = set()
        self._readiness: dict[tuple[str, str, int], _Readiness] = {}  # by (pod uid, container, restarts)
        self._insecure = ssl.create_default_context()
        self._insecure.check_hostname = False
        self._insecure.verify_mode = ssl.CERT_NONE

    # --- node ----------------------------------------------------------------------------

    def _register_node(self) -> None:
        now = _now()
        node = {
            "metadata": {"name": self.node, "labels": {**self.labels, "kubernetes.io/hostname": self.node,
                                                       "kubernetes.io/os": "linux"}},
            "status": {
                "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                "addresses": [{"type": "InternalIP", "address": self.address},
                              {"type": "Hostname", "address": self.node}],
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet stand-in is posting ready status",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}],
                "nodeInfo": {"kubeletVersion": "v0.0.0-stand-in", "operatingSystem": "linux",
                             "architecture": "amd64", "containerRuntimeVersion": "hami-e2e://0",
                             "kernelVersion": "", "osImage": "", "kubeProxyVersion": "", "machineID": "",
                             "systemUUID": "", "bootID": ""},
            },
        }
        try:
            self.kube.create_node(node)
        except KubeError as exc:
            if exc.status != 409:
                raise
        if self.pod_resources_dir is not None:
            self._pod_resources_server = serve(self.pod_resources, self.pod_resources_dir)
        for target in (self._heartbeat, self._supervise):
            thread = threading.Thread(target=target, name=f"{target.__name__}-{self.node}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _heartbeat(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.node}"
        while not self._stopping.is_set():
            spec = {"holderIdentity": self.node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": _micro_now()}
            try:
                try:
                    self.kube.request("PATCH", path, body={"spec": spec},
                                      content_type="application/merge-patch+json")
                except NotFoundError:
                    self.kube.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                                      body={"metadata": {"name": self.node}, "spec": spec})
            except KubeError as exc:
                log.warning("kubelet %s: lease renewal failed: %s", self.node, exc)
            self._stopping.wait(10)

    # --- pods ----------------------------------------------------------------------------

    def _sync(self, pods: list[JSON]) -> None:
        for pod in pods:
            uid = pod["metadata"]["uid"]
            if pod["metadata"].get("deletionTimestamp"):
                if uid not in self._terminating:
                    self._terminating.add(uid)
                    threading.Thread(target=self._terminate, args=(pod,), daemon=True).start()
                continue
            phase = (pod.get("status") or {}).get("phase")
            if uid in self._handled or phase != "Pending":
                continue
            self._handled.add(uid)
            self._admit(pod)

    def _admit(self, pod: JSON) -> None:
        meta = pod["metadata"]
        self.pod_resources.admitting(meta["uid"], meta.get("namespace") or "default", meta["name"],
                                     [c["name"] for c in pod["spec"].get("containers") or []])
        if not self._allocate_devices(pod):
            return
        if not self.runtime.runnable(pod):
            self._post(pod, {"phase": "Running", "hostIP": self.address, "startTime": _now(),
                             "conditions": _conditions(True),
                             "containerStatuses": [_container_status(c, ready=True, running=True)
                                                   for c in pod["spec"]["containers"]]})
            return
        # Started by the supervisor thread, the one owner of pod processes.
        with self._lock:
            self._to_start[pod["metadata"]["uid"]] = pod

    def _try_start(self, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        try:
            running = self.runtime.start(pod, self.workdir / uid)
        except (KubeError, RuntimeError, OSError) as exc:
            # A kubelet keeps a pod in ContainerCreating and retries (e.g. a Secret not there yet).
            log.info("kubelet %s: pod %s/%s not started yet: %s", self.node, pod["metadata"]["namespace"],
                     pod["metadata"]["name"], exc)
            return
        with self._lock:
            self._to_start.pop(uid, None)
            self.running[uid] = running
            self.specs[uid] = pod

    def _supervise(self) -> None:
        """Container restarts, readiness probes and status, twice a second."""
        attempted: dict[str, float] = {}
        while not self._stopping.wait(0.5):
            with self._lock:
                waiting = list(self._to_start.values())
            for pod in waiting:
                uid = pod["metadata"]["uid"]
                if time.monotonic() - attempted.get(uid, 0.0) > 2:
                    attempted[uid] = time.monotonic()
                    self._try_start(pod)
            with self._lock:
                pods = [(uid, self.running[uid], self.specs[uid]) for uid in list(self.running)]
            for uid, running, pod in pods:
                if uid in self._terminating:
                    continue
                try:
                    self._observe(uid, running, pod)
                except KubeError as exc:
                    log.debug("kubelet %s: status of %s failed: %s", self.node, running.name, exc)

    def _observe(self, uid: str, running: RunningPod, pod: JSON) -> None:
        policy = pod["spec"].get("restartPolicy", "Always")
        statuses, all_ready, done, failed = [], True, True, False
        for container in pod["spec"]["containers"]:
            process = running.containers.get(container["name"])
            if process is None:  # a container this runtime does not run
                statuses.append(_container_status(container, ready=True, running=True))
                continue
            code = process.exit_code()
            name = container["name"]
            if code is not None and (policy == "Always" or (policy == "OnFailure" and code != 0)):
                # CrashLoopBackOff as a kubelet does it: the first restart at once, then 10 s
                # doubling to 5 min. Restarting in a tight loop would burn a Job's backoffLimit
                # (it counts restarts) before, say, a new RoleBinding reaches the authorizer.
                due = running.restart_due.setdefault(name, time.monotonic() + _backoff(running.restarts[name]))
                if time.monotonic() < due:
                    all_ready, done = False, False
                    statuses.append(_container_status(container, ready=False, running=False, exit_code=code,
                                                      restarts=running.restarts[name], waiting=True))
                    continue
                log.info("kubelet %s: %s exited with %s; restarting:\n%s", self.node, process.name, code,
                         process.tail(10))
                running.restart_due.pop(name, None)
                self.runtime.restart(pod, running, container)
                process, code = running.containers[name], None
            ready = code is None and self._ready(uid, running, container)
            all_ready &= ready
            done &= code is not None
            failed |= code not in (None, 0)
            statuses.append(_container_status(container, ready=ready, running=code is None, exit_code=code,
                                              restarts=running.restarts[container["name"]]))
        phase = ("Failed" if failed else "Succeeded") if done else "Running"
        status = {"phase": phase, "hostIP": self.address, "podIP": running.ip, "podIPs": [{"ip": running.ip}],
                  "conditions": _conditions(all_ready and not done), "containerStatuses": statuses}
        self._post(pod, status)
        if done:
            with self._lock:
                self.running.pop(uid, None)
            self.runtime.stop(running, grace=0)

    def _ready(self, uid: str, running: RunningPod, container: JSON) -> bool:
        """Readiness as a kubelet judges it: until its first success the container is probed on
        every pass (a quick start), then every `periodSeconds`, and it turns unready only after
        `failureThreshold` failures in a row. One slow answer from a busy container must not take
        its endpoints away (here that refused a burst's pods at the webhook), as no kubelet would."""
        spec = container.get("readinessProbe") or {}
        if spec.get("httpGet") is None:
            return True
        key = (uid, container["name"], running.restarts[container["name"]])
        state = self._readiness.setdefault(key, _Readiness())
        now = time.monotonic()
        if state.ready and now - state.probed_at < float(spec.get("periodSeconds", 10)):
            return True
        state.probed_at = now
        if self._probe(running, container, float(spec.get("timeoutSeconds", 1))):
            state.ready, state.failures = True, 0
        elif state.ready:
            state.failures += 1
            state.ready = state.failures < int(spec.get("failureThreshold", 3))
        return state.ready

    def _probe(self, running: RunningPod, container: JSON, timeout: float = 1.0) -> bool:
        probe = (container.get("readinessProbe") or {}).get("httpGet")
        if probe is None:
            return True
        port = probe["port"]
        if isinstance(port, str):
            port = next(p["containerPort"] for p in container.get("ports") or [] if p.get("name") == port)
        url = f"{probe.get('scheme', 'HTTP').lower()}://{running.ip}:{port}{probe.get('path', '/')}"
        try:
            with urllib.request.urlopen(url, timeout=timeout, context=self._insecure) as response:
                return 200 <= response.status < 400
        except OSError:
            return False

    def _post(self, pod: JSON, status: JSON) -> None:
        uid = pod["metadata"]["uid"]
        signature = _without_times(status)
        previous = self.posted.get(uid)
        if previous == signature:
            return
        first = previous is None
        self.posted[uid] = signature
        patch = dict(status)
        if first:
            patch.setdefault("startTime", _now())
        self._set_status(pod["metadata"], patch)

    def _terminate(self, pod: JSON) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        grace = min(float(meta.get("deletionGracePeriodSeconds") or 0), 10.0)
        with self._lock:
            self._to_start.pop(uid, None)
            running = self.running.pop(uid, None)
        if running is not None:
            self.runtime.stop(running, grace=grace)
        self._forget(pod)
        try:
            self.kube.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                              body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        except KubeError as exc:
            if exc.status not in (404, 409):
                log.warning("kubelet %s: final delete of %s/%s failed: %s", self.node, meta["namespace"],
                            meta["name"], exc)

    def _allocate(self, uid: str, container: str, need: int) -> None:
        """The device manager's Allocate; the container's ids recorded for List only once it
        returns, as the kubelet records them (podDevices.insert after the RPC)."""
        with self._lock:
            before = set(self.assigned.get(uid, set()))
        super()._allocate(uid, container, need)
        with self._lock:
            ids = sorted(self.assigned.get(uid, set()) - before)
        self.pod_resources.allocated(uid, container, ids)

    def _forget(self, pod: JSON) -> None:
        super()._forget(pod)
        self.pod_resources.forget(pod["metadata"]["uid"])

    def stop(self) -> None:
        if self._pod_resources_server is not None:
            self._pod_resources_server.stop(grace=None).wait(5)
        super().stop()
        with self._lock:
            running = list(self.running.values())
            self.running.clear()
        for pod in running:
            self.runtime.stop(pod, grace=2)


_TIMES = frozenset({"startedAt", "finishedAt", "lastTransitionTime", "startTime"})


def _without_times(value: Any) -> Any:
    """A status without its timestamps: what decides whether it changed."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _conditions(ready: bool) -> list[JSON]:
    now = _now()
    value = "True" if ready else "False"
    return [{"type": t, "status": s, "lastTransitionTime": now} for t, s in (
        ("PodReadyToStartContainers", "True"), ("Initialized", "True"), ("ContainersReady", value),
        ("Ready", value), ("PodScheduled", "True"))]


def _backoff(restarts: int) -> float:
    return 0.0 if restarts == 0 else min(10.0 * 2 ** (restarts - 1), 300.0)


def _container_status(container: JSON, *, ready: bool, running: bool, exit_code: int | None = None,
                      restarts: int = 0, waiting: bool = False) -> JSON:
    state: JSON
    if waiting:
        state = {"waiting": {"reason": "CrashLoopBackOff",
                             "message": f"back-off restarting failed container {container['name']}"}}
    elif running:
        state = {"running": {"startedAt": _now()}}
    else:
        state = {"terminated": {"exitCode": exit_code or 0, "reason": "Completed" if not exit_code else "Error",
                                "finishedAt": _now()}}
    return {"name": container["name"], "image": container["image"], "imageID": "", "ready": ready,
            "started": running, "restartCount": restarts, "state": state}
