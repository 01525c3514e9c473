"""Slow-header connections against the real `hami-dcu webhook`: does it keep answering, and
does its memory stay put? (issue 21, item 4)

    python bench/slowloris.py [--connections 2000] [--sources 8] [--hold 15] [--compare]

The webhook runs as the chart runs it (its command line, TLS, default connection limits) in
its own process pinned to CPU 0; the attack runs here on CPU 1. `--connections` clients,
spread over `--sources` loopback addresses (127.0.0.2 ...), each finish the TLS handshake,
send a request line and one header, then one more header byte a second: the shape that held
the extender's connections (and their TLS buffers) for as long as the client wished. With
`--reconnect` a client whose connection is closed opens a new one at once.

While the attack lasts `--hold` seconds, a normal AdmissionReview is sent every 0.5 s from
127.0.0.1 on a new connection (as the API server opens one), and the webhook's RSS is sampled.
Printed: the baseline (latency and RSS before the attack), the same figures under attack,
what the server did with the attackers' connections, and the targets: every review answered
within 1 s, RSS within 50 MiB of the baseline. `--compare` runs the same attack against a
plain aiohttp server with the same TLS and no limits (the webhook's listener before issue 21).
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
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from benchlib import free_port, memory_mib, percentile, stop, wait_for_http

from hami_dcu.webhook.certs import issue
from webhook import REVIEW

LATENCY_TARGET = 1.0  # seconds
MEMORY_TARGET = 50.0  # MiB above the baseline

OURS = """
import os, sys
if (os.cpu_count() or 1) > 1:
    os.sched_setaffinity(0, {0})
from hami_dcu.cli.main import main
sys.exit(main(["webhook", "--bind", "0.0.0.0:" + sys.argv[1], "--tls-cert", sys.argv[2], "--tls-key", sys.argv[3],
               "--log-level", "info"]))
"""

# The webhook's listener as it was: aiohttp's own server, TLS, no deadline and no cap.
UNGUARDED = """
import os, sys
if (os.cpu_count() or 1) > 1:
    os.sched_setaffinity(0, {0})
from aiohttp import web
from prometheus_client import CollectorRegistry
from hami_dcu.common.protocol import keys
from hami_dcu.common.io.tls import ReloadingTLS
from hami_dcu.webhook.decision import Settings
from hami_dcu.webhook.server import build_app
tls = ReloadingTLS(sys.argv[2], sys.argv[3])
web.run_app(build_app(Settings(naming=keys.DCU_NAMING), CollectorRegistry()), host="0.0.0.0",
            port=int(sys.argv[1]), ssl_context=tls.context, access_log=None, print=None)
