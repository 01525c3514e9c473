"""Scheduling at scale through the real kube-scheduler and our extender, on kwok's fake nodes
(e2e/realcluster/kwokscale.py: the real control plane, the chart installed with helm, kwok,
and the node-side simulator running the device plugin's own Allocate per pod).

    python bench/scale.py --nodes 1000 --pods 2000
    python bench/scale.py --nodes 20,1000,5000 --pods 100,2000,10000
    python bench/scale.py --mode dra --nodes 1000 --pods 2000     # the chart in DRA mode
    python bench/scale.py --mode both --nodes 1000 --pods 2000    # device-plugin mode, then DRA
    python bench/scale.py --peer hami --nodes 1000 --pods 2000    # HAMi v2.10, ours, plain (bench/peerrace.py)
    python bench/scale.py --contend --nodes 1000 --pods 2000      # the bursts again beside a CPU hog of one core

For each node count (ascending, on one cluster that grows), a burst of `--pods` pods in the mix
of e2e/realcluster/scalemix.py (shares, whole cards, two and four cards, per-pod policies) is
created by 8 threads as fast as the API takes them, twice: first their plain twins (no DCU
limits: the default kube-scheduler, the same binary without the extender), then the DCU pods
(webhook, hami-scheduler's kube-scheduler, /filter and /bind, node lock, the simulated
Allocate). Printed per node count, each DCU figure beside the baseline's from the same run:

* pods/s bound (first create sent to last pod bound) and the ratio plain / DCU;
* create-to-bound p50 / p99, bound-to-Running (DCU: until the Allocate released the lock);
* CPU per pod of every process of ours (their /proc: the extender's per scheduled pod, the
  control plane's, kwok's, the simulated node side's), and the extender's RSS;
* API requests per pod by verb and resource (kube-apiserver's apiserver_request_total) and
  watch events it sent, the time it waited for our webhook;
* where a DCU pod's time goes: /filter and /bind calls per pod and their mean, lock waits
  (the extender's own metrics), binds that failed and went back to kube-scheduler's queue
  (FailedScheduling events), the node side (waiting for the node's turn, bound to allocated).

In DRA mode (`--mode dra`; `both` runs device-plugin mode first, then DRA on a new cluster)
the chart is installed with `mode: dra`: the webhook rewrites the same DCU pods into claims,
hami-scheduler's kube-scheduler allocates them (its DynamicResources plugin) and binds, our
extender serves /prioritize only (binpack); the fake nodes' ResourceSlices are published and
their pods' claims prepared by the DRA driver's own code (e2e/realcluster/drasim.py). Its block
says where a DRA pod's time goes instead: /prioritize calls per pod, bound-to-prepared on the
node side, the claims' API traffic, kube-scheduler's CPU per pod. A third burst measures the DRA
floor (e2e/realcluster/drafloor.py): the same number of plain twins, each with one claim for
one whole device of a trivial DeviceClass (selecting on its driver only), published in a trivial
ResourceSlice per node with as many devices as cards and nothing else, placed by the default
kube-scheduler (the same binary). That is what any DRA driver's pods cost; ours are judged
against it, by rate and by kube-scheduler's CPU per pod.

`--contend` (device-plugin mode) runs the same two bursts a second time at each node count with
a CPU hog of one core beside them (one busy-loop process at normal priority, started before the
plain burst and stopped after the DCU burst, both by the bench), and prints both ratios, the
contended one over the uncontended one, and the binds that failed (BindingFailed events) in each:
the DCU path must slow in proportion to the machine, not fall off a cliff (issue 40). Its line
`scale-contend: nodes=N pods=M dcu_pods_per_s=X plain_pods_per_s=Y ratio=Z uncontended_ratio=U
slowdown=Z/U binding_failed=B uncontended_binding_failed=C` comes just before the `scale:` line.

Counters are read before and after each burst, and given net of the background measured over
20 s without pods (kwok's Leases, the plugins' 30 s reports, controllers): a slow burst would
otherwise be charged more of it per pod than a fast one. The last line is
`scale: nodes=N pods=M dcu_pods_per_s=X plain_pods_per_s=Y ratio=Z` for the largest
device-plugin run; a DRA run adds, before it, `scale-dra-floor: nodes=N pods=M dra_pods_per_s=X
floor_pods_per_s=Y ratio=Z` and `scale-dra: ...` (the fields of `scale`).
Needs what the real-cluster suite needs (root, Go and the module proxy for the first build of
the control plane and kwok).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from benchlib import cpu_seconds, machine_cpu_seconds, memory_mib

# The test harness (e2e/) is not installed: it imports from the checkout this script is in.
sys.path.append(str(Path(__file__).resolve().parent.parent))

from e2e.realcluster import hami, scalemix
from e2e.realcluster import scalestats as st
from e2e.realcluster.cluster import unavailable
from e2e.realcluster.kwokscale import CARDS_PER_NODE, DEVICE_PLUGIN, DRA, NAMESPACE, KwokScale
from e2e.realcluster.nodesim import REPORT_LIMIT_SECONDS
from hami_dcu.common.io.kube import UnreachableError

EXT = "hami_dcu_scheduler_"
SIM = "hami_dcu_nodesim_"
DRASIM = "hami_dcu_drasim_"
BACKGROUND_SECONDS = 20.0
Last = tuple[int, int, float, float]  # (nodes, pods, DCU or DRA pods/s, plain or floor pods/s)
CHART_VALUES = Path(__file__).resolve().parent.parent / "chart" / "values.yaml"
MEMORY_UNITS = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}


def extender_memory_limit_mib(values: dict | None = None) -> float:
    """The extender container's memory limit in MiB: scheduler.extenderResources.limits.memory
    of the chart's values, as `values` (the run's --values) override them."""
    chart = yaml.safe_load(CHART_VALUES.read_text())
    limit = str(chart["scheduler"]["extenderResources"]["limits"]["memory"])
    override = (((values or {}).get("scheduler") or {}).get("extenderResources") or {}).get("limits") or {}
    limit = str(override.get("memory", limit))
    for suffix, mib in MEMORY_UNITS.items():
        if limit.endswith(suffix):
            return float(limit[: -len(suffix)]) * mib
    return float(limit) / (1024 * 1024)  # plain bytes


def memory_verdict(peak: float, limit: float) -> str:
    """The extender's peak RSS against its chart limit; issue 40 asks at most half of it."""
    verdict = "within half of it" if peak <= limit / 2 else "OVER HALF OF IT"
    return f"{100 * peak / limit:.0f}% of the chart's limit {limit:.0f} MiB, {verdict}"


