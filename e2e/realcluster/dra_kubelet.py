"""The kubelet stand-in with DRA: what a kubelet does for pods with `resourceClaims`.

* a plugin watcher on `plugins_registry`: every new socket gets the registration handshake
  (dra_client.register), a vanished one unregisters its driver;
* before a pod's containers start, its claims are resolved (`resourceClaimName`, or for a
  template the name in `status.resourceClaimStatuses`, and the claim kube-scheduler made for
  its extended resources in `status.extendedResourceClaimStatus`, whose request mappings say
  which container gets which request), read with the node's identity, checked
  (allocated, reserved for this pod), and prepared with one NodePrepareResources call per
  driver, skipping claims already prepared for another pod; each container then gets the CDI
  ids of the claims (and requests) it names, resolved as a runtime resolves them;
* a failure leaves the pod Pending with a `FailedPrepareDynamicResources` event and is tried
  again, as a kubelet's pod worker does;
* when a pod finishes or goes, every claim no other pod here uses is unprepared.
"""

from __future__ import annotations

import logging
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from e2e.realcluster.dra_client import (
    CdiError,
    ContainerEdits,
    DraEndpoint,
    PreparedDevice,
    RegistrationRefused,
    register,
    resolve_cdi,
)
from e2e.realcluster.kubelet import RealKubelet
from hami_dcu.common.io.kube import KubeError, NotFoundError

log = logging.getLogger(__name__)
JSON = dict[str, Any]
RESOURCE_API = "/apis/resource.k8s.io/v1"
RETRY_SECONDS = 2.0


class PrepareError(RuntimeError):
    pass


@dataclass
class ClaimInUse:
    namespace: str
    name: str
    uid: str
    drivers: tuple[str, ...]
    devices: list[PreparedDevice] = field(default_factory=list)
    pods: set[str] = field(default_factory=set)