"""


@dataclass
class Attack:
    opened: int = 0  # TLS handshakes finished
    failed: int = 0  # connects or handshakes that did not finish
    closed_by_server: int = 0  # connections the server closed while we trickled
    alive: int = 0
    peak_alive: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)


async def slow_client(port: int, source: str, context: ssl.SSLContext, attack: Attack, opening: asyncio.Semaphore,
                      reconnect: bool) -> None:
    while not attack.stop.is_set():
        try:
            async with opening:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(
                    "127.0.0.1", port, ssl=context, local_addr=(source, 0), server_hostname="localhost"), 30)
        except (OSError, TimeoutError, ssl.SSLError):
            attack.failed += 1
            if not reconnect:
                return
            await asyncio.sleep(0.05)
            continue
        attack.opened += 1
        attack.alive += 1
        attack.peak_alive = max(attack.peak_alive, attack.alive)
        try:
            writer.write(b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
            while not attack.stop.is_set():
                await writer.drain()
                try:  # the server closing the connection shows as EOF here
                    if await asyncio.wait_for(reader.read(1), 1.0) == b"":
                        attack.closed_by_server += 1
                        break
                except TimeoutError:
                    writer.write(b"a")
        except (OSError, ssl.SSLError):
            attack.closed_by_server += 1
        finally:
            attack.alive -= 1
            writer.close()
        if not reconnect:
            return


async def review_once(port: int, context: ssl.SSLContext) -> float:
    """Seconds for one review on a new connection (from 127.0.0.1); inf when it failed."""
    body = json.dumps(REVIEW).encode()
    started = time.perf_counter()
    try:
        async with asyncio.timeout(10):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                           server_hostname="localhost")
            writer.write(b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            answer = await reader.read()
            writer.close()
    except (OSError, TimeoutError, ssl.SSLError) as exc:
        if os.environ.get("SLOWLORIS_DEBUG"):
            print("review failed:", repr(exc), f"after {time.perf_counter() - started:.3f} s")
        return float("inf")
    return time.perf_counter() - started if b'"allowed": true' in answer or b'"allowed":true' in answer \
        else float("inf")


async def run_attack(port: int, pid: int, context: ssl.SSLContext, args: argparse.Namespace) -> dict[str, float]:
    baseline_latency = [await review_once(port, context) for _ in range(10)]
    baseline_rss, _ = memory_mib(pid)
    attack = Attack()
    sources = [f"127.0.0.{2 + i}" for i in range(args.sources)]
    opening = asyncio.Semaphore(200)  # handshakes in flight at once
    clients = [asyncio.create_task(slow_client(port, sources[i % len(sources)], context, attack, opening,
                                               args.reconnect)) for i in range(args.connections)]
    latencies: list[float] = []
    peak_rss = baseline_rss
    started = time.monotonic()
    next_review = started
    while time.monotonic() - started < args.hold:
        peak_rss = max(peak_rss, memory_mib(pid)[0])
        if time.monotonic() >= next_review:
            latencies.append(await review_once(port, context))
            next_review += 0.5
        await asyncio.sleep(0.1)
    attack.stop.set()
    await asyncio.gather(*clients, return_exceptions=True)
    await asyncio.sleep(1)
    return {"baseline_p50": percentile(baseline_latency, 50), "baseline_rss": baseline_rss,
            "p50": percentile(latencies, 50), "max": max(latencies), "failed_reviews": sum(
                1 for x in latencies if x == float("inf")), "reviews": len(latencies), "peak_rss": peak_rss,
            "after_rss": memory_mib(pid)[0], "opened": attack.opened, "refused": attack.failed,
            "closed_by_server": attack.closed_by_server, "peak_alive": attack.peak_alive}


def measure(code: str, work: Path, args: argparse.Namespace, name: str) -> dict[str, float]:
    port = free_port()
    with open(work / f"{name}.log", "ab") as log:
        server = subprocess.Popen([sys.executable, "-c", code, str(port), str(work / "tls.crt"),
                                   str(work / "tls.key")], stdout=log, stderr=log)
    try:
        context = ssl.create_default_context(cafile=str(work / "ca.crt"))
        import urllib.request

        urllib.request.install_opener(urllib.request.build_opener(urllib.request.HTTPSHandler(context=context)))
        wait_for_http(f"https://localhost:{port}/healthz", 60.0, server)
        return asyncio.run(run_attack(port, server.pid, context, args))
    finally:
        stop(server)


def report(name: str, figures: dict[str, float]) -> None:
    ms = 1000
    print(f"{name}:")
    print(f"  baseline (no attack)   review {figures['baseline_p50'] * ms:7.1f} ms   "
          f"RSS {figures['baseline_rss']:6.1f} MiB")
    worst = figures["max"]
    worst_text = "never answered" if worst == float("inf") else f"{worst * ms:.1f} ms"
    print(f"  under attack           review p50 {figures['p50'] * ms:7.1f} ms, max {worst_text}, "
          f"{int(figures['failed_reviews'])} of {int(figures['reviews'])} failed")
    grown = figures["peak_rss"] - figures["baseline_rss"]
    print(f"  memory                 peak RSS {figures['peak_rss']:6.1f} MiB (+{grown:.1f}), "
          f"after {figures['after_rss']:6.1f} MiB")
    print(f"  attackers              {int(figures['opened'])} handshakes finished, {int(figures['refused'])} refused "
          f"before, {int(figures['closed_by_server'])} closed by the server after, "
          f"at most {int(figures['peak_alive'])} open at once")
    answered = worst <= LATENCY_TARGET
    print(f"  targets                every review within {LATENCY_TARGET:g} s: {'met' if answered else 'MISSED'}; "
          f"RSS within {MEMORY_TARGET:g} MiB of the baseline: {'met' if grown <= MEMORY_TARGET else 'MISSED'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--sources", type=int, default=8, help="loopback addresses the attack comes from")
    parser.add_argument("--hold", type=float, default=15.0, help="seconds the attack lasts")
    parser.add_argument("--reconnect", action="store_true", help="attackers reopen closed connections at once")
    parser.add_argument("--compare", action="store_true", help="also attack a plain aiohttp server (no limits)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-slowloris-"))
    bundle = issue(["localhost"], ip_addresses=["127.0.0.1"])
    (work / "tls.crt").write_bytes(bundle.cert)
    (work / "tls.key").write_bytes(bundle.key)
    (work / "ca.crt").write_bytes(bundle.ca_cert)
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    print(f"slowloris: {args.connections} slow-header TLS connections from {args.sources} addresses for "
          f"{args.hold:g} s{' (reconnecting)' if args.reconnect else ''}; a review every 0.5 s from 127.0.0.1")
    report("hami-dcu webhook (default limits)", measure(OURS, work, args, "ours"))
    if args.compare:
        report("plain aiohttp server, no limits (before issue 21)", measure(UNGUARDED, work, args, "unguarded"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
