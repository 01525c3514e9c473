"""The node side of kwok's fake nodes: what each node's device plugin and kubelet do on the API,
done by the device plugin's own code (`PluginService`), in processes of their own: the harness
(kwokscale.py) shards the fake nodes over several of these processes, each given its share in
`--nodes` and its own `--metrics-port`, since one Python process (one core, for its GIL) fell
behind with 5,000 nodes' reports.

    python -m e2e.realcluster.nodesim --kubeconfig admin.kubeconfig --nodes nodes.txt \
        --cards 8 --workdir DIR --metrics-port P

Per fake node, one `PluginService` (the device plugin minus gRPC and the SMI) over mock cards:
* registration: `register_node` publishes the cards and the handshake at start and again every
  `--register-interval` seconds (the chart's registerIntervalSeconds), spread over the interval,
  followed by the plugin's `reconcile` (vDCUs of pods gone, a lock nobody needs) on every node
  that has served a pod: on the others it would list no pod, and at 5,000 nodes those lists
  alone would be 170 requests/s that this 2-core machine cannot spare. Each real node reports
  from its own machine; here one process makes the report of every node of its shard (167
  writes/s at 5,000 nodes, over all shards), so the writers are sized to the node count, a
  node whose previous report is still queued is not queued again (a backlog would make every
  later report older), and how late each report is goes into
  `hami_dcu_nodesim_report_delay_seconds`: reports later than the extender's 60 s limit would
  make nodes look dead, and the bench says so;
* Allocate: for every DCU pod bound to the node, in the order the pods arrive, what the kubelet
  does per container: GetPreferredAllocation (`preferred`) over the node's free slot ids, then
  `allocate`, which finds the pod by the node lock, writes its vDCU files, records the outcome
  on the pod and releases the lock. A refused Allocate fails the pod as the kubelet does
  (UnexpectedAdmissionError). Pods of one node are served one at a time, as a kubelet admits
  them; nodes are served in parallel by `--workers` threads.

Each node's plugin follows its node and its pods with the plugin's own watches (NodeWatch into a
NodeCache, as `hami-dcu device-plugin` does), started with the simulator, so the per-pod reads
the bench counts are the real plugin's.

Every write (and watch) is made as the chart's device plugin identity on that node: the admin credential
impersonates the plugin's ServiceAccount with the node name a kubelet-bound token carries
(`authentication.kubernetes.io/node-name`), so RBAC and the chart's admission policies judge
each write exactly as they judge the real plugin's.

Its own figures (per pod: waiting for the node's turn, bound-to-allocated) are Prometheus
metrics on `--metrics-port`, beside the plugin's; the harness sums its shards' into one.
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from hami_dcu.cli.localcluster.pods import MockCard, default_cards
from hami_dcu.common.io.kube import GoneError, Kube, KubeError, NotFoundError, load_api_client
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.requests import pod_containers
from hami_dcu.deviceplugin.core import AllocateFailed, Paths
from hami_dcu.deviceplugin.metrics import PluginMetrics
from hami_dcu.deviceplugin.nodecache import NodeCache
from hami_dcu.deviceplugin.nodewatch import NodeWatch
from hami_dcu.deviceplugin.plan import fake_device_id
from hami_dcu.deviceplugin.service import PluginService
from hami_dcu.node.discovery import DcuCard, DrmNodes
from hami_dcu.node.smi import Card

log = logging.getLogger(__name__)
JSON = dict[str, Any]
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30)
# How old a node's handshake may be before the extender's /filter takes it for dead
# (scheduler/handshake.py HANDSHAKE_TTL; the harness does not import the extender).
REPORT_LIMIT_SECONDS = 60


def served_cards(cards: list[MockCard], naming: keys.Naming = keys.DCU_NAMING) -> list[DcuCard]:
    """Mock cards as discovery reports them (index order; device nodes by index)."""
    return [DcuCard(Card(index=i, serial=c.serial, model=c.model, memory_mib=c.memory_mib,
                         compute_units=c.compute_units, pci_bus_id=c.pci_bus_id, numa=c.numa),
                    DrmNodes(card=f"/dev/dri/card{i}", render=f"/dev/dri/renderD{128 + i}"), naming.id_prefix)
            for i, c in enumerate(cards)]


def impersonating(base: Kube, user: str, node: str) -> Kube:
    """A client acting as `user` with the node name of a token bound to a pod on `node`,
    sharing `base`'s connections (one TLS pool for every node)."""
    api_client = copy.copy(base.api_client)
    api_client.default_headers = {**base.api_client.default_headers, "Impersonate-User": user,
                                  f"Impersonate-Extra-{NODE_NAME_EXTRA.replace('/', '%2F')}": node}
    return Kube(api_client, timeout=base.timeout)