class CpuHog:
    """One core kept busy beside a burst: a busy-loop process at normal priority (not niced),
    as a neighbour's build or test run would be, started and stopped by the bench."""

    def __init__(self) -> None:
        self.popen: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.seconds = 0.0
        self.cpu = 0.0

    def __enter__(self) -> CpuHog:
        self.popen = subprocess.Popen([sys.executable, "-c", "while True:\n    pass"])
        self.started = time.monotonic()
        print(f"  CPU hog started (pid {self.popen.pid}, a busy loop of one core at normal priority; load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})", flush=True)
        return self

    def __exit__(self, *_exc: object) -> None:
        assert self.popen is not None
        try:
            self.cpu = cpu_seconds(self.popen.pid)
        except OSError:
            pass
        self.seconds = time.monotonic() - self.started
        self.popen.kill()
        self.popen.wait()
        print(f"  CPU hog stopped: it ran {self.seconds:.0f} s and used {self.cpu:.0f} s of CPU "
              f"({self.cpu / max(self.seconds, 1e-9):.2f} cores)", flush=True)


@dataclass
class Contended:
    """One node count's bursts with and without the CPU hog, side by side."""

    nodes: int
    pods: int
    dcu: float  # pods/s with the hog
    plain: float
    quiet_dcu: float  # pods/s without it
    quiet_plain: float
    failed: float  # BindingFailed events of the DCU burst with the hog
    quiet_failed: float

    def line(self) -> str:
        ratio, quiet = st.ratio(self.plain, self.dcu), st.ratio(self.quiet_plain, self.quiet_dcu)
        return (f"scale-contend: nodes={self.nodes} pods={self.pods} dcu_pods_per_s={self.dcu:.1f} "
                f"plain_pods_per_s={self.plain:.1f} ratio={ratio:.2f} uncontended_ratio={quiet:.2f} "
                f"slowdown={st.ratio(ratio, quiet):.2f} binding_failed={self.failed:.0f} "
                f"uncontended_binding_failed={self.quiet_failed:.0f}")


