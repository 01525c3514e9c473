"""Scheduler extender benchmark, the real process: `python bench/scheduler.py [--quick] [--only filter|job]`.

/filter: a local API server (its own process) holds N nodes x 8 cards and 8 running pods per
node (realistic objects, random shared shapes on random cards: every node's usage differs).
The real `hami-dcu scheduler` process (the chart's command line, log level info, GC on) lists
and watches it; then /filter requests go to it over HTTP, one at a time as kube-scheduler
sends them, naming all N nodes (nodeCacheCapable):
* warm: 16 pod shapes in rotation (shared vDCUs of many sizes, a whole card, two whole cards),
  after one request per shape;
* cold: every request a shape never seen before.
Each request is also sent to the baseline, a minimal aiohttp handler in its own process that
decodes the same ExtenderArgs and encodes a reply of the same size; figures are that
request's round trip, baseline and ratio side by side. Every filter leaves its assumption in
place, as a real one does until its bind. Also printed: the process's RSS once synced and at
the end, its peak, and how long it took to become ready.

job: the local cluster (API server, webhook, extender, scheduler loop with kube-scheduler's
bind concurrency, kubelet stand-in and device plugin over gRPC): 40 pods of one shape onto
one 10-card node, all created at once; time until every pod is Running, against the
baseline of 40 plain pods placed on that node directly (no scheduling, no DCU: what the
kubelet stand-in alone costs), and the extender's API calls per bind from its /metrics.
Then 10 pods one after the other (no contention): API calls per bind.

Targets: filter p50 <= 3x and p99 <= 5x the baseline; RSS <= 300 MB at 5,000
nodes; the 40-pod Job Running in <= 5 s; binds <= 2 API calls uncontended, <= 2.5 contended.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).parent))

from benchlib import (
    free_port,
    memory_mib,
    percentile,
    python_process,
    ratio_line,
    stop,
    wait_for_http,
)
from clusterdata import SHAPES, Shape, new_pod, node_name

HERE = Path(__file__).parent

SCHEDULER = """
import sys
from hami_dcu.cli.main import main
sys.exit(main(["scheduler", "--kubeconfig", sys.argv[1], "--bind", "127.0.0.1:" + sys.argv[2],
               "--log-level", "info"]))
"""

# The physical limit of one /filter: aiohttp receives the body, json decodes the ExtenderArgs,
# and encodes a reply as large as the extender's (X-Failed: how many FailedNodes it had).
BASELINE = """
import json, sys
from aiohttp import web

REASON = "insufficient card memory: container main needs 1 card x (2000 MiB, 10 percent of cores)"

async def handle(request):
    args = json.loads(await request.read())
    names = args["NodeNames"]
    failed = int(request.headers.get("X-Failed", "0"))
    reply = {"Nodes": None, "NodeNames": names[:1], "FailedNodes": {n: REASON for n in names[1:1 + failed]},
             "FailedAndUnresolvableNodes": {}, "Error": ""}
    return web.Response(body=json.dumps(reply, separators=(",", ":")), content_type="application/json")

async def ok(_request):
    return web.Response(text="ok")

app = web.Application(client_max_size=256 * 1024 * 1024)
app.router.add_post("/filter", handle)
app.router.add_get("/healthz", ok)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


def cold_shape(i: int) -> Shape:
    """A shape no earlier request had: a memory size nobody asks for twice."""
    return Shape(1, 1001 + 7 * i, 1 + i % 40)


async def _post(session: aiohttp.ClientSession, url: str, body: bytes, failed: int | None = None
                ) -> tuple[float, dict]:
    headers = {"Content-Type": "application/json"}
    if failed is not None:
        headers["X-Failed"] = str(failed)
    started = time.perf_counter()
    async with session.post(url, data=body, headers=headers) as response:
        answer = await response.json()
    return (time.perf_counter() - started) * 1000, answer


