"""The node side of kwok's fake nodes in DRA mode: what each node's DRA driver and kubelet do on
the API, done by the DRA driver's own code (`DriverService` over a `DriverCore`), in processes
of their own (nodesim.py is the device-plugin mode's; the harness shards the fake nodes over
several of either, through the same launcher, `run_simulator`).

    python -m e2e.realcluster.drasim --kubeconfig admin.kubeconfig --nodes nodes.txt \
        --cards 8 --workdir DIR --metrics-port P --identity USER

Per fake node, one `DriverService` over mock cards, as the driver's identity on that node:
* the ResourceSlice: `publish` at start (the driver's own slice builder, dra/slices.py), then
  every `--register-interval` seconds, spread over the interval, followed by `reconcile` on
  every node that has prepared a claim (DriverLoop.once of dra/command.py);
* NodePrepareResources: for every pod with claims bound to the node, what the kubelet does
  before its containers start: each claim read and checked (allocated, reserved for the pod),
  then the driver's `prepare` (it reads the claim itself, plans the vDCU, writes the vdev file,
  the record and the CDI spec), as the kubelet stand-in of the real-cluster suite does over
  gRPC. A claim not ready yet is tried again after RETRY_SECONDS, as a kubelet's pod worker
  does; a pod finished or gone has its claims unprepared.
kwok turns DRA pods Running on its own (it does not wait for Prepare): the figure that says how
long a pod waits for its devices is this process's bound-to-prepared.

Every driver write is made as the chart's DRA driver identity on that node (the admin
credential impersonating its ServiceAccount with the node name of a pod-bound token), so RBAC
judges it as it judges the real driver's. The kubelet's own claim reads are the admin's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from e2e.realcluster.nodesim import impersonating, run_simulator, served_cards
from hami_dcu.cli.localcluster.pods import MockCard
from hami_dcu.common.io.kube import GoneError, Kube, KubeError, NotFoundError
from hami_dcu.common.protocol import keys
from hami_dcu.dra.core import DraPaths, DriverCore, PrepareFailed
from hami_dcu.dra.latency import PodLatency
from hami_dcu.dra.metrics import DriverMetrics
from hami_dcu.dra.server import ClaimRef
from hami_dcu.dra.service import DriverService, claim_path

log = logging.getLogger(__name__)
JSON = dict[str, Any]
EXTENDED_CLAIM = "<extended resources>"  # no pod claim can be named so (not a DNS label)
RETRY_SECONDS = 2.0  # the kubelet stand-in's (dra_kubelet.py) wait before preparing again
ATTEMPTS = 30  # then the pod stays unprepared and is counted failed
_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30)


class NotReady(RuntimeError):
    """A claim of the pod cannot be prepared yet (not generated, allocated or reserved)."""


def pod_claim_names(pod: JSON) -> dict[str, str]:
    """Pod claim name -> ResourceClaim name, as the kubelet resolves them: the name given, or
    the one the claim controller generated from the template (`status.resourceClaimStatuses`)."""
    statuses = {s.get("name"): s.get("resourceClaimName")
                for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out = {}
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus")
    if isinstance(extended, dict) and extended.get("resourceClaimName"):
        # The claim kube-scheduler made for the pod's extended resources (a whole-card pod the
        # webhook left as written): the kubelet prepares it as any other.
        out[EXTENDED_CLAIM] = extended["resourceClaimName"]
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
        if not name:
            raise NotReady(f"pod claim {entry.get('name')}: no ResourceClaim generated yet")
        out[entry["name"]] = name
    return out


def check_claim(claim: JSON, pod_uid: str) -> None:
    """What the kubelet checks before it asks the driver: allocated, and reserved for the pod."""
    meta, status = claim.get("metadata") or {}, claim.get("status") or {}
    who = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    if not status.get("allocation"):
        raise NotReady(f"{who} is not allocated")
    if not any(r.get("uid") == pod_uid for r in status.get("reservedFor") or []):
        raise NotReady(f"{who} is not reserved for pod {pod_uid}")


class SimMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.driver = DriverMetrics(self.registry)
        self.bound_to_prepared_seconds = Histogram(
            "hami_dcu_drasim_bound_to_prepared_seconds", "From the pod seen bound to its last claim prepared",
            buckets=_BUCKETS, registry=self.registry)
        self.prepare_seconds = Histogram(
            "hami_dcu_drasim_prepare_seconds", "The kubelet's part and the driver's Prepare for one pod "
            "(claims read, checked, prepared)", buckets=_BUCKETS, registry=self.registry)
        self.pods = Counter("hami_dcu_drasim_pods", "Pods with claims served, by result (prepared, failed)",
                            ["result"], registry=self.registry)
        self.retries = Counter("hami_dcu_drasim_retries", "Prepares tried again (a claim not ready yet)",
                               registry=self.registry)
        self.publishes = Counter("hami_dcu_drasim_publishes", "ResourceSlice checks, by result", ["result"],
                                 registry=self.registry)


class DraNodeSimulator:
    def __init__(self, admin: Kube, driver_user: str, nodes: dict[str, list[MockCard]], workdir: Path,
                 register_interval: float = 30.0, workers: int = 32, naming: keys.Naming = keys.DCU_NAMING,
                 slots_per_card: int = keys.DEFAULT_SLOTS_PER_CARD, metrics: SimMetrics | None = None) -> None:
        self.admin = admin
        self.register_interval = register_interval
        self.metrics = metrics or SimMetrics()
        # The drivers' latency reads (one pod read per prepared pod, off the Prepare path) share
        # two threads: one executor per node would be thousands of threads.
        self._latency_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="drasim-latency")
        self.services: dict[str, DriverService] = {}
        for node, cards in nodes.items():
            root = workdir / node
            paths = DraPaths(vdev_dir=root / "vdev", etc_vdev=root / "etc-vdev", cdi_dir=root / "cdi",
                             state_dir=root / "state", dev_root=root / "dev", driver_dir=root / "dtk",
                             hyhal_dir=root / "hyhal")
            kube = impersonating(admin, driver_user, node)
            latency = PodLatency(kube, node, self.metrics.driver, submit=self._latency_pool.submit)
            self.services[node] = DriverService(kube, DriverCore(node, served_cards(cards, naming), paths),
                                                slots_per_card, health=dict, metrics=self.metrics.driver,
                                                latency=latency, naming=naming)
        self.prepared: dict[str, tuple[str, list[str]]] = {}  # pod uid -> (node, claim uids)
        self.served: set[str] = set()  # nodes that have prepared a claim: the ones reconcile reads for
        self._handled: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="drasim-prepare")
        self._registrar = ThreadPoolExecutor(max_workers=4, thread_name_prefix="drasim-publish")
        self._threads = [threading.Thread(target=self._watch, name="drasim-watch", daemon=True),
                         threading.Thread(target=self._refresh, name="drasim-publish", daemon=True)]

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> DraNodeSimulator:
        self.publish(self.services)
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        for pool in (self._pool, self._registrar, self._latency_pool):
            pool.shutdown(wait=False, cancel_futures=True)

    # --- the ResourceSlices ----------------------------------------------------------------

    def publish(self, nodes: Iterable[str]) -> None:
        """Publish these nodes' slices now, a few at a time."""
        for done in [self._registrar.submit(self._publish_one, node) for node in nodes]:
            done.result()

    def _publish_one(self, node: str, reconcile: bool = False) -> None:
        """What the driver's loop does each interval (dra/command.py DriverLoop.once)."""
        service = self.services[node]
        try:
            service.publish()
            self.metrics.publishes.labels("ok").inc()
            if reconcile and node in self.served:
                service.reconcile()
        except (KubeError, OSError) as exc:
            self.metrics.publishes.labels("failed").inc()
            log.warning("node %s: publish or reconcile failed: %s", node, exc)

    def _refresh(self) -> None:
        """Every node again within each interval, evenly spread."""
        nodes = sorted(self.services)
        gap = self.register_interval / max(1, len(nodes))
        while not self._stopping.is_set():
            started = time.monotonic()
            for i, node in enumerate(nodes):
                delay = started + i * gap - time.monotonic()
                if delay > 0 and self._stopping.wait(delay):
                    return
                self._registrar.submit(self._publish_one, node, True)
            rest = started + self.register_interval - time.monotonic()
            if rest > 0 and self._stopping.wait(rest):
                return

    # --- pods with claims bound to the fake nodes --------------------------------------------

    def _watch(self) -> None:
        # Every pod of the cluster, those of other shards' nodes dropped in `_seen` (as
        # nodesim.py's watch: no field selector names a set of nodes).
        resource_version = ""
        while not self._stopping.is_set():
            try:
                if not resource_version:
                    listed = self.admin.list_pods()
                    for pod in listed.items:
                        self._seen(pod, "ADDED")
                    resource_version = listed.resource_version
                for event in self.admin.watch_pods(resource_version, timeout_seconds=60):
                    pod = event.get("object") or {}
                    resource_version = (pod.get("metadata") or {}).get("resourceVersion") or resource_version
                    if event.get("type") != "BOOKMARK":
                        self._seen(pod, event.get("type", ""))
            except GoneError:
                resource_version = ""
            except KubeError as exc:
                log.warning("pod watch broken, again in a second: %s", exc)
                self._stopping.wait(1)

    def _seen(self, pod: JSON, kind: str) -> None:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        node, uid = spec.get("nodeName"), meta.get("uid", "")
        if node not in self.services or not (spec.get("resourceClaims") or status.get("extendedResourceClaimStatus")):
            return
        if kind == "DELETED" or status.get("phase") in ("Succeeded", "Failed"):
            with self._lock:
                done = self.prepared.pop(uid, None)
            if done is not None:
                self._submit(self._unprepare, *done)
            return
        if meta.get("deletionTimestamp"):
            return
        with self._lock:
            if uid in self._handled:
                return
            self._handled.add(uid)
        self._submit(self._serve, node, pod, time.monotonic(), 1)

    def _submit(self, *call: Any) -> None:
        try:
            self._pool.submit(*call)
        except RuntimeError:  # shut down: stopping
            pass

    def _serve(self, node: str, pod: JSON, seen: float, attempt: int) -> None:
        started = time.monotonic()
        try:
            claims = self.prepare_pod(node, pod)
        except NotReady as exc:
            if attempt >= ATTEMPTS:
                self.metrics.pods.labels("failed").inc()
                log.warning("pod %s on %s: not prepared after %d attempts: %s", pod["metadata"]["name"], node,
                            attempt, exc)
                return
            self.metrics.retries.inc()
            timer = threading.Timer(RETRY_SECONDS, self._retry, args=(node, pod, seen, attempt + 1))
            timer.daemon = True
            timer.start()
            return
        except (PrepareFailed, KubeError) as exc:
            self.metrics.pods.labels("failed").inc()
            log.warning("pod %s on %s: prepare failed: %s", pod["metadata"]["name"], node, exc)
            return
        now = time.monotonic()
        self.metrics.prepare_seconds.observe(now - started)
        self.metrics.bound_to_prepared_seconds.observe(now - seen)
        self.metrics.pods.labels("prepared").inc()
        with self._lock:
            self.prepared[pod["metadata"]["uid"]] = (node, claims)
            self.served.add(node)

    def _retry(self, node: str, pod: JSON, seen: float, attempt: int) -> None:
        """Read the pod again (its claim statuses may have come since) and serve it, unless it went."""
        meta = pod["metadata"]
        try:
            current = self.admin.get_pod(meta["namespace"], meta["name"])
        except KubeError:
            return
        if current["metadata"].get("uid") == meta["uid"] and not current["metadata"].get("deletionTimestamp"):
            self._submit(self._serve, node, current, seen, attempt)

    def prepare_pod(self, node: str, pod: JSON) -> list[str]:
        """The kubelet's part of admitting a pod with claims: read and check each claim, then
        the driver's Prepare. The claim UIDs prepared, for the unprepare when the pod goes."""
        namespace, pod_uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        service = self.services[node]
        uids = []
        for claim_name in pod_claim_names(pod).values():
            try:
                claim = self.admin.request("GET", claim_path(namespace, claim_name))
            except NotFoundError as exc:
                raise NotReady(f"ResourceClaim {namespace}/{claim_name} not found") from exc
            check_claim(claim, pod_uid)
            uid = claim["metadata"]["uid"]
            service.prepare(ClaimRef(namespace, claim_name, uid))
            uids.append(uid)
        return uids

    def _unprepare(self, node: str, claim_uids: list[str]) -> None:
        for uid in claim_uids:
            try:
                self.services[node].unprepare(ClaimRef("", "", uid))
            except PrepareFailed as exc:
                log.warning("node %s: unprepare of claim %s failed: %s", node, uid, exc)


def main(argv: list[str] | None = None) -> int:
    return run_simulator(argv, __doc__.split("\n\n")[0], "drasim", "the DRA driver's ServiceAccount username",
                         lambda admin, user, nodes, workdir, interval, workers, naming: DraNodeSimulator(
                             admin, user, nodes, workdir, interval, workers, naming))


if __name__ == "__main__":
    raise SystemExit(main())