@dataclass
class Scrape:
    apiserver: str = ""
    extender: str = ""
    nodesim: str = ""
    cpu: float = 0.0  # the extender's
    at: float = 0.0  # monotonic time the CPU figures were read
    cpus: dict[str, float] = field(default_factory=dict)  # every process of the cluster's, and this one's
    machine: float = 0.0  # CPU seconds every process on the machine has used (/proc/stat)


def process_cpus(scale: KwokScale) -> dict[str, float]:
    found = {}
    for name, pid in scale.pids().items():
        try:
            found[name] = cpu_seconds(pid)
        except OSError:
            pass
    times = os.times()
    found["harness"] = times.user + times.system  # pod creation, watches, this script
    return found


@dataclass
class Measured:
    burst: st.Burst
    before: Scrape
    after: Scrape
    events: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    background: Measured | None = None  # the same figures over a quiet spell, to subtract
    deleted_in: float = 0.0  # seconds to delete the burst's pods afterwards (harness time)

    @property
    def span(self) -> float:
        return self.after.at - self.before.at


def scrape(scale: KwokScale, pid: int, cpu_first: bool) -> Scrape:
    """Metrics of the apiserver, the extender and the simulator. The extender's CPU is read on
    the side of the scrape that keeps the scrape's own cost out of the burst's figure."""
    found = Scrape()
    if cpu_first:
        found.cpu, found.at = cpu_seconds(pid), time.monotonic()
        found.cpus, found.machine = process_cpus(scale), machine_cpu_seconds()
    found.apiserver = scale.apiserver_metrics()
    found.extender = scale.extender_metrics()
    found.nodesim = scale.nodesim_metrics()
    if not cpu_first:
        found.cpu, found.at = cpu_seconds(pid), time.monotonic()
        found.cpus, found.machine = process_cpus(scale), machine_cpu_seconds()
    return found


def events_by_reason(scale: KwokScale, run: str) -> dict[str, float]:
    """Events of the burst's pods, by reason (deduplicated events carry their count)."""
    counts: dict[str, float] = {}
    prefix = f"{run}-"
    path = f"/api/v1/namespaces/{NAMESPACE}/events"
    for attempt in range(3):  # a machine busy with other runs answers a list slowly (10 s was once too short)
        try:
            events = scale.kube.request("GET", path, timeout=60).get("items") or []
            break
        except UnreachableError:
            if attempt == 2:
                raise
    for event in events:
        if not ((event.get("involvedObject") or {}).get("name") or "").startswith(prefix):
            continue
        reason = event.get("reason") or "?"
        counts[reason] = counts.get(reason, 0) + float(event.get("count") or 1)
    return counts


def measure(scale: KwokScale, run: str, shapes: list[scalemix.Shape], dcu: bool, background: Measured,
            floor: bool = False) -> Measured:
    pid = scale.extender_pid()
    before = scrape(scale, pid, cpu_first=False)
    started = time.monotonic()
    # The floor's pods are judged bound: no driver prepares their claims for kwok to wait on.
    burst = scale.burst(run, shapes, dcu=dcu, floor=floor, until_running=not floor)
    seconds = time.monotonic() - started
    after = scrape(scale, pid, cpu_first=True)
    measured = Measured(burst, before, after, events_by_reason(scale, run), seconds, background)
    measured.deleted_in = scale.delete_run(run)
    print(f"  {run}: {burst.pods} pods deleted in {measured.deleted_in:.0f} s", flush=True)
    return measured


def measure_background(scale: KwokScale, seconds: float) -> Measured:
    """The same figures over a spell without pods: kwok's Leases, the plugins' reports, the
    controllers' resyncs; each burst's figures are given net of them."""
    pid = scale.extender_pid()
    before = scrape(scale, pid, cpu_first=False)
    time.sleep(seconds)
    after = scrape(scale, pid, cpu_first=True)
    return Measured(st.Burst(pods=0), before, after, seconds=seconds)


def gained(m: Measured, source: str, family: str, by: tuple[str, ...] = (), suffix: str = "",
           net: bool = False) -> dict:
    """What the counters gained over the burst; `net`: beyond the background's rate."""
    found = st.deltas(st.samples(getattr(m.before, source), family, by, suffix),
                      st.samples(getattr(m.after, source), family, by, suffix))
    if net and m.background is not None:
        found = st.net_of_background(found, gained(m.background, source, family, by, suffix), m.background.span,
                                     m.span)
    return found


