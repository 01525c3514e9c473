"""A scale harness on the real control plane: kwok's fake nodes beside one stand-in node.

    with KwokScale() as scale:
        scale.grow(1000)                      # 1,000 fake nodes x 8 mock cards, registered
        burst = scale.burst("dcu-1", scalemix.shapes(2000), dcu=True)

What runs (RealCluster, as the real-cluster suite has it): etcd, kube-apiserver,
kube-controller-manager and the cluster's default kube-scheduler; `helm install` of the chart,
whose scheduler pod (the bundled kube-scheduler with the chart's KubeSchedulerConfiguration, and
our extender serving the webhook) and device plugin run on one stand-in node. Then:

* kwok (kwok.py) keeps the fake nodes Ready (node status and Leases) and turns the pods bound to
  them Running, a DCU pod only once its allocation is done;
* every fake node carries the `kwok.x-k8s.io/node=fake:NoSchedule` taint, which the chart's pods
  do not tolerate, so its DaemonSet, Deployment and Jobs stay on the stand-in node; the burst's
  pods tolerate it and select the fake nodes;
* the node-side simulator (nodesim.py) registers each fake node's cards and keeps the handshake
  fresh, and serves every DCU pod bound to a fake node with the device plugin's own Allocate, as
  the plugin's identity on that node. It runs in `shard_count` processes (simshards.py: one per
  NODES_PER_SHARD nodes, at most MOST_SHARDS; `sim_shards` forces a count), each over its share
  of the fake nodes (`split_nodes`): one Python process is held to one core by its GIL, and at
  5,000 nodes one process fell behind with the reports (the bench's HARNESS BEHIND).
  `nodesim_metrics` sums the shards' /metrics into one exposition (`merge_expositions`), so
  what the bench reads is the same as one process's would be.

`KwokScale(mode="dra")` installs the chart in DRA mode instead (DraRealCluster: the stand-in
node runs the DRA driver): the fake nodes offer no DCU resource, drasim.py publishes each one's
ResourceSlice with the DRA driver's own code and prepares the claims of the pods bound there;
the webhook rewrites the burst's pods into claims, which hami-scheduler's kube-scheduler
allocates, ranking nodes by our extender's /prioritize. drasim.py runs through the same
launcher as nodesim.py, so it is sharded the same way.

The baseline of a burst is the same pods without DCU limits: the webhook leaves them alone and
the cluster's default kube-scheduler (the same binary, no extender) places them.
"""

from __future__ import annotations

import logging
import shutil
import signal
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from e2e.realcluster import drafloor, kwok, scalemix
from e2e.realcluster.cluster import RELEASE, SYSTEM_NAMESPACE, RealCluster
from e2e.realcluster.controlplane import free_port
from e2e.realcluster.dra_cluster import DraRealCluster
from e2e.realcluster.processes import Process, wait_for
from e2e.realcluster.scalestats import Burst
from e2e.realcluster.simshards import merge_expositions, shard_count, shard_process_name, shard_workers, split_nodes
from e2e.tools import ROOT
from hami_dcu.cli.localcluster.pods import default_cards
from hami_dcu.common.io.kube import GoneError, Kube, KubeError, NotFoundError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.dra import names as dra_names

log = logging.getLogger(__name__)
JSON = dict[str, Any]
STANDIN = "standin"
NAMESPACE = "scale"
CARDS_PER_NODE = 8
CARD_MEMORY_MIB = 65520
# kwok renews each fake node's Lease every LEASE_SECONDS / 4. A kubelet's 40 s (every 10 s)
# would be 500 writes/s at 5,000 nodes, more than this 2-core machine's control plane has to
# spare for them; the controller manager's grace period grows with it, as kwokctl's
# heartbeat factor does for large clusters.
LEASE_SECONDS = 240
NODE_MONITOR_GRACE_SECONDS = 300
# The controller manager lifts the `not-ready` taint admission puts on every new Node, one
# write per node, and its node TTL controller annotates each: at its default 20 requests/s,
# 1,000 new nodes take minutes to become schedulable.
CONTROLLER_MANAGER_QPS = 200
FAKE_CPU, FAKE_MEMORY, FAKE_PODS = "64", "512Gi", "110"
DEVICE_PLUGIN, DRA = "devicePlugin", "dra"  # the chart's `mode` values
CREATE_TIMEOUT_SECONDS = 60.0


