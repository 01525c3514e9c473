"""End-to-end scheduling through the real kube-scheduler and our extender, on an upstream
control plane (e2e/realcluster: kube-apiserver, kube-controller-manager, kube-scheduler and
etcd built from Go modules; the chart installed with helm; kubelet stand-ins per node).

    python bench/realcluster.py [--nodes 20] [--cards 4] [--pods 200] [--job 40] [--mode devicePlugin|dra]
    python bench/realcluster.py --peer hami     # HAMi v2.10's chart, then ours, then plain, on one cluster

Three measurements, each against its baseline from the same run and the same cluster:
* a burst of `--pods` shared-DCU pods (1 card, 1000-4000 MiB, 5-20 % cores) created as fast as
  the API takes them from `--creators` clients at once (8, as the kwok harness does; a Job or
  ReplicaSet controller creates up to 500 at once; 1: one after the other, where a DCU pod's
  creation waits for the webhook's round trip): time until every pod is bound, and until every pod is Running (after the
  device plugin's Allocate); the baseline is the same number of plain pods (no DCU) scheduled by
  the cluster's default kube-scheduler, which is the same binary without the extender round
  trips, node lock and Allocate;
* a Job of `--job` pods (1 card, 2000 MiB, 10 % cores each; the real Job controller creates the
  pods) onto as few `--cards` nodes as fit them (binpack): time until all are Running, and how
  many nodes they used against the fewest that could hold them (slots per node = cards x 4);
* the same Job pinned (node affinity) to one extra 10-card node, every bind contending for its
  node lock: time until all are Running, against a Job of as many plain pods onto that node.

`--steps` also prints one node's cycle during the DCU burst, step by step as the API server's
watches show it (lock, Binding, the device plugin's outcome, the lock's release, the next lock:
e2e/realcluster/cyclesteps.py), and the API requests per DCU pod by verb and resource.

`--mode dra` installs the chart in DRA mode: the same HAMi-style pod specs are rewritten by the
webhook into claims, allocated by kube-scheduler's DRA allocator and prepared by our DRA driver.

Needs what the real-cluster suite needs (root, Go and the module proxy on the first run).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

# The test harness (e2e/) is not installed: it imports from the checkout this script is in.
sys.path.append(str(Path(__file__).resolve().parent.parent))

from benchlib import cpu_seconds, machine_cpu_seconds

from e2e.realcluster import hami
from e2e.realcluster import scalestats as st
from e2e.realcluster.cluster import RealCluster, unavailable
from e2e.realcluster.cyclesteps import StepRecorder, steps
from e2e.realcluster.podprogress import BOUND, RUNNING, PodProgress
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest

BIG_NODE = "big"
# Where a pod's CPU goes. On a real cluster the node side runs on the nodes; on this one
# machine it competes with the control plane for the same cores.
CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "hami-kube-scheduler",
                 "extender", "vgpu-scheduler-extender")
STAND_INS = "kubelet stand-ins + bench"  # this process: the stand-ins' threads, pod creation, its watches
MACHINE = "machine"


def _burst(cluster: RealCluster, label: str, pods: int, dcu: bool, creators: int) -> tuple[float, float, float]:
    """Seconds until all `pods` are created (by `creators` clients at once, as fast as the API
    takes them: DCU pods pass the webhook), until all are bound, and until all are Running."""
    kube, ns = cluster.kube, cluster.namespace
    # One connection per creator: urllib3's default pool of 4 would open and drop the rest.
    kube.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = max(4, creators)

    def create(i: int) -> None:
        containers = [Ctr("c", 1, 1000 + (i % 4) * 1000, 5 + (i % 4) * 5)] if dcu else [Ctr("c")]
        manifest = pod_manifest(f"{label}-{i:03d}", containers)
        manifest["metadata"]["labels"] = {"bench": label}
        kube.create_pod(ns, manifest)

    progress = PodProgress(kube, ns, f"bench={label}").start()
    try:
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=creators) as pool:
            list(pool.map(create, range(pods)))
        created_at = time.monotonic() - start
        deadline = start + 600
        bound_at = progress.when_all(BOUND, pods, deadline)
        running_at = progress.when_all(RUNNING, pods, deadline)
    finally:
        progress.stop()
    if bound_at is None or running_at is None:
        raise SystemExit(f"{label}: {progress.count(BOUND)} of {pods} pods bound, {progress.count(RUNNING)} Running "
                         f"after 600 s")
    return created_at, bound_at - start, running_at - start


def _cpu(cluster: RealCluster) -> dict[str, float]:
    """CPU seconds used so far by each role's processes, this process, and the whole machine."""
    spent: dict[str, float] = {}
    for role, pids in cluster.process_ids().items():
        for pid in pids:
            try:
                spent[role] = spent.get(role, 0.0) + cpu_seconds(pid)
            except OSError:  # exited since it was listed
                pass
    times = os.times()
    spent[STAND_INS] = times.user + times.system
    spent[MACHINE] = machine_cpu_seconds()
    return spent