def cpu_spent(m: Measured) -> dict[str, float]:
    """CPU seconds per process over the burst, net of the background's rate."""
    spent = {(k,): v - m.before.cpus.get(k, v) for k, v in m.after.cpus.items()}
    if m.background is not None:
        bg = m.background
        spent = st.net_of_background(spent, {(k,): v - bg.before.cpus.get(k, v) for k, v in bg.after.cpus.items()},
                                     bg.span, m.span)
    return {k[0]: v for k, v in spent.items()}


def total(m: Measured, source: str, family: str, suffix: str = "", by: tuple[str, ...] = (),
          match: tuple[str, ...] | None = None) -> float:
    return sum(v for k, v in gained(m, source, family, by, suffix).items() if match is None or k == match)


def mean_ms(m: Measured, source: str, family: str, by: tuple[str, ...] = (), match: tuple[str, ...] | None = None
            ) -> float:
    count = total(m, source, family, "_count", by, match)
    return 1000 * total(m, source, family, "_sum", by, match) / count if count else 0.0


def requests_line(m: Measured) -> str:
    """All requests per pod (net of the background), then the largest by verb and resource."""
    requests = gained(m, "apiserver", "apiserver_request_total", ("verb", "resource", "subresource"), net=True)
    per = st.per_pod(requests, m.burst.pods, top=7)
    total = sum(requests.values()) / m.burst.pods if m.burst.pods else 0.0
    return f"total {total:.2f}: " + ", ".join(f"{verb} {resource}{'/' + sub if sub else ''} {value:.2f}"
                                              for (verb, resource, sub), value in per)