def report_writers(nodes: int, write_seconds: float = 0.25, interval: float = 30.0) -> int:
    """Threads enough to write every node's report within a third of the interval when a
    write takes `write_seconds` (kube-apiserver's latency on a loaded 2-core machine): the
    writes wait on the API, not on this process's CPU."""
    return max(4, min(64, math.ceil(nodes * write_seconds / (interval / 3))))


def count_needed(container: JSON, resource: str) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    try:
        return int(limits.get(resource, 0))
    except (TypeError, ValueError):
        return 0


class SimMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.plugin = PluginMetrics(self.registry)
        self.queued_seconds = Histogram(
            "hami_dcu_nodesim_queued_seconds", "From the pod seen bound to its node's turn (pods of one node "
            "are admitted one at a time)", buckets=_BUCKETS, registry=self.registry)
        self.bound_to_allocated_seconds = Histogram(
            "hami_dcu_nodesim_bound_to_allocated_seconds", "From the pod seen bound to its last Allocate done "
            "(the node lock released)", buckets=_BUCKETS, registry=self.registry)
        self.pods = Counter("hami_dcu_nodesim_pods", "DCU pods admitted, by result", ["result"],
                            registry=self.registry)
        self.registrations = Counter("hami_dcu_nodesim_registrations", "Node registrations, by result "
                                     "(late: not queued again while the previous one still waited)",
                                     ["result"], registry=self.registry)
        self.report_delay_seconds = Histogram(
            "hami_dcu_nodesim_report_delay_seconds", "From a node's turn in the report schedule to its "
            "report written", buckets=(*_BUCKETS, 60, 120), registry=self.registry)
        # What the extender judges a node by: a handshake older than its limit (60 s) makes the
        # node look dead to /filter, however late or skipped the reports in between were.
        self.report_gap_seconds = Histogram(
            "hami_dcu_nodesim_report_gap_seconds", "Between two reports of one node written",
            buckets=(30, 35, 45, REPORT_LIMIT_SECONDS, 90, 120), registry=self.registry)


class ReportGaps:
    """The time between two reports of each node written, into `histogram` (the report
    writers are threads)."""

    def __init__(self, histogram: Histogram) -> None:
        self.histogram = histogram
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def written(self, node: str, now: float) -> None:
        with self._lock:
            last, self._last[node] = self._last.get(node), now
        if last is not None:
            self.histogram.observe(now - last)