def _cpu_line(label: str, before: dict[str, float], after: dict[str, float], pods: int, seconds: float) -> str:
    spent = {role: used - before.get(role, 0.0) for role, used in after.items()}
    machine = spent.pop(MACHINE)
    shown = ", ".join(f"{role} {1000 * used / pods:.1f}" for role, used in
                      sorted(spent.items(), key=lambda item: -item[1]) if 1000 * used / pods >= 0.05)
    control = sum(used for role, used in spent.items() if role in CONTROL_PLANE)
    node = sum(spent.values()) - control
    return (f"  CPU ms per pod, {label}: {shown}\n"
            f"  {'':{len(label) + 17}}control plane {1000 * control / pods:.1f}, node side and bench "
            f"{1000 * node / pods:.1f}; the machine was {machine / seconds:.2f} of {os.cpu_count()} cores busy")


def _delete_all(cluster: RealCluster, claims: bool) -> None:
    """Delete the namespace's pods and wait until they are gone, and in DRA mode their claims
    too: kube-controller-manager deletes a pod's generated claims after the pod, and until then
    they hold their cards (the next burst or Job would start on a cluster that is not empty)."""
    kube, ns = cluster.kube, cluster.namespace
    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods")
    while kube.list_pods(namespace=ns).items:
        time.sleep(0.5)
    deadline = time.monotonic() + 300
    while claims and kube.request("GET", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims").get("items"):
        if time.monotonic() > deadline:
            raise SystemExit(f"claims in {ns} still there 300 s after their pods: is kube-controller-manager running?")
        time.sleep(0.5)


def _job(cluster: RealCluster, pods: int, label: str, node: str, dcu: bool = True, pinned: bool = True
         ) -> tuple[float, int]:
    """Seconds until all pods of a Job are Running (the real Job controller creates them), and
    how many nodes they used: all on `node` (pinned), or anywhere but there."""
    kube, ns = cluster.kube, cluster.namespace
    template = pod_manifest("x", [Ctr("c", 1, 2000, 10)] if dcu else [Ctr("c")])
    template["spec"]["restartPolicy"] = "Never"
    template["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In" if pinned else "NotIn", "values": [node]}]}]}}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"bench-{label}"},
           "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                    "template": {"metadata": {"labels": {"bench": label}}, "spec": template["spec"]}}}
    progress = PodProgress(kube, ns, f"bench={label}").start()
    try:
        start = time.monotonic()
        kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=job)
        running_at = progress.when_all(RUNNING, pods, start + 600)
    finally:
        progress.stop()
    if running_at is None:
        raise SystemExit(f"{label}: {progress.count(RUNNING)} of {pods} pods Running after 600 s")
    return running_at - start, len(progress.nodes())


def _delete_job(cluster: RealCluster, label: str) -> None:
    kube, ns = cluster.kube, cluster.namespace
    kube.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/bench-{label}",
                 body={"propagationPolicy": "Background"})
    while kube.list_pods(namespace=ns, label_selector=f"bench={label}").items:
        time.sleep(0.5)