def report(nodes: int, plain: Measured, dcu: Measured, pid: int, mode: str = DEVICE_PLUGIN,
           memory_limit: float = 1024.0, note: str = "") -> tuple[float, float]:
    p, d = plain.burst, dcu.burst
    plain_rate, dcu_rate = p.pods_per_second(), d.pods_per_second()
    fewest = scalemix.fewest_nodes(scalemix.shapes(d.pods), CARDS_PER_NODE)
    title = "DRA mode: " if mode == DRA else ""
    print(f"\n{title}nodes={nodes} (x {CARDS_PER_NODE} mock cards) pods={d.pods}{note}   load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    dcu_label = "DRA (claims + /prioritize)" if mode == DRA else "DCU (hami-scheduler + extender)"
    for label, m, rate in (("plain (default kube-scheduler)", plain, plain_rate),
                           (dcu_label, dcu, dcu_rate)):
        b = m.burst
        lat = b.create_to_bound()
        run = b.bound_to_running()
        print(f"  {label:32} {len(b.bound):6d} bound {rate:7.1f} pods/s   create-to-bound p50 "
              f"{1000 * st.quantile(lat, .5):7.0f} ms p99 {1000 * st.quantile(lat, .99):7.0f} ms   bound-to-Running "
              f"p50 {1000 * st.quantile(run, .5):6.0f} ms p99 {1000 * st.quantile(run, .99):6.0f} ms   "
              f"on {st.nodes_used(b.nodes.values())} nodes")
        if b.refused or b.failed:
            print(f"    refused at create: {len(b.refused)}, Failed: {len(b.failed)} "
                  f"(e.g. {next(iter({**b.refused, **b.failed}.values()))})")
    print(f"  ratio plain/DCU: {st.ratio(plain_rate, dcu_rate):.2f}x   (DCU packing: {st.nodes_used(d.nodes.values())} "
          f"nodes, no fewer than {fewest} could hold the burst)")
    cpu = cpu_spent(dcu).get("extender", 0.0)
    rss, peak = memory_mib(pid)
    print(f"  extender: {1000 * cpu / max(1, len(d.bound)):.2f} ms CPU per scheduled DCU pod "
          f"({cpu:.1f} s over {dcu.seconds:.0f} s, net of its background), RSS {rss:.0f} MiB (peak {peak:.0f} MiB: "
          f"{memory_verdict(peak, memory_limit)}); "
          f"during the plain burst {cpu_spent(plain).get('extender', 0.0):.1f} s")
    pods = max(1, len(d.bound))
    scheduler = cpu_spent(dcu).get("hami-kube-scheduler", 0.0)
    default = cpu_spent(plain).get("kube-scheduler", 0.0)
    print(f"  kube-scheduler: hami-scheduler's {1000 * scheduler / pods:.2f} ms CPU per DCU pod; the default one's "
          f"{1000 * default / max(1, len(p.bound)):.2f} ms per plain pod")
    if mode == DRA:
        report_dra_path(dcu, pods)
    else:
        report_device_plugin_path(dcu, pods)
    report_costs(plain, dcu)
    return dcu_rate, plain_rate


def report_floor(dra: Measured, floor: Measured) -> float:
    """The DRA floor beside our DRA pods; the floor's pods/s."""
    f, d = floor.burst, dra.burst
    rate, lat = f.pods_per_second(), f.create_to_bound()
    print(f"  {'DRA floor (trivial claims)':32} {len(f.bound):6d} bound {rate:7.1f} pods/s   create-to-bound p50 "
          f"{1000 * st.quantile(lat, .5):7.0f} ms p99 {1000 * st.quantile(lat, .99):7.0f} ms   "
          f"on {st.nodes_used(f.nodes.values())} nodes")
    if f.refused or f.failed:
        print(f"    refused at create: {len(f.refused)}, Failed: {len(f.failed)} "
              f"(e.g. {next(iter({**f.refused, **f.failed}.values()))})")
    ours = cpu_spent(dra).get("hami-kube-scheduler", 0.0) / max(1, len(d.bound))
    trivial = cpu_spent(floor).get("kube-scheduler", 0.0) / max(1, len(f.bound))
    print(f"  ratio floor/DRA: {st.ratio(rate, d.pods_per_second()):.2f}x   kube-scheduler CPU per pod: ours "
          f"{1000 * ours:.2f} ms, the trivial claim's {1000 * trivial:.2f} ms ({st.ratio(ours, trivial):.2f}x)")
    print(f"  floor API requests per pod: {requests_line(floor)}")
    return rate


def report_dra_path(dcu: Measured, pods: int) -> None:
    """Where a DRA pod's time goes: /prioritize, the node side's Prepare, the claims' traffic."""
    calls = total(dcu, "extender", EXT + "prioritize_seconds", "_count")
    reviews = total(dcu, "extender", "hami_dcu_webhook_review_seconds", "_count")
    print(f"  per DRA pod: /prioritize {calls / pods:.2f} calls (mean "
          f"{mean_ms(dcu, 'extender', EXT + 'prioritize_seconds'):.1f} ms), admission reviews {reviews / pods:.2f} "
          f"(the pod's and its claim's; mean {mean_ms(dcu, 'extender', 'hami_dcu_webhook_review_seconds'):.1f} ms "
          f"in our handler, its template read included)")
    prepared = total(dcu, "nodesim", DRASIM + "pods", "_total", ("result",), ("prepared",))
    failed = total(dcu, "nodesim", DRASIM + "pods", "_total", ("result",), ("failed",))
    print(f"  node side: bound to prepared {mean_ms(dcu, 'nodesim', DRASIM + 'bound_to_prepared_seconds'):.0f} ms "
          f"(mean; kwok runs a pod without waiting for it), the kubelet's reads and the driver's Prepare "
          f"{mean_ms(dcu, 'nodesim', DRASIM + 'prepare_seconds'):.0f} ms per pod; {prepared:.0f} pods prepared, "
          f"{failed:.0f} failed, {total(dcu, 'nodesim', DRASIM + 'retries', '_total'):.0f} retries (claim not ready)")


def report_device_plugin_path(dcu: Measured, pods: int) -> None:
    """Where a device-plugin DCU pod's time goes: /filter, /bind, the node lock, Allocate."""
    filters = total(dcu, "extender", EXT + "filter_seconds", "_count")
    binds_ok = total(dcu, "extender", EXT + "bind_seconds", "_count", ("result",), ("ok",))
    binds_err = total(dcu, "extender", EXT + "bind_seconds", "_count", ("result",), ("error",))
    waits = total(dcu, "extender", EXT + "node_lock_wait_seconds", "_count")
    filter_ms = mean_ms(dcu, "extender", EXT + "filter_seconds")
    print(f"  per DCU pod: /filter {filters / pods:.2f} calls (mean {filter_ms:.1f} ms), "
          f"/bind {binds_ok / pods:.2f} ok + {binds_err / pods:.2f} failed (mean ok "
          f"{mean_ms(dcu, 'extender', EXT + 'bind_seconds', ('result',), ('ok',)):.0f} ms), API calls per bind "
          f"{total(dcu, 'extender', EXT + 'bind_api_calls', '_sum') / max(1, binds_ok):.2f}")
    print(f"  lock: waits {waits / pods:.2f} per pod, mean wait "
          f"{mean_ms(dcu, 'extender', EXT + 'node_lock_wait_seconds'):.0f} ms, contended "
          f"{total(dcu, 'extender', EXT + 'node_lock_contention', '_total'):.0f}, taken over "
          f"{total(dcu, 'extender', EXT + 'node_lock_takeovers', '_total'):.0f}, duplicate binds "
          f"{total(dcu, 'extender', EXT + 'duplicate_binds', '_total'):.0f}")
    print(f"  node side: waiting for the node's turn {mean_ms(dcu, 'nodesim', SIM + 'queued_seconds'):.0f} ms, "
          f"bound to allocated (lock released) {mean_ms(dcu, 'nodesim', SIM + 'bound_to_allocated_seconds'):.0f} ms, "
          f"Allocate {mean_ms(dcu, 'nodesim', 'hami_dcu_plugin_allocate_seconds'):.0f} ms (mean)")
    cache = {outcome: total(dcu, "nodesim", "hami_dcu_plugin_cache_reads", "_total", ("outcome",), (outcome,))
             for outcome in ("served", "fell-back", "stale")}
    print(f"  the plugins' watch-fed cache, per pod (advice and Allocate each ask it): served "
          f"{cache['served'] / pods:.2f}, fell back to reading {cache['fell-back'] / pods:.2f}, stale (caught by "
          f"the conditioned write) {cache['stale'] / pods:.2f}")
    print(f"  {reports_line(dcu)}")


def report_costs(plain: Measured, dcu: Measured) -> None:
    """CPU per pod of every process, kube-apiserver's side, events and API requests per pod."""
    for label, m in (("DCU", dcu), ("plain", plain)):
        spent = cpu_spent(m)
        ours = sum(spent.values())
        shown = ", ".join(f"{k} {1000 * v / m.burst.pods:.1f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
                          if v > 0.005 * ours)
        raw = sum(v - m.before.cpus.get(k, v) for k, v in m.after.cpus.items())
        others = (m.after.machine - m.before.machine) - raw
        cores = others / max(m.span, 1e-9)
        print(f"  CPU ms per pod (net), {label + ':':6} {shown}; all of ours {1000 * ours / m.burst.pods:.1f}, other "
              f"processes on the machine {1000 * others / m.burst.pods:.1f} ({cores:.2f} cores)")
    for label, m in (("DCU", dcu), ("plain", plain)):
        n = m.burst.pods
        watch = gained(m, "apiserver", "apiserver_watch_events_total", ("resource",), net=True)
        shown = ", ".join(f"{res} {v / n:.1f}" for (res,), v in sorted(watch.items(), key=lambda kv: -kv[1])[:4])
        webhook = 1000 * total(m, "apiserver", "apiserver_admission_webhook_admission_duration_seconds", "_sum") / n
        requests = 1000 * total(m, "apiserver", "apiserver_request_duration_seconds", "_sum") / n
        print(f"  kube-apiserver per pod, {label + ':':6} waiting for our webhook {webhook:.1f} ms, all requests' "
              f"time {requests:.0f} ms; watch events sent: {shown}")
    print(f"  events: DCU {_events(dcu.events)}; plain {_events(plain.events)}")
    print(f"  API requests per pod, DCU:   {requests_line(dcu)}")
    print(f"  API requests per pod, plain: {requests_line(plain)}", flush=True)


def reports_line(m: Measured) -> str:
    """Whether the simulated plugins kept their nodes alive: the simulator (one process or a few,
    simshards.py) writes every node's report here, and two reports of a node further apart than
    the extender's limit make that node look dead to /filter (device plugin not reporting),
    which is the harness, not the product. Late or skipped reports within the limit are not."""
    written = total(m, "nodesim", SIM + "report_delay_seconds", "_count")
    late = total(m, "nodesim", SIM + "registrations", "_total", ("result",), ("late",))
    gaps = total(m, "nodesim", SIM + "report_gap_seconds", "_count")
    within = total(m, "nodesim", SIM + "report_gap_seconds", "_bucket", ("le",), (f"{REPORT_LIMIT_SECONDS:.1f}",))
    over = gaps - within
    silent = st.samples(m.after.extender, "hami_dcu_nodes_not_reporting").get((), 0.0)
    warning = f"   HARNESS BEHIND: nodes looked dead ({over:.0f} gaps over the limit)" if over or silent else ""
    return (f"node reports (simulated plugins): {written:.0f} written, mean delay "
            f"{mean_ms(m, 'nodesim', SIM + 'report_delay_seconds'):.0f} ms, {late:.0f} skipped while the "
            f"previous one waited, {over:.0f} of {gaps:.0f} gaps between two reports of a node over the "
            f"extender's {REPORT_LIMIT_SECONDS} s; nodes not reporting at the end: {silent:.0f}{warning}")


def _events(counts: dict[str, float]) -> str:
    shown = {k: v for k, v in counts.items() if k not in ("Scheduled",)}
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(shown.items())) or "none but Scheduled"