def fake_node(name: str, cards: int = CARDS_PER_NODE, slots_per_card: int = keys.DEFAULT_SLOTS_PER_CARD,
              naming: keys.Naming = keys.DCU_NAMING, mode: str = DEVICE_PLUGIN) -> JSON:
    """A Node object kwok manages, as a kubelet with the device plugin registered reports it;
    in DRA mode without the DCU resource (the cards are in the node's ResourceSlice, and a
    device plugin's resource would make the DRA driver stand back)."""
    resources = {"cpu": FAKE_CPU, "memory": FAKE_MEMORY, "pods": FAKE_PODS}
    if mode != DRA:
        resources[naming.resources.count] = str(cards * slots_per_card)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {kwok.MANAGED_ANNOTATION: kwok.MANAGED_VALUE},
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                scalemix.FAKE_NODE_LABEL: "kwok"}},
        "spec": {"taints": [dict(kwok.TAINT)]},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def fake_node_names(count: int) -> list[str]:
    return [f"kwok-{i:05d}" for i in range(count)]


class KwokScale:
    def __init__(self, workdir: Path | None = None, register_interval: float = 30.0, sim_workers: int = 32,
                 say: Callable[[str], None] = lambda line: print(line, flush=True), values: JSON | None = None,
                 mode: str = DEVICE_PLUGIN, hami_peer: bool = False, hami_args: Sequence[str] = (),
                 sim_shards: int | None = None) -> None:
        """`sim_shards`: the node-side simulator's process count; None: `shard_count`'s for the
        node count of each `grow`."""
        if mode not in (DEVICE_PLUGIN, DRA):
            raise ValueError(f"mode {mode!r}: {DEVICE_PLUGIN} or {DRA}")
        if hami_peer and mode == DRA:
            raise ValueError("HAMi v2.10 has no DRA mode: hami_peer needs the device-plugin mode")
        if sim_shards is not None and sim_shards < 1:
            raise ValueError(f"sim_shards {sim_shards}: at least 1")
        self.mode = mode
        self.sim_shards = sim_shards
        self.register_interval = register_interval
        self.sim_workers = sim_workers
        self.say = say
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="hami-kwok-", dir="/tmp"))
        self.workdir.chmod(0o755)
        (self.workdir / "cluster").mkdir(exist_ok=True)
        extra: JSON = {"hami_peer": True, "hami_args": hami_args} if hami_peer else {}
        backend = DraRealCluster if mode == DRA else RealCluster
        self.cluster = backend({STANDIN: default_cards(STANDIN, 1)}, namespace=NAMESPACE, values=values, **extra,
                                   workdir=self.workdir / "cluster",
                                   controller_manager_args=[f"--node-monitor-grace-period={NODE_MONITOR_GRACE_SECONDS}s",
                                                            f"--kube-api-qps={CONTROLLER_MANAGER_QPS}",
                                                            f"--kube-api-burst={2 * CONTROLLER_MANAGER_QPS}"])
        self.kwok: Process | None = None
        self.nodesims: list[Process] = []  # the simulator's shards, one process each
        self.nodesim_ports: list[int] = []  # their /metrics ports, in the same order
        self.nodes: list[str] = []

    # --- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> KwokScale:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> KwokScale:
        binary = kwok.binary()
        self.cluster.start()
        assert self.cluster.control_plane is not None
        self.kwok = kwok.start(binary, self.cluster.kubeconfig, self.workdir / "kwok", LEASE_SECONDS)
        return self

    def stop(self) -> None:
        self._stop_nodesims()
        if self.kwok is not None:
            self.kwok.stop(grace=5)
        self.cluster.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def kube(self) -> Kube:
        """The cluster's admin client."""
        return self.cluster.kube

    @property
    def processes(self) -> list[Process]:
        assert self.cluster.control_plane is not None
        return [*self.cluster.control_plane.processes, *(p for p in (self.kwok,) if p), *self.nodesims]

    # --- fake nodes ----------------------------------------------------------------------

    def grow(self, total: int) -> None:
        """Fake nodes up to `total`, Ready and schedulable, each registered by the simulator;
        then one DCU pod through the whole path, so the first measured pod finds it warm."""
        names = fake_node_names(total)
        new = names[len(self.nodes):]
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            for done in [pool.submit(self._create_node, name) for name in new]:
                done.result()
        self.nodes = names
        wait_for(f"{total} fake nodes Ready and schedulable", lambda: self._schedulable() >= total,
                 120 + total / 20, self.processes, interval=2)
        self.say(f"  {len(new)} fake nodes created and Ready in {time.monotonic() - started:.1f} s")
        self._restart_nodesim()
        self._canary()

    def _create_node(self, name: str) -> None:
        try:
            self.kube.create_node(fake_node(name, naming=self.cluster.naming, mode=self.mode))
        except KubeError as exc:
            if exc.status != 409:
                raise

    def _schedulable(self) -> int:
        items = self.kube.list_nodes(label_selector=f"{scalemix.FAKE_NODE_LABEL}=kwok").items
        return sum(1 for node in items if _ready(node) and not any(
            t.get("key") != kwok.TAINT["key"] for t in node["spec"].get("taints") or []))

    def _stop_nodesims(self) -> None:
        # Every shard is told at once, then waited for: one by one, each would add its grace.
        for process in self.nodesims:
            process.signal(signal.SIGTERM)
        for process in self.nodesims:
            process.stop(grace=5)
        self.nodesims, self.nodesim_ports = [], []

    def _restart_nodesim(self) -> None:
        """The simulator over the current fake nodes, in `shard_count` processes, each with its
        own nodes file, /metrics port and log; every node's folder is named by the node, so the
        shards share one workdir (and `vdev_files` finds a node's files wherever it was served)."""
        self._stop_nodesims()
        total = len(self.nodes)
        shards = shard_count(total, self.sim_shards)
        started = time.monotonic()
        accounts = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{RELEASE}"
        if self.mode == DRA:  # the DRA driver's side: slices and Prepare (drasim.py)
            module, identity = "drasim", f"--identity={accounts}-dra-driver"
        else:
            module, identity = "nodesim", f"--identity={accounts}-device-plugin"
        logs: list[Path] = []
        counted = f"{shards} process{'es' if shards > 1 else ''}"
        # Started one after another from this thread, not from a pool's: a Process dies with
        # the thread that started it (processes.py). Starting takes milliseconds; the shards
        # then register their nodes at the same time.
        for shard, names in enumerate(split_nodes(self.nodes, shards)):
            nodes_file = self.workdir / f"fake-nodes-{shard}.txt"
            nodes_file.write_text("".join(f"{name}\n" for name in names))
            port = free_port("127.0.0.1")
            log_file = self.workdir / "logs" / f"nodesim-{total}-{shard}.log"
            self.nodesims.append(Process(shard_process_name(shard, shards), [
                sys.executable, "-m", f"e2e.realcluster.{module}", f"--kubeconfig={self.cluster.kubeconfig}",
                f"--nodes={nodes_file}", f"--cards={CARDS_PER_NODE}", f"--workdir={self.workdir / 'nodesim'}",
                f"--metrics-port={port}", f"--register-interval={self.register_interval}",
                f"--workers={shard_workers(self.sim_workers, shards)}", identity,
                f"--naming={self.cluster.naming.name}",
            ], log_file, cwd=ROOT).start())  # the harness (e2e/) imports from the checkout
            self.nodesim_ports.append(port)
            logs.append(log_file)
        wait_for(f"the node simulator's first registration of every fake node ({counted})",
                 lambda: all("registered" in log.read_text() for log in logs), 60 + total / 20, self.processes,
                 interval=1)
        self.say(f"  node simulator registered {total} nodes in {time.monotonic() - started:.1f} s ({counted})")

    def _canary(self) -> None:
        burst = self.burst(f"canary-{len(self.nodes)}", [scalemix.MIX[0]], dcu=True, timeout=120)
        if burst.failed or burst.refused or len(burst.running) != 1:
            raise RuntimeError(f"the canary DCU pod did not run: {burst.failed or burst.refused}\n"
                               f"{self.cluster.diagnose()}")
        self.delete_run(f"canary-{len(self.nodes)}")

    # --- bursts --------------------------------------------------------------------------

    def publish_floor(self) -> None:
        """The trivial DRA driver's class, template and one slice per fake node (drafloor.py),
        written by the admin: what the DRA floor burst's pods are allocated from."""
        for path, body in ((f"{dra_names.RESOURCE_API}/deviceclasses", drafloor.device_class()),
                           (f"{dra_names.RESOURCE_API}/namespaces/{NAMESPACE}/resourceclaimtemplates",
                            drafloor.claim_template(NAMESPACE))):
            self._create(path, body)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            for done in [pool.submit(self._create, f"{dra_names.RESOURCE_API}/resourceslices",
                                     drafloor.resource_slice(node, CARDS_PER_NODE)) for node in self.nodes]:
                done.result()
        self.say(f"  floor driver: {len(self.nodes)} trivial ResourceSlices in {time.monotonic() - started:.1f} s")

    def _create(self, path: str, body: JSON) -> None:
        try:
            self.kube.request("POST", path, body=body)
        except KubeError as exc:
            if exc.status != 409:  # made for a smaller node count before
                raise

    def burst(self, run: str, shapes: list[scalemix.Shape], dcu: bool, creators: int = 8, timeout: float = 900,
              until_running: bool = True, floor: bool = False) -> Burst:
        """Create one pod per shape as fast as `creators` threads get them accepted, and wait
        until every pod is bound (and Running, unless `until_running` is False) or Failed.
        `floor`: each pod the plain twin with one trivial DRA claim (drafloor.py)."""
        result = Burst(pods=len(shapes))
        watcher = _RunWatch(self, run, result)
        watcher.start()
        names = [f"{run}-{i:05d}" for i in range(len(shapes))]

        def create(i: int) -> None:
            name = names[i]
            manifest = drafloor.pod(name, shapes[i], run) if floor else scalemix.manifest(name, shapes[i], run, dcu)
            result.created[name] = time.monotonic()
            try:
                # The API server's own limit, not the client's 10 s: a create slowed by admission
                # (DRA mode's webhook) is part of what is measured, not a refusal.
                self.kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=manifest,
                                  timeout=CREATE_TIMEOUT_SECONDS)
            except KubeError as exc:
                result.refused[name] = str(exc)

        try:
            with ThreadPoolExecutor(max_workers=creators) as pool:
                list(pool.map(create, range(len(names))))
            expected = len(names) - len(result.refused)

            def settled() -> bool:
                done = result.running if until_running else result.bound
                return len(set(done) | set(result.failed)) >= expected

            wait_for(f"burst {run}: {expected} pods {'Running' if until_running else 'bound'}", settled, timeout,
                     self.processes, interval=0.2)
        finally:
            watcher.stop()
        return result

    def job(self, run: str, shape: scalemix.Shape, pods: int, timeout: float = 300) -> dict[str, str]:
        """A Job of `pods` pods of one shape, run in parallel (the real Job controller creates
        them): pod name -> node, once every pod is bound. `delete_job` removes it."""
        template = scalemix.manifest(run, shape, run, dcu=True)
        template["spec"]["restartPolicy"] = "Never"
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": run, "labels": {scalemix.RUN_LABEL: run}},
               "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                        "template": {"metadata": {"labels": {scalemix.RUN_LABEL: run},
                                                  "annotations": template["metadata"].get("annotations") or {}},
                                     "spec": template["spec"]}}}
        self.kube.request("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", body=job)
        selector = f"{scalemix.RUN_LABEL}={run}"

        def placed() -> dict[str, str] | None:
            items = self.kube.list_pods(namespace=NAMESPACE, label_selector=selector).items
            found = {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName") or "" for p in items}
            return found if len(found) >= pods and all(found.values()) else None

        wait_for(f"the {pods} pods of Job {run} bound", lambda: placed() is not None, timeout, self.processes,
                 interval=0.5)
        return placed() or {}

    def delete_job(self, run: str) -> None:
        self.kube.request("DELETE", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{run}",
                          body={"propagationPolicy": "Background"})
        self.delete_run(run)

    def delete_run(self, run: str, timeout: float = 900, deleters: int = 16) -> float:
        """Delete a burst's pods and wait until they are gone; the seconds it took.

        One DELETE per pod from `deleters` threads, grace 0 (gone at once, not marked for kwok
        to finish: two writes a pod). A single deletecollection is served by one worker in
        kube-apiserver (`--delete-collection-workers`), and at 10,000 pods on 5,000 nodes it
        deleted 7 pods/s, outlasting the 15-minute limit."""
        selector = f"{scalemix.RUN_LABEL}={run}"
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        started = time.monotonic()
        deadline = started + timeout
        self.kube.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = max(4, deleters)

        def delete(name: str) -> None:
            try:
                self.kube.request("DELETE", f"{path}/{name}", query={"gracePeriodSeconds": 0},
                                  body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
            except NotFoundError:
                pass
            except KubeError as exc:
                log.info("deleting pod %s: %s; the next round tries again", name, exc)

        while True:
            names = [p["metadata"]["name"] for p in self.kube.request(
                "GET", path, query={"labelSelector": selector, "resourceVersion": "0"}).get("items") or []]
            if names:
                with ThreadPoolExecutor(max_workers=deleters) as pool:
                    list(pool.map(delete, names))
            try:
                wait_for(f"the pods of {run} gone", lambda: not self.kube.request(
                    "GET", path, query={"labelSelector": selector, "limit": 1}).get("items"),
                    min(60.0, max(1.0, deadline - time.monotonic())), self.processes, interval=1)
                break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise
        if self.mode == DRA:
            # The claim controller deletes the pods' generated claims after them: until then their
            # allocations still hold capacity the next burst would be refused.
            wait_for(f"the claims of {run}'s pods gone", lambda: not self.claims(limit=1),
                     max(1.0, deadline - time.monotonic()), self.processes, interval=1)
        return time.monotonic() - started

    # --- what the measurements read --------------------------------------------------------

    def claims(self, limit: int | None = None) -> list[JSON]:
        """The ResourceClaims of the bursts' namespace (DRA mode)."""
        query = {"limit": limit} if limit else None
        return self.kube.request("GET", f"{dra_names.RESOURCE_API}/namespaces/{NAMESPACE}/resourceclaims",
                                 query=query).get("items") or []

    def resource_slices(self) -> list[JSON]:
        """Every ResourceSlice of our driver (DRA mode)."""
        return [s for s in self.kube.request("GET", f"{dra_names.RESOURCE_API}/resourceslices").get("items") or []
                if (s.get("spec") or {}).get("driver") == dra_names.DRIVER]

    # --- which scheduler places the DCU pods: HAMi's (hami_peer, until use_our_scheduler) or ours

    @property
    def hami_places(self) -> bool:
        return self.cluster.hami_binary is not None and self.cluster.hami_peer

    @property
    def extender_container(self) -> str:
        return "vgpu-scheduler-extender" if self.hami_places else "extender"

    def use_our_scheduler(self) -> None:
        """Uninstall HAMi's chart and upgrade ours to the full chart (scheduler, webhook): the
        same cluster, nodes and node simulator, now with hami-dcu placing the DCU pods."""
        self.cluster.replace_hami_with_ours()
        self._canary()

    def extender_pid(self) -> int:
        """The extender process of the scheduler pod (its container's process is the command)."""
        pid = self.pids().get(self.extender_container)
        if pid is None:
            raise RuntimeError(f"no running {self.extender_container} container on the stand-in node")
        return pid

    def pids(self) -> dict[str, int]:
        """Every process of the cluster by role: the control plane, kwok, the node simulator and
        the chart's containers on the stand-in node (hami-scheduler's kube-scheduler, the
        extender, the device plugin). Each is the process its command runs as: the wrappers
        that start it (setpriv, ip netns exec, unshare, sh) exec it in their place."""
        found = {p.name: p.popen.pid for p in self.processes if p.popen is not None and p.running}
        for running in list(self.cluster.kubelets[STANDIN].running.values()):
            for name, process in running.containers.items():
                if process.popen is not None and process.running:
                    found["hami-kube-scheduler" if name == "kube-scheduler" else name] = process.popen.pid
        return found

    def extender_metrics(self) -> str:
        component = "hami-scheduler" if self.hami_places else "scheduler"
        pods = self.kube.list_pods(namespace=SYSTEM_NAMESPACE,
                                   label_selector=f"app.kubernetes.io/component={component}").items
        ip = next(p["status"]["podIP"] for p in pods if (p.get("status") or {}).get("podIP"))
        # HAMi's chart: --metrics-bind-address=:9395; ours: scheduler.metricsPort.
        port = 9395 if self.hami_places else self.cluster.values().get("scheduler", {}).get("metricsPort", 9395)
        with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=60) as answer:
            return answer.read().decode()

    def apiserver_metrics(self) -> str:
        plane = self.cluster.control_plane
        assert plane is not None
        context = ssl.create_default_context(cafile=str(plane.pki.ca))
        context.load_cert_chain(str(plane.admin.cert), str(plane.admin.key))
        with urllib.request.urlopen(f"{plane.url}/metrics", timeout=60, context=context) as answer:
            return answer.read().decode()

    def nodesim_metrics(self) -> str:
        """The simulator's /metrics: its shards' summed into one exposition (merge_expositions)."""
        texts = []
        for port in self.nodesim_ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
                texts.append(answer.read().decode())
        return merge_expositions(texts)

    def vdev_files(self, node: str) -> dict[str, str]:
        """vdev directory -> its vdev0.conf, as the simulated plugin of `node` wrote them."""
        base = self.workdir / "nodesim" / node / "vdev"
        if not base.is_dir():
            return {}
        return {d.name: (d / "vdev0.conf").read_text() for d in sorted(base.iterdir()) if (d / "vdev0.conf").is_file()}

    def locks_left(self) -> list[str]:
        from e2e.invariants import locks_left

        return locks_left(self.kube.list_nodes(label_selector=f"{scalemix.FAKE_NODE_LABEL}=kwok").items)


def _ready(node: JSON) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


class _RunWatch:
    """Watches one burst's pods and notes, per pod, when it was first seen bound, Running or
    Failed (the harness's clock, the same one that timed the creates)."""

    def __init__(self, scale: KwokScale, run: str, result: Burst) -> None:
        self.kube = scale.kube
        self.selector = f"{scalemix.RUN_LABEL}={run}"
        self.result = result
        self._stopping = threading.Event()
        listed = self.kube.list_pods(namespace=NAMESPACE, label_selector=self.selector)
        self._version = listed.resource_version
        self._thread = threading.Thread(target=self._run, name=f"watch-{run}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                for event in self._events():
                    self._note(event.get("object") or {})
                    if self._stopping.is_set():
                        return
            except GoneError:
                self._version = self.kube.list_pods(namespace=NAMESPACE, label_selector=self.selector).resource_version
            except KubeError as exc:
                log.warning("burst watch broken, again: %s", exc)
                time.sleep(0.2)

    def _events(self) -> Iterator[JSON]:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        for event in self.kube.watch(path, self._version, timeout_seconds=5, label_selector=self.selector):
            self._version = ((event.get("object") or {}).get("metadata") or {}).get("resourceVersion") or self._version
            yield event

    def _note(self, pod: JSON) -> None:
        now = time.monotonic()
        name = (pod.get("metadata") or {}).get("name")
        if not name:
            return
        node = (pod.get("spec") or {}).get("nodeName")
        status = pod.get("status") or {}
        if node and name not in self.result.bound:
            self.result.bound[name] = now
            self.result.nodes[name] = node
        if status.get("phase") == "Running" and name not in self.result.running:
            self.result.running[name] = now
        if status.get("phase") == "Failed" and name not in self.result.failed:
            self.result.failed[name] = status.get("message") or status.get("reason") or "Failed"