async def _measure(session: aiohttp.ClientSession, ours: str, base: str, names: list[str], pods: list[dict]
                   ) -> tuple[list[float], list[float], list[int]]:
    mine, theirs, failed = [], [], []
    for pod in pods:
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
        elapsed, answer = await _post(session, ours, body)
        if answer.get("Error") or not answer.get("NodeNames"):
            raise RuntimeError(f"filter failed: {str(answer)[:300]}")
        mine.append(elapsed)
        failed.append(len(answer.get("FailedNodes") or {}))
        theirs.append((await _post(session, base, body, failed[-1]))[0])
    return mine, theirs, failed


async def bench_filter(nodes: int, warm: int, cold: int, work: Path) -> None:
    kubeconfig = work / f"kubeconfig-{nodes}"
    api = subprocess.Popen([sys.executable, str(HERE / "preloaded_apiserver.py"), str(kubeconfig),
                            "--nodes", str(nodes)])
    scheduler = baseline = None
    try:
        loaded = time.monotonic()
        while not kubeconfig.exists():
            if api.poll() is not None or time.monotonic() - loaded > 900:
                raise RuntimeError("the preloaded API server did not start")
            await asyncio.sleep(0.2)
        port, base_port = free_port(), free_port()
        with open(work / f"scheduler-{nodes}.log", "wb") as log:  # info level, as the chart runs it
            scheduler = subprocess.Popen([sys.executable, "-c", SCHEDULER, str(kubeconfig), str(port)],
                                         stderr=log, stdout=log)
        ready = await asyncio.to_thread(wait_for_http, f"http://127.0.0.1:{port}/readyz", 900.0, scheduler)
        synced_rss, _ = memory_mib(scheduler.pid)
        baseline = python_process(BASELINE, str(base_port))
        await asyncio.to_thread(wait_for_http, f"http://127.0.0.1:{base_port}/healthz", 60.0, baseline)
        ours, base = f"http://127.0.0.1:{port}/filter", f"http://127.0.0.1:{base_port}/filter"
        names = [node_name(i) for i in range(nodes)]
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            # One request per shape first: what is measured as warm has been seen once.
            await _measure(session, ours, base, names, [new_pod(i, s, "prime") for i, s in enumerate(SHAPES)])
            warm_pods = [new_pod(i, SHAPES[i % len(SHAPES)], "warm") for i in range(warm)]
            w_ours, w_base, w_failed = await _measure(session, ours, base, names, warm_pods)
            c_ours, c_base, _ = await _measure(session, ours, base, names,
                                               [new_pod(i, cold_shape(i), "cold") for i in range(cold)])
        rss, peak = memory_mib(scheduler.pid)
    finally:
        for proc in (baseline, scheduler, api):
            stop(proc)
    print(f"\n/filter, {nodes} nodes x 8 cards, {nodes * 8} running pods; the real process became ready "
          f"(list + sync) in {ready:.1f} s")
    print(f"  warm: {len(w_ours)} requests, 16 shapes in rotation (FailedNodes per reply: median "
          f"{percentile(w_failed, 50):.0f}, max {max(w_failed)})")
    print(ratio_line("warm p50", percentile(w_ours, 50), percentile(w_base, 50), target=3))
    print(ratio_line("warm p99", percentile(w_ours, 99), percentile(w_base, 99), target=5))
    print(f"  cold: {len(c_ours)} requests, each a shape never seen before")
    print(ratio_line("cold p50", percentile(c_ours, 50), percentile(c_base, 50), target=3))
    print(ratio_line("cold p99", percentile(c_ours, 99), percentile(c_base, 99), target=5))
    print(f"  max round trip: ours {max(w_ours + c_ours):.1f} ms, baseline {max(w_base + c_base):.1f} ms")
    verdict = "met" if peak <= 300 else "MISSED"
    print(f"  scheduler process RSS: {synced_rss:.0f} MiB once synced, {rss:.0f} MiB at the end, peak {peak:.0f} MiB "
          f"(target <= 300 MB at 5,000 nodes: {verdict if nodes <= 5000 else 'n/a'})")