class NodeSimulator:
    def __init__(self, admin: Kube, plugin_user: str, nodes: dict[str, list[MockCard]], workdir: Path,
                 register_interval: float = 30.0, workers: int = 32, naming: keys.Naming = keys.DCU_NAMING,
                 register_workers: int | None = None,
                 slots_per_card: int = keys.DEFAULT_SLOTS_PER_CARD, metrics: SimMetrics | None = None) -> None:
        self.admin = admin
        self.resource = naming.resources.count
        self.register_interval = register_interval
        self.metrics = metrics or SimMetrics()
        self.cores: dict[str, PluginService] = {}
        self.watches: list[NodeWatch] = []
        self.slot_ids: dict[str, list[str]] = {}
        for node, cards in nodes.items():
            served = served_cards(cards, naming)
            root = workdir / node
            paths = Paths(vdev_dir=root / "vdev", etc_vdev=root / "etc-vdev", state_dir=root / "state",
                          dev_root=root / "dev", driver_dir=root / "dtk", hyhal_dir=root / "hyhal")
            kube, cache = impersonating(admin, plugin_user, node), NodeCache(node)
            self.watches.append(NodeWatch(kube, node, cache))
            self.cores[node] = PluginService(kube, node, served, paths, slots_per_card, metrics=self.metrics.plugin,
                                             naming=naming, cache=cache)
            self.slot_ids[node] = [fake_device_id(c.id, s) for c in served for s in range(slots_per_card)]
        self.assigned: dict[str, dict[str, set[str]]] = {node: {} for node in nodes}  # node -> uid -> ids
        self._queues: dict[str, deque[tuple[JSON, float]]] = {node: deque() for node in nodes}
        self._ready: deque[str] = deque()  # nodes with pods waiting and no worker on them
        self._busy: set[str] = set()
        self._handled: set[str] = set()
        self.served: set[str] = set()  # nodes that have had a DCU pod to admit
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._registrar = ThreadPoolExecutor(max_workers=register_workers or report_writers(len(nodes)),
                                             thread_name_prefix="nodesim-register")
        self._reporting: set[str] = set()  # nodes whose report is queued or being written
        self._gaps = ReportGaps(self.metrics.report_gap_seconds)
        self._threads = [threading.Thread(target=self._work, name=f"nodesim-{i}", daemon=True)
                         for i in range(workers)]
        self._threads += [threading.Thread(target=self._watch, name="nodesim-watch", daemon=True),
                          threading.Thread(target=self._refresh, name="nodesim-register", daemon=True)]

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> NodeSimulator:
        for watch in self.watches:
            watch.start()
        self.register(self.cores)
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        for watch in self.watches:
            watch.stop()
        with self._cond:
            self._cond.notify_all()
        self._registrar.shutdown(wait=False, cancel_futures=True)

    # --- registration --------------------------------------------------------------------

    def register(self, nodes: Iterable[str]) -> None:
        """Register these nodes now, a few at a time (start-up takes seconds at 5,000 nodes)."""
        for done in [self._registrar.submit(self._register_one, node) for node in nodes]:
            done.result()

    def _register_one(self, node: str, reconcile: bool = False, due: float | None = None) -> None:
        """What the plugin's loop does each interval (deviceplugin/command.py NodeLoop.once)."""
        try:
            if due is not None:
                self.metrics.report_delay_seconds.observe(max(0.0, time.monotonic() - due))
            self.cores[node].register_node(now=datetime.now(UTC))
            self.metrics.registrations.labels("ok").inc()
            self._gaps.written(node, time.monotonic())
            if reconcile and node in self.served:
                self.cores[node].reconcile()
        except (KubeError, OSError) as exc:
            self.metrics.registrations.labels("failed").inc()
            log.warning("node %s: registration or reconcile failed: %s", node, exc)
        finally:
            with self._cond:
                self._reporting.discard(node)

    def _refresh(self) -> None:
        """Every node again within each interval, evenly spread: a device plugin's reports."""
        nodes = sorted(self.cores)
        gap = self.register_interval / max(1, len(nodes))
        while not self._stopping.is_set():
            started = time.monotonic()
            for i, node in enumerate(nodes):
                due = started + i * gap
                delay = due - time.monotonic()
                if delay > 0 and self._stopping.wait(delay):
                    return
                with self._cond:
                    late = node in self._reporting
                    self._reporting.add(node)
                if late:
                    self.metrics.registrations.labels("late").inc()
                    continue
                # Not waited for: one slow write must not delay every later node's report.
                self._registrar.submit(self._register_one, node, True, due)
            rest = started + self.register_interval - time.monotonic()
            if rest > 0 and self._stopping.wait(rest):
                return

    # --- pods bound to the fake nodes ----------------------------------------------------

    def _watch(self) -> None:
        # Every pod of the cluster, those of other shards' nodes dropped in `_seen`: a field
        # selector matches one node name (or all but one), not a shard's set, and a watch per
        # node would be thousands more. Each shard decoding every pod event is the price.
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
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node, uid = spec.get("nodeName"), meta.get("uid", "")
        if node not in self.cores:
            return
        if kind == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            with self._cond:
                self.assigned[node].pop(uid, None)
            return
        if uid in self._handled or meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Pending":
            return
        if not any(count_needed(c, self.resource) for c in pod_containers(pod)):
            return
        with self._cond:
            self._handled.add(uid)
            self.served.add(node)
            self._queues[node].append((pod, time.monotonic()))
            if node not in self._busy and node not in self._ready:
                self._ready.append(node)
                self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._ready and not self._stopping.is_set():
                    self._cond.wait()
                if self._stopping.is_set():
                    return
                node = self._ready.popleft()
                pod, seen = self._queues[node].popleft()
                self._busy.add(node)
            try:
                self.metrics.queued_seconds.observe(time.monotonic() - seen)
                self._admit(node, pod)
                self.metrics.bound_to_allocated_seconds.observe(time.monotonic() - seen)
            finally:
                with self._cond:
                    self._busy.discard(node)
                    if self._queues[node]:
                        self._ready.append(node)
                        self._cond.notify()

    def _admit(self, node: str, pod: JSON) -> None:
        """The kubelet's device-manager part of admitting one pod: per container that asks for
        cards, advice then Allocate, with slot ids no other live pod holds."""
        core, uid = self.cores[node], pod["metadata"]["uid"]
        try:
            for container in pod_containers(pod):
                need = count_needed(container, self.resource)
                if not need:
                    continue
                with self._cond:
                    used = set().union(*self.assigned[node].values())
                free = [i for i in self.slot_ids[node] if i not in used]
                if len(free) < need:
                    raise AllocateFailed(f"{need} {self.resource} requested, {len(free)} free")
                advice = [i for i in core.preferred(free, [], need) if i in free]
                chosen = advice if len(advice) == need else free[:need]
                with self._cond:
                    self.assigned[node].setdefault(uid, set()).update(chosen)
                core.allocate([chosen])
        except AllocateFailed as exc:
            self.metrics.pods.labels("failed").inc()
            self._fail(pod, str(exc))
            return
        self.metrics.pods.labels("allocated").inc()

    def _fail(self, pod: JSON, message: str) -> None:
        meta = pod["metadata"]
        log.warning("pod %s/%s on %s failed admission: %s", meta["namespace"], meta["name"],
                    pod["spec"]["nodeName"], message)
        try:
            self.admin.patch_pod_status(meta["namespace"], meta["name"], {
                "phase": "Failed", "reason": "UnexpectedAdmissionError",
                "message": f"Allocate failed due to {message}, which is unexpected"})
        except NotFoundError:
            pass
        except KubeError as exc:
            log.warning("pod %s/%s: could not mark it Failed: %s", meta["namespace"], meta["name"], exc)


