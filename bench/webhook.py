"""Webhook latency at a fixed offered rate over HTTPS keep-alive, server pinned to one core.

    python bench/webhook.py [--rate 500] [--seconds 10]

The server runs in a subprocess pinned to CPU 0; the load generator (aiohttp, keep-alive,
a small connection pool) runs here pinned to the other CPU and sends reviews on a fixed
schedule, so latency includes queueing when the server falls behind. Prints reviews/s,
p50/p90/p99/max and the ratio of p99 to the 5 ms target.
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

from hami_dcu.webhook.certs import issue

REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "bench",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": "default",
        "operation": "CREATE",
        "object": {
            "metadata": {"name": "bench", "namespace": "default", "labels": {"app": "bench"}},
            "spec": {"schedulerName": "default-scheduler", "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {
                    "hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "15", "cpu": "1"}}},
                {"name": "sidecar", "image": "busybox", "resources": {"limits": {"cpu": "100m"}}}]},
        },
    },
}

SERVER = """
import os, sys
os.sched_setaffinity(0, {0})
from hami_dcu.cli.main import main
sys.exit(main(["webhook", "--bind", "127.0.0.1:%d", "--tls-cert", %r, "--tls-key", %r, "--log-level", "warning"]))
"""


def server_side_shares(metrics_text: str) -> str:
    """The server's own view (decision time, no network or queueing): share of reviews
    answered within each histogram bucket, from /metrics."""
    buckets: dict[str, float] = {}
    for line in metrics_text.splitlines():
        if line.startswith("hami_dcu_webhook_review_seconds_bucket"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[bound] = float(line.rsplit(" ", 1)[1])
    total = buckets.get("+Inf") or 1.0
    shown = ("0.0005", "0.001", "0.005")
    return "  ".join(f"<={float(b) * 1000:g}ms {n / total:.1%}" for b, n in buckets.items() if b in shown)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def load(url: str, ca_file: str, rate: int, seconds: float) -> tuple[list[float], int, float, str]:
    context = ssl.create_default_context(cafile=ca_file)
    body = json.dumps(REVIEW).encode()
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=16, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(50):  # warm up the connection pool and the server
            async with session.post(url, data=body) as r:
                await r.read()

        async def one(scheduled: float) -> None:
            nonlocal errors
            try:
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    if r.status != 200:
                        errors += 1
            except aiohttp.ClientError:
                errors += 1
            latencies.append(time.perf_counter() - scheduled)  # from when it should have been sent

        # One task per request, started on schedule by a ticker: creating all of them up
        # front would make the client's own event loop the bottleneck at high rates.
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
        elapsed = time.perf_counter() - start
        async with session.get(url.removesuffix("/webhook") + "/metrics") as r:
            metrics_text = await r.text()
    return latencies, errors, elapsed, metrics_text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=500, help="offered reviews per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--port", type=int, default=18443)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    bundle = issue(["localhost"], ip_addresses=["127.0.0.1"])
    (work / "tls.crt").write_bytes(bundle.cert)
    (work / "tls.key").write_bytes(bundle.key)
    (work / "ca.crt").write_bytes(bundle.ca_cert)
    server = subprocess.Popen([sys.executable, "-c", SERVER % (args.port, str(work / "tls.crt"),
                                                                str(work / "tls.key"))])
    try:
        time.sleep(2.0)
        if os.cpu_count() and os.cpu_count() > 1:
            os.sched_setaffinity(0, {1})
        url = f"https://127.0.0.1:{args.port}/webhook"
        latencies, errors, elapsed, metrics_text = asyncio.run(load(url, str(work / "ca.crt"), args.rate, args.seconds))
    finally:
        server.terminate()
        server.wait(10)
    ms = [x * 1000 for x in latencies]
    p99 = percentile(ms, 99)
    achieved = len(ms) / elapsed
    print(f"webhook: offered {args.rate}/s for {args.seconds:.0f}s -> {achieved:.0f} reviews/s, errors {errors}")
    print(f"latency ms: p50 {percentile(ms, 50):.2f}  p90 {percentile(ms, 90):.2f}  p99 {p99:.2f}  max {max(ms):.2f}")
    print(f"server-side decision time: {server_side_shares(metrics_text)}")
    print(f"p99 / target(5 ms) = {p99 / 5:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