def bench_job(pods: int, sequential: int) -> None:
    from hami_dcu.cli.localcluster.cluster import LocalCluster
    from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
    from hami_dcu.common.protocol import keys

    def running(kube, ns: str, label: str) -> int:
        items = kube.list_pods(namespace=ns, label_selector=f"bench={label}").items
        return sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running")

    def burst(cluster: LocalCluster, label: str, count: int, dcu: bool) -> float:
        kube, ns = cluster.kube, cluster.namespace
        started = time.monotonic()
        for i in range(count):
            manifest = pod_manifest(f"{label}-{i:03d}", [Ctr("c", 1, 2000, 10)] if dcu else [Ctr("c")])
            manifest["metadata"]["labels"] = {"bench": label}
            if not dcu:
                manifest["spec"]["nodeName"] = "node0"
            kube.create_pod(ns, manifest)
        while running(kube, ns, label) < count:
            if time.monotonic() - started > 300:
                raise RuntimeError(f"{label}: not all {count} pods Running after 300 s")
            time.sleep(0.02)
        return time.monotonic() - started

    def bind_calls(cluster: LocalCluster) -> tuple[float, float]:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.scheduler_port}/metrics") as answer:
            text = answer.read().decode()
        values = {}
        for line in text.splitlines():
            for suffix in ("_sum", "_count"):
                if line.startswith("hami_dcu_scheduler_bind_api_calls" + suffix + " "):
                    values[suffix] = float(line.split()[1])
        return values.get("_sum", 0.0), values.get("_count", 0.0)

    with LocalCluster({"node0": default_cards("node0", 10)}, register_interval=1.0,
                      naming=keys.DCU_NAMING) as cluster:
        baseline = burst(cluster, "plain", pods, dcu=False)  # they stay: they hold no DCU
        before = bind_calls(cluster)
        job = burst(cluster, "job", pods, dcu=True)
        after = bind_calls(cluster)
        contended = (after[0] - before[0]) / max(1.0, after[1] - before[1])
        bound = cluster.kube.list_pods(namespace=cluster.namespace, label_selector="bench=job").items
        assert all(p["metadata"]["annotations"].get(keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS for p in bound)
        for pod in bound:  # the node is full: make room for the lone pods
            cluster.kube.delete_pod(cluster.namespace, pod["metadata"]["name"])
        while cluster.kube.list_pods(namespace=cluster.namespace, label_selector="bench=job").items:
            time.sleep(0.1)
        single = []
        for i in range(sequential):
            before = bind_calls(cluster)
            single.append(burst(cluster, f"one{i}", 1, dcu=True) * 1000)
            after = bind_calls(cluster)
            single_calls = after[0] - before[0]
    print(f"\nJob of {pods} pods (1 card, 2000 MiB, 10 percent) onto one 10-card node, local cluster")
    print(ratio_line("all Running", job, baseline, unit="s"), f"(target <= 5 s: {'met' if job <= 5 else 'MISSED'})")
    print(f"  API calls per bind: {contended:.2f} on average under contention (target <= 2.5); "
          f"{single_calls:.0f} for a lone pod (target <= 2); a lone pod Running in {percentile(single, 50):.0f} ms "
          f"(median of {sequential})")


async def main(args: argparse.Namespace) -> int:
    quick = args.quick
    if args.only in (None, "filter"):
        with tempfile.TemporaryDirectory(prefix="bench-sched-") as tmp:
            for nodes in args.nodes or ((1000,) if quick else (5000, 10000)):
                await bench_filter(nodes, 100 if quick else (400 if nodes <= 5000 else 200),
                                   20 if quick else (60 if nodes <= 5000 else 30), Path(tmp))
    if args.only in (None, "job"):
        await asyncio.to_thread(bench_job, 40, 5 if quick else 10)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 nodes, fewer requests")
    parser.add_argument("--only", choices=("filter", "job"))
    parser.add_argument("--nodes", type=int, action="append", help="cluster size for /filter (repeatable; "
                        "default 5,000 and 10,000)")
    sys.exit(asyncio.run(main(parser.parse_args())))