class DraKubelet(RealKubelet):
    def __init__(self, *args: Any, registry_dir: Path, cdi_dir: Path, host_path: Callable[[str], Path],
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registry_dir = registry_dir
        self.cdi_dir = cdi_dir
        self.host_path = host_path
        self.drivers: dict[str, DraEndpoint] = {}
        self.driver_sockets: dict[Path, str] = {}
        self.dra_registrations = 0
        self.claims: dict[str, ClaimInUse] = {}  # claim uid -> claim prepared on this node
        self.pod_claims: dict[str, list[str]] = {}  # pod uid -> claim uids
        self.container_edits: dict[str, dict[str, ContainerEdits]] = {}  # pod uid -> container -> edits
        self.prepare_errors: dict[str, str] = {}  # pod uid -> last failure
        self.unprepare_errors: list[str] = []
        self._dra_lock = threading.RLock()

    def start(self) -> DraKubelet:
        super().start()
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        thread = threading.Thread(target=self._watch_registry, name=f"dra-watch-{self.node}", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    # --- plugin watcher ------------------------------------------------------------------

    def _watch_registry(self) -> None:
        while not self._stopping.wait(0.5):
            try:
                sockets = {p for p in self.registry_dir.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)}
            except OSError:
                continue
            for gone in set(self.driver_sockets) - sockets:
                driver = self.driver_sockets.pop(gone)
                with self._dra_lock:
                    endpoint = self.drivers.pop(driver, None)
                if endpoint is not None:
                    endpoint.close()
                log.info("kubelet %s: DRA driver %s unregistered (%s removed)", self.node, driver, gone)
            for new in sockets - set(self.driver_sockets):
                try:
                    endpoint = register(new, self.host_path)
                except (grpc.RpcError, RegistrationRefused) as exc:
                    log.info("kubelet %s: DRA registration on %s failed, retrying: %s", self.node, new, exc)
                    continue
                with self._dra_lock:
                    old = self.drivers.get(endpoint.driver)
                    self.drivers[endpoint.driver] = endpoint
                    self.dra_registrations += 1
                self.driver_sockets[new] = endpoint.driver
                if old is not None:
                    old.close()

    # --- prepare ---------------------------------------------------------------------------

    def _allocate_devices(self, pod: JSON) -> bool:
        extended = _extended_claim(pod)
        # Resources kube-scheduler gave through a DeviceClass's extendedResourceName are no
        # device plugin's: the kubelet's device manager skips them (they are the claim's).
        if not super()._allocate_devices(_without_mapped_resources(pod, extended)):
            return False
        if not (pod.get("spec") or {}).get("resourceClaims") and extended is None:
            return True
        uid = pod["metadata"]["uid"]
        try:
            self._prepare_pod(pod)
        except (PrepareError, CdiError, KubeError, grpc.RpcError) as exc:
            message = exc.details() if isinstance(exc, grpc.RpcError) else str(exc)
            self.prepare_errors[uid] = message
            log.info("kubelet %s: pod %s/%s: %s", self.node, pod["metadata"]["namespace"], pod["metadata"]["name"],
                     message)
            self._pod_event(pod, "FailedPrepareDynamicResources", f"Failed to prepare dynamic resources: {message}")
            timer = threading.Timer(RETRY_SECONDS, self._retry, args=(pod,))
            timer.daemon = True
            timer.start()
            return False
        self.prepare_errors.pop(uid, None)
        return True

    def _retry(self, pod: JSON) -> None:
        meta = pod["metadata"]
        if self._stopping.is_set():
            return
        try:
            current = self.kube.get_pod(meta["namespace"], meta["name"])
        except KubeError:
            return
        if current["metadata"]["uid"] != meta["uid"] or current["metadata"].get("deletionTimestamp"):
            return
        if (current.get("status") or {}).get("phase") == "Pending" and current["spec"].get("nodeName") == self.node:
            self._admit(current)

    def _claim_names(self, pod: JSON) -> dict[str, str]:
        """Pod claim name -> ResourceClaim name; the claim kube-scheduler made for the pod's
        extended resources under EXTENDED, a key no pod claim can have."""
        statuses = {s["name"]: s.get("resourceClaimName")
                    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        out = {}
        for entry in pod["spec"].get("resourceClaims") or []:
            name = entry.get("resourceClaimName") or statuses.get(entry["name"])
            if not name:
                raise PrepareError(f"pod claim {entry['name']}: no ResourceClaim generated yet")
            out[entry["name"]] = name
        extended = _extended_claim(pod)
        if extended is not None:
            out[EXTENDED] = extended["resourceClaimName"]
        return out

    def _prepare_pod(self, pod: JSON) -> None:
        meta = pod["metadata"]
        namespace, pod_uid = meta["namespace"], meta["uid"]
        names = self._claim_names(pod)
        fetched: dict[str, JSON] = {}
        for pod_claim, claim_name in names.items():
            claim = self.kube.request("GET", f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims/{claim_name}")
            status = claim.get("status") or {}
            if not status.get("allocation"):
                raise PrepareError(f"ResourceClaim {namespace}/{claim_name} is not allocated")
            if not any(r.get("uid") == pod_uid for r in status.get("reservedFor") or []):
                raise PrepareError(f"ResourceClaim {namespace}/{claim_name} is not reserved for this pod")
            fetched[pod_claim] = claim
        by_driver: dict[str, list[JSON]] = {}
        with self._dra_lock:
            for claim in fetched.values():
                if claim["metadata"]["uid"] in self.claims:
                    continue
                results = claim["status"]["allocation"]["devices"].get("results") or []
                for driver in sorted({r["driver"] for r in results}):
                    by_driver.setdefault(driver, []).append(claim)
        for driver, claims in by_driver.items():
            self._prepare_with(driver, claims, pod_uid)
        with self._dra_lock:
            for claim in fetched.values():
                self._use(claim["metadata"]["uid"], pod_uid)
        mapped = _extended_requests(pod)
        self.container_edits[pod_uid] = {
            c["name"]: resolve_cdi(self._cdi_ids(c, names, fetched, mapped.get(c["name"], [])), self.cdi_dir,
                                   self.host_path)
            for c in pod["spec"]["containers"] + (pod["spec"].get("initContainers") or [])
        }

    def _use(self, claim_uid: str, pod_uid: str) -> None:
        """The pod uses the claim: it is unprepared when the last such pod goes."""
        self.claims[claim_uid].pods.add(pod_uid)
        used = self.pod_claims.setdefault(pod_uid, [])
        if claim_uid not in used:
            used.append(claim_uid)

    def _prepare_with(self, driver: str, claims: list[JSON], pod_uid: str) -> None:
        with self._dra_lock:
            endpoint = self.drivers.get(driver)
        if endpoint is None:
            raise PrepareError(f"DRA driver {driver} is not registered with kubelet on node {self.node}")
        refs = [(c["metadata"]["namespace"], c["metadata"]["uid"], c["metadata"]["name"]) for c in claims]
        answers = endpoint.prepare(refs)
        for claim in claims:
            meta = claim["metadata"]
            answer = answers.get(meta["uid"])
            if answer is None:
                raise PrepareError(f"DRA driver {driver} gave no answer for claim {meta['name']}")
            if answer.error:
                raise PrepareError(f"DRA driver {driver} failed on claim {meta['name']}: {answer.error}")
            with self._dra_lock:
                entry = self.claims.setdefault(meta["uid"], ClaimInUse(meta["namespace"], meta["name"], meta["uid"],
                                                                       ()))
                entry.drivers = tuple(sorted({*entry.drivers, driver}))
                entry.devices.extend(answer.devices)
                # Claimed at once: if a later claim of this pod fails, this one is still
                # unprepared when the pod goes.
                self._use(meta["uid"], pod_uid)

    def _cdi_ids(self, container: JSON, names: dict[str, str], fetched: dict[str, JSON],
                 extended_requests: list[str]) -> list[str]:
        """The CDI ids of the claims (and requests) the container names, and of the requests of
        the extended-resource claim mapped to it (status.extendedResourceClaimStatus)."""
        ids: list[str] = []
        refs = list((container.get("resources") or {}).get("claims") or [])
        refs += [{"name": EXTENDED, "request": request} for request in extended_requests]
        for ref in refs:
            claim = fetched.get(ref["name"])
            if claim is None:
                raise PrepareError(f"container {container['name']} names unknown pod claim {ref['name']}")
            with self._dra_lock:
                devices = list(self.claims[claim["metadata"]["uid"]].devices)
            for device in devices:
                wanted = ref.get("request")
                if wanted and not any(r == wanted or r.startswith(wanted + "/") for r in device.request_names):
                    continue
                ids.extend(i for i in device.cdi_ids if i not in ids)
        return ids

    # --- unprepare -------------------------------------------------------------------------

    def _forget(self, pod: JSON) -> None:
        super()._forget(pod)
        uid = pod["metadata"]["uid"]
        done: list[ClaimInUse] = []
        with self._dra_lock:
            self.container_edits.pop(uid, None)
            for claim_uid in self.pod_claims.pop(uid, []):
                claim = self.claims.get(claim_uid)
                if claim is None:
                    continue
                claim.pods.discard(uid)
                if not claim.pods:
                    done.append(self.claims.pop(claim_uid))
        for claim in done:
            self._unprepare(claim)

    def _unprepare(self, claim: ClaimInUse) -> None:
        for driver in claim.drivers:
            with self._dra_lock:
                endpoint = self.drivers.get(driver)
            if endpoint is None:
                self.unprepare_errors.append(f"{claim.name}: driver {driver} not registered")
                continue
            try:
                errors = endpoint.unprepare([(claim.namespace, claim.uid, claim.name)])
            except grpc.RpcError as exc:
                self.unprepare_errors.append(f"{claim.name}: {exc.details()}")
                continue
            if errors.get(claim.uid):
                self.unprepare_errors.append(f"{claim.name}: {errors[claim.uid]}")

    def _pod_event(self, pod: JSON, reason: str, message: str) -> None:
        try:
            self.kube.create_event(pod, reason, message, "Warning", component="kubelet")
        except (KubeError, NotFoundError) as exc:
            log.debug("kubelet %s: event %s not recorded: %s", self.node, reason, exc)

    def stop(self) -> None:
        super().stop()
        with self._dra_lock:
            for endpoint in self.drivers.values():
                endpoint.close()


EXTENDED = "<extended-resources>"  # kube-scheduler's own in-memory name for that claim: no pod claim's


def _extended_claim(pod: JSON) -> JSON | None:
    """status.extendedResourceClaimStatus: the claim kube-scheduler made for the pod's extended
    resources served through a DeviceClass (DRAExtendedResource), and which container's resource
    each of its requests serves."""
    found = (pod.get("status") or {}).get("extendedResourceClaimStatus")
    return found if isinstance(found, dict) and found.get("resourceClaimName") else None


def _extended_requests(pod: JSON) -> dict[str, list[str]]:
    """Container -> the requests of the extended-resource claim that serve it."""
    out: dict[str, list[str]] = {}
    for mapping in (_extended_claim(pod) or {}).get("requestMappings") or []:
        out.setdefault(mapping["containerName"], []).append(mapping["requestName"])
    return out


def _without_mapped_resources(pod: JSON, extended: JSON | None) -> JSON:
    """The pod as the device plugin side sees it: the resources the extended-resource claim
    serves taken out of each container they are mapped to."""
    if extended is None:
        return pod
    mapped = {(m["containerName"], m["resourceName"]) for m in extended.get("requestMappings") or []}
    spec = dict(pod["spec"])
    for section in ("initContainers", "containers"):
        containers = []
        for container in spec.get(section) or []:
            resources = container.get("resources") or {}
            kept = {part: {k: v for k, v in (resources.get(part) or {}).items() if (container["name"], k) not in mapped}
                    for part in ("limits", "requests") if part in resources}
            containers.append({**container, "resources": {**resources, **kept}})
        if section in spec:
            spec[section] = containers
    return {**pod, "spec": spec}


def host_path_resolver(node_root: Path, host_paths: dict[str, Path]) -> Callable[[str], Path]:
    """A path on the node -> where it is from here: the longest mapped prefix (short socket
    directories), else under the node's root directory, as the pod runtime lays out hostPaths."""
    prefixes = sorted(host_paths, key=len, reverse=True)

    def resolve(path: str) -> Path:
        for prefix in prefixes:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return host_paths[prefix] / path[len(prefix):].lstrip("/")
        return node_root / path.lstrip("/")

    return resolve


__all__ = ["DraKubelet", "host_path_resolver"]