def _requests(cluster: RealCluster) -> dict[tuple[str, ...], float]:
    """kube-apiserver's requests so far by verb, resource and subresource."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    return st.samples(text, "apiserver_request_total", ("verb", "resource", "subresource"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--cards", type=int, default=4, help="cards per node (4 vDCU slots each)")
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--job", type=int, default=40)
    parser.add_argument("--creators", type=int, default=8,
                        help="clients creating the burst's pods at once (1: one after the other)")
    parser.add_argument("--mode", choices=("devicePlugin", "dra"), default="devicePlugin",
                        help="the chart's mode; the pod specs are the same in both")
    parser.add_argument("--steps", action="store_true",
                        help="also print one node's cycle step by step and the API requests per DCU pod")
    parser.add_argument("--register-interval", type=int, default=30,
                        help="seconds between two reports of a node's plugin or DRA driver (default: the chart's; "
                             "the test suites' 5 s adds a node write, a pod list and a node read per node every 5 s)")
    parser.add_argument("--values", help="a YAML file of chart values to install with (e.g. other connection limits)")
    parser.add_argument("--workdir", help="keep the cluster's files (every component's log) here afterwards")
    parser.add_argument("--peer", choices=("hami",),
                        help="race HAMi v2.10 on the same cluster: its chart places the burst and the Jobs, then "
                             "ours does (HAMi uninstalled), then the plain baseline")
    parser.add_argument("--hami-qps", type=int, default=1000,
                        help="--peer hami: HAMi's API client rate (--kube-qps, burst twice it; 0: its default 5/s)")
    parser.add_argument("--controller-manager-qps", type=int,
                        help="kube-controller-manager's --kube-api-qps (burst twice it); default its own, 20: "
                             "in DRA mode it creates each pod's claim and records it in the pod's status")
    args = parser.parse_args()
    values = (yaml.safe_load(Path(args.values).read_text()) if args.values else None) or {}
    for reporter in ("devicePlugin", "draDriver"):  # a --values file's own interval wins
        values.setdefault(reporter, {}).setdefault("registerIntervalSeconds", args.register_interval)
    reason = unavailable() or (hami.why_unavailable() if args.peer else None)
    if reason:
        raise SystemExit(reason)
    logging.basicConfig(level=logging.WARNING)
    nodes = {f"node{i:02d}": default_cards(f"node{i:02d}", args.cards) for i in range(args.nodes)}
    nodes[BIG_NODE] = default_cards(BIG_NODE, 10)  # the pinned Job's (the binpack Job keeps off it)
    if args.peer:
        if args.mode != "devicePlugin":
            raise SystemExit("--peer hami: HAMi v2.10 has no DRA mode")
        race(args, nodes, values)
        return
    print(f"starting a real control plane with {args.nodes} nodes x {args.cards} cards, mode {args.mode} ...",
          flush=True)
    started = time.monotonic()
    backend = RealCluster
    if args.mode == "dra":
        from e2e.realcluster.dra_cluster import DraRealCluster

        backend = DraRealCluster
    workdir = Path(args.workdir) if args.workdir else None
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    qps = args.controller_manager_qps
    manager_args = [f"--kube-api-qps={qps}", f"--kube-api-burst={2 * qps}"] if qps else []
    with backend(nodes, values=values, workdir=workdir, controller_manager_args=manager_args) as cluster:
        print(f"cluster up and chart installed in {time.monotonic() - started:.1f} s "
              f"(Kubernetes {cluster.kube_version})", flush=True)
        cpu_before = _cpu(cluster)
        base_created, base_bound, base_running = _burst(cluster, "plain", args.pods, dcu=False, creators=args.creators)
        base_cpu = _cpu_line("plain", cpu_before, _cpu(cluster), args.pods, base_running)
        _delete_all(cluster, claims=args.mode == "dra")
        recorder = StepRecorder(cluster.kube, cluster.namespace).start() if args.steps else None
        requests_before = _requests(cluster) if args.steps else {}
        cpu_before = _cpu(cluster)
        created, bound, running = _burst(cluster, "dcu", args.pods, dcu=True, creators=args.creators)
        dcu_cpu = _cpu_line("DCU", cpu_before, _cpu(cluster), args.pods, running)
        detail: list[str] = []
        if recorder is not None:
            detail = ["\none node's cycle during the DCU burst, as the API server's watches show it:",
                      *steps(recorder.stop()).lines(), "API requests per DCU pod during the burst (all clients):"]
            gained = st.deltas(requests_before, _requests(cluster))
            detail += [f"  {per:5.2f}  {' '.join(part for part in key if part)}"
                       for key, per in st.per_pod(gained, args.pods, top=12)]
            detail.append(f"  {sum(gained.values()) / args.pods:5.2f}  in all")
        _delete_all(cluster, claims=args.mode == "dra")
        print(f"\nburst of {args.pods} pods over {args.nodes} nodes, created by {args.creators} clients at once")
        print(f"  baseline (default kube-scheduler, no DCU): bound in {base_bound:6.2f} s "
              f"({args.pods / base_bound:6.1f} pods/s), Running in {base_running:6.2f} s")
        path = "DRA allocator + driver" if args.mode == "dra" else "kube-scheduler + extender"
        print(f"  shared DCU ({path}): bound in {bound:6.2f} s "
              f"({args.pods / bound:6.1f} pods/s), Running in {running:6.2f} s "
              f"({args.pods / running:6.1f} pods/s)")
        print(f"  ratio to baseline: bound {bound / base_bound:.2f}x, Running {running / base_running:.2f}x")
        print(f"  all created in {created:.2f} s (baseline {base_created:.2f} s): a burst binds no faster than "
              f"it is created")
        print(f"{base_cpu}\n{dcu_cpu}")
        print("\n".join(detail), flush=True)
        job_time, used = _job(cluster, args.job, "job", BIG_NODE, pinned=False)
        fewest = math.ceil(args.job / (args.cards * 4))
        print(f"\nJob of {args.job} pods (binpack): all Running in {job_time:.2f} s on {used} nodes "
              f"(fewest possible: {fewest})")
        _delete_job(cluster, "job")
        plain, _ = _job(cluster, args.job, "plain-one", BIG_NODE, dcu=False)
        _delete_job(cluster, "plain-one")
        one, _ = _job(cluster, args.job, "one", BIG_NODE)
        print(f"Job of {args.job} pods onto one 10-card node ({BIG_NODE}, node affinity): all Running in "
              f"{one:.2f} s (target <= 5 s: {'met' if one <= 5 else 'MISSED'}); baseline, {args.job} plain pods "
              f"of a Job onto it: {plain:.2f} s; ratio {one / plain:.2f}x")


def race(args: argparse.Namespace, nodes: dict, values: dict) -> None:
    """HAMi v2.10's chart places the DCU burst and both Jobs, then ours does on the same cluster
    (HAMi uninstalled, our chart upgraded from the node side to the full chart), then the plain
    baseline; the last line is `peer-realcluster: ...`."""
    hami_args = [f"--kube-qps={args.hami_qps}", f"--kube-burst={2 * args.hami_qps}"] if args.hami_qps else []
    workdir = Path(args.workdir) if args.workdir else None
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"starting a real control plane with {args.nodes} nodes x {args.cards} cards, HAMi v2.10's chart "
          f"({' '.join(hami_args) or 'its default API rate'}) and our node side ...", flush=True)
    rates: dict[str, float] = {}
    with RealCluster(nodes, values=values, workdir=workdir, hami_peer=True, hami_args=hami_args) as cluster:
        print(f"cluster up in {time.monotonic() - started:.1f} s (Kubernetes {cluster.kube_version})", flush=True)
        for who, label in (("HAMi v2.10", "hami"), ("hami-dcu", "ours")):
            if label == "ours":
                cluster.replace_hami_with_ours()
            cpu_before = _cpu(cluster)
            created, bound, running = _burst(cluster, label, args.pods, dcu=True, creators=args.creators)
            cpu = _cpu_line(who, cpu_before, _cpu(cluster), args.pods, running)
            _delete_all(cluster, claims=False)
            job_time, used = _job(cluster, args.job, f"{label}-job", BIG_NODE, pinned=False)
            _delete_job(cluster, f"{label}-job")
            one, _ = _job(cluster, args.job, f"{label}-one", BIG_NODE)
            _delete_job(cluster, f"{label}-one")
            rates[label] = args.pods / bound
            print(f"\n{who}: burst of {args.pods} bound in {bound:6.2f} s ({rates[label]:6.1f} pods/s), Running in "
                  f"{running:6.2f} s (created in {created:.2f} s)\n{cpu}\n"
                  f"  Job of {args.job} (binpack): Running in {job_time:.2f} s on {used} nodes (fewest "
                  f"{math.ceil(args.job / (args.cards * 4))}); Job of {args.job} onto {BIG_NODE}: {one:.2f} s",
                  flush=True)
        cpu_before = _cpu(cluster)
        _created, plain_bound, plain_running = _burst(cluster, "plain", args.pods, dcu=False, creators=args.creators)
        print(f"\nplain: bound in {plain_bound:6.2f} s ({args.pods / plain_bound:6.1f} pods/s)\n"
              f"{_cpu_line('plain', cpu_before, _cpu(cluster), args.pods, plain_running)}")
    print(f"peer-realcluster: nodes={args.nodes} pods={args.pods} hami_pods_per_s={rates['hami']:.1f} "
          f"ours_pods_per_s={rates['ours']:.1f} plain_pods_per_s={args.pods / plain_bound:.1f} "
          f"ours_vs_hami={st.ratio(rates['ours'], rates['hami']):.2f}")


if __name__ == "__main__":
    main()
