"""The race against HAMi v2.10 (`python bench/scale.py --peer hami --nodes 1000 --pods 2000`).

One kwok cluster (e2e/realcluster/kwokscale.py), one node simulator serving every Allocate with
hami-dcu's device plugin code, and three schedulers in turn over the same nodes:

1. HAMi's own chart (its scheduler process built from ../shared/peers, its webhook, its
   kube-scheduler profile and node lock), hami-dcu's chart with the node side only;
2. hami-dcu's chart in full (HAMi's uninstalled);
3. plain pods, the same shapes without DCU limits, through the cluster's default kube-scheduler.

Each gets the same burst (scalemix's mix: shares, whole cards, two and four cards, per-pod
binpack/spread; no numa policy, the dcu names, which HAMi v2.10 places) and the same Job of 40
shares (HAMi#1367: a Job's pods contending for the node lock). Printed per scheduler: pods/s,
create-to-bound p50/p99, binds that failed and went back to kube-scheduler's queue
(FailedScheduling events), the extender's CPU per pod and RSS, API requests per pod, nodes used,
anything never bound. The last line:

    peer: nodes=N pods=M hami_pods_per_s=X ours_pods_per_s=Y plain_pods_per_s=Z ours_vs_hami=Y/X
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib import memory_mib
from scale import BACKGROUND_SECONDS, Measured, cpu_spent, measure, measure_background, requests_line

from e2e.realcluster import scalemix
from e2e.realcluster import scalestats as st
from e2e.realcluster.kwokscale import CARDS_PER_NODE, KwokScale

JOB_PODS = 40
# HAMi's scheduler process takes the rate of its API client as flags (5 requests/s, burst 10,
# unless set; its chart sets neither). At that rate its registration loop (every 15 s, for each
# node and each of its vendors: a GET and a PATCH of the handshake) had registered 1 of 1,000
# fake nodes after 70 s here, so no burst could start: the race gives it a rate as unthrottled
# as hami-dcu's Python client (which has none). `--hami-qps 0` keeps HAMi's defaults.
HAMI_QPS = 1000
JOB_SHAPE = scalemix.Shape("job-share-2g-10", 1, 2000, 10)


@dataclass
class JobRun:
    seconds: float
    nodes: int
    fewest: int


@dataclass
class Lap:
    label: str
    measured: Measured
    job: JobRun | None
    rss: float = 0.0
    peak: float = 0.0


def run_job(scale: KwokScale, run: str) -> JobRun:
    started = time.monotonic()
    placed = scale.job(run, JOB_SHAPE, JOB_PODS, timeout=600)
    seconds = time.monotonic() - started
    scale.delete_job(run)
    fewest = scalemix.fewest_nodes([JOB_SHAPE] * JOB_PODS, CARDS_PER_NODE)
    return JobRun(seconds, st.nodes_used(placed.values()), fewest)


def lap(scale: KwokScale, label: str, run: str, shapes: list[scalemix.Shape], dcu: bool) -> Lap:
    background = measure_background(scale, BACKGROUND_SECONDS)
    measured = measure(scale, run, shapes, dcu=dcu, background=background)
    rss, peak = memory_mib(scale.extender_pid())
    job = run_job(scale, f"{run}-job") if dcu else None
    return Lap(label, measured, job, rss, peak)


def print_lap(item: Lap, extender: str) -> None:
    m, b = item.measured, item.measured.burst
    lat = b.create_to_bound()
    never = b.pods - len(b.bound)
    pods = max(1, len(b.bound))
    failed_binds = m.events.get("FailedScheduling", 0.0)
    print(f"  {item.label:28} {b.pods_per_second():7.1f} pods/s  create-to-bound p50 "
          f"{1000 * st.quantile(lat, .5):6.0f} ms p99 {1000 * st.quantile(lat, .99):6.0f} ms  "
          f"on {st.nodes_used(b.nodes.values())} nodes  never bound {never}")
    if extender:
        cpu = cpu_spent(m).get(extender, 0.0)
        scheduler = cpu_spent(m).get("hami-kube-scheduler", 0.0)
        print(f"    FailedScheduling events (binds, filters sent back to the queue) {failed_binds / pods:.2f} per pod;"
              f" extender {1000 * cpu / pods:.2f} ms CPU per pod, RSS {item.rss:.0f} MiB (peak {item.peak:.0f});"
              f" its kube-scheduler {1000 * scheduler / pods:.2f} ms per pod")
    print(f"    API requests per pod: {requests_line(m)}")
    if b.refused or b.failed:
        print(f"    refused at create {len(b.refused)}, Failed {len(b.failed)}: "
              f"{next(iter({**b.refused, **b.failed}.values()))}")
    if item.job is not None:
        j = item.job
        print(f"    Job of {JOB_PODS}: all bound in {j.seconds:.1f} s on {j.nodes} nodes (fewest {j.fewest})")


def race(nodes: int, pods: int, register_interval: float, workdir: Path | None, hami_qps: int = HAMI_QPS) -> str:
    """The three laps on one cluster; returns the `peer:` line."""
    started = time.monotonic()
    print(f"\nthe race: HAMi v2.10 against hami-dcu, {nodes} fake nodes, {pods} pods "
          f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    shapes = scalemix.shapes(pods)
    args = [f"--kube-qps={hami_qps}", f"--kube-burst={2 * hami_qps}"] if hami_qps else []
    with KwokScale(workdir, register_interval=register_interval, hami_peer=True, hami_args=args) as scale:
        print(f"  up in {time.monotonic() - started:.0f} s (Kubernetes {scale.cluster.kube_version}, HAMi's chart "
              f"({' '.join(args) or 'its default API rate'}) and hami-dcu's node side)", flush=True)
        scale.grow(nodes)
        hami_lap = lap(scale, "HAMi v2.10", f"hami-{nodes}", shapes, dcu=True)
        print("  HAMi uninstalled, hami-dcu's scheduler installed", flush=True)
        scale.use_our_scheduler()
        ours_lap = lap(scale, "hami-dcu", f"ours-{nodes}", shapes, dcu=True)
        plain_lap = lap(scale, "plain (default scheduler)", f"plain-{nodes}", shapes, dcu=False)
    print(f"\nnodes={nodes} (x {CARDS_PER_NODE} mock cards) pods={pods}   "
          f"fewest nodes for the burst {scalemix.fewest_nodes(shapes, CARDS_PER_NODE)}")
    print_lap(hami_lap, "vgpu-scheduler-extender")
    print_lap(ours_lap, "extender")
    print_lap(plain_lap, "")
    h, o, p = (x.measured.burst.pods_per_second() for x in (hami_lap, ours_lap, plain_lap))
    if hami_lap.job and ours_lap.job:
        print(f"  Job of {JOB_PODS}: hami-dcu {st.ratio(hami_lap.job.seconds, ours_lap.job.seconds):.1f}x faster "
              f"than HAMi")
    print(f"  done in {time.monotonic() - started:.0f} s")
    return (f"peer: nodes={nodes} pods={pods} hami_pods_per_s={h:.1f} ours_pods_per_s={o:.1f} "
            f"plain_pods_per_s={p:.1f} ours_vs_hami={st.ratio(o, h):.2f}")