def _counts(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1000", help="fake node counts, comma-separated (ascending)")
    parser.add_argument("--pods", default="", help="pods per burst, one value or one per node count "
                        "(default: twice the nodes)")
    parser.add_argument("--register-interval", type=float, default=30.0,
                        help="seconds between two reports of a fake node's plugin (the chart's default)")
    parser.add_argument("--values", help="a YAML file of chart values to install with (e.g. another node policy)")
    parser.add_argument("--workdir", help="keep the cluster's files (every component's log) here afterwards "
                        "(with --mode both, one folder per mode in it)")
    parser.add_argument("--mode", choices=(DEVICE_PLUGIN, DRA, "both"), default=DEVICE_PLUGIN,
                        help="the chart's mode; both: device-plugin mode, then DRA mode on a new cluster")
    parser.add_argument("--peer", choices=("hami",),
                        help="race a peer on one cluster: HAMi v2.10's scheduler, then ours, then plain pods "
                             "(bench/peerrace.py; one node count)")
    parser.add_argument("--hami-qps", type=int, default=1000,
                        help="--peer hami: HAMi's API client rate (--kube-qps; burst twice it); 0: HAMi's own "
                             "default (5/s), at which it cannot register 1,000 nodes in time")
    parser.add_argument("--contend", action="store_true",
                        help="device-plugin mode: run each node count's bursts again beside a CPU hog of one core "
                             "and print both ratios")
    parser.add_argument("--sim-shards", type=int, default=None,
                        help="processes of the node-side simulator (default: one per 1,500 fake nodes, at most "
                             "half the machine's cores)")
    args = parser.parse_args()
    if args.contend and (args.mode != DEVICE_PLUGIN or args.peer):
        raise SystemExit("--contend: device-plugin mode only, without --peer")
    if args.sim_shards is not None and args.sim_shards < 1:
        raise SystemExit("--sim-shards: at least 1")
    reason = unavailable() or (hami.why_unavailable() if args.peer else None)
    if reason:
        raise SystemExit(reason)
    nodes = sorted(_counts(args.nodes))
    pods = _counts(args.pods) or [2 * n for n in nodes]
    if len(pods) == 1:
        pods *= len(nodes)
    if len(pods) != len(nodes):
        raise SystemExit("--pods: one value, or one per node count")
    for n, m in zip(nodes, pods, strict=True):
        need = scalemix.fewest_nodes(scalemix.shapes(m), CARDS_PER_NODE)
        if need > n:
            raise SystemExit(f"{m} pods of the mix need at least {need} nodes x {CARDS_PER_NODE} cards, not {n}")
    logging.basicConfig(level=logging.WARNING)
    if args.peer:
        if len(nodes) != 1 or args.mode != DEVICE_PLUGIN or args.values:
            raise SystemExit("--peer hami: one node count, device-plugin mode, the chart's default values")
        signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
        from peerrace import race

        print(race(nodes[0], pods[0], args.register_interval, Path(args.workdir) if args.workdir else None,
                   args.hami_qps))
        return
    # A stopped bench tears its cluster down (the `with` below) instead of leaving a control
    # plane, kwok and the simulator running.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    started = time.monotonic()
    values = yaml.safe_load(Path(args.values).read_text()) if args.values else None
    modes = [DEVICE_PLUGIN, DRA] if args.mode == "both" else [args.mode]
    last: dict[str, tuple[Last, Last | None]] = {}
    contended: list[Contended] = []
    for mode in modes:
        workdir = Path(args.workdir) / mode if args.workdir and len(modes) > 1 else args.workdir
        last[mode] = run_mode(mode, nodes, pods, args.register_interval, values, Path(workdir) if workdir else None,
                              contended if args.contend else None, args.sim_shards)
    print(f"\nall done in {time.monotonic() - started:.0f} s")
    if DRA in last:
        dra, floor = last[DRA]
        if floor is not None:
            n, m, dra_rate, floor_rate = floor
            print(f"scale-dra-floor: nodes={n} pods={m} dra_pods_per_s={dra_rate:.1f} "
                  f"floor_pods_per_s={floor_rate:.1f} ratio={st.ratio(floor_rate, dra_rate):.2f}")
        print(st.final_line(*dra, label="scale-dra"))
    for found in contended:
        print(found.line())
    if DEVICE_PLUGIN in last:
        print(st.final_line(*last[DEVICE_PLUGIN][0]))


def run_mode(mode: str, nodes: list[int], pods: list[int], register_interval: float, values: dict | None,
             workdir: Path | None, contended: list[Contended] | None = None, sim_shards: int | None = None
             ) -> tuple[Last, Last | None]:
    """One cluster with the chart in `mode`, grown through the node counts, a plain and a DCU
    burst at each (and in DRA mode the floor's); (nodes, pods, DCU pods/s, plain pods/s) of the
    largest, and (nodes, pods, DRA pods/s, floor pods/s) in DRA mode. `contended`: run both
    bursts again beside a CPU hog and add each node count's comparison to it. `sim_shards`: the
    node-side simulator's process count (None: by the node count)."""
    started = time.monotonic()
    print(f"\n{'DRA mode: ' if mode == DRA else ''}starting the real control plane, the chart (mode {mode}) and "
          f"kwok (load average {os.getloadavg()[0]:.1f}) ...", flush=True)
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    last: Last = (0, 0, 0.0, 0.0)
    floor_last: Last | None = None
    memory_limit = extender_memory_limit_mib(values)
    with KwokScale(workdir, register_interval=register_interval, values=values, mode=mode,
                   sim_shards=sim_shards) as scale:
        print(f"  up in {time.monotonic() - started:.0f} s (Kubernetes {scale.cluster.kube_version})", flush=True)
        for n, m in zip(nodes, pods, strict=True):
            scale.grow(n)
            shapes = scalemix.shapes(m)
            background = measure_background(scale, BACKGROUND_SECONDS)
            plain = measure(scale, f"plain-{n}", shapes, dcu=False, background=background)
            dcu = measure(scale, f"dcu-{n}", shapes, dcu=True, background=background)
            dcu_rate, plain_rate = report(n, plain, dcu, scale.extender_pid(), mode, memory_limit)
            last = (n, m, dcu_rate, plain_rate)
            if contended is not None:
                with CpuHog():
                    hog_plain = measure(scale, f"plain-c{n}", shapes, dcu=False, background=background)
                    hog_dcu = measure(scale, f"dcu-c{n}", shapes, dcu=True, background=background)
                hog_rate, hog_plain_rate = report(n, hog_plain, hog_dcu, scale.extender_pid(), mode, memory_limit,
                                                  note=", beside a CPU hog of one core")
                found = Contended(n, m, hog_rate, hog_plain_rate, dcu_rate, plain_rate,
                                  hog_dcu.events.get("BindingFailed", 0.0), dcu.events.get("BindingFailed", 0.0))
                contended.append(found)
                print(f"  with the CPU hog against without: ratio {st.ratio(hog_plain_rate, hog_rate):.2f}x against "
                      f"{st.ratio(plain_rate, dcu_rate):.2f}x, BindingFailed {found.failed:.0f} against "
                      f"{found.quiet_failed:.0f}", flush=True)
            if mode == DRA:
                scale.publish_floor()
                floor = measure(scale, f"floor-{n}", shapes, dcu=False, background=background, floor=True)
                floor_last = (n, m, dcu_rate, report_floor(dcu, floor))
                rss, peak = memory_mib(scale.extender_pid())
                print(f"  extender after the floor burst: RSS {rss:.0f} MiB (peak of the whole run {peak:.0f} MiB: "
                      f"{memory_verdict(peak, memory_limit)})", flush=True)
    print(f"  {mode} done in {time.monotonic() - started:.0f} s", flush=True)
    return last, floor_last


if __name__ == "__main__":
    main()
