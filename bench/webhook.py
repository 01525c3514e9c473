"""Webhook CPU and latency against a minimal handler, same TLS, same load, same core.

    python bench/webhook.py [--rate 500] [--seconds 10] [--rounds 2]

Each round runs two servers one after the other, each in its own process pinned to CPU 0:
the real `hami-dcu webhook` (its command line, log level info as the chart runs it, logging
to a file as a container's stderr would), and the baseline, a minimal aiohttp handler with
the same TLS context that decodes the AdmissionReview and answers one with a fixed patch.
The load generator (aiohttp, keep-alive, a small pool) runs here on the other CPU and sends
the same review on a fixed schedule, so latency includes queueing when a server falls
behind. Per server: the CPU time it used during the measured load divided by the reviews
(from /proc), and p50/p99 latency; then ours against the baseline's.

Target (issue 23): p99 <= 1.3x the baseline's in a quiet run. CPU per review is shown, not a
target (issue 14's 1.5x was withdrawn when the envelope became a marshmallow schema again).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).parent))

from benchlib import cpu_seconds, free_port, percentile, ratio_line, stop, wait_for_http

from hami_dcu.webhook.certs import issue

REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "bench",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "default",
        "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                     "groups": ["system:serviceaccounts", "system:authenticated"]},
        "object": {
            "metadata": {"name": "bench", "namespace": "default", "labels": {"app": "bench"}},
            "spec": {"schedulerName": "default-scheduler", "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {
                    "hygon.com/dcunum": "1", "hygon.com/dcumem": "2k", "hygon.com/dcucores": "15", "cpu": "1"}}},
                {"name": "sidecar", "image": "busybox", "resources": {"limits": {"cpu": "100m"}}}]},
        },
    },
}

OURS = """
import os, sys
os.sched_setaffinity(0, {0})
from hami_dcu.cli.main import main
sys.exit(main(["webhook", "--bind", "127.0.0.1:" + sys.argv[1], "--tls-cert", sys.argv[2], "--tls-key", sys.argv[3],
               "--log-level", "info"]))
"""

# The physical limit of a review: TLS, HTTP, JSON in and out, nothing decided.
BASELINE = """
import base64, json, os, sys
os.sched_setaffinity(0, {0})
from aiohttp import web
from hami_dcu.common.io.tls import ReloadingTLS

PATCH = base64.b64encode(json.dumps([{"op": "replace", "path": "/spec/schedulerName",
                                      "value": "hami-scheduler"}]).encode()).decode()

async def handle(request):
    review = json.loads(await request.read())
    return web.json_response({"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": {
        "uid": review["request"]["uid"], "allowed": True, "patchType": "JSONPatch", "patch": PATCH}})

async def ok(_request):
    return web.Response(text="ok")

app = web.Application(client_max_size=1024 * 1024)
app.router.add_post("/webhook", handle)
app.router.add_get("/healthz", ok)
tls = ReloadingTLS(sys.argv[2], sys.argv[3])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), ssl_context=tls.context, access_log=None, print=None)
"""


async def load(url: str, ca_file: str, rate: int, seconds: float, pid: int) -> tuple[list[float], int, float]:
    """(latencies in ms, errors, server CPU seconds per review) for `seconds` at `rate`/s."""
    context = ssl.create_default_context(cafile=ca_file)
    body = json.dumps(REVIEW).encode()
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=16, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(200):  # warm up the connection pool and the server
            async with session.post(url, data=body, headers=headers) as r:
                await r.read()

        async def one(scheduled: float) -> None:
            nonlocal errors
            try:
                async with session.post(url, data=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        errors += 1
            except aiohttp.ClientError:
                errors += 1
            latencies.append((time.perf_counter() - scheduled) * 1000)  # from when it should have been sent

        # One task per request, started on schedule by a ticker: creating all of them up
        # front would make the client's own event loop the bottleneck at high rates.
        cpu_before = cpu_seconds(pid)
        start = time.perf_counter() + 0.05
        total = int(rate * seconds)
        tasks: list[asyncio.Task[None]] = []
        for i in range(total):
            scheduled = start + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(scheduled)))
        await asyncio.gather(*tasks)
        cpu = cpu_seconds(pid) - cpu_before
    return latencies, errors, cpu / total


def measure(code: str, work: Path, args: argparse.Namespace, name: str) -> tuple[list[float], int, float]:
    port = free_port()
    with open(work / f"{name}.log", "ab") as log:
        server = subprocess.Popen([sys.executable, "-c", code, str(port), str(work / "tls.crt"),
                                   str(work / "tls.key")], stdout=log, stderr=log)
    try:
        wait_for_http_tls(port, work, server)
        return asyncio.run(load(f"https://127.0.0.1:{port}/webhook", str(work / "ca.crt"), args.rate, args.seconds,
                                server.pid))
    finally:
        stop(server)


def wait_for_http_tls(port: int, work: Path, server: subprocess.Popen[bytes]) -> None:
    context = ssl.create_default_context(cafile=str(work / "ca.crt"))
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
    urllib.request.install_opener(opener)
    wait_for_http(f"https://127.0.0.1:{port}/healthz", 60.0, server)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=500, help="offered reviews per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    bundle = issue(["localhost"], ip_addresses=["127.0.0.1"])
    (work / "tls.crt").write_bytes(bundle.cert)
    (work / "tls.key").write_bytes(bundle.key)
    (work / "ca.crt").write_bytes(bundle.ca_cert)
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    print(f"webhook: {args.rate} reviews/s offered for {args.seconds:.0f} s, servers pinned to CPU 0, "
          f"log level info; {args.rounds} rounds")
    for round_ in range(1, args.rounds + 1):
        ours, ours_errors, ours_cpu = measure(OURS, work, args, "ours")
        base, base_errors, base_cpu = measure(BASELINE, work, args, "baseline")
        print(f"round {round_}: errors ours {ours_errors}, baseline {base_errors}")
        print(ratio_line("CPU per review", ours_cpu * 1e6, base_cpu * 1e6, unit="us"))
        print(ratio_line("latency p50", percentile(ours, 50), percentile(base, 50)))
        print(ratio_line("latency p99", percentile(ours, 99), percentile(base, 99), target=1.3))
        print(f"  max latency: ours {max(ours):.1f} ms, baseline {max(base):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