class Simulator(Protocol):
    metrics: Any

    def start(self) -> Any: ...

    def stop(self) -> None: ...


def run_simulator(argv: list[str] | None, description: str, label: str, identity_help: str,
                  build: Callable[[Kube, str, dict[str, list[MockCard]], Path, float, int, keys.Naming], Simulator]
                  ) -> int:
    """The command line both node-side simulators share (this one's and drasim.py's): the
    fake nodes, the admin credential, the identity their writes are made as; runs until SIGTERM."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", required=True, help="a file naming one fake node per line")
    parser.add_argument("--cards", type=int, default=8, help="mock cards per node")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--register-interval", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--identity", required=True, help=identity_help)
    parser.add_argument("--naming", default=keys.DCU_NAMING.name, choices=sorted(keys.NAMINGS),
                        help="the naming set the chart speaks")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    names = [n.strip() for n in Path(args.nodes).read_text().splitlines() if n.strip()]
    api_client = load_api_client(args.kubeconfig)
    # Every node's client shares this pool: enough connections for each worker, the watches (the
    # simulator's, and the device plugin's two per node) and the registration threads, so none
    # is opened and dropped per request.
    api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = args.workers * 2 + 12 + 2 * len(names)
    admin = Kube(api_client, timeout=30)
    simulator = build(admin, args.identity, {n: default_cards(n, args.cards) for n in names}, Path(args.workdir),
                      args.register_interval, args.workers, keys.naming_by_name(args.naming))
    start_http_server(args.metrics_port, addr="127.0.0.1", registry=simulator.metrics.registry)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda _sig, _frame: stopping.set())
    simulator.start()
    print(f"{label}: {len(names)} nodes registered", flush=True)
    stopping.wait()
    simulator.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_simulator(argv, __doc__.split("\n\n")[0], "nodesim", "the device plugin's ServiceAccount username",
                         lambda admin, user, nodes, workdir, interval, workers, naming: NodeSimulator(
                             admin, user, nodes, workdir, interval, workers, naming))


if __name__ == "__main__":
    raise SystemExit(main())
