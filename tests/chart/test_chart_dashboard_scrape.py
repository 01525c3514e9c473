"""The dashboard reads only series our processes serve, checked against what their /metrics
endpoints really answer: the extender's after /filter, /bind and /preempt have run, the device
plugin's and the DRA driver's metrics servers. Every latency histogram has a p50/p99 panel."""

import asyncio
import json
import re
import urllib.request
from datetime import UTC, datetime

from chart_paths import CHART

from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.common.io.metricsserver import serve
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import NodeDevice, encode_node_devices, encode_reported
from hami_dcu.deviceplugin.metrics import PluginMetrics
from hami_dcu.dra.metrics import DriverMetrics
from hami_dcu.node.usage import CardFacts, NodeView, VdevFacts
from hami_dcu.node.usagecollector import UsageCollector
from hami_dcu.node.usagesmi import MockUsage
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.filtering import FilterSettings
from hami_dcu.scheduler.service import SchedulerService, ServiceSettings
from hami_dcu.webhook import certs
from hami_dcu.webhook.server import WebhookMetrics

DCU = keys.DCU_NAMING  # the naming set these tests speak

METRIC_NAME = re.compile(r"\bhami_dcu_[a-z0-9_]+\b")
USAGE_NAME = re.compile(r"\b(v?(?:dcu|hcu)_[a-z_]+)\{")  # Hygon's exporter series: name{selector}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
LATENCY = ("hami_dcu_scheduler_filter_seconds", "hami_dcu_scheduler_bind_seconds", "hami_dcu_scheduler_preempt_seconds",
           "hami_dcu_scheduler_node_lock_wait_seconds", "hami_dcu_pod_create_to_bound_seconds",
           "hami_dcu_pod_bound_to_allocated_seconds")


def names_in(exposition: str) -> set[str]:
    """Series names a scrape can return: each family's TYPE line (families without samples yet
    still say what they will serve) and every sample line."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ")
            base = family.removesuffix("_total") if kind == "counter" else family
            names |= {base + suffix for suffix in SUFFIXES.get(kind, ("",))}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()


def node(name: str) -> dict:
    cards = [NodeDevice(id=f"DCU-{name}-S0", count=4, devmem=65520, devcore=100, type="DCU-K100_AI", index=0)]
    return {"metadata": {"name": name, "annotations": {DCU.node_register: encode_node_devices(cards),
                                                       DCU.node_handshake: encode_reported(datetime.now(UTC))}}}


def dcu_pod(name: str) -> dict:
    limits = {DCU.resources.count: "1", DCU.resources.memory: "2000", DCU.resources.cores: "20"}
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": keys.DEFAULT_SCHEDULER_NAME,
                     "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}}


async def test_every_dashboard_query_names_a_series_a_scrape_returns(kube, aiohttp_client, tmp_path):
    service = SchedulerService(AsyncKube(kube), ServiceSettings(filter=FilterSettings(naming=keys.DCU_NAMING)))
    # As the command runs it: serving TLS (its expiry watched), the webhook in the same registry.
    cert = tmp_path / "tls.crt"
    cert.write_bytes(certs.issue(["svc"]).cert)
    service.metrics.watch_certificate(str(cert))
    WebhookMetrics(service.metrics.registry)
    client = await aiohttp_client(build_app(service))
    kube.create_node(node("n1"))
    pod = kube.create_pod("default", dcu_pod("p"))
    assert await service.wait_synced(10)
    for _ in range(200):
        if service.cache.node("n1") is not None:
            break
        await asyncio.sleep(0.02)
    meta = pod["metadata"]
    assert (await (await client.post("/filter", json={"Pod": pod, "NodeNames": ["n1"]})).json())["NodeNames"] == ["n1"]
    bind = {"PodName": "p", "PodNamespace": "default", "PodUID": meta["uid"], "Node": "n1"}
    assert (await (await client.post("/bind", json=bind)).json()) == {"Error": ""}
    await client.post("/preempt", json={"Pod": dcu_pod("q"), "NodeNameToMetaVictims": {}})
    served = names_in(await (await client.get("/metrics")).text())

    plugin, driver = PluginMetrics(), DriverMetrics()
    # Their usage series, one naming set each (a process serves the set it runs with).
    view = NodeView("n1", (CardFacts(0, "S0", "K100_AI", "0000:3D:00.0", 65520),), (VdevFacts(1, 0, 18, 2000),))
    for metrics, naming in ((plugin, "dcu"), (driver, "hcu")):
        metrics.registry.register(UsageCollector(naming, "n1", lambda: view, MockUsage(), None))
    for metrics in (plugin, driver):
        server = serve(metrics, "127.0.0.1:0")
        try:
            served |= names_in(scrape(server.server_port))
        finally:
            server.shutdown()

    dashboard = json.loads((CHART / "dashboards" / "hami-dcu.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    named = {name for q in queries for name in METRIC_NAME.findall(q) + USAGE_NAME.findall(q)}
    assert named - served == set()
    assert {"vdcu_utilizationrate", "vhcu_usedmemory_bytes", "hami_dcu_usage_source_up"} <= named
    for histogram in LATENCY:
        bucket = f"rate({histogram}_bucket[5m])"
        assert histogram + "_bucket" in served
        assert any(q.startswith("histogram_quantile(0.5,") and bucket in q for q in queries), histogram
        assert any("histogram_quantile(0.99," in q and bucket in q for q in queries), histogram
    # a name the processes do not serve is caught by the same comparison
    assert "hami_dcu_pod_bound_to_allocated_seconds_bucket" in served
    assert "hami_dcu_pod_bound_to_allocate_seconds_bucket" not in served
